// The engine: the wheel under one mutex, an Asio timer on a strand that
// advances it, a thread pool that runs executors, and a group-committing
// writer in front of the store. docs/design.md explains the threads and the
// order of persist, fire and remove.
#include "delayq/engine.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "delayq/log.hpp"
#include "delayq/open_store.hpp"
#include "delayq/timer_wheel.hpp"
#include "detail/lateness_histogram.hpp"
#include "detail/store_writer.hpp"

namespace delayq {
namespace {

using std::chrono::steady_clock;
using std::chrono::system_clock;

// What the engine keeps in a wheel node's tag.
enum node_state : std::uint32_t {
  armed = 0,       // waiting in a slot for its tick
  persisting = 1,  // a store write about it is in flight; other calls wait
};

constexpr std::size_t max_type_length = 128;
constexpr std::size_t max_id_length = 256;

bool valid_type(std::string_view type) {
  if (type.empty() || type.size() > max_type_length) return false;
  return std::all_of(type.begin(), type.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == ':' || c == '-';
  });
}

bool valid_id(std::string_view id) {
  if (id.empty() || id.size() > max_id_length) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u > 0x20 && u != 0x7f;
  });
}

bool valid_policy(const retry_policy& p) {
  return p.max_attempts >= 1 && p.base >= std::chrono::milliseconds{0} && p.cap >= p.base;
}

boost::system::error_code check_options(const engine_options& o) {
  if (o.tick < std::chrono::milliseconds{1} || o.slots == 0 || o.workers == 0 ||
      o.max_pending == 0 || o.max_delay <= std::chrono::milliseconds{0} || o.async_threads == 0 ||
      !(o.catch_up_rate >= 0) || !valid_policy(o.retry) ||
      !(o.alerts.failure_rate_threshold > 0 && o.alerts.failure_rate_threshold <= 1) ||
      o.alerts.window <= std::chrono::seconds{0})
    return errc::invalid_options;
  for (const auto& [type, policy] : o.retry_per_type)
    if (!valid_policy(policy)) return errc::invalid_options;
  for (const auto& [type, timeout] : o.timeout_per_type)
    if (timeout <= std::chrono::milliseconds{0}) return errc::invalid_options;
  for (const auto& [type, limit] : o.type_concurrency)
    if (limit == 0) return errc::invalid_options;
  return {};
}

std::string describe_task(const task& t) { return "task " + t.id + " (" + t.type + ")"; }

}  // namespace

class engine::impl : public std::enable_shared_from_this<impl> {
 public:
  impl(boost::asio::any_io_executor ex, executor_factory executors,
       std::unique_ptr<task_store> store, engine_options options)
      : options_(std::move(options)),
        executors_(std::move(executors)),
        store_(std::move(store)),
        writer_(*store_, !store_->in_process(), [this] { post_store_retry(); }),
        inline_(store_->in_process()),
        executor_(ex),
        strand_(boost::asio::make_strand(ex)),
        timer_(strand_),
        pool_(options_.workers),
        async_pool_(options_.async_threads),
        wheel_(options_.slots),
        id_nonce_(std::random_device{}() & 0xffffffu) {
    for (const auto& [type, limit] : options_.type_concurrency) gates_[type].limit = limit;
  }

  // ------------------------------------------------------------ lifecycle

  void start(boost::system::error_code& ec) {
    ec = {};
    std::unique_lock lock(mutex_);
    if (state_ != run_state::idle) {
      ec = errc::already_started;
      return;
    }
    // Nobody else can touch the engine before start() returns (calls fail
    // with not_running), so holding the lock across the load is free.
    anchor_steady_ = steady_clock::now() - options_.tick;
    anchor_system_ = system_clock::now() - options_.tick;
    std::uint64_t loaded = 0;
    const auto now = system_clock::now();
    std::vector<task> overdue;
    const list_summary summary = store_->list(
        [&](task&& t) {
          if (!valid_id(t.id) || wheel_.find(t.id) != timer_wheel::npos) {
            log(log_level::warning,
                "start: skipping stored " + describe_task(t) + ": invalid or duplicate id");
            return;
          }
          ++loaded;
          if (t.due <= now && options_.catch_up_rate > 0) {
            overdue.push_back(std::move(t));
          } else {
            const std::uint64_t tick = tick_for(t.due);
            wheel_.insert(std::move(t), tick);
          }
        },
        ec);
    if (ec) {
      log(log_level::error, "start: loading " + store_->describe() + " failed: " + ec.message());
      // Leave nothing half-loaded behind: a later start() loads afresh.
      wheel_.advance(timer_wheel::no_tick - 1, [&](timer_wheel::handle h) { wheel_.erase(h); });
      return;
    }
    release_overdue(std::move(overdue));
    loaded_ = loaded;
    quarantined_ = summary.quarantined;
    boost::system::error_code dead_ec;
    dead_ = store_->count_dead(dead_ec);
    if (dead_ec) dead_ = 0;  // a store without dead letters (errc::unsupported)
    state_ = run_state::running;
    armed_tick_ = wheel_.next_due_tick();
    if (armed_tick_ != timer_wheel::no_tick) post_rearm();
    log(log_level::info,
        "started with " + std::to_string(loaded) + " stored tasks from " + store_->describe());
  }

  bool stop(duration drain) {
    std::unique_lock lock(mutex_);
    if (state_ == run_state::idle || state_ == run_state::stopped) {
      state_ = run_state::stopped;
      return running_.empty();
    }
    state_ = run_state::stopping;
    // Attempts held back by a per-type limit have not started: drop them from
    // memory; they are still in the store for the next start.
    for (auto& [type, gate] : gates_) {
      for (attempt* a : gate.waiting) forget(a);
      gate.waiting.clear();
    }
    boost::asio::post(strand_, [self = shared_from_this()] {
      self->timer_.cancel();
      self->store_retry_.cancel();
    });
    changed_.wait_for(lock, drain, [&] { return running_.empty(); });
    state_ = run_state::stopped;
    const bool drained = running_.empty();
    lock.unlock();
    writer_.drain();  // removals of attempts that just succeeded, and kept ones
    return drained;
  }

  void join_threads() {
    async_pool_.join();  // their calls fail fast with not_running by now
    pool_.join();
    // Attempts that outlived stop()'s drain may have queued removals since.
    writer_.stop_flusher();
  }

  boost::asio::any_io_executor executor() const { return executor_; }
  boost::asio::any_io_executor async_executor() { return async_pool_.get_executor(); }

