// engine_core: construction, start() and stop(), and the queries. The
// changes are in changes/ (change.hpp has the map), the write path in
// engine_core_writes.cpp, the clock in engine_core_fire.cpp.
#include "detail/engine_core.hpp"

#include <algorithm>
#include <queue>
#include <unordered_set>

#include "delayq/log.hpp"
#include "detail/task_state.hpp"

namespace delayq::detail {
namespace {

namespace tsw = task_state_word;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

std::string describe_task(std::string_view id, std::string_view type) {
  return "task " + std::string(id) + " (" + std::string(type) + ")";
}

}  // namespace

engine_core::engine_core(boost::asio::any_io_executor ex, executor_factory executors,
                         std::unique_ptr<task_store> store, engine_options options)
    : options_(std::move(options)),
      executors_(std::move(executors)),
      store_(std::move(store)),
      executor_(ex),
      types_(executors_, options_),
      failures_(options_.alerts),
      settler_(failures_),
      ticker_(ex, options_.tick),
      writer_(*store_, store_writer::options{options_.max_queued_writes},
              [this](std::span<write_op> ops) { on_written(ops); }),
      dispatcher_(*this, types_, options_.workers, ticker_.strand(), lateness_),
      owner_(make_ownership(options_, *store_, *this)) {
  pending_.cap(options_.max_pending);
  std::vector<task_table*> all;
  for (std::size_t i = 0; i < options_.tables; ++i) {
    tables_.push_back(std::make_unique<task_table>(static_cast<std::uint32_t>(i), options_.slots,
                                                   i == 0 ? nullptr : &tables_[0]->wheel));
    all.push_back(tables_.back().get());
  }
  all_.assign(std::move(all));
  for (const auto& [name, limit] : options_.type_concurrency) {
    boost::system::error_code ec;
    if (!valid_type(name)) continue;  // no task can have it
    if (const auto* t = types_.lookup(name, true, ec)) dispatcher_.set_limit(t->k, limit);
  }
}

engine_core::~engine_core() { shutdown(); }

void engine_core::shutdown() {
  owner_->stop();
  pager_.stop();
  dispatcher_.join();
  writer_.stop();
}

void engine_core::attempts_ended() {
  { std::lock_guard lock(stop_mutex_); }
  stop_cv_.notify_all();
}

// ------------------------------------------------------------------ lifecycle

void engine_core::start(boost::system::error_code& ec) {
  ec = {};
  std::unique_lock lock(all_);
  if (state_.load() != run_state::idle) {
    ec = errc::already_started;
    return;
  }
  // Nobody else changes the tables before start() returns (calls fail with
  // not_running), so holding their locks across the load costs nothing.
  ticker_.anchor();
  const std::int64_t now = now_ms();
  const bool take = store_->in_process();
  std::vector<record_id> overdue;
  std::vector<std::pair<std::string, std::string>> rejected;  // id, why
  std::vector<std::string> taken;
  std::uint64_t loaded = 0;
  auto next_report = steady_clock::now() + std::chrono::seconds{1};
  const auto load = [&](task&& t) {
    std::string why;
    const type_registry::type_info* type = accept(t, why);
    if (!type) {
      rejected.emplace_back(std::move(t.id), std::move(why));
      return;
    }
    if (hold_locked(table_for(hash(t.id)), t, *type, &overdue, now) == timer_wheel::npos) {
      log(log_level::warning,
          "start: skipping a second stored copy of " + describe_task(t.id, t.type));
      return;
    }
    ++loaded;
    if (take) {
      taken.push_back(std::move(t.id));
      if (taken.size() >= 10'000) {
        boost::system::error_code rec;
        store_->remove(taken, rec);
        taken.clear();
      }
    }
    if ((loaded & 0xffff) == 0 && steady_clock::now() >= next_report) {
      next_report = steady_clock::now() + std::chrono::seconds{1};
      log(log_level::info,
          "start: loaded " + std::to_string(loaded) + " tasks so far from " + store_->describe());
    }
  };
  // With a horizon, only the tasks due within it (see engine_core_horizon.cpp);
  // a store that cannot read by due time gets every task loaded.
  list_summary summary;
  pager_.set(0, std::numeric_limits<std::int64_t>::max());
  // The one question the core asks its ownership by kind: who loads the
  // tasks. A node that owns every id loads them below; a cluster's
  // ownership reads the shards it won.
  if (!owner_->owns_all()) {
    // A cluster engine always pages (cluster_ownership.hpp): by default
    // its horizon is max_delay, which holds every task of its shards.
    const std::int64_t horizon = std::max<std::int64_t>(
        1, (options_.horizon.count() > 0 ? std::min(options_.horizon, options_.max_delay)
                                         : options_.max_delay)
               .count());
    owner_->start_locked(now + horizon, load, summary, ec);
    if (!ec) pager_.set(horizon, now + horizon);
  } else if (options_.horizon.count() > 0 && !take) {
    // No task is due later than max_delay from now: a longer horizon holds
    // every task anyway (and now + horizon must not overflow).
    const std::int64_t horizon = std::min(options_.horizon, options_.max_delay).count();
    const std::int64_t until = now + horizon;
    due_cursor cursor;
    if (options_.type_capacity.empty()) {
      for (;;) {
        const list_summary page = store_->list_due(cursor, until, 10'000, load, ec);
        if (ec) break;
        summary.tasks += page.tasks;
        summary.quarantined += page.quarantined;
        if (page.tasks + page.quarantined < 10'000) break;
      }
    } else {
      // Capped types are held whole (see engine_core_horizon.cpp): one read
      // of every task, holding the near ones and the capped ones. The probe
      // tells whether the store can page at all.
      store_->list_due(
          cursor, std::numeric_limits<std::int64_t>::min(), 1, [](task&&) {}, ec);
      if (!ec)
        summary = store_->list(
            [&](task&& t) {
              if (to_epoch_ms(t.due) <= until || options_.type_capacity.count(t.type) != 0)
                load(std::move(t));
            },
            ec);
    }
    if (ec == errc::unsupported && summary.tasks == 0 && summary.quarantined == 0) {
      log(log_level::warning, "start: " + store_->describe() +
                                  " cannot read tasks by due time; holding every task "
                                  "(engine_options::horizon has no effect)");
      ec = {};
    } else if (!ec) {
      pager_.set(horizon, until);
    }
  } else if (options_.horizon.count() > 0) {
    log(log_level::info, "start: the store is in process; holding every task (no horizon)");
  }
  if (!pager_.on() && !ec) summary = store_->list(load, ec);
  if (ec) {
    log(log_level::error, "start: loading " + store_->describe() + " failed: " + ec.message());
    // Leave nothing half-loaded behind: a later start() loads afresh.
    for (const auto& t : tables_) {
      std::vector<timer_wheel::handle> all;
      t->wheel.for_each([&](timer_wheel::handle h) { all.push_back(h); });
      for (timer_wheel::handle h : all) erase_locked(*t, h);
      t->armed_tick = timer_wheel::no_tick;
    }
    return;
  }
  if (take && !taken.empty()) {
    boost::system::error_code rec;
    store_->remove(taken, rec);
  }
  std::size_t quarantined = summary.quarantined;
  for (const auto& [id, why] : rejected) {
    boost::system::error_code qec;
    store_->quarantine(id, why, qec);
    if (!qec) {
      ++quarantined;
      log(log_level::error, "start: quarantined stored task '" + id + "': " + why);
    } else {
      log(log_level::warning, "start: skipping stored task '" + id + "': " + why +
                                  " (it could not be quarantined: " + qec.message() + ")");
    }
  }
  release_overdue(overdue);
  loaded_ = loaded;
  quarantined_ = quarantined;
  boost::system::error_code dead_ec;
  dead_letter_store* const dead_store = store_->dead_letters();
  // None without dead letters.
  std::int64_t dead = dead_store ? static_cast<std::int64_t>(dead_store->count_dead(dead_ec)) : 0;
  dead_ = dead_ec ? 0 : dead;
  for (const auto& t : tables_) t->armed_tick = t->wheel.next_due_tick();
  state_.store(run_state::running, std::memory_order_release);
  if (pager_.on()) pager_.run(*this);
  owner_->run();
  ticker_.post([self = shared_from_this()] { self->rearm(); });
  log(log_level::info,
      "started with " + std::to_string(loaded) + " stored tasks from " + store_->describe());
}

bool engine_core::stop(milliseconds drain) {
  {
    // Every table: no call decides while the state changes.
    std::lock_guard lock(all_);
    const run_state s = state_.load();
    if (s == run_state::idle || s == run_state::stopped) {
      state_.store(run_state::stopped);
      return dispatcher_.running() == 0;
    }
    // Workers stop starting attempts before anyone can see the engine
    // stopping: a caller told not_running knows nothing starts any more.
    dispatcher_.stop_starting();
    state_.store(run_state::stopping);
  }
  ticker_.post([self = shared_from_this()] { self->ticker_.cancel(); });
  if (dispatcher_.in_attempt()) {
    // Called by an executor: its own attempt is running, so there is nothing
    // to drain into; waiting would wait for itself.
    state_.store(run_state::stopped);
    return false;
  }
  bool drained;
  {
    std::unique_lock lock(stop_mutex_);
    const auto ended = [&] { return dispatcher_.running() == 0 && settling_.load() == 0; };
    stop_cv_.wait_for(lock, drain, ended);
    drained = ended();
    state_.store(run_state::stopped);
  }
  writer_.flush();  // removals of attempts that just succeeded, among others
  // Then leave the cluster: the others take the shards at their next round.
  owner_->stop();
  return drained;
}

// ------------------------------------------------------------------ ownership

std::string engine_core::owner_of(std::string_view id) const { return owner_->owner_of(id); }

std::vector<std::string> engine_core::members() const { return owner_->members(); }

void engine_core::let_go_unowned_locked() {
  // Busy records (a write or an attempt) are let go when they settle
  // (evict_if_far_locked), a pinned one when its call decides.
  for (const auto& t : tables_) {
    std::vector<timer_wheel::handle> drop;
    t->wheel.for_each([&](timer_wheel::handle h) {
      if (t->wheel.is_indexed(h) && !owner_->owns(t->wheel.id(h))) drop.push_back(h);
    });
    for (timer_wheel::handle h : drop) evict_if_far_locked(*t, h);
  }
}

std::string_view engine_core::running_id_locked(record_id r) const noexcept {
  const task_table& t = table_of_record(r);
  const timer_wheel::handle h = handle_of(r);
  return tsw::state_of(t.tag(h)) == tsw::running ? t.wheel.id(h) : std::string_view{};
}

// ------------------------------------------------------------------ queries

std::optional<task> engine_core::find(std::string_view id, boost::system::error_code& ec) const {
  auto s = status(id, ec);
  if (!s) return std::nullopt;
  return std::move(s->task);
}

std::optional<task_status> engine_core::status(std::string_view id,
                                               boost::system::error_code& ec) const {
  ec.clear();
  const task_table& t = table_for(hash(id));
  std::unique_lock lock(t.mutex);
  timer_wheel::handle h = t.wheel.find(id);
  // Not held: maybe due past the horizon (or of a shard gained and not read
  // yet), in the store only. A read (the pager, a shard's) may hold it while
  // the store is asked: then the table answers, on the next round.
  for (int round = 0; h == timer_wheel::npos; ++round) {
    if (!horizon_on()) return std::nullopt;
    lock.unlock();
    bool held_meanwhile = false;
    std::optional<task> found = find_stored(id, ec, &held_meanwhile);
    if (ec) return std::nullopt;  // unknown, not absent: the caller must not say "no such task"
    lock.lock();
    if (!held_meanwhile || round == 8) {
      if (!found) return std::nullopt;
      const bool due = to_epoch_ms(found->due) <= now_ms();
      return task_status{std::move(*found), due ? task_state::ready : task_state::delayed};
    }
    h = t.wheel.find(id);
  }
  const std::uint32_t w = t.tag(h);
  if (w & tsw::fresh) return std::nullopt;  // not acknowledged yet
  task_state st = task_state::delayed;
  switch (tsw::state_of(w)) {
    case tsw::armed:
    case tsw::persisting:
    case tsw::queued:  // a heavy tick's tasks are queued up to 5 ms before they are due
      st = t.wheel.due_ms(h) <= now_ms() ? task_state::ready : task_state::delayed;
      break;
    case tsw::cancelling: st = task_state::ready; break;
    case tsw::running: st = task_state::running; break;
    case tsw::dead: return std::nullopt;
  }
  return task_status{task_of(t, h), st};
}

std::vector<task> engine_core::upcoming(std::size_t limit, std::string_view type) const {
  std::vector<task> out;
  if (limit == 0) return out;
  int kind = -1;
  if (!type.empty()) {
    boost::system::error_code ec;
    const auto* ti =
        valid_type(type) ? const_cast<type_registry&>(types_).lookup(type, false, ec) : nullptr;
    if (!ti) return out;
    kind = ti->k;
  }
  // The `limit` earliest, by a bounded max-heap over every held record of
  // every table (one table locked at a time).
  struct entry {
    std::int64_t due;
    task t;
    bool operator<(const entry& o) const { return due < o.due; }
  };
  std::priority_queue<entry> best;
  for (const auto& t : tables_) {
    std::lock_guard lock(t->mutex);
    t->wheel.for_each([&](timer_wheel::handle h) {
      if (!t->wheel.is_indexed(h)) return;
      const std::uint32_t w = t->tag(h);
      if ((w & tsw::fresh) || tsw::state_of(w) == tsw::running) return;
      if (kind >= 0 && t->wheel.kind(h) != kind) return;
      const std::int64_t due = t->wheel.due_ms(h);
      if (best.size() >= limit && due >= best.top().due) return;
      if (best.size() >= limit) best.pop();
      best.push(entry{due, task_of(*t, h)});
    });
  }
  out.resize(best.size());
  for (std::size_t i = best.size(); i-- > 0;) {
    out[i] = std::move(const_cast<entry&>(best.top()).t);
    best.pop();
  }
  if (!horizon_on() || out.size() >= limit) return out;
  // Fewer than `limit` held: the rest come from the store, past the
  // watermark, in due order (a rare type may need many pages: at most
  // upcoming_scan records are read).
  constexpr std::size_t upcoming_scan = 100'000;
  due_cursor cursor{pager_.watermark() + 1, {}};
  const_cast<store_writer&>(writer_).flush();
  std::unordered_set<std::string> seen;
  for (const task& t : out) seen.insert(t.id);
  std::size_t scanned = 0;
  while (out.size() < limit && scanned < upcoming_scan) {
    boost::system::error_code ec;
    const list_summary page = store_->list_due(
        cursor, std::numeric_limits<std::int64_t>::max(), 1000,
        [&](task&& t) {
          if (out.size() >= limit || (!type.empty() && t.type != type) || seen.count(t.id)) return;
          out.push_back(std::move(t));
        },
        ec);
    scanned += page.tasks + page.quarantined;
    if (ec || page.tasks + page.quarantined < 1000) break;
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const task& a, const task& b) { return a.due < b.due; });
  return out;
}

std::size_t engine_core::pending() const {
  const std::int64_t n = pending_.load();
  return n > 0 ? static_cast<std::size_t>(n) : 0;
}

engine_stats engine_core::stats() const {
  engine_stats s;
  s.pending = pending();
  s.scheduled = scheduled_.load();
  s.loaded = loaded_.load(std::memory_order_relaxed);
  s.paged = paged_.load(std::memory_order_relaxed);
  s.succeeded = settler_.succeeded();
  s.failed = settler_.failed();
  s.cancelled = cancelled_.load();
  s.quarantined = quarantined_.load(std::memory_order_relaxed);
  s.retried = settler_.retried();
  s.died = settler_.died();
  s.released = settler_.released();
  const std::int64_t dead = dead_.load(std::memory_order_relaxed);
  s.dead = dead > 0 ? static_cast<std::size_t>(dead) : 0;
  s.ready = dispatcher_.ready();
  s.running = dispatcher_.running();
  s.fired = dispatcher_.fired();
  s.timed_out = dispatcher_.timed_out();
  owner_->add_stats(s);
  s.wakeups = wakeups_.load(std::memory_order_relaxed);
  s.writes_queued = writer_.queued();
  s.writes_kept = writer_.kept();
  s.lateness_p50 = lateness_.quantile(0.50);
  s.lateness_p90 = lateness_.quantile(0.90);
  s.lateness_p99 = lateness_.quantile(0.99);
  s.lateness_max = lateness_.max();
  return s;
}

engine_metrics engine_core::metrics() const {
  engine_metrics m;
  // Types first: a type interned after this has nothing held yet.
  const std::size_t n = types_.size();
  m.types.resize(n);
  for (std::size_t k = 0; k < n; ++k) {
    const std::int64_t p = types_.at(static_cast<type_registry::kind>(k)).pending.load();
    m.types[k].pending = p > 0 ? static_cast<std::size_t>(p) : 0;
  }
  m.loaded = loaded_.load(std::memory_order_relaxed);
  m.quarantined = quarantined_.load(std::memory_order_relaxed);
  const std::int64_t dead = dead_.load(std::memory_order_relaxed);
  m.dead = dead > 0 ? static_cast<std::size_t>(dead) : 0;
  using cells = type_counter_cells;
  for (std::size_t k = 0; k < n; ++k) {
    const type_registry::type_info& ti = types_.at(static_cast<type_registry::kind>(k));
    const type_counters& c = ti.counters;
    const auto gauge = [&](type_counters::gauge g) {
      const std::int64_t v = c.sum(g);
      return v > 0 ? static_cast<std::size_t>(v) : std::size_t{0};
    };
    type_metrics& t = m.types[k];
    t.type = ti.name;
    t.ready = gauge(&cells::ready);
    t.running = gauge(&cells::running);
    t.scheduled = c.sum(&cells::scheduled);
    t.fired = c.sum(&cells::fired);
    t.succeeded = c.sum(&cells::succeeded);
    t.failed = c.sum(&cells::failed);
    t.retried = c.sum(&cells::retried);
    t.died = c.sum(&cells::died);
    t.cancelled = c.sum(&cells::cancelled);
    t.timed_out = c.sum(&cells::timed_out);
    t.released = c.sum(&cells::released);
    c.snapshot(&cells::lateness, t.lateness_seconds, 1e-6);
    c.snapshot(&cells::execution, t.execution_seconds, 1e-6);
  }
  writer_.metrics(m.store);
  m.wakeups = wakeups_.load(std::memory_order_relaxed);
  return m;
}

}  // namespace delayq::detail
