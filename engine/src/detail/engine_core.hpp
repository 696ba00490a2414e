// The engine's coordinator: which table an id lives in, the skeletons every
// call follows, the clock, and the parts it drives. The tasks themselves
// live in task tables (task_table.hpp), split by id hash, each under its own
// lock; what a change does to a table is the change's own (changes/).
//
// Where a task's life is read:
//   changes/change.hpp          the path of every change (decide, write,
//                               landed or failed), and the map of changes
//   changes/schedule_calls.cpp  schedule, schedule_many, async_schedule
//   changes/*_change.cpp        each change: its decision and its settling
//   engine_core_id_call.hpp     the skeleton of a call on one id (cancel,
//                               reschedule, signal, requeue)
//   engine_core_writes.cpp      the write path: changes to the store writer
//                               and back, and what runs after a table's lock
//   engine_core_fire.cpp        the clock: due tasks to the dispatcher
//   engine_core_tables.cpp      the table services changes use: arm, erase,
//                               the counts
//   engine_core_horizon.cpp     with a horizon, what reads of the store do
//   engine_core.cpp             construction, start(), stop(), the queries
//
// The parts, each in its own file: task_table (a shard of the tasks),
// ownership (which ids are ours: single_node_ownership, or
// cluster_ownership with its lease threads), horizon_pager, attempt_settler
// (attempt outcomes), ticker (the clock), dispatcher (workers, gates,
// running attempts), failure_policy, store_writer (group commit),
// type_registry (interned types, with their counts), validation.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <string_view>
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
#include "detail/changes/change.hpp"
#include "detail/dispatcher.hpp"
#include "detail/failure_policy.hpp"
#include "detail/horizon_pager.hpp"
#include "detail/lateness_histogram.hpp"
#include "detail/ownership.hpp"
#include "detail/store_writer.hpp"
#include "detail/task_table.hpp"
#include "detail/ticker.hpp"
#include "detail/type_registry.hpp"
#include "detail/validation.hpp"

namespace delayq::detail {

/// Thread safety: as engine (every member is safe from any thread); the
/// `_locked` members under the lock of the table they name.
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
  /// engine::fire_due().
  std::size_t fire_due();
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

  // ---- the table services (engine_core_tables.cpp), for the changes ---------
  // Each under the lock of `t`.

  /// A due time no later than the coarse clock plus this may be due at once
  /// (the coarse clock lags by a few milliseconds at most); a later one is
  /// not, as of that reading.
  static constexpr std::int64_t due_at_once_slack_ms = 50;
  /// Files record h for `due_ms`; or, given `after` and a due time already
  /// passed, hands it to the dispatcher at once (after the lock).
  void arm_locked(task_table& t, timer_wheel::handle h, std::int64_t due_ms,
                  after_lock* after = nullptr);
  /// The record goes, and its counts with it.
  void erase_locked(task_table& t, timer_wheel::handle h);
  /// The record stays held but find() no longer reaches it (its id went to
  /// a new version, or it was cancelled while queued).
  void unindex_locked(task_table& t, timer_wheel::handle h);
  /// find() reaches it again, unless its id is held; false then.
  bool reindex_locked(task_table& t, timer_wheel::handle h);
  /// With a horizon, after a record settled: lets go of it again if it is
  /// due past the watermark and idle (the store has it).
  void evict_if_far_locked(task_table& t, timer_wheel::handle h);
  /// Clusters, as an attempt dispatched under lease token `fence` settles:
  /// when this instance no longer holds the record's shard under that token
  /// (lost it, maybe taken it again since), the record is an earlier
  /// tenure's copy and must not wait or run again here: it goes, and where
  /// the shard is held again the id is read afresh from the store after the
  /// lock (the new tenure's read skipped it while the record was busy).
  /// True when it went. Never on a single node (fence 0).
  bool drop_if_tenure_ended_locked(task_table& t, timer_wheel::handle h, std::uint64_t fence,
                                   after_lock& after);
  task task_of(const task_table& t, timer_wheel::handle h) const;
  ready_ref ready_of(const task_table& t, timer_wheel::handle h, std::uint32_t word) const;
  /// The pending count of tasks of `kind` (capacity): changes move it with
  /// their records.
  pending_count& kind_pending(type_registry::kind k) const { return types_.at(k).pending; }
  /// Counts one on the per-type counter `c` of record h's type.
  void count(const task_table& t, timer_wheel::handle h, type_counters::counter c) const noexcept {
    type_counters::add(types_.at(t.wheel.kind(h)).counters.mine().*c);
  }
  void note_scheduled(const task_table& t, timer_wheel::handle h) noexcept {
    scheduled_.add(1);
    count(t, h, &type_counter_cells::scheduled);
  }
  void note_cancelled(const task_table& t, timer_wheel::handle h) noexcept {
    cancelled_.add(1);
    count(t, h, &type_counter_cells::cancelled);
  }
  /// Dead letters counted: +1 once one is written, -1 once one left.
  void note_dead(std::int64_t delta) noexcept { dead_.fetch_add(delta, std::memory_order_relaxed); }
  bool is_running() const noexcept { return state_.load() == run_state::running; }
  dispatcher& workers() noexcept { return dispatcher_; }
  horizon_pager& pager() noexcept { return pager_; }
  const type_registry& types() const noexcept { return types_; }
  /// A pager read in progress must not hold record h's id again.
  void note_gone_locked(const task_table& t, timer_wheel::handle h) {
    if (horizon_on()) pager_.note_gone(t.wheel.id(h));
  }