  // ------------------------------------------------------------ scheduling

  // `due_checked`: the caller made `due` from now + a delay it checked, so
  // validate_due() (and its clock read) has nothing left to refuse.
  std::string schedule_at(std::string_view type, std::string payload, time_point due,
                          const schedule_options& opts, boost::system::error_code& ec,
                          bool due_checked = false) {
    if (inline_) return schedule_one_inline(type, std::move(payload), due, opts, ec, due_checked);
    std::vector<task_spec> one(1);
    one[0].type = std::string(type);
    one[0].payload = std::move(payload);
    one[0].due = due;
    one[0].options = opts;
    std::size_t bad = 0;
    auto ids = schedule_many(std::move(one), ec, bad);
    return ids.empty() ? std::string{} : std::move(ids.front());
  }

  // Every schedule call comes here: validate all, decide all under the lock,
  // write all in one store batch, then arm all or roll all back. `bad` gets
  // the index of the task an error is about.
  std::vector<std::string> schedule_many(std::vector<task_spec> specs,
                                         boost::system::error_code& ec, std::size_t& bad) {
    ec = {};
    const std::size_t n = specs.size();
    std::vector<task> tasks(n);
    for (std::size_t i = 0; i < n; ++i) {
      task_spec& spec = specs[i];
      if (auto e = validate(spec.type, spec.payload, spec.due, spec.options.id)) {
        ec = e;
        bad = i;
        return {};
      }
      tasks[i].id = spec.options.id;
      tasks[i].type = std::move(spec.type);
      tasks[i].payload = std::move(spec.payload);
      // Stores keep milliseconds; keep the same value in memory so find() and
      // a reloaded task agree.
      tasks[i].due = std::chrono::floor<std::chrono::milliseconds>(spec.due);
    }

    std::unique_lock lock(mutex_);
    if (state_ != run_state::running) {
      ec = errc::not_running;
      return {};
    }
    // Calls on one id take effect in order: wait out writes in flight.
    changed_.wait(lock, [&] {
      return std::none_of(tasks.begin(), tasks.end(), [&](const task& t) {
        if (t.id.empty()) return false;
        const timer_wheel::handle h = wheel_.find(t.id);
        return h != timer_wheel::npos && wheel_.tag(h) == persisting;
      });
    });

    // Decide what each task does, before changing anything.
    enum class action { insert, keep, replace_waiting, replace_running };
    struct step {
      action what = action::insert;
      timer_wheel::handle h = timer_wheel::npos;
      attempt* running = nullptr;
      task old;  // replace_waiting: the version to restore on failure
      std::uint64_t old_tick = 0;
    };
    std::vector<step> plan(n);
    std::unordered_set<std::string_view> in_batch;
    std::size_t added = 0;
    for (std::size_t i = 0; i < n; ++i) {
      task& t = tasks[i];
      step& st = plan[i];
      if (t.id.empty()) {
        do t.id = generate_id();
        while (wheel_.find(t.id) != timer_wheel::npos || running_.count(t.id) != 0 ||
               in_batch.count(t.id) != 0);
      } else if (n > 1 && in_batch.count(t.id) != 0) {
        ec = errc::duplicate_id;
        bad = i;
        return {};
      }
      if (n > 1) in_batch.insert(t.id);
      const timer_wheel::handle h = wheel_.find(t.id);
      auto run = running_.find(t.id);
      if (h == timer_wheel::npos && run == running_.end()) {
        ++added;
        continue;
      }
      switch (specs[i].options.conflict) {
        case on_conflict::reject:
          ec = errc::duplicate_id;
          bad = i;
          return {};
        case on_conflict::keep: st.what = action::keep; break;
        case on_conflict::replace:
          if (h != timer_wheel::npos) {
            st.what = action::replace_waiting;
            st.h = h;
          } else {
            // The old version is running: let it finish, but its outcome must
            // neither remove nor retry what replaces it.
            st.what = action::replace_running;
            st.running = run->second.get();
          }
          break;
      }
    }
    if (added > 0 && pending_locked() + added > options_.max_pending) {
      ec = errc::queue_full;
      bad = n - 1;
      return {};
    }

    // Apply in memory (detached, so nothing fires yet) and queue one batch.
    std::vector<task> to_save;
    to_save.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      step& st = plan[i];
      switch (st.what) {
        case action::keep: continue;
        case action::replace_waiting:
          st.old_tick = wheel_.due_tick(st.h);
          st.old = std::exchange(wheel_.value(st.h), std::move(tasks[i]));
          wheel_.disarm(st.h);
          break;
        case action::replace_running:
          set_superseded(st.running, true);
          st.h = wheel_.insert_detached(std::move(tasks[i]));
          break;
        case action::insert: st.h = wheel_.insert_detached(std::move(tasks[i])); break;
      }
      wheel_.tag(st.h) = persisting;
      to_save.push_back(wheel_.value(st.h));
    }
    std::vector<std::string> ids(n);
    if (!to_save.empty() && inline_) {
      ec = writer_.save_now(to_save);
    } else if (!to_save.empty()) {
      std::vector<detail::store_writer::op> ops(to_save.size());
      for (std::size_t i = 0; i < ops.size(); ++i) {
        ops[i].what = detail::store_writer::kind::save;
        ops[i].d.task = std::move(to_save[i]);
      }
      auto ticket = writer_.enqueue(std::move(ops));
      lock.unlock();
      ec = writer_.wait(ticket);
      lock.lock();
      // Nobody else touched these nodes meanwhile: calls on them waited.
    }
    for (std::size_t i = 0; i < n; ++i) {
      step& st = plan[i];
      if (st.what == action::keep) {
        ids[i] = std::move(tasks[i].id);
      } else if (!ec) {
        ids[i] = wheel_.value(st.h).id;
        arm_locked(st.h, tick_for(wheel_.value(st.h).due));
      } else if (st.what == action::replace_waiting) {
        wheel_.value(st.h) = std::move(st.old);
        arm_locked(st.h, st.old_tick);
      } else {
        wheel_.erase(st.h);
        // Give the id back to the old version if it is still running.
        if (st.running && superseded_.count(st.running) != 0) set_superseded(st.running, false);
      }
    }
    changed_.notify_all();
    if (ec) {
      bad = 0;
      return {};
    }
    scheduled_ += n;
    return ids;
  }

  // schedule_at() of one task for an inline store: the task is built once and
  // moved into the wheel, written to the store from the wheel's copy under
  // the lock, and the id is hashed by the wheel and the store only.
  std::string schedule_one_inline(std::string_view type, std::string&& payload, time_point due,
                                  const schedule_options& opts, boost::system::error_code& ec,
                                  bool due_checked) {
    ec = {};
    if (auto e = validate_spec(type, payload, opts.id)) {
      ec = e;
      return {};
    }
    if (!due_checked) {
      if (auto e = validate_due(due)) {
        ec = e;
        return {};
      }
    }
    task t;
    t.id = opts.id;
    t.type = type;
    t.payload = std::move(payload);
    t.due = std::chrono::floor<std::chrono::milliseconds>(due);
    const std::uint64_t tick = tick_for(t.due);

    std::unique_lock lock(mutex_);
    if (state_ != run_state::running) {
      ec = errc::not_running;
      return {};
    }
    if (t.id.empty()) {
      do t.id = generate_id();
      while (wheel_.find(t.id) != timer_wheel::npos || running_.count(t.id) != 0);
    } else if (!running_.empty() && running_.count(t.id) != 0) {
      lock.unlock();
      return schedule_one_general(std::move(t), opts, ec);
    }
    const timer_wheel::handle h = wheel_.insert(std::move(t), tick);
    if (h == timer_wheel::npos) {  // held already: `t` is untouched
      lock.unlock();
      return schedule_one_general(std::move(t), opts, ec);
    }
    if (pending_locked() > options_.max_pending) {
      wheel_.erase(h);
      ec = errc::queue_full;
      return {};
    }
    const task& held = wheel_.value(h);
    if ((ec = writer_.save_now(std::span<const task>(&held, 1)))) {
      wheel_.erase(h);
      return {};
    }
    ++scheduled_;
    note_armed_locked(wheel_.due_tick(h));
    return held.id;
  }

  // The conflict cases of schedule_one_inline(): the batch path decides them.
  std::string schedule_one_general(task&& t, const schedule_options& opts,
                                   boost::system::error_code& ec) {
    std::vector<task_spec> one(1);
    one[0].type = std::move(t.type);
    one[0].payload = std::move(t.payload);
    one[0].due = t.due;
    one[0].options.id = std::move(t.id);
    one[0].options.conflict = opts.conflict;
    std::size_t bad = 0;
    auto ids = schedule_many(std::move(one), ec, bad);
    return ids.empty() ? std::string{} : std::move(ids.front());
  }

  bool cancel(std::string_view id, boost::system::error_code& ec) {
    ec = {};
    std::unique_lock lock(mutex_);
    if (state_ != run_state::running) {
      ec = errc::not_running;
      return false;
    }
    if (inline_) {
      if (const timer_wheel::handle h = wheel_.find(id); h != timer_wheel::npos) {
        if ((ec = writer_.remove_now(wheel_.value(h).id))) return false;
        wheel_.erase(h);
        ++cancelled_;
        return true;
      }
    } else {
      wait_settled(lock, id);
    }
    if (const timer_wheel::handle h = wheel_.find(id); h != timer_wheel::npos) {
      const std::uint64_t old_tick = wheel_.due_tick(h);
      wheel_.disarm(h);
      wheel_.tag(h) = persisting;
      task gone;
      gone.id = std::string(id);
      auto ticket = writer_.enqueue(detail::store_writer::kind::remove, std::move(gone));
      lock.unlock();
      ec = writer_.wait(ticket);
      lock.lock();
      if (ec) {
        arm_locked(h, old_tick);
      } else {
        wheel_.erase(h);
        ++cancelled_;
      }
      changed_.notify_all();
      return !ec;
    }
    if (auto run = running_.find(id); run != running_.end()) {
      run->second->cancelled = true;
      ++cancelled_;
      return true;
    }
    return false;
  }

  bool reschedule(std::string_view id, time_point due, boost::system::error_code& ec) {
    ec = {};
    if (auto e = validate_due(due)) {
      ec = e;
      return false;
    }
    std::unique_lock lock(mutex_);
    if (state_ != run_state::running) {
      ec = errc::not_running;
      return false;
    }
    if (!inline_) wait_settled(lock, id);
    const timer_wheel::handle h = wheel_.find(id);
    if (h == timer_wheel::npos) return false;
    const time_point old_due = wheel_.value(h).due;
    const std::uint64_t old_tick = wheel_.due_tick(h);
    wheel_.disarm(h);
    wheel_.value(h).due = std::chrono::floor<std::chrono::milliseconds>(due);
    if (!persist_then_arm(lock, h, ec)) {
      wheel_.value(h).due = old_due;
      arm_locked(h, old_tick);
      return false;
    }
    return true;
  }

  std::vector<dead_letter> dead_letters(std::size_t offset, std::size_t limit,
                                        boost::system::error_code& ec) const {
    // Straight to the store: dead letters are not kept in memory. Writes
    // still queued are flushed first, so a task that just died is listed.
    writer_.flush();
    return store_->list_dead(offset, limit, ec);
  }

  bool requeue(std::string_view id, time_point due, boost::system::error_code& ec) {
    ec = {};
    if (auto e = validate_due(due)) {
      ec = e;
      return false;
    }
    writer_.flush();
    std::optional<dead_letter> d = store_->find_dead(id, ec);
    if (ec || !d) return false;
    std::unique_lock lock(mutex_);
    if (state_ != run_state::running) {
      ec = errc::not_running;
      return false;
    }
    wait_settled(lock, id);
    if (wheel_.find(id) != timer_wheel::npos || running_.count(id) != 0) {
      ec = errc::duplicate_id;
      return false;
    }
    if (pending_locked() >= options_.max_pending) {
      ec = errc::queue_full;
      return false;
    }
    task t = std::move(d->task);
    t.attempts = 0;
    t.due = std::chrono::floor<std::chrono::milliseconds>(due);
    const timer_wheel::handle h = wheel_.insert_detached(std::move(t));
    if (inline_) {
      ec = writer_.revive_now(wheel_.value(h));
    } else {
      wheel_.tag(h) = persisting;
      auto ticket = writer_.enqueue(detail::store_writer::kind::revive, wheel_.value(h));
      lock.unlock();
      ec = writer_.wait(ticket);
      lock.lock();
    }
    if (ec) {
      wheel_.erase(h);
    } else {
      arm_locked(h, tick_for(wheel_.value(h).due));
      if (dead_ > 0) --dead_;
    }
    changed_.notify_all();
    return !ec;
  }

  bool purge(std::string_view id, boost::system::error_code& ec) {
    ec = {};
    {
      std::lock_guard lock(mutex_);
      if (state_ != run_state::running) {
        ec = errc::not_running;
        return false;
      }
    }
    writer_.flush();
    std::optional<dead_letter> d = store_->find_dead(id, ec);
    if (ec || !d) return false;
    task gone;
    gone.id = std::string(id);
    ec = inline_
             ? writer_.purge_now(gone.id)
             : writer_.wait(writer_.enqueue(detail::store_writer::kind::purge, std::move(gone)));
    if (ec) return false;
    std::lock_guard lock(mutex_);
    if (dead_ > 0) --dead_;
    return true;
  }

  std::optional<task> find(std::string_view id) const {
    std::lock_guard lock(mutex_);
    if (const timer_wheel::handle h = wheel_.find(id);
        h != timer_wheel::npos && wheel_.tag(h) == armed)
      return wheel_.value(h);
    if (auto run = running_.find(id); run != running_.end()) return run->second->t;
    return std::nullopt;
  }

  std::optional<task_status> status(std::string_view id) const {
    std::lock_guard lock(mutex_);
    if (const timer_wheel::handle h = wheel_.find(id);
        h != timer_wheel::npos && wheel_.tag(h) == armed) {
      const task& t = wheel_.value(h);
      return task_status{t, t.due <= system_clock::now() ? task_state::ready : task_state::delayed};
    }
    if (auto run = running_.find(id); run != running_.end()) {
      for (const auto& [type, gate] : gates_)
        for (const attempt* a : gate.waiting)
          if (a == run->second.get()) return task_status{a->t, task_state::ready};
      return task_status{run->second->t, task_state::running};
    }
    return std::nullopt;
  }

  std::size_t pending() const {
    std::lock_guard lock(mutex_);
    return pending_locked();
  }

  engine_stats stats() const {
    engine_stats s;
    {
      std::lock_guard lock(mutex_);
      s.pending = pending_locked();
      s.running = active_;
      s.scheduled = scheduled_;
      s.loaded = loaded_;
      s.succeeded = succeeded_;
      s.failed = failed_;
      s.cancelled = cancelled_;
      s.quarantined = quarantined_;
      s.retried = retried_;
      s.died = died_;
      s.dead = dead_;
    }
    s.fired = fired_.load(std::memory_order_relaxed);
    s.timed_out = timed_out_.load(std::memory_order_relaxed);
    s.wakeups = wakeups_.load(std::memory_order_relaxed);
    s.lateness_p50 = lateness_.quantile(0.50);
    s.lateness_p90 = lateness_.quantile(0.90);
    s.lateness_p99 = lateness_.quantile(0.99);
    s.lateness_max = lateness_.max();
    return s;
  }

  const engine_options& options() const noexcept { return options_; }
  std::string store_description() const { return store_->describe(); }

 private:
  enum class run_state { idle, running, stopping, stopped };

  // A task taken out of the wheel to run. It stays findable by id (through
  // running_) until its outcome is settled.
  struct attempt {
    task t;
    bool cancelled = false;   // cancel() came while it ran: do not retry
    bool superseded = false;  // schedule(replace) stored a new version: leave the store alone
  };
  struct type_gate {
    std::size_t limit = 0;
    std::size_t active = 0;
    std::deque<attempt*> waiting;
  };

  // Spreads tasks that were overdue at start() over the coming ticks at
  // options_.catch_up_rate per second, in due order. Their due time stays as
  // stored (executors and lateness see the truth); only the tick they are
  // released at moves.
  void release_overdue(std::vector<task> overdue) {
    if (overdue.empty()) return;
    std::stable_sort(overdue.begin(), overdue.end(),
                     [](const task& a, const task& b) { return a.due < b.due; });
    const double tick_seconds = std::chrono::duration<double>(options_.tick).count();
    const double per_tick = options_.catch_up_rate * tick_seconds;
    const std::uint64_t first = current_tick();
    for (std::size_t k = 0; k < overdue.size(); ++k) {
      const auto offset = static_cast<std::uint64_t>(static_cast<double>(k) / per_tick);
      wheel_.insert(std::move(overdue[k]), first + offset);
    }
    log(log_level::info, std::to_string(overdue.size()) +
                             " tasks were overdue at start; releasing them at " +
                             std::to_string(options_.catch_up_rate) + " per second");
  }

  // ------------------------------------------------------------ validation

  boost::system::error_code validate_due(time_point due) const {
    if (due.time_since_epoch().count() < 0) return errc::invalid_delay;
    if (due - system_clock::now() > options_.max_delay) return errc::due_too_far;
    return {};
  }

  boost::system::error_code validate(std::string_view type, const std::string& payload,
                                     time_point due, const std::string& id) const {
    if (auto e = validate_spec(type, payload, id)) return e;
    return validate_due(due);
  }

  // validate() without the due time.
  boost::system::error_code validate_spec(std::string_view type, const std::string& payload,
                                          const std::string& id) const {
    if (!valid_type(type)) return errc::invalid_type;
    if (!options_.accept_unregistered_types && !executors_.contains(type))
      return errc::unknown_type;
    if (!id.empty() && !valid_id(id)) return errc::invalid_id;
    if (payload.size() > options_.max_payload) return errc::payload_too_large;
    return {};
  }

  // ------------------------------------------------------------ clock

  // Due times are wall-clock instants; the wheel counts steady ticks from
  // anchor_steady_. A due time is mapped to the first tick boundary at or
  // after it, once, when the task enters the wheel: a later step of the wall
  // clock does not move tasks already waiting (see docs/design.md).
  std::uint64_t tick_for(time_point due) const {
    const auto offset = due - anchor_system_;
    if (offset.count() <= 0) return 0;
    const auto tick = std::chrono::duration_cast<system_clock::duration>(options_.tick).count();
    return static_cast<std::uint64_t>((offset.count() + tick - 1) / tick);
  }

  std::uint64_t current_tick() const {
    const auto elapsed = steady_clock::now() - anchor_steady_;
    return static_cast<std::uint64_t>(elapsed / options_.tick);
  }

  steady_clock::time_point deadline_of(std::uint64_t tick) const {
    return anchor_steady_ +
           tick * std::chrono::duration_cast<steady_clock::duration>(options_.tick);
  }

  // ------------------------------------------------------------ wheel + timer

  std::size_t pending_locked() const { return wheel_.size() + running_.size(); }

  // Blocks while a store write about `id` is in flight, so calls on one id
  // take effect in order and each sees the settled outcome of the last.
  void wait_settled(std::unique_lock<std::mutex>& lock, std::string_view id) {
    changed_.wait(lock, [&] {
      const timer_wheel::handle h = wheel_.find(id);
      return h == timer_wheel::npos || wheel_.tag(h) != persisting;
    });
  }

  // Saves node `h` (detached), waits for the store outside the lock, then
  // arms it. Returns false (ec set) when the save failed; the node is left
  // detached for the caller to roll back.
  bool persist_then_arm(std::unique_lock<std::mutex>& lock, timer_wheel::handle h,
                        boost::system::error_code& ec) {
    if (inline_) {
      if ((ec = writer_.save_now(std::span<const task>(&wheel_.value(h), 1)))) return false;
      arm_locked(h, tick_for(wheel_.value(h).due));
      return true;
    }
    wheel_.tag(h) = persisting;
    auto ticket = writer_.enqueue(detail::store_writer::kind::save, wheel_.value(h));
    lock.unlock();
    ec = writer_.wait(ticket);
    lock.lock();
    // Nobody else erased or moved `h`: every other call on this id waited.
    if (ec) {
      wheel_.tag(h) = armed;  // the caller re-arms or erases it
      return false;
    }
    arm_locked(h, tick_for(wheel_.value(h).due));
    changed_.notify_all();
    return true;
  }

  // Arms `h` and wakes the timer early if it is now the earliest task.
  void arm_locked(timer_wheel::handle h, std::uint64_t tick) {
    wheel_.arm(h, tick);
    wheel_.tag(h) = armed;
    note_armed_locked(wheel_.due_tick(h));
  }

  // Under the lock: a node was armed at `due`; wake the timer early if it is
  // now the earliest.
  void note_armed_locked(std::uint64_t due) {
    if (due < armed_tick_ && state_ == run_state::running) {
      armed_tick_ = due;
      post_rearm();
    }
  }

  void post_rearm() {
    boost::asio::post(strand_, [self = shared_from_this()] { self->rearm(); });
  }

  // On the strand: point the timer at armed_tick_. An absolute deadline, so
  // however late this runs, the tick boundary does not drift.
  void rearm() {
    std::uint64_t tick;
    {
      std::lock_guard lock(mutex_);
      if (state_ != run_state::running) return;
      tick = armed_tick_;
    }
    if (tick == timer_wheel::no_tick) return;
    timer_.expires_at(deadline_of(tick));
    timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (!ec) self->on_timer();
    });
  }

  // On the strand: fire everything due up to now (every missed tick, in
  // order), hand it to the workers, and sleep until the next due tick.
  void on_timer() {
    wakeups_.fetch_add(1, std::memory_order_relaxed);
    std::vector<attempt*> ready;
    {
      std::lock_guard lock(mutex_);
      if (state_ != run_state::running) return;
      std::vector<attempt*> fired;
      wheel_.advance(current_tick(), [&](timer_wheel::handle h) {
        auto a = std::make_unique<attempt>();
        a->t = wheel_.extract(h);
        fired.push_back(a.get());
        std::string_view key = a->t.id;
        running_.emplace(key, std::move(a));  // unique: a replaced version is in superseded_
      });
      // One tick may hold tasks due at different milliseconds, and a reload
      // puts every overdue task in the same tick: run them in due order.
      std::stable_sort(fired.begin(), fired.end(),
                       [](const attempt* x, const attempt* y) { return x->t.due < y->t.due; });
      for (attempt* a : fired)
        if (admit(a)) ready.push_back(a);
      armed_tick_ = wheel_.next_due_tick();
    }
    for (attempt* a : ready) post_attempt(a);
    rearm();
  }

  // Under the lock: counts `a` against its type's limit, or parks it.
  bool admit(attempt* a) {
    auto gate = gates_.find(a->t.type);
    if (gate != gates_.end()) {
      if (gate->second.active >= gate->second.limit) {
        gate->second.waiting.push_back(a);
        return false;
      }
      ++gate->second.active;
    }
    ++active_;
    return true;
  }

  // Under the lock: `a` finished; returns the next parked attempt of its type
  // that may start now, if any.
  attempt* release(const attempt& a) {
    --active_;
    auto gate = gates_.find(a.t.type);
    if (gate == gates_.end()) return nullptr;
    --gate->second.active;
    if (gate->second.waiting.empty() || state_ != run_state::running) return nullptr;
    attempt* next = gate->second.waiting.front();
    gate->second.waiting.pop_front();
    ++gate->second.active;
    ++active_;
    return next;
  }

  void post_attempt(attempt* a) {
    // A raw pointer, not shared_from_this(): the pool is a member, joined by
    // ~engine before the impl can go, and a shared pointer queued in a member
    // would keep its owner alive forever.
    boost::asio::post(pool_, [this, a] { run_attempt(a); });
  }

  // ------------------------------------------------------------ workers

  // What a worker, a timeout and an asynchronous executor's callback share
  // about one attempt: whichever settles it first reports the outcome; the
  // others find `settled` set and leave `a` alone (it may be gone by then).
  struct attempt_token {
    attempt* a = nullptr;
    std::atomic<bool> settled{false};
    std::optional<task> copy;  // what the executor reads when `a` may go first
    std::unique_ptr<delayq::async_executor> async;
    std::shared_ptr<boost::asio::steady_timer> timeout;
  };

  void run_attempt(attempt* a) {
    {
      std::lock_guard lock(mutex_);
      if (state_ != run_state::running) {
        // Stopped before it started: it is still in the store for next time.
        release(*a);
        forget(a);
        changed_.notify_all();
        return;
      }
    }
    const auto started = system_clock::now();
    lateness_.record(std::chrono::duration_cast<std::chrono::microseconds>(started - a->t.due));
    fired_.fetch_add(1, std::memory_order_relaxed);

    auto token = std::make_shared<attempt_token>();
    token->a = a;
    const auto timeout = options_.timeout_per_type.find(a->t.type);
    const bool timed = timeout != options_.timeout_per_type.end();
    std::unique_ptr<delayq::executor> sync;
    try {
      sync = executors_.make(a->t.type);
      if (!sync) token->async = executors_.make_async(a->t.type);
    } catch (...) {
      settle(token, describe_exception(std::current_exception()), false);
      return;
    }
    if (!sync && !token->async) {
      // Nothing will change by retrying: straight to the dead letters.
      settle(token, "no executor registered for type " + a->t.type, true);
      return;
    }
    // A timeout or an asynchronous executor can outlive `a`: give the
    // executor a copy it owns with the token.
    if (timed || token->async) token->copy = a->t;
    const task& t = token->copy ? *token->copy : a->t;
    if (timed) arm_timeout(token, timeout->second);

    if (sync) {
      std::string failure;
      try {
        sync->execute(t);
      } catch (...) {
        failure = describe_exception(std::current_exception());
      }
      settle(token, std::move(failure), false);
      return;
    }
    try {
      token->async->start(t, [self = shared_from_this(), token](std::string failure) {
        self->settle(token, std::move(failure), false);
      });
    } catch (...) {
      settle(token, describe_exception(std::current_exception()), false);
    }
  }

  static std::string describe_exception(std::exception_ptr e) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      std::string what = ex.what();
      return what.empty() ? "exception with an empty message" : what;
    } catch (...) {
      return "exception of unknown type";
    }
  }

  void arm_timeout(const std::shared_ptr<attempt_token>& token, std::chrono::milliseconds after) {
    auto timer = std::make_shared<boost::asio::steady_timer>(strand_);
    token->timeout = timer;
    // The timer is only touched on the strand.
    boost::asio::post(strand_, [self = shared_from_this(), token, timer, after] {
      timer->expires_after(after);
      timer->async_wait([self, token, after](const boost::system::error_code& ec) {
        if (ec) return;  // the attempt ended first and cancelled it
        self->timed_out_.fetch_add(1, std::memory_order_relaxed);
        self->settle(token, "timed out after " + std::to_string(after.count()) + " ms", false);
      });
    });
  }

  void settle(const std::shared_ptr<attempt_token>& token, std::string failure, bool hopeless) {
    if (token->settled.exchange(true)) return;  // a timeout or the executor got here first
    if (token->timeout) boost::asio::post(strand_, [timer = token->timeout] { timer->cancel(); });
    // Let the asynchronous executor go once its completion has been called;
    // the token (and the copy it reads) lives as long as that callback.
    complete(token->a, failure, hopeless);
  }

  const retry_policy& policy_for(std::string_view type) const {
    auto it = options_.retry_per_type.find(type);
    return it == options_.retry_per_type.end() ? options_.retry : it->second;
  }

  // Full jitter: uniform in [0, min(cap, base * 2^(attempt-1))].
  std::chrono::milliseconds backoff(const retry_policy& p, std::uint32_t attempt) {
    const unsigned shift = std::min<std::uint32_t>(attempt > 0 ? attempt - 1 : 0, 40);
    const auto base = static_cast<std::uint64_t>(p.base.count());
    const auto cap = static_cast<std::uint64_t>(p.cap.count());
    const std::uint64_t ceiling = base > (cap >> shift) ? cap : std::min(cap, base << shift);
    std::uniform_int_distribution<std::uint64_t> pick(0, ceiling);
    std::lock_guard lock(random_mutex_);
    return std::chrono::milliseconds{static_cast<std::int64_t>(pick(random_))};
  }

  void complete(attempt* a, const std::string& failure, bool hopeless) {
    std::vector<alert> alerts;
    std::unique_lock lock(mutex_);
    const bool ok = failure.empty();
    ok ? ++succeeded_ : ++failed_;
    note_outcome(a->t.type, ok, alerts);
    attempt* next = release(*a);
    // Set when a write nobody waits for found no flusher to take it (the
    // engine is being destroyed): write it here, as a last resort.
    bool flush = false;
    if (a->superseded) {
      forget(a);
    } else if (ok || a->cancelled) {
      // At-least-once: the task leaves the store only now. Nobody waits for
      // this removal; losing it to a crash runs the task once more, and a
      // store that is down gets it when it is back.
      // The worker does not wait for it either: the writer's flusher writes
      // it, together with the removals that pile up meanwhile.
      if (inline_) {
        writer_.remove_now(a->t.id);
      } else {
        flush = !writer_.submit(detail::store_writer::kind::remove, a->t);
      }
      running_.erase(a->t.id);
    } else {
      // Out of running_ before the move: its key is a view into a->t.id.
      const std::unique_ptr<attempt> owned = std::move(running_.extract(a->t.id).mapped());
      task t = std::move(owned->t);
      t.attempts += 1;
      const retry_policy& policy = policy_for(t.type);
      if (hopeless || t.attempts >= policy.max_attempts) {
        flush = !bury_locked(std::move(t), failure, alerts);
      } else {
        const auto wait = backoff(policy, t.attempts);
        t.due = std::chrono::floor<std::chrono::milliseconds>(system_clock::now() + wait);
        ++retried_;
        log(log_level::warning, describe_task(t) + " attempt " + std::to_string(t.attempts) +
                                    " of " + std::to_string(policy.max_attempts) +
                                    " failed: " + failure + "; retrying in " +
                                    std::to_string(wait.count()) + " ms");
        if (state_ == run_state::running) {
          const timer_wheel::handle h = wheel_.insert_detached(std::move(t));
          boost::system::error_code ec;
          if (!persist_then_arm(lock, h, ec)) {
            // The store keeps the previous attempt count (the write is kept
            // and retried until the store is back); the retry still runs.
            arm_locked(h, tick_for(wheel_.value(h).due));
          }
        } else {
          // Stopping: record the attempt; the next start retries it.
          if (inline_) {
            writer_.save_now(std::span<const task>(&t, 1));
          } else {
            flush = !writer_.submit(detail::store_writer::kind::save, std::move(t));
          }
        }
      }
    }
    changed_.notify_all();
    lock.unlock();
    if (flush) writer_.flush();
    if (writer_.has_failed()) post_store_retry();
    if (next) post_attempt(next);
    raise(alerts);
  }

  // Under the lock: the task will not run again by itself. Returns false when
  // the dead letter was queued but nobody will write it unless the caller
  // flushes (see store_writer::submit()).
  bool bury_locked(task t, const std::string& failure, std::vector<alert>& alerts) {
    dead_letter d;
    d.error = failure;
    d.died_at = std::chrono::floor<std::chrono::milliseconds>(system_clock::now());
    d.task = std::move(t);
    log(log_level::error, describe_task(d.task) + " is a dead letter after " +
                              std::to_string(d.task.attempts) + " attempts: " + failure);
    ++died_;
    ++dead_;
    if (options_.alerts.on_alert) {
      alert al;
      al.what = alert::kind::task_died;
      al.type = d.task.type;
      al.task_id = d.task.id;
      al.error = failure;
      alerts.push_back(std::move(al));
    }
    if (inline_) {
      writer_.bury_now(d);
      return true;
    }
    std::vector<detail::store_writer::op> ops(1);
    ops[0].what = detail::store_writer::kind::bury;
    ops[0].d = std::move(d);
    return writer_.submit(std::move(ops));
  }

  // Under the lock: counts an outcome in its type's window, and raises a
  // failure_rate alert when the rate crosses the threshold upwards.
  void note_outcome(const std::string& type, bool ok, std::vector<alert>& alerts) {
    if (!options_.alerts.on_alert) return;
    type_health& h = health_[type];
    const auto bucket_len = options_.alerts.window / health_buckets;
    const auto now = steady_clock::now().time_since_epoch();
    const auto index = static_cast<std::uint64_t>(
        now / std::max<steady_clock::duration>(bucket_len, std::chrono::milliseconds{1}));
    auto& b = h.buckets[index % health_buckets];
    if (b.index != index) b = {index, 0, 0};
    ++b.attempts;
    if (!ok) ++b.failures;
    std::uint64_t attempts = 0, failures = 0;
    for (const auto& x : h.buckets)
      if (x.index + health_buckets > index) {
        attempts += x.attempts;
        failures += x.failures;
      }
    const double rate =
        attempts ? static_cast<double>(failures) / static_cast<double>(attempts) : 0;
    const bool over =
        attempts >= options_.alerts.min_attempts && rate >= options_.alerts.failure_rate_threshold;
    if (over && !h.alerting) {
      alert al;
      al.what = alert::kind::failure_rate;
      al.type = type;
      al.failure_rate = rate;
      al.attempts = attempts;
      al.failures = failures;
      alerts.push_back(std::move(al));
    }
    h.alerting = over;
  }

  void raise(const std::vector<alert>& alerts) {
    for (const alert& al : alerts) {
      try {
        options_.alerts.on_alert(al);
      } catch (const std::exception& e) {
        log(log_level::error, std::string("alert callback threw: ") + e.what());
      } catch (...) {
        log(log_level::error, "alert callback threw an exception of unknown type");
      }
    }
  }

  // A store write that must land failed (the store is down): try again in a
  // second, and every second after until it lands.
  void post_store_retry() {
    boost::asio::post(strand_, [self = shared_from_this()] {
      if (self->store_retry_armed_) return;
      self->store_retry_armed_ = true;
      self->store_retry_.expires_after(std::chrono::seconds{1});
      self->store_retry_.async_wait([self](const boost::system::error_code& ec) {
        self->store_retry_armed_ = false;
        if (ec) return;
        // Raw `this` into our own pool, as in post_attempt().
        impl* me = self.get();
        boost::asio::post(self->async_pool_, [me] {
          me->writer_.retry_failed();
          if (me->writer_.has_failed()) me->post_store_retry();
        });
      });
    });
  }

  // Under the lock: moves a running attempt out of (or back into) running_,
  // so the id is free for the version that replaces it.
  void set_superseded(attempt* a, bool on) {
    if (on) {
      auto node = running_.extract(a->t.id);
      a->superseded = true;
      superseded_.emplace(a, std::move(node.mapped()));
    } else {
      auto node = superseded_.extract(a);
      a->superseded = false;
      std::string_view key = a->t.id;
      running_.emplace(key, std::move(node.mapped()));
    }
  }

  // Under the lock: drops a finished (or never started) attempt.
  void forget(attempt* a) {
    if (a->superseded)
      superseded_.erase(a);
    else
      running_.erase(a->t.id);
  }

  std::string generate_id() {
    // 6 hex digits of a per-engine random nonce, a dash, 8 of a counter: 15
    // characters, so the id fits std::string's small buffer. A clash with a
    // stored id is caught by the caller, which draws the next one.
    static constexpr char hex[] = "0123456789abcdef";
    const std::uint64_t n = id_counter_.fetch_add(1, std::memory_order_relaxed);
    std::string id(15, '-');
    for (int i = 0; i < 6; ++i) id[5 - i] = hex[(id_nonce_ >> (4 * i)) & 0xf];
    for (int i = 0; i < 8; ++i) id[14 - i] = hex[(n >> (4 * i)) & 0xf];
    return id;
  }

  const engine_options options_;
  const executor_factory executors_;
  std::unique_ptr<task_store> store_;
  mutable detail::store_writer writer_;
  // The store's writes are inline (task_store::inline_writes()): they are made
  // under mutex_, through writer_'s *_now() calls, and no node is ever left
  // `persisting` while mutex_ is free.
  const bool inline_;
  const boost::asio::any_io_executor executor_;
  boost::asio::strand<boost::asio::any_io_executor> strand_;
  boost::asio::steady_timer timer_;  // touched only on strand_
  boost::asio::thread_pool pool_;
  boost::asio::thread_pool async_pool_;  // runs async_schedule() calls
  // Tick k of the wheel is the instant anchor_steady_ + k * tick. Set by
  // start() one tick in the past, so that the wheel (which starts at tick 0
  // and files anything not in the future at tick 1) runs overdue tasks at
  // once instead of a tick later.
  steady_clock::time_point anchor_steady_;
  system_clock::time_point anchor_system_;

  mutable std::mutex mutex_;
  std::condition_variable changed_;  // a persisting node settled, or an attempt ended
  run_state state_ = run_state::idle;
  timer_wheel wheel_;
  std::unordered_map<std::string_view, std::unique_ptr<attempt>>
      running_;  // keys view into attempt::t.id
  std::unordered_map<attempt*, std::unique_ptr<attempt>> superseded_;  // replaced while running
  std::unordered_map<std::string, type_gate> gates_;                   // keys fixed at construction
  std::size_t active_ = 0;  // attempts posted to workers and not completed
  std::uint64_t armed_tick_ = timer_wheel::no_tick;

  std::uint64_t scheduled_ = 0, loaded_ = 0, succeeded_ = 0, failed_ = 0, cancelled_ = 0,
                quarantined_ = 0, retried_ = 0, died_ = 0;
  std::size_t dead_ = 0;  // dead letters in the store, as far as this engine knows
  std::atomic<std::uint64_t> timed_out_{0};

  // Failure counts per type over the alert window, in buckets.
  static constexpr std::size_t health_buckets = 6;
  struct type_health {
    struct bucket {
      std::uint64_t index = 0, attempts = 0, failures = 0;
    };
    std::array<bucket, health_buckets> buckets{};
    bool alerting = false;
  };
  std::unordered_map<std::string, type_health> health_;

  std::mutex random_mutex_;
  std::mt19937_64 random_{std::random_device{}()};

  boost::asio::steady_timer store_retry_{strand_};  // on strand_ only
  bool store_retry_armed_ = false;                  // on strand_ only
  std::atomic<std::uint64_t> fired_{0};
  std::atomic<std::uint64_t> wakeups_{0};  // on_timer() runs: the idle cost
  detail::lateness_histogram lateness_;

  const std::uint64_t id_nonce_;
  std::atomic<std::uint64_t> id_counter_{0};
};

