// engine_core: the clock and the fire path. The ticker's timer wakes
// on_tick() at the next due tick; it hands every due record to the
// dispatcher (in a cluster, only under a lease surely ours: ownership.hpp);
// the dispatcher runs the attempts and gives their outcomes back to
// settle(), which applies the attempt settler's verdict (attempt_settler.hpp:
// remove, retry, release or bury) to the record and writes it.
#include <algorithm>

#include "delayq/log.hpp"
#include "detail/engine_core.hpp"
#include "detail/task_state.hpp"

namespace delayq::detail {
namespace {

namespace tsw = task_state_word;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

}  // namespace

// ------------------------------------------------------------------ the clock

void engine_core::note_armed_locked(std::uint64_t tick) {
  if (tick < armed_tick_ && state_.load(std::memory_order_relaxed) == run_state::running) {
    armed_tick_ = tick;
    ticker_.post([self = shared_from_this()] { self->rearm(); });
  }
}

// On the strand: points the timer at armed_tick_.
void engine_core::rearm() {
  std::uint64_t tick;
  {
    std::lock_guard lock(mutex_);
    if (state_.load() != run_state::running) return;
    tick = armed_tick_;
  }
  if (tick == timer_wheel::no_tick) return;
  ticker_.wait_until(tick, [self = shared_from_this()](const boost::system::error_code& ec) {
    if (!ec) self->on_tick();
  });
}

// On the strand: everything due up to now (every missed tick, in order) goes
// to the dispatcher; then the timer sleeps until the next due tick.
void engine_core::on_tick() {
  wakeups_.fetch_add(1, std::memory_order_relaxed);
  std::vector<ready_ref> due;
  std::vector<timer_wheel::handle> held_back;
  {
    std::lock_guard lock(mutex_);
    if (state_.load() != run_state::running) return;
    const auto now = steady_clock::now();
    wheel_.advance(ticker_.current_tick(), [&](timer_wheel::handle h) {
      // Clusters: a record fires only under a lease surely ours now (its
      // outcome's writes carry the token); otherwise the next round decides.
      if (owner_->may_fire_locked(h, wheel_.id(h), now) == 0) {
        held_back.push_back(h);
        return;
      }
      const std::uint32_t w = tsw::next_queued(tag(h));
      set_tag(h, w);
      due.push_back(ready_of(h, w));
    });
    // One tick may hold tasks due at different milliseconds, and a reload
    // puts many overdue tasks in one tick: hand them over in due order.
    if (due.size() > 1) {
      std::int64_t lo = due.front().v.due_ms(), hi = lo;
      for (const ready_ref& r : due) {
        lo = std::min(lo, r.v.due_ms());
        hi = std::max(hi, r.v.due_ms());
      }
      if (hi - lo < 4096) {
        // The usual case: a tick's worth of milliseconds. Counting sort.
        std::vector<std::uint32_t> count(static_cast<std::size_t>(hi - lo) + 2, 0);
        for (const ready_ref& r : due) ++count[static_cast<std::size_t>(r.v.due_ms() - lo) + 1];
        for (std::size_t i = 1; i < count.size(); ++i) count[i] += count[i - 1];
        std::vector<ready_ref> sorted(due.size());
        for (const ready_ref& r : due)
          sorted[count[static_cast<std::size_t>(r.v.due_ms() - lo)]++] = r;
        due.swap(sorted);
      } else {
        std::stable_sort(due.begin(), due.end(), [](const ready_ref& a, const ready_ref& b) {
          return a.v.due_ms() < b.v.due_ms();
        });
      }
    }
    if (!held_back.empty()) {
      // A round from now: renewed, they run; lost, apply_round let go of them.
      const std::uint64_t later = ticker_.tick_for(ticker_.now_ms() + owner_->hold_back().count());
      for (timer_wheel::handle h : held_back) {
        wheel_.arm(h, later);
        // Not held at all (lost while a write about it was in flight): let go.
        if (!owns_locked(wheel_.id(h))) evict_if_far_locked(h);
      }
    }
    armed_tick_ = wheel_.next_due_tick();
    for (const ready_ref& r : due) dispatcher_.count_ready(r.kind, 1);
  }
  dispatcher_.push(due);
  rearm();
}

// start(): tasks found overdue are released over the coming ticks.
void engine_core::release_overdue(std::vector<timer_wheel::handle>& overdue) {
  if (overdue.empty()) return;
  // Spread over the coming ticks at catch_up_rate per second, in due order.
  // Their due time stays as stored (executors and lateness see the truth);
  // only the tick they are released at moves. They are armed like any task,
  // so cancel() and reschedule() reach them while they wait their turn.
  std::stable_sort(overdue.begin(), overdue.end(),
                   [&](timer_wheel::handle a, timer_wheel::handle b) {
                     return wheel_.due_ms(a) < wheel_.due_ms(b);
                   });
  const double per_tick =
      options_.catch_up_rate * std::chrono::duration<double>(options_.tick).count();
  const std::uint64_t first = ticker_.current_tick();
  for (std::size_t k = 0; k < overdue.size(); ++k)
    wheel_.arm(overdue[k], first + static_cast<std::uint64_t>(static_cast<double>(k) / per_tick));
  log(log_level::info, std::to_string(overdue.size()) +
                           " tasks were overdue at start; releasing them at " +
                           std::to_string(options_.catch_up_rate) + " per second");
}

// ------------------------------------------------------------------ attempts

bool engine_core::may_start(const ready_ref& r) const noexcept {
  return owner_->may_start(r.v.id(), r.fence);
}

// ------------------------------------------------------------------ attempt outcomes

void engine_core::settle(std::span<outcome> outcomes) {
  after_lock after;
  call_state none;
  bool leaving_settled = false;
  {
    std::lock_guard lock(mutex_);
    std::vector<write_op> ops;
    const bool stopping = state_.load() != run_state::running;
    // Most outcomes end in an erase, whose index bucket is a cache miss in a
    // large wheel: ask for every bucket of the batch before the first.
    if (outcomes.size() > 1)
      for (const outcome& o : outcomes) wheel_.prefetch_index_of(o.h);
    for (outcome& o : outcomes) {
      const timer_wheel::handle h = o.h;
      // Clusters: the lease token the attempt was dispatched under fences
      // its outcome write (a shard taken meanwhile refuses it: lease_lost);
      // the last attempt on a shard being handed over may be this one.
      if (!leaving_settled) leaving_settled = owner_->attempt_settled_locked(wheel_.id(h));
      const std::uint64_t fence = owner_->take_fence_locked(h);
      if (o.result == outcome::what::dead) {
        erase_locked(h);  // cancelled while queued: its last reference let go
        continue;
      }
      dispatcher_.attempt_done(o.kind);
      const type_registry::type_info& type = types_.at(o.kind);
      const attempt_settler::verdict v =
          settler_.decide(o, type, wheel_.id(h), wheel_.attempts(h), !wheel_.is_indexed(h),
                          stopping, after.alerts, ticker_.now_ms());
      switch (v.what) {
        case attempt_settler::verdict_kind::drop_replaced:
          if (o.on_stored) after.stored.emplace_back(std::move(o.on_stored), errc::ok);
          erase_locked(h);
          break;
        case attempt_settler::verdict_kind::drop:
          erase_locked(h);  // as it was in the store, for the next start
          break;
        case attempt_settler::verdict_kind::rearm:
          set_tag(h, tsw::with_state(tag(h), tsw::armed));
          wheel_.arm(h, ticker_.current_tick() + 1);
          note_armed_locked(wheel_.due_tick(h));
          break;
        case attempt_settler::verdict_kind::remove: {
          // At-least-once: the task leaves the store only now. Nobody waits
          // for the removal; a crash before it lands runs the task once more.
          write_op op = make_op(change_kind::remove, p_none, h, false);
          op.must_land = true;
          op.fence = fence;
          op.on_stored = std::move(o.on_stored);
          ops.push_back(std::move(op));
          erase_locked(h);
          break;
        }
        case attempt_settler::verdict_kind::bury: {
          const bool asked = o.result == outcome::what::buried;  // attempt_completion::bury()
          write_op op = make_op(change_kind::bury, p_bury, h, true);
          op.t.attempts = v.attempts;
          if (o.priority) op.t.priority = *o.priority;  // attempt_completion::bury()
          if (store_->dead_letters() == nullptr) {
            // A store without the dead-letter role (docs/failure-handling.md)
            // gets no bury: the store writer groups changes of many callers
            // into one batch, and one change the store refuses would fail the
            // others with it. The store keeps the task as its last retry
            // wrote it, and the next start() runs it again; no dead letter is
            // counted, since none exists.
            settler_.note_death(op.t, type, o.failure, after.alerts, false, asked);
            if (store_->in_process())  // it gave its tasks to the wheel at start()
              log(log_level::error, "task " + op.t.id +
                                        " is dropped: an in-process store without dead "
                                        "letters keeps no copy of it");
            if (o.on_stored) after.stored.emplace_back(std::move(o.on_stored), errc::unsupported);
            erase_locked(h);
            break;
          }
          op.error = o.failure;
          op.died_at = std::chrono::floor<milliseconds>(std::chrono::system_clock::now());
          op.must_land = true;
          op.fence = fence;
          op.on_stored = std::move(o.on_stored);
          settler_.note_death(op.t, type, o.failure, after.alerts, true, asked);
          ++dead_;
          ops.push_back(std::move(op));
          erase_locked(h);
          break;
        }
        case attempt_settler::verdict_kind::retry: {
          // The new count and due time are written before the retry is armed,
          // and the record shows them only then (settle_locked applies them),
          // without the worker waiting for the write.
          set_tag(h, tsw::with_state(tag(h), tsw::persisting));
          write_op op = make_op(change_kind::save, p_retry, h, true);
          op.t.attempts = v.attempts;
          op.t.due = from_epoch_ms(v.due_ms);
          op.aux = static_cast<std::uint64_t>(v.due_ms);
          op.must_land = true;
          op.fence = fence;
          op.on_stored = std::move(o.on_stored);
          ops.push_back(std::move(op));
          break;
        }
        case attempt_settler::verdict_kind::release: {
          // A retry's write without the attempt counted: the new due time
          // (and priority) are written before the task is armed again. The
          // due time is bounded as a schedule's is: not before the epoch
          // (it fires at once), not past max_delay from now.
          std::int64_t due = std::clamp<std::int64_t>(v.due_ms, 0, latest_due_ms() - 1);
          const std::int64_t now = now_ms();
          if (due > now && due - now > options_.max_delay.count())
            due = now + options_.max_delay.count();
          set_tag(h, tsw::with_state(tag(h), tsw::persisting));
          if (o.priority) set_attrs_locked(h, {*o.priority, attrs_of(h).ttr_ms});
          write_op op = make_op(change_kind::save, p_release, h, true);
          op.t.due = from_epoch_ms(due);
          op.aux = static_cast<std::uint64_t>(due);
          op.must_land = true;
          op.fence = fence;
          op.on_stored = std::move(o.on_stored);
          ops.push_back(std::move(op));
          break;
        }
      }
    }
    for (write_op& op : ops) submit_locked(std::span(&op, 1), nullptr, none, after);
  }
  run_after(after);
  changed_.notify_all();  // stop() may be waiting for attempts to end
  if (leaving_settled) owner_->handover_check();
}

}  // namespace delayq::detail
