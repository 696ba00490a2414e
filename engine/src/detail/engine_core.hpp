// The engine's state and its operations: the wheel under one lock, and the
// calls that change it. Every change follows one path:
//
//   decide (under the lock: validate against what is held, put the record in
//   a transitional state) -> hand a write_op to the store writer -> settle
//   (under the lock: arm, erase or roll back, by the op's purpose and outcome)
//
// For a store that keeps live tasks (Redis, SQLite) settle() runs when the
// write is durable, on the writer thread; the caller waits for it, or its
// completion handler is posted then. For an in_process() store the writer
// completes live changes at once and settle() runs before the lock is let go.
//
// Where a task's life is read:
//   engine_core_calls.cpp      schedule (decide, write, settle) and the calls
//                              on one id, over the skeleton in
//                              engine_core_id_call.hpp (engine_core_signal.cpp:
//                              signals of count-triggered tasks)
//   engine_core_writes.cpp     the write path: ops to the store writer, and
//                              settle_locked() by the op's purpose
//   engine_core_fire.cpp       the clock and the fire path: due tasks to the
//                              dispatcher, attempt outcomes back, settled by
//                              attempt_settler (remove, retry or bury)
//   engine_core_horizon.cpp    with a horizon (horizon_pager), what the reads
//                              of the store do to the wheel
//   engine_core.cpp            construction, start(), stop(), the queries
//
// The parts it drives, each in its own file: ownership (which ids are ours:
// single_node_ownership, or cluster_ownership with its lease threads),
// horizon_pager (the horizon's watermark, reads and pins, and the pager's
// thread), attempt_settler (attempt outcomes), ticker (the clock and the
// timer), dispatcher (workers, per-type gates, running attempts),
// failure_policy (backoff, dead letters, alerts), store_writer (pipelined
// group commit), type_registry (interned types), validation (ids, types, due
// times, generated ids). task_state.hpp describes the state word that keeps
// cancel() truthful.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <semaphore>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "delayq/detail/schedule_completion.hpp"
#include "delayq/engine_options.hpp"
#include "delayq/engine_stats.hpp"
#include "delayq/executor.hpp"
#include "delayq/schedule_options.hpp"
#include "delayq/task_status.hpp"
#include "delayq/task_store.hpp"
#include "delayq/timer_wheel.hpp"
#include "detail/attempt_settler.hpp"
#include "detail/dispatcher.hpp"
#include "detail/failure_policy.hpp"
#include "detail/horizon_pager.hpp"
#include "detail/lateness_histogram.hpp"
#include "detail/ownership.hpp"
#include "detail/spin_mutex.hpp"
#include "detail/store_writer.hpp"
#include "detail/ticker.hpp"
#include "detail/type_registry.hpp"
#include "detail/validation.hpp"