// ---------------------------------------------------------------- engine

engine::engine(boost::asio::any_io_executor ex, executor_factory executors,
               std::unique_ptr<task_store> store, engine_options options) {
  if (auto ec = check_options(options)) throw boost::system::system_error(ec, "delayq::engine");
  if (!store) store = open_store(default_store_uri());
  impl_ = std::make_shared<impl>(std::move(ex), std::move(executors), std::move(store),
                                 std::move(options));
}

engine::engine(boost::asio::io_context& io, executor_factory executors,
               std::unique_ptr<task_store> store, engine_options options)
    : engine(io.get_executor(), std::move(executors), std::move(store), std::move(options)) {}

engine::engine(boost::asio::any_io_executor ex, executor_factory executors, engine_options options)
    : engine(std::move(ex), std::move(executors), nullptr, std::move(options)) {}

engine::engine(boost::asio::io_context& io, executor_factory executors, engine_options options)
    : engine(io.get_executor(), std::move(executors), nullptr, std::move(options)) {}

engine::~engine() {
  if (!impl_) return;
  impl_->stop(duration{0});
  impl_->join_threads();
}

void engine::start() {
  boost::system::error_code ec;
  start(ec);
  detail::throw_if(ec, "delayq::engine::start");
}
void engine::start(boost::system::error_code& ec) { impl_->start(ec); }

