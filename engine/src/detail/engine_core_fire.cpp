// engine_core: the clock. The ticker's timer wakes on_tick() at the next
// tick any table has a task due at; it advances every table and hands what
// is due to the dispatcher, in due order (in a cluster, only under a lease
// surely ours: ownership.hpp). The dispatcher runs the attempts and gives
// their outcomes back to settle() (changes/outcome_change.cpp).
#include <algorithm>

#include "delayq/log.hpp"
#include "detail/engine_core.hpp"
#include "detail/task_state.hpp"
#include "detail/test_seams.hpp"

namespace delayq::detail {
namespace {

namespace tsw = task_state_word;
using std::chrono::steady_clock;

// A tick with at least this many entries is prepared ahead (rearm()), by
// this much time an entry (twice what taking one costs here), at most this
// much ahead.
constexpr std::size_t early_load = 256;
constexpr std::chrono::nanoseconds early_lead_per_task{500};
constexpr std::chrono::milliseconds early_lead_max{5};

// The order due tasks run in: by due millisecond, then by when they were
// scheduled.
bool runs_before(const ready_ref& a, const ready_ref& b) noexcept {
  const std::int64_t da = a.v.due_ms(), db = b.v.due_ms();
  return da != db ? da < db : a.order < b.order;
}

// Puts `due` (of several tables and ticks) in due order, by sorting.
void sort_by_due(std::vector<ready_ref>& due) {
  if (due.size() < 2) return;
  std::int64_t lo = due.front().v.due_ms(), hi = lo;
  for (const ready_ref& r : due) {
    lo = std::min(lo, r.v.due_ms());
    hi = std::max(hi, r.v.due_ms());
  }
  if (hi - lo < 4096) {
    // A tick's worth of milliseconds. Counting sort, stable.
    std::vector<std::uint32_t> count(static_cast<std::size_t>(hi - lo) + 2, 0);
    for (const ready_ref& r : due) ++count[static_cast<std::size_t>(r.v.due_ms() - lo) + 1];
    for (std::size_t i = 1; i < count.size(); ++i) count[i] += count[i - 1];
    std::vector<ready_ref> sorted(due.size());
    for (const ready_ref& r : due) sorted[count[static_cast<std::size_t>(r.v.due_ms() - lo)]++] = r;
    due.swap(sorted);
  } else {
    std::stable_sort(due.begin(), due.end(), [](const ready_ref& a, const ready_ref& b) {
      return a.v.due_ms() < b.v.due_ms();
    });
  }
  // Tasks due at the same instant in several tables: in the order they
  // were scheduled (one table's are in that order already).
  for (std::size_t i = 0; i < due.size();) {
    std::size_t j = i + 1;
    bool mixed = false;
    while (j < due.size() && due[j].v.due_ms() == due[i].v.due_ms()) {
      mixed = mixed || table_of(due[j].h) != table_of(due[i].h);
      ++j;
    }
    if (mixed)
      std::stable_sort(due.begin() + static_cast<std::ptrdiff_t>(i),
                       due.begin() + static_cast<std::ptrdiff_t>(j),
                       [](const ready_ref& a, const ready_ref& b) { return a.order < b.order; });
    i = j;
  }
}

// Puts `due` in due order, where `ends` ends each table's run of it. A
// table's run is in that order already when one tick, or several ticks in
// turn, gave it, which is nearly always: then the runs are merged, a copy of
// each reference and a few comparisons each (a burst of 2,000 tasks due in
// one millisecond took 0.2 ms to sort, before its first task could start).
void order_by_due(std::vector<ready_ref>& due, const std::vector<std::size_t>& ends) {
  if (due.size() < 2) return;
  struct run {
    std::size_t at, end;
  };
  std::vector<run> runs;
  std::size_t begin = 0;
  for (std::size_t end : ends) {
    const auto b = due.begin() + static_cast<std::ptrdiff_t>(begin);
    const auto e = due.begin() + static_cast<std::ptrdiff_t>(end);
    if (!std::is_sorted(b, e, runs_before)) return sort_by_due(due);
    if (end > begin) runs.push_back({begin, end});
    begin = end;
  }
  if (runs.size() < 2) return;
  std::vector<ready_ref> merged;
  merged.reserve(due.size());
  while (!runs.empty()) {
    std::size_t first = 0;
    for (std::size_t k = 1; k < runs.size(); ++k)
      if (runs_before(due[runs[k].at], due[runs[first].at])) first = k;
    merged.push_back(due[runs[first].at]);
    if (++runs[first].at == runs[first].end)
      runs.erase(runs.begin() + static_cast<std::ptrdiff_t>(first));
  }
  due.swap(merged);
}

}  // namespace

void engine_core::note_armed_locked(task_table& t, std::uint64_t tick) {
  t.armed_tick = std::min(t.armed_tick, tick);
  // The timer sleeps until armed_tick_: an earlier tick re-arms it. rearm()
  // reads every table's own tick, so a lower value lost to a race here only
  // costs a wake-up, never a late task.
  std::uint64_t cur = armed_tick_.load(std::memory_order_relaxed);
  while (tick < cur) {
    if (armed_tick_.compare_exchange_weak(cur, tick, std::memory_order_relaxed)) {
      if (state_.load(std::memory_order_relaxed) == run_state::running)
        ticker_.post([self = shared_from_this()] { self->rearm(); });
      return;
    }
  }
}

// On the strand: points the timer at the earliest tick any table waits for
// (or the one whose tasks are held early). A heavy tick ahead is prepared:
// the timer wakes a little before it, and on_early() takes its tasks from
// the wheel, so that when it begins they are handed to the workers at once
// rather than after the time taking them takes (about 0.2 us a task here:
// the last of 2,000 due in one millisecond started 0.4 ms later).
void engine_core::rearm() {
  if (state_.load() != run_state::running) return;
  std::uint64_t tick, held, wake;
  std::size_t load;
  for (;;) {
    // The earliest tick, and the entries its tables' slots hold for it: one
    // pass, one hold of each table's lock.
    tick = timer_wheel::no_tick;
    load = 0;
    for (const auto& t : tables_) {
      std::lock_guard lock(t->mutex);
      if (t->armed_tick == timer_wheel::no_tick || t->armed_tick > tick) continue;
      if (t->armed_tick < tick) {
        tick = t->armed_tick;
        load = 0;
      }
      load += t->wheel.slot_load(tick);
    }
    {
      std::lock_guard lock(early_mutex_);
      held = early_tick_;
    }
    wake = std::min(tick, held);
    if (auto* seam = test_seams::rearm_scanned.load(std::memory_order_relaxed))
      seam(armed_tick_.load(std::memory_order_relaxed), wake);
    armed_tick_.store(wake, std::memory_order_relaxed);
    // A task armed in a table this pass had read, before the store above,
    // compared its tick with the old armed_tick_ (on_tick() leaves the tick
    // it fired there, at or before anything armed since) and posted no
    // rearm(): look again. An arm after a table's second reading sees `wake`
    // (stored before that lock was taken) and posts one if it is earlier.
    // Without the second look such a task waited for whatever woke the
    // timer next; on a quiet engine, for ever (a retry due at once, armed
    // by the store writer's thread while on_tick() was here).
    bool earlier = false;
    for (const auto& t : tables_) {
      std::lock_guard lock(t->mutex);
      if (t->armed_tick < wake) {
        earlier = true;
        break;
      }
    }
    if (!earlier) break;
  }
  if (wake == timer_wheel::no_tick) return;
  if (held == timer_wheel::no_tick && load >= early_load) {
    const auto lead = std::min<steady_clock::duration>(early_lead_per_task * load, early_lead_max);
    const auto at = ticker_.boundary(tick) - lead;
    if (at > steady_clock::now()) {
      ticker_.wait_until_instant(
          at, [self = shared_from_this(), tick](const boost::system::error_code& ec) {
            if (!ec) self->on_early(tick);
          });
      return;
    }
  }
  ticker_.wait_until(wake, [self = shared_from_this()](const boost::system::error_code& ec) {
    if (!ec) self->on_tick();
  });
}

// On the strand, shortly before heavy tick `tick` begins: its tasks are
// taken from the wheel (queued, as a due task waiting for a worker is: a
// cancel or reschedule meanwhile wins over them) and held until it begins.
//
// early_mutex_ is held from taking to holding, as on_tick() and fire_due()
// hold it from take_early() through their advance(): what two collectors
// take, they take one after the other, in due order. It is taken before a
// table's mutex, never after one.
void engine_core::on_early(std::uint64_t tick) {
  wakeups_.fetch_add(1, std::memory_order_relaxed);
  if (state_.load() != run_state::running) return;
  {
    std::lock_guard hold(early_mutex_);
    // A wake already under way when rearm() chose another (a handler the
    // timer had queued cannot be cancelled): one tick's tasks are held at
    // a time, the others go at their tick as usual.
    if (early_tick_ != timer_wheel::no_tick) return;
    std::vector<std::size_t> ends;
    for (const auto& t : tables_) {
      std::lock_guard lock(t->mutex);
      // A table with an earlier tick since rearm() is on_tick()'s to advance.
      if (t->armed_tick != tick) continue;
      advance_locked(*t, tick, early_, std::nullopt, true);
      ends.push_back(early_.size());
    }
    order_by_due(early_, ends);
    early_tick_ = early_.empty() ? timer_wheel::no_tick : tick;
  }
  rearm();  // for `tick`, or earlier if a table has an earlier one
}

// Under early_mutex_.
void engine_core::take_early_locked(std::uint64_t to_tick, std::vector<ready_ref>& due,
                                    std::optional<std::int64_t> due_by_ms) {
  if (early_tick_ == timer_wheel::no_tick) return;
  if (early_tick_ > to_tick) {
    // A tick longer than a millisecond holds tasks due before its boundary:
    // fire_due() hands over those due by now (early_ is in due order).
    if (!due_by_ms) return;
    const auto past = std::find_if(early_.begin(), early_.end(),
                                   [&](const ready_ref& r) { return r.v.due_ms() > *due_by_ms; });
    due.insert(due.end(), early_.begin(), past);
    early_.erase(early_.begin(), past);
    if (early_.empty()) early_tick_ = timer_wheel::no_tick;
    return;
  }
  due.insert(due.end(), early_.begin(), early_.end());
  early_.clear();
  early_tick_ = timer_wheel::no_tick;
}

// On the strand: everything due up to now (every missed tick, in order) goes
// to the dispatcher; then the timer sleeps until the next due tick.
void engine_core::on_tick() {
  wakeups_.fetch_add(1, std::memory_order_relaxed);
  if (state_.load() != run_state::running) return;
  std::vector<ready_ref> due;
  {
    std::lock_guard hold(early_mutex_);
    const std::uint64_t now = ticker_.current_tick();
    take_early_locked(now, due, std::nullopt);
    advance(now, due);
  }
  dispatcher_.push(due);
  rearm();
}

std::size_t engine_core::fire_due() {
  if (state_.load() != run_state::running) return 0;
  std::vector<ready_ref> due;
  {
    std::lock_guard hold(early_mutex_);
    // Every tick whose boundary is at or before the wall clock's now (a
    // task is filed at the first boundary at or after its due time), then,
    // of the tick under way, the tasks due by now's millisecond: nothing
    // fires early, and nothing due waits for the boundary.
    const std::int64_t now = ticker_.begun_ms();  // the clock the wheel fires by
    take_early_locked(ticker_.last_tick_by(now), due, now);
    advance(ticker_.last_tick_by(now), due, now);
  }
  dispatcher_.push(due);
  // The timer may be armed for a tick just emptied: it then wakes once for
  // nothing, and sleeps until the next due tick.
  return due.size();
}

void engine_core::advance(std::uint64_t to_tick, std::vector<ready_ref>& due,
                          std::optional<std::int64_t> due_by_ms) {
  std::vector<std::size_t> ends;  // of each run in `due`: what it held, then each table's
  if (!due.empty()) ends.push_back(due.size());
  for (const auto& t : tables_) {
    std::lock_guard lock(t->mutex);
    if (t->armed_tick > to_tick && !due_by_ms) continue;  // nothing due here yet
    advance_locked(*t, to_tick, due, due_by_ms);
    ends.push_back(due.size());
  }
  // One tick may hold tasks due at different milliseconds, a reload puts
  // many overdue tasks in one tick, and the tables interleave: hand them
  // over in due order.
  order_by_due(due, ends);
}

void engine_core::advance_locked(task_table& t, std::uint64_t to_tick, std::vector<ready_ref>& due,
                                 std::optional<std::int64_t> due_by_ms, bool ahead) {
  std::vector<timer_wheel::handle> held_back;
  const auto now = steady_clock::now();
  const std::size_t first = due.size();
  const auto fire = [&](timer_wheel::handle h) {
    // Clusters: a record fires only under a lease surely ours now (its
    // outcome's writes carry the token); otherwise the next round decides.
    if (owner_->may_fire_locked(t.ref(h), t.wheel.id(h), now) == 0) {
      held_back.push_back(h);
      return;
    }
    const std::uint32_t w = tsw::next_queued(t.tag(h));
    t.set_tag(h, w);
    due.push_back(ready_of(t, h, w));
  };
  if (ahead)
    t.wheel.take_tick(to_tick, fire);
  else
    t.wheel.advance(to_tick, fire);
  if (due_by_ms) {
    std::vector<timer_wheel::handle> taken;
    t.wheel.take_due_by(*due_by_ms, taken);
    for (timer_wheel::handle h : taken) fire(h);
  }
  if (!held_back.empty()) {
    // A round from now: renewed, they run; lost, apply_round let go of them.
    const std::uint64_t later = ticker_.tick_for(ticker_.now_ms() + owner_->hold_back().count());
    for (timer_wheel::handle h : held_back) {
      t.wheel.arm(h, later);
      // Not held at all (lost while a write about it was in flight): let go.
      if (!owner_->owns(t.wheel.id(h))) evict_if_far_locked(t, h);
    }
  }
  t.armed_tick = t.wheel.next_due_tick();
  // Counted in runs of one type: two atomic adds a run, not a task.
  for (std::size_t i = first; i < due.size();) {
    std::size_t j = i + 1;
    while (j < due.size() && due[j].kind == due[i].kind) ++j;
    dispatcher_.count_ready(due[i].kind, static_cast<std::ptrdiff_t>(j - i));
    i = j;
  }
}

// start(), under every table's lock: tasks found overdue are released over
// the coming ticks.
void engine_core::release_overdue(std::vector<record_id>& overdue) {
  if (overdue.empty()) return;
  // Spread over the coming ticks at catch_up_rate per second, in due order.
  // Their due time stays as stored (executors and lateness see the truth);
  // only the tick they are released at moves. They are armed like any task,
  // so cancel() and reschedule() reach them while they wait their turn.
  const auto due_of = [&](record_id r) { return table_of_record(r).wheel.due_ms(handle_of(r)); };
  std::stable_sort(overdue.begin(), overdue.end(),
                   [&](record_id a, record_id b) { return due_of(a) < due_of(b); });
  const double per_tick =
      options_.catch_up_rate * std::chrono::duration<double>(options_.tick).count();
  const std::uint64_t first = ticker_.current_tick();
  for (std::size_t k = 0; k < overdue.size(); ++k) {
    task_table& t = table_of_record(overdue[k]);
    const std::uint64_t tick =
        first + static_cast<std::uint64_t>(static_cast<double>(k) / per_tick);
    t.wheel.arm(handle_of(overdue[k]), tick);
    t.armed_tick = std::min(t.armed_tick, t.wheel.due_tick(handle_of(overdue[k])));
  }
  log(log_level::info, std::to_string(overdue.size()) +
                           " tasks were overdue at start; releasing them at " +
                           std::to_string(options_.catch_up_rate) + " per second");
}

bool engine_core::may_start(const ready_ref& r) const noexcept {
  return owner_->may_start(r.v.id(), r.fence);
}

}  // namespace delayq::detail