namespace delayq::detail {

/// Thread safety: as engine (every member is safe from any thread).
class engine_core final : public dispatcher::owner,
                          private ownership::host,
                          private horizon_pager::host,
                          public std::enable_shared_from_this<engine_core> {
 public:
  engine_core(boost::asio::any_io_executor ex, executor_factory executors,
              std::unique_ptr<task_store> store, engine_options options);
  ~engine_core() override;

  void start(boost::system::error_code& ec);
  /// schedule_at() and schedule_many(). `bad` gets the index of the task an
  /// error is about.
  std::vector<std::string> schedule(std::span<const task_spec> specs, boost::system::error_code& ec,
                                    std::size_t& bad);
  std::string schedule_at(std::string_view type, std::string_view payload,
                          std::chrono::system_clock::time_point due, const schedule_options& opts,
                          boost::system::error_code& ec);
  std::string schedule_delay(std::string_view type, std::string_view payload,
                             std::chrono::milliseconds delay, const schedule_options& opts,
                             boost::system::error_code& ec);
  void async_schedule(task_spec spec, std::unique_ptr<schedule_completion> done);
  bool cancel(std::string_view id, boost::system::error_code& ec);
  bool reschedule(std::string_view id, std::chrono::system_clock::time_point due,
                  boost::system::error_code& ec);
  std::optional<dead_letter> find_dead(std::string_view id, boost::system::error_code& ec) const;
  std::vector<dead_letter> dead_letters(std::size_t offset, std::size_t limit,
                                        boost::system::error_code& ec) const;
  bool requeue(std::string_view id, std::chrono::system_clock::time_point due,
               boost::system::error_code& ec);
  bool purge(std::string_view id, boost::system::error_code& ec);
  signal_result signal(std::string_view id, std::uint32_t n, boost::system::error_code& ec);
  std::optional<task> find(std::string_view id, boost::system::error_code& ec) const;
  std::optional<task_status> status(std::string_view id, boost::system::error_code& ec) const;
  std::vector<task> upcoming(std::size_t limit, std::string_view type) const;
  std::string owner_of(std::string_view id) const;
  bool attempt_current(const task& t) const noexcept { return owner_->may_start(t.id, t.fence); }
  std::int64_t clock_ms() const noexcept { return ticker_.now_ms(); }
  std::vector<std::string> members() const;
  std::size_t pending() const;
  engine_stats stats() const;
  engine_metrics metrics() const;
  bool stop(std::chrono::milliseconds drain);
  /// Stops and joins every thread the engine owns (for ~engine).
  void shutdown();

  const engine_options& options() const noexcept { return options_; }
  std::string store_description() const { return store_->describe(); }
  boost::asio::any_io_executor executor() const { return executor_; }

  // dispatcher::owner
  void settle(std::span<outcome> outcomes) override;
  std::shared_ptr<void> keep_alive() override { return shared_from_this(); }
  bool may_start(const ready_ref& r) const noexcept override;

 private:
  enum class run_state { idle, running, stopping, stopped };

  // Why the engine made a write, which says what to do once it landed or failed.
  enum purpose : std::uint8_t {
    p_none,             // must-land, nothing in memory depends on it
    p_insert,           // a new record (schedule, requeue): arm it, or erase it
    p_replace,          // a record's content replaced: arm it, or restore it
    p_replace_running,  // a new record beside a running old one: arm, or erase and give the id back
    p_cancel,           // an armed record: erase it, or arm it again
    p_cancel_queued,    // a due record: leave it dead, or queued again
    p_reschedule,       // arm at the new time, or back at the old one
    p_retry,            // a failed attempt's new count and due time: arm either way
    p_release,          // a released attempt's new due time (and priority): arm either way
    p_purge,            // a dead letter went
    p_bury,             // a dead letter written (counted already): uncount it if fenced off
    p_signal,           // a trigger's new count (and due time): arm either way, old ones on failure
  };

  // One API call's answer, filled in as its ops settle.
  struct call_state {
    std::size_t remaining = 0;
    boost::system::error_code ec;
    std::vector<std::string> ids;  // schedule: one per task
    bool found = false;            // cancel, reschedule, requeue, purge
    std::size_t bad = 0;           // schedule: which task an error is about
    std::binary_semaphore done{0};
    std::unique_ptr<schedule_completion> async;
  };
  struct op_ctx final : op_context {
    std::shared_ptr<call_state> call;
    std::size_t index = 0;  // which task of a schedule call
    // What p_replace restores, p_cancel and p_reschedule re-arm.
    std::string old_payload;
    std::int64_t old_due_ms = 0;
    std::uint32_t old_attempts = 0;
    std::uint16_t old_kind = 0;
    std::uint32_t old_running_tag = 0;               // p_replace_running: the old record's word
    std::uint32_t old_trigger = 0, old_signals = 0;  // p_replace, p_signal
    std::uint32_t old_priority = 0, old_ttr_ms = 0;  // p_replace
  };
  // What settling found to do once the lock is let go.
  struct after_lock {
    std::vector<call_state*> calls;                  // blocking callers to wake
    std::vector<std::shared_ptr<call_state>> async;  // handlers to post
    std::vector<ready_ref> requeue;                  // due references to queue again
    std::vector<alert> alerts;
    std::vector<std::string> deferred;  // ids whose deferred async calls may run now
    // attempt_completion's on_stored handlers and what to tell them
    std::vector<
        std::pair<std::function<void(boost::system::error_code)>, boost::system::error_code>>
        stored;
  };
  // One task of a schedule call, as views into the caller's arguments, and
  // what checking it found.
  struct spec_ref {
    std::string_view type_name, payload, id;
    on_conflict conflict = on_conflict::reject;
    const type_registry::type_info* type = nullptr;
    std::int64_t due_ms = 0;
    std::uint32_t hash = 0;
    std::uint32_t trigger_count = 0;
    std::uint32_t priority = 0, ttr_ms = 0;
  };
  // The engine's side of one change, whether or not the store writes it.
  struct change {
    purpose why = p_none;
    timer_wheel::handle h = timer_wheel::npos;
    std::uint64_t aux = 0;
    op_ctx* ctx = nullptr;
    boost::system::error_code ec;
    std::string_view id;  // for calls deferred on this id
  };
  struct deferred_call {
    task_spec spec;
    std::unique_ptr<schedule_completion> done;
  };
  // `looked_up`: the serial of the lookup of its id (the horizon) that just
  // ended, 0 for none.
  void async_schedule_ref(task_spec& spec, std::unique_ptr<schedule_completion>& done,
                          std::uint64_t looked_up = 0);
  // On the pager's thread: looks an async schedule's id up, then runs it.
  void run_lookup(deferred_call& job, std::uint64_t serial);
  bool release_lookup_locked(std::string_view id, std::uint64_t serial);

  // ---- calls (engine_core_calls.cpp) ---------------------------------------
  boost::system::error_code check_spec(spec_ref& spec);
  // Schedules checked specs; ids[i] gets task i's id.
  void schedule_checked(std::span<spec_ref> specs, std::span<std::string> ids,
                        boost::system::error_code& ec, std::size_t& bad);
  // Under the lock: decides every task of a schedule call and applies it.
  // Returns false (nothing changed) when the call must wait for an id whose
  // write is in flight; `waiting_id` then names it.
  bool schedule_locked(std::span<spec_ref> specs, std::span<std::string> ids,
                       const std::shared_ptr<call_state>& call, call_state& out,
                       std::string& waiting_id, after_lock& after);
  bool running_check(boost::system::error_code& ec) const;
  // ---- the id-call skeleton (engine_core_id_call.hpp) -----------------------
  // What a call on one id decided under the lock. On entry `h` is the
  // settled record of the id (npos: none) and `hash` the id's; decide sets
  // the change to make and what settling it needs to undo it.
  struct id_change {
    purpose why = p_none;
    timer_wheel::handle h = timer_wheel::npos;
    std::uint32_t hash = 0;
    std::uint64_t aux = 0;
    std::int64_t old_due_ms = 0;    // p_reschedule, p_signal
    std::uint32_t old_signals = 0;  // p_signal
  };
  enum class id_must : std::uint8_t { be_held, be_free };
  // The call on `id` that writes a change of kind `what`: `prepare(ec)` off
  // the lock after the owner check, `decide(d, ec)` under it; either returns
  // false to answer now (not found, or ec). Returns whether the change
  // landed (call_state::found).
  template <class Prepare, class Decide>
  bool change_id(std::string_view id, change_kind what, id_must must, Prepare&& prepare,
                 Decide&& decide, boost::system::error_code& ec);

  // A blocking call's answer: from the writer once it wrote, or from `inline_call`.
  bool wait_answer(const std::shared_ptr<call_state>& call, bool queued, call_state& inline_call,
                   boost::system::error_code& ec);

  // ---- the write path (engine_core_writes.cpp) ------------------------------
  // Whether the store writes changes of this kind (an in-process store keeps
  // no live tasks: their changes are settled at once, with no op).
  bool writes(change_kind what) const noexcept {
    return writer_.persists_live() || (what != change_kind::save && what != change_kind::remove);
  }
  write_op make_op(change_kind what, purpose why, timer_wheel::handle h, bool with_task);
  // Under the lock: hands ops to the writer as one group; settles them here
  // when the writer completed them on this thread, or refused them (busy).
  // Returns whether they were queued.
  bool submit_locked(std::span<write_op> ops, const std::shared_ptr<call_state>& call,
                     call_state& inline_call, after_lock& after);
  void on_written(std::span<write_op> ops);
  void settle_locked(const change& c, call_state& call, after_lock& after);
  void run_after(after_lock& after);

  // ---- the wheel --------------------------------------------------------------
  task task_of(timer_wheel::handle h) const;
  std::uint32_t tag(timer_wheel::handle h) const noexcept;
  void set_tag(timer_wheel::handle h, std::uint32_t w) noexcept;
  // Files the record in the wheel for `due_ms`; or, given `after` and a due
  // time already passed, queues it for a worker at once (engine_core.cpp).
  void arm_locked(timer_wheel::handle h, std::int64_t due_ms, after_lock* after = nullptr);
  void erase_locked(timer_wheel::handle h);
  // Waits while the record of `id` is in transit (a store write about it in
  // flight); returns its handle then, or npos.
  timer_wheel::handle find_settled(std::unique_lock<spin_mutex>& lock, std::string_view id,
                                   std::uint32_t hash);
  std::size_t pending_locked() const noexcept { return wheel_.size() - unindexed_; }
  std::size_t& kind_pending(std::uint16_t kind);
  // Counts one on the per-type counter `c` of record h's type.
  void count(timer_wheel::handle h, std::atomic<std::uint64_t> type_counters::*c) const noexcept {
    type_counters::add(types_.at(wheel_.kind(h)).counters.*c);
  }

  // Count-triggered tasks (engine_core_signal.cpp): their trigger count and
  // signals, by record, beside the wheel (whose records stay small for the
  // ordinary tasks). Under the lock; set_trigger_locked(h, 0, 0) forgets.
  struct trigger_counts {
    std::uint32_t count = 0, signals = 0;
  };
  trigger_counts trigger_of(timer_wheel::handle h) const;
  void set_trigger_locked(timer_wheel::handle h, std::uint32_t count, std::uint32_t signals);
  ready_ref ready_of(timer_wheel::handle h, std::uint32_t word) const;

  // Tasks with a priority or a ttr (task::priority, task::ttr): theirs, by
  // record, beside the wheel like the trigger counts, so ordinary tasks pay
  // nothing. Under the lock; set_attrs_locked(h, {}) forgets.
  struct task_attrs {
    std::uint32_t priority = 0, ttr_ms = 0;
  };
  task_attrs attrs_of(timer_wheel::handle h) const;
  static task_attrs attrs_from(const task& t) noexcept {
    return {t.priority, clamped_ttr_ms(t.ttr)};
  }
  void set_attrs_locked(timer_wheel::handle h, task_attrs a);

  // ---- the horizon (engine_core_horizon.cpp, horizon_pager.hpp) ------------
  // With a horizon the wheel holds every stored task due at or before the
  // watermark (plus tasks due later that a call is working on); the rest are
  // in the store only. Readers of the store (the pager, fault_in, a
  // cluster's shard reads) note which ids were erased while they read, so a
  // record read before its erase is not held again after it. A cluster
  // always pages: without a horizon the wheel holds every task there is.
  bool horizon_on() const noexcept { return pager_.on(); }
  // Ids a call looked up and has not decided on yet: the engine does not let
  // go of their records meanwhile (a record let go between the lookup and
  // the decision would look absent). Off the lock; unpins in its destructor.
  class pins {
   public:
    explicit pins(engine_core& e) : e_(e) {}
    ~pins();
    pins(const pins&) = delete;
    pins& operator=(const pins&) = delete;

   private:
    friend class engine_core;
    engine_core& e_;
    std::vector<std::string> ids_;
  };
  // Under the lock: the type of a stored task the engine can hold, or null
  // with `why` set.
  const type_registry::type_info* accept_locked(const task& t, std::string& why);
  // Under the lock: holds a stored task, armed at its due time (or at the
  // current tick if `overdue` is null and it is overdue); npos if its id is held.
  timer_wheel::handle hold_locked(const task& t, const type_registry::type_info& type,
                                  std::vector<timer_wheel::handle>* overdue, std::int64_t now);
  // Holds the stored tasks named by `ids` that the engine does not hold, so
  // a call can go on with them as with any held task. Off the lock.
  // Pins the ids in `p` (every one, held or not) until `p` ends. Fails with
  // errc::busy if the ids keep changing under it.
  void fault_in(std::span<const std::string_view> ids, pins& p, boost::system::error_code& ec);
  // Under the lock, after a record settled: lets go of it again if it is
  // due past the watermark and idle (the store has it).
  void evict_if_far_locked(timer_wheel::handle h);
  // The stored task `id` the engine does not hold, read from the store.
  // The stored task `id` (horizon only), unless the wheel holds it by the
  // time the store answered: then nothing, and `held_meanwhile` says so.
  std::optional<task> find_stored(std::string_view id, boost::system::error_code& ec,
                                  bool* held_meanwhile = nullptr) const;
  // Under the lock: holds a task a read of the store found, unless its id is
  // held (memory is newer); one it cannot accept goes to `rejected`. False
  // when the id was erased since the read began (what was read is stale).
  bool hold_found_locked(const task& t, std::uint64_t seq, std::int64_t now,
                         rejected_tasks& rejected);
  // Off the lock: moves what reads rejected to the store's quarantine.
  void quarantine_rejected(const rejected_tasks& rejected) override;
  std::uint64_t begin_read_locked() override { return pager_.begin_read_locked(); }
  void end_read_locked(std::uint64_t seq) override { pager_.end_read_locked(seq); }
  // Reads (from, until] of the due index into the wheel; false if stopped first.
  bool page_in(std::int64_t from, std::int64_t until, std::uint64_t seq) override;

  // ---- ownership (ownership.hpp) -------------------------------------------
  // Which ids this engine may hold and run. The core asks owner_ and never
  // what kind it is: single_node_ownership answers each question with a
  // constant (a virtual call of a few nanoseconds per call or due task),
  // cluster_ownership from its leases.
  bool owns_locked(std::string_view id) const noexcept { return owner_->owns(id); }
  // Off the lock: errc::not_owner unless this instance holds the shard of
  // `id` and its lease is surely ours now.
  bool owner_check(std::string_view id, boost::system::error_code& ec) const {
    return owner_->check(id, ec);
  }
  // Under the lock, when a call that changes the task of `id` decides: the
  // lease token its store write carries (store_change::fence), so that the
  // write is refused (errc::lease_lost, the call fails and changes nothing)
  // if another instance took the shard since; 0 on a single node. False
  // with errc::not_owner when the lease is not surely ours now.
  bool call_fence_locked(std::string_view id, std::uint64_t& fence,
                         boost::system::error_code& ec) const {
    fence = 0;
    return owner_->fence_for(id, fence, ec);
  }

  // ownership::host: what a cluster's ownership reads tasks in with.
  spin_mutex& mutex() const noexcept override { return mutex_; }
  bool running() const noexcept override { return state_.load() == run_state::running; }
  std::int64_t watermark_locked() const noexcept override { return pager_.watermark_locked(); }
  bool held_locked(std::string_view id) const noexcept override {
    return wheel_.find(id) != timer_wheel::npos;
  }
  void hold_read_locked(const task& t, std::uint64_t seq, std::int64_t now,
                        rejected_tasks& rejected) override {
    hold_found_locked(t, seq, now, rejected);
  }
  void count_quarantined_locked(std::size_t n) noexcept override { quarantined_ += n; }
  void let_go_unowned_locked() override;
  std::string_view running_id_locked(timer_wheel::handle h) const noexcept override;
  void flush_writes() override { writer_.flush(); }
  std::size_t writes_kept() const override { return writer_.kept(); }
  void check_starts() override { dispatcher_.check_starts(); }

  // ---- the clock and the fire path (engine_core_fire.cpp) ---------------------
  void note_armed_locked(std::uint64_t tick);
  void rearm();
  void on_tick();
  void release_overdue(std::vector<timer_wheel::handle>& overdue);

  const engine_options options_;
  const executor_factory executors_;
  std::unique_ptr<task_store> store_;
  const boost::asio::any_io_executor executor_;
  type_registry types_;
  failure_policy failures_;
  attempt_settler settler_;  // under mutex_
  lateness_histogram lateness_;
  id_generator ids_;
  ticker ticker_;

  mutable spin_mutex mutex_;
  mutable std::condition_variable_any
      changed_;  // a transitional record settled, or an attempt ended
  std::atomic<run_state> state_{run_state::idle};
  timer_wheel wheel_;
  std::size_t unindexed_ = 0;  // records held that find() cannot reach (dead, superseded)
  std::vector<std::size_t> kind_pending_;
  std::unordered_map<timer_wheel::handle, trigger_counts> triggers_;
  std::unordered_map<timer_wheel::handle, task_attrs> attrs_;
  std::uint64_t armed_tick_ = timer_wheel::no_tick;
  std::unordered_map<std::string, std::vector<deferred_call>>
      deferred_;  // async calls waiting for an id

  std::uint64_t scheduled_ = 0, loaded_ = 0, paged_ = 0, cancelled_ = 0, quarantined_ = 0;
  std::size_t dead_ = 0;
  std::atomic<std::uint64_t> wakeups_{0};

  horizon_pager pager_;  // its `_locked` members under mutex_
  // Ids an async schedule is looking up (id -> serial): calls on them wait.
  std::unordered_map<std::string, std::uint64_t> looking_up_;
  std::uint64_t lookup_serial_ = 0;

  // Last: their threads call back into everything above (the ownership's
  // last of all: it is stopped, and goes, first).
  store_writer writer_;
  dispatcher dispatcher_;
  const std::unique_ptr<ownership> owner_;
};

}  // namespace delayq::detail