 private:
  enum class run_state { idle, running, stopping, stopped };

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
    task_table* table = nullptr;
    std::uint64_t order = 0;  // the floor of its stamp (task_table::stamp())
    bool generated = false;   // the engine drew the id
  };

  // ---- tables ------------------------------------------------------------------
  task_table& table_for(std::uint32_t hash) const noexcept {
    // The hash's high bits (the wheel's index uses the low ones).
    return *tables_[(static_cast<std::uint64_t>(hash) * tables_.size()) >> 32];
  }
  std::uint32_t hash(std::string_view id) const noexcept { return tables_[0]->wheel.hash(id); }
  task_table& table_of_record(record_id r) const noexcept { return *tables_[table_of(r)]; }
  /// Waits (on `t`'s lock `lock`) while the record of `id` is in transit;
  /// returns its handle then, or npos.
  template <class Lock>
  timer_wheel::handle find_settled(Lock& lock, task_table& t, std::string_view id,
                                   std::uint32_t hash);

  // ---- calls (changes/schedule_calls.cpp) ---------------------------------------
  void async_schedule_ref(task_spec& spec, std::unique_ptr<schedule_completion>& done,
                          std::uint64_t looked_up = 0);
  // On the pager's thread: looks an async schedule's id up, then runs it.
  void run_lookup(deferred_call& job, std::uint64_t serial);
  bool release_lookup_locked(task_table& t, std::string_view id, std::uint64_t serial);
  void hash_early(spec_ref& spec) const noexcept;
  // Draws a generated id into `id`, which `spec.id` then views, with its
  // hash and table.
  void draw_id(spec_ref& spec, std::string& id);
  // Checks a task before any lock (a `type` already set is taken as checked:
  // a batch's previous task had its name).
  boost::system::error_code check_spec(spec_ref& spec);
  void schedule_checked(std::span<spec_ref> specs, std::span<std::string> ids,
                        boost::system::error_code& ec, std::size_t& bad);
  // One checked task, as schedule_checked() would, by a shorter path where
  // it can: the blocking calls of one task (schedule, schedule_at).
  void schedule_one_checked(spec_ref& spec, std::string& id, boost::system::error_code& ec);
  // Under the locks of every table the specs name: decides every task of a
  // schedule call and applies it (changes/schedule_change.cpp). Returns
  // false (nothing changed) when the call must wait for an id whose write is
  // in flight (`waiting` names it) or, `waiting` empty, draw its generated
  // ids anew (one was held).
  bool schedule_locked(std::span<spec_ref> specs, std::span<std::string> ids,
                       const std::shared_ptr<call_state>& call, call_state& out,
                       std::string& waiting, after_lock& after, bool may_send);
  // schedule_locked() for a call of one task (schedule, schedule_at,
  // async_schedule, a put, a schedule_many of one): the same decision,
  // without a batch's plan.
  bool schedule_one_locked(spec_ref& spec, std::string& id, const std::shared_ptr<call_state>& call,
                           call_state& out, std::string& waiting, after_lock& after, bool may_send);
  // What schedule_locked() decided for a task whose id is held or not.
  enum class schedule_action : std::uint8_t { insert, keep, replace };
  // Under the task's table lock, its counts reserved: applies one decided
  // task (insert or replace of `h`) and sets `h` to its record. Returns the
  // change that settles it, or null for an insert that nothing writes (the
  // caller settles it in place, with no allocation).
  std::unique_ptr<change> apply_schedule_locked(const spec_ref& spec, schedule_action what,
                                                timer_wheel::handle& h, bool durable);
  // The write of a task apply_schedule_locked() applied, carrying `made`.
  write_op schedule_op_locked(const spec_ref& spec, schedule_action what, timer_wheel::handle h,
                              std::unique_ptr<change> made, const std::shared_ptr<call_state>& call,
                              std::size_t index);
  // Reserves the pending counts one decided task takes (an insert, or a
  // replace that changes a capped type); queue_full or type_full if it may not.
  errc reserve_one_locked(const spec_ref& spec, schedule_action what, const task_table& t,
                          timer_wheel::handle h);
  // Under the task's table lock, on an in-process store with no horizon, for
  // a task that is not due at once: inserts it and arms it, as
  // schedule_one_locked() and its settling would (ec: its counts refused it).
  // Returns false, having changed nothing, if its id is held or calls wait on
  // an id of the table: the caller takes the general path.
  bool insert_new_in_place_locked(spec_ref& spec, boost::system::error_code& ec);
  // Settles in place a task apply_schedule_locked() applied, with nothing to write.
  void settle_schedule_locked(task_table& t, timer_wheel::handle h, change* made, call_state& out,
                              after_lock& after);
  bool running_check(boost::system::error_code& ec) const;

  // ---- the id-call skeleton (engine_core_id_call.hpp) -----------------------
  // What a call on one id decided under its table's lock. On entry `h` is
  // the settled record of the id (npos: none); decide sets the change.
  struct id_change {
    task_table* table = nullptr;
    timer_wheel::handle h = timer_wheel::npos;
    std::uint32_t hash = 0;
    bool durable = false;  // the change will be written: it lives on the heap

    id_change() = default;
    id_change(const id_change&) = delete;
    id_change& operator=(const id_change&) = delete;
    ~id_change() {
      if (local_) local_->~change();
    }
    /// Makes the change decided: on the heap when it will travel with its
    /// write, here when it settles at once (an in-process store: no
    /// allocation per call).
    template <class C, class... A>
    C& make(A&&... args) {
      if (durable) {
        auto p = std::make_unique<C>(std::forward<A>(args)...);
        C& c = *p;
        heap = std::move(p);
        return c;
      }
      static_assert(sizeof(C) <= sizeof(storage_) && alignof(C) <= alignof(std::max_align_t));
      C* c = new (storage_) C(std::forward<A>(args)...);
      local_ = c;
      return *c;
    }
    change* made() noexcept { return heap ? heap.get() : local_; }
    std::unique_ptr<change> heap;

   private:
    change* local_ = nullptr;
    alignas(std::max_align_t) std::byte storage_[128];
  };
  enum class id_must : std::uint8_t { be_held, be_free };
  template <class Prepare, class Decide>
  bool change_id(std::string_view id, change_kind what, id_must must, Prepare&& prepare,
                 Decide&& decide, boost::system::error_code& ec);
  bool wait_answer(const std::shared_ptr<call_state>& call, bool queued, call_state& inline_call,
                   boost::system::error_code& ec);

  // ---- the write path (engine_core_writes.cpp) ------------------------------
  bool writes(change_kind what) const noexcept {
    return writer_.persists_live() || (what != change_kind::save && what != change_kind::remove);
  }
  write_op make_op(change_kind what, const task_table& t, timer_wheel::handle h, bool with_task);
  // Under the lock of the ops' tables: hands the ops to the writer as one
  // group; settles them here when the writer completed them on this thread
  // or refused them (busy). Returns whether they were queued.
  bool submit_locked(std::span<write_op> ops, const std::shared_ptr<call_state>& call,
                     call_state& inline_call, after_lock& after, bool may_send = false);
  void on_written(std::span<write_op> ops);
  // Under c's table lock: what a change's outcome does, and the waiters it wakes.
  void settle_change(change& c, const boost::system::error_code& ec, call_state& call,
                     after_lock& after);
  void run_after(after_lock& after);

  // ---- the horizon (engine_core_horizon.cpp, horizon_pager.hpp) ------------
  bool horizon_on() const noexcept { return pager_.on(); }
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
  const type_registry::type_info* accept(const task& t, std::string& why);
  timer_wheel::handle hold_locked(task_table& t, const task& tk,
                                  const type_registry::type_info& type,
                                  std::vector<record_id>* overdue, std::int64_t now);
  void fault_in(std::span<const std::string_view> ids, pins& p, boost::system::error_code& ec);
  std::optional<task> find_stored(std::string_view id, boost::system::error_code& ec,
                                  bool* held_meanwhile = nullptr) const;
  bool hold_found_locked(const task& t, std::uint64_t seq, std::int64_t now,
                         rejected_tasks& rejected);
  void quarantine_rejected(const rejected_tasks& rejected) override;
  std::uint64_t begin_read_locked() override { return pager_.begin_read(); }
  void end_read_locked(std::uint64_t seq) override { pager_.end_read(seq); }
  bool page_in(std::int64_t from, std::int64_t until, std::uint64_t seq) override;

  // ---- ownership (ownership.hpp) -------------------------------------------
  bool owner_check(std::string_view id, boost::system::error_code& ec) const {
    return owner_->check(id, ec);
  }
  bool call_fence(std::string_view id, std::uint64_t& fence, boost::system::error_code& ec) const {
    fence = 0;
    return owner_->fence_for(id, fence, ec);
  }

  // ownership::host and horizon_pager::host: the reads lock every table.
  table_set_lock& mutex() const noexcept override { return all_; }
  bool running() const noexcept override { return state_.load() == run_state::running; }
  std::int64_t watermark_locked() const noexcept override { return pager_.watermark(); }
  bool held_locked(std::string_view id) const noexcept override {
    return table_for(hash(id)).wheel.find(id) != timer_wheel::npos;
  }
  void hold_read_locked(const task& t, std::uint64_t seq, std::int64_t now,
                        rejected_tasks& rejected) override {
    hold_found_locked(t, seq, now, rejected);
  }
  void count_quarantined_locked(std::size_t n) noexcept override { quarantined_ += n; }
  void let_go_unowned_locked() override;
  std::string_view running_id_locked(record_id r) const noexcept override;
  void flush_writes() override { writer_.flush(); }
  std::size_t writes_kept() const override { return writer_.kept(); }
  void check_starts() override { dispatcher_.check_starts(); }

  // ---- the clock (engine_core_fire.cpp) ------------------------------------
  void note_armed_locked(task_table& t, std::uint64_t tick);
  void rearm();
  void on_tick();
  void on_early(std::uint64_t tick);
  // Appends the early tasks to `due` if their tick is `to_tick` or before
  // (with `due_by_ms`, also those due by then).
  void take_early_locked(std::uint64_t to_tick, std::vector<ready_ref>& due,
                         std::optional<std::int64_t> due_by_ms);
  // Advances every table to `to_tick` (and with `due_by_ms`, takes the
  // tasks of the tick under way due by then), putting what may fire into
  // `due` in due order (after what `due` holds, itself in due order).
  void advance(std::uint64_t to_tick, std::vector<ready_ref>& due,
               std::optional<std::int64_t> due_by_ms = std::nullopt);
  // One table's part of advance(); with `ahead`, takes the tasks of tick
  // `to_tick` before it begins instead (timer_wheel::take_tick()).
  void advance_locked(task_table& t, std::uint64_t to_tick, std::vector<ready_ref>& due,
                      std::optional<std::int64_t> due_by_ms, bool ahead = false);
  void release_overdue(std::vector<record_id>& overdue);
  // An attempt settled while the engine stops: stop() may be waiting.
  void attempts_ended();

  const engine_options options_;
  const executor_factory executors_;
  std::unique_ptr<task_store> store_;
  const boost::asio::any_io_executor executor_;
  type_registry types_;
  failure_policy failures_;
  attempt_settler settler_;
  lateness_histogram lateness_;
  id_generator ids_;
  ticker ticker_;

  std::atomic<run_state> state_{run_state::idle};
  std::vector<std::unique_ptr<task_table>> tables_;
  mutable table_set_lock all_;  // every table, in order
  pending_count pending_;       // records find() reaches, in every table
  // The earliest tick any table waits for; the timer is armed for it.
  std::atomic<std::uint64_t> armed_tick_{timer_wheel::no_tick};
  // A heavy tick's tasks, taken from the wheel just before the tick begins
  // (on_early()) and handed over when it does, in due order; early_tick_ is
  // that tick (no_tick: none held). Under early_mutex_, which a collector
  // (on_early, on_tick, fire_due) holds while it takes from the tables.
  spin_mutex early_mutex_;
  std::vector<ready_ref> early_;
  std::uint64_t early_tick_ = timer_wheel::no_tick;

  // Every schedule and cancel counts one: striped (see pending_count).
  striped_counter<std::uint64_t> scheduled_, cancelled_;
  std::atomic<std::uint64_t> loaded_{0}, paged_{0}, quarantined_{0};
  std::atomic<std::int64_t> dead_{0};
  std::atomic<std::uint64_t> wakeups_{0};
  std::mutex stop_mutex_;  // stop() waits on stop_cv_ for the attempts to end
  std::condition_variable stop_cv_;
  // Outcome batches being settled (settle()): an attempt counted out of
  // running() may still have its write to queue. stop() waits for none
  // before it flushes the writer.
  std::atomic<std::size_t> settling_{0};

  horizon_pager pager_;
  std::atomic<std::uint64_t> lookup_serial_{0};

  // Last: their threads call back into everything above (the ownership's
  // last of all: it is stopped, and goes, first).
  store_writer writer_;
  dispatcher dispatcher_;
  const std::unique_ptr<ownership> owner_;
};

}  // namespace delayq::detail