std::string engine::schedule(std::string_view type, std::string payload, duration delay,
                             const schedule_options& options) {
  boost::system::error_code ec;
  auto id = schedule(type, std::move(payload), delay, options, ec);
  detail::throw_if(ec, "delayq::engine::schedule");
  return id;
}

std::string engine::schedule(std::string_view type, std::string payload, duration delay,
                             const schedule_options& options, boost::system::error_code& ec) {
  if (delay < duration{0}) {
    ec = errc::invalid_delay;
    return {};
  }
  if (delay > impl_->options().max_delay) {
    ec = errc::due_too_far;
    return {};
  }
  return impl_->schedule_at(type, std::move(payload), std::chrono::system_clock::now() + delay,
                            options, ec, /*due_checked=*/true);
}

std::string engine::schedule_at(std::string_view type, std::string payload, time_point due,
                                const schedule_options& options) {
  boost::system::error_code ec;
  auto id = schedule_at(type, std::move(payload), due, options, ec);
  detail::throw_if(ec, "delayq::engine::schedule_at");
  return id;
}

std::string engine::schedule_at(std::string_view type, std::string payload, time_point due,
                                const schedule_options& options, boost::system::error_code& ec) {
  return impl_->schedule_at(type, std::move(payload), due, options, ec);
}

std::vector<std::string> engine::schedule_many(std::vector<task_spec> tasks) {
  boost::system::error_code ec;
  std::size_t bad = 0;
  auto ids = impl_->schedule_many(std::move(tasks), ec, bad);
  if (ec)
    throw boost::system::system_error(
        ec, "delayq::engine::schedule_many: task " + std::to_string(bad) + " of the batch");
  return ids;
}

std::vector<std::string> engine::schedule_many(std::vector<task_spec> tasks,
                                               boost::system::error_code& ec) {
  std::size_t bad = 0;
  return impl_->schedule_many(std::move(tasks), ec, bad);
}

engine::executor_type engine::get_executor() const noexcept { return impl_->executor(); }
boost::asio::any_io_executor engine::async_executor() const { return impl_->async_executor(); }
engine::duration engine::options_max_delay() const noexcept { return impl_->options().max_delay; }

bool engine::cancel(std::string_view id) {
  boost::system::error_code ec;
  const bool found = cancel(id, ec);
  detail::throw_if(ec, "delayq::engine::cancel");
  return found;
}
bool engine::cancel(std::string_view id, boost::system::error_code& ec) {
  return impl_->cancel(id, ec);
}

bool engine::reschedule(std::string_view id, time_point due) {
  boost::system::error_code ec;
  const bool found = reschedule(id, due, ec);
  detail::throw_if(ec, "delayq::engine::reschedule");
  return found;
}
bool engine::reschedule(std::string_view id, time_point due, boost::system::error_code& ec) {
  return impl_->reschedule(id, due, ec);
}

std::optional<task> engine::find(std::string_view id) const { return impl_->find(id); }
std::optional<task_status> engine::status(std::string_view id) const { return impl_->status(id); }
// Interim: the wheel being replaced has no way to walk its tasks.
std::vector<task> engine::upcoming(std::size_t, std::string_view) const { return {}; }

std::vector<dead_letter> engine::dead_letters(std::size_t offset, std::size_t limit) const {
  boost::system::error_code ec;
  auto out = dead_letters(offset, limit, ec);
  detail::throw_if(ec, "delayq::engine::dead_letters");
  return out;
}
std::vector<dead_letter> engine::dead_letters(std::size_t offset, std::size_t limit,
                                              boost::system::error_code& ec) const {
  return impl_->dead_letters(offset, limit, ec);
}

bool engine::requeue(std::string_view id, time_point due) {
  boost::system::error_code ec;
  const bool found = requeue(id, due, ec);
  detail::throw_if(ec, "delayq::engine::requeue");
  return found;
}
bool engine::requeue(std::string_view id, time_point due, boost::system::error_code& ec) {
  return impl_->requeue(id, due, ec);
}

bool engine::purge(std::string_view id) {
  boost::system::error_code ec;
  const bool found = purge(id, ec);
  detail::throw_if(ec, "delayq::engine::purge");
  return found;
}
bool engine::purge(std::string_view id, boost::system::error_code& ec) {
  return impl_->purge(id, ec);
}
std::size_t engine::pending() const { return impl_->pending(); }
engine_stats engine::stats() const { return impl_->stats(); }
bool engine::stop(duration drain) { return impl_->stop(drain); }
const engine_options& engine::options() const noexcept { return impl_->options(); }
std::string engine::store() const { return impl_->store_description(); }

}  // namespace delayq
