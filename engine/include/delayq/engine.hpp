// delayq/engine.hpp - the delayed-task engine users embed in their Asio program.
#pragma once

#include "delayq/detail/boost_cxx20.hpp"  // first: Boost 1.74 + C++20

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/system/error_code.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "delayq/engine_metrics.hpp"
#include "delayq/error.hpp"
#include "delayq/executor.hpp"
#include "delayq/task.hpp"
#include "delayq/task_store.hpp"

namespace delayq {

/// How failed attempts are retried.
///
/// After a failed attempt k (k = 1 for the first), the task waits a random
/// delay drawn uniformly from [0, min(cap, base * 2^(k-1))] ("full jitter":
/// retries of many tasks that failed together spread out instead of hitting
/// the recovering service in waves), then runs again. After `max_attempts`
/// attempts in all it becomes a dead letter.
struct retry_policy {
  std::uint32_t max_attempts = 3;
  std::chrono::milliseconds base{1000};
  std::chrono::milliseconds cap{std::chrono::minutes{5}};
};

/// Something an operator should hear about.
struct alert {
  enum class kind {
    task_died,     ///< A task became a dead letter.
    failure_rate,  ///< A type's failure rate crossed the threshold.
  };
  kind what = kind::task_died;
  std::string type;
  std::string task_id;  ///< task_died: the task.
  std::string error;    ///< task_died: its last error.
  /// failure_rate: failed / finished attempts of the type over the window.
  double failure_rate = 0;
  std::uint64_t attempts = 0;  ///< failure_rate: attempts finished in the window.
  std::uint64_t failures = 0;  ///< failure_rate: of which failed.
};

/// When and how alerts are raised.
struct alert_options {
  /// Called for every alert, on a worker thread (never the ticking strand),
  /// without the engine's lock held. An exception from it is caught and
  /// logged. Empty: no alerts.
  std::function<void(const alert&)> on_alert;
  /// A type's failure rate at or above this, over `window`, raises one
  /// failure_rate alert; it is raised again only after the rate fell below.
  double failure_rate_threshold = 0.5;
  /// Fewer finished attempts than this in the window never alert.
  std::uint64_t min_attempts = 10;
  std::chrono::seconds window{60};
};

/// How an engine is tuned. The defaults fire a task within a millisecond
/// or two of its due time, whether it is due in 5 ms or in 48 hours.
struct engine_options {
  /// Resolution of the wheel: a task fires at the first tick boundary at or
  /// after its due time, so lateness is below one tick plus dispatch time.
  /// The timer wakes only for a tick that has a task due, so a fine tick
  /// costs nothing while nothing is due (timer_wheel.hpp, "Tick and slots").
  std::chrono::milliseconds tick{1};
  /// Buckets in the wheel. One revolution is `tick * slots` (4.1 s by
  /// default); longer delays wait more revolutions in their slot, and a
  /// slot is read only in a revolution where something in it is due.
  std::size_t slots = 4096;
  /// Threads that run executors. Never the thread that ticks the wheel.
  std::size_t workers = 2;
  /// Most tasks held at once (waiting, retrying or running). Beyond it
  /// schedule() fails with errc::queue_full.
  std::size_t max_pending = std::numeric_limits<std::size_t>::max();
  /// Largest payload accepted, in bytes (errc::payload_too_large beyond).
  std::size_t max_payload = std::size_t{1} << 20;
  /// Furthest due time accepted, measured from now (errc::due_too_far).
  std::chrono::milliseconds max_delay = std::chrono::hours{24 * 366 * 10};
  /// How failed attempts are retried, and when a task becomes a dead letter.
  delayq::retry_policy retry;
  /// Per-type overrides of `retry`.
  std::map<std::string, delayq::retry_policy, std::less<>> retry_per_type;
  /// Per-type execution timeouts: an attempt still running after its
  /// timeout counts as failed and is retried by the policy. The attempt
  /// itself is not interrupted (a synchronous executor keeps its worker
  /// until it returns), and its late outcome is ignored.
  std::map<std::string, std::chrono::milliseconds, std::less<>> timeout_per_type;
  /// Alerts on dead letters and on failure rates.
  alert_options alerts;
  /// Most attempts of one type running at once, per type; a type not listed
  /// is limited only by `workers`. Tasks over the limit wait their turn in due
  /// order.
  std::map<std::string, std::size_t, std::less<>> type_concurrency;
  /// When false (the default) schedule() rejects a type that has no executor
  /// with errc::unknown_type. Set it in a process that schedules work for
  /// types registered elsewhere.
  bool accept_unregistered_types = false;
  /// How fast start() releases tasks that were already overdue when it loaded
  /// them, in tasks per second, in due order; 0 releases them all at once.
  /// A process that was down for an hour may find a million tasks overdue;
  /// spreading them keeps the executors' downstream services standing.
  double catch_up_rate = 10000;
  /// Most pending tasks per type: scheduling past it fails with
  /// errc::type_full and stores nothing (1 means "one job per topic").
  /// Pending means held by the engine: delayed, due, running or waiting for
  /// a retry. A replace of a pending task of the same type takes no second
  /// place; on_conflict::keep takes none. The check and the insert happen
  /// under one lock, so two calls racing for the last place cannot both
  /// get it. A schedule_many() batch that would overfill a type fails as a
  /// whole (nothing stored, `bad` names the first task past the capacity).
  /// A requeue() of a dead letter into a full type fails with type_full too.
  std::map<std::string, std::size_t, std::less<>> type_capacity;
  /// How far ahead the engine holds tasks in memory; 0 (the default): every
  /// task. With a horizon, a task due later stays in the store only (its
  /// schedule writes it there and takes no wheel memory), and the engine
  /// reads the tasks coming within the horizon from the store's due index in
  /// pages, ahead of their due time, as time advances; start() loads only the
  /// horizon. Calls that name a task it does not hold (cancel, reschedule,
  /// signal, find, status, and schedule with an id and on_conflict reject or
  /// keep) look it up in the store first: one more store round trip for
  /// those. pending(), max_pending and type_capacity then count held tasks
  /// only (those due within the horizon). Needs a store with list_due() and
  /// find() (Redis and SQLite); with another store, or an in-process one, the
  /// engine holds every task and logs why. See docs/scale-out.md, "The horizon".
  std::chrono::milliseconds horizon{0};
  /// Store writes queued and not yet sent before calls that wait for their
  /// write are refused: async_schedule() and, by default, every schedule call
  /// then fail with errc::busy (nothing stored). Writes the engine makes for
  /// itself (removals, retries, dead letters) are never refused.
  std::size_t max_queued_writes = 100'000;
  /// What a blocking schedule call does when max_queued_writes writes are
  /// queued: fail with errc::busy (the default), or wait for room.
  /// async_schedule() never waits: it fails with errc::busy.
  enum class queue_full_policy { fail, wait };
  queue_full_policy when_write_queue_full = queue_full_policy::fail;
  /// Run as one instance of a cluster sharing a sharded store (opt-in; see
  /// docs/scale-out.md, "The engine in a cluster"). The store must split
  /// tasks into `cluster->shards` shards (task_store::shards(); else start()
  /// fails with errc::shard_mismatch) and make lease tables
  /// (make_shard_leases()). The engine then holds leases on a share of the
  /// shards (a thread renews them every lease/3), holds and runs only the
  /// tasks of the shards it holds, and fires a task only while its shard's
  /// lease is surely ours (shard_lease::valid_until). A schedule of a task
  /// whose shard another instance holds is written to the store and then let
  /// go (its owner runs it). Calls naming an id (cancel, reschedule, signal,
  /// requeue, schedule with an id) whose shard this instance does not hold
  /// fail with errc::not_owner: only the owner can say whether it will run.
  /// Their store writes carry the shard's lease token (store_change::fence):
  /// when another instance took the shard while the call decided, the write
  /// is refused and the call fails with errc::lease_lost, having changed
  /// nothing.
  /// find() and status() of such an id read the store. start() returns after
  /// the first lease round, holding the shards it won then; stop() releases
  /// the leases once the running attempts ended (after a drain that timed
  /// out, the leases of shards with attempts still running are left to
  /// expire instead). A shard another instance should own is handed over
  /// only once no attempt runs on it (docs/scale-out.md).
  std::optional<cluster_options> cluster;
  /// engine_options::cluster: called when a store setting may have changed
  /// on another instance (task_store::save_setting, erase_setting), so an
  /// application that keeps its configuration in the settings (delayq-server:
  /// push targets) rereads it and the whole cluster runs with one. Called
  /// once per batch of setting notices; once after start() (a change made
  /// between the application's own read and the engine's subscription would
  /// otherwise be missed); after the notice connection was lost and came
  /// back (notices may have been missed); every minute, since notices are
  /// best effort; and every lease round when the store sends no notices.
  /// Return false when the reread failed: it is called again about once a
  /// second until it returns true. Never two calls at once: it runs on the engine's
  /// notice thread (on its lease thread when the store sends no notices),
  /// without the engine's lock, and notices of saved tasks wait meanwhile.
  /// It may call the store. An exception from it is logged and counts as
  /// false.
  std::function<bool()> on_settings_changed;
};

/// What schedule() does when a task with the same id is pending.
enum class on_conflict {
  reject,   ///< Fail with errc::duplicate_id (the default).
  replace,  ///< Replace type, payload and due time; the id stays.
  keep,     ///< Keep the pending task untouched and return its id.
};

/// Per-call options of schedule() and schedule_at().
struct schedule_options {
  /// The task id; empty asks the engine to generate a unique one. Ids are
  /// 1-256 bytes with no spaces or control characters.
  std::string id;
  on_conflict conflict = on_conflict::reject;
  /// Signals (engine::signal()) that make the task run before its due time;
  /// 0 (the default): none, the task runs at its due time only. The task
  /// runs when it has received this many signals or at its due time,
  /// whichever comes first; its executor tells which from task::signals.
  std::uint32_t trigger_count = 0;
};

/// What engine::signal() did.
struct signal_result {
  std::uint32_t signals = 0;        ///< Signals received now, this one included.
  std::uint32_t trigger_count = 0;  ///< The task's trigger count.
  bool triggered = false;           ///< The count is reached: the task is due now.
};

/// One task of a schedule_many() call.
struct task_spec {
  std::string type;
  std::string payload;
  std::chrono::system_clock::time_point due{};
  schedule_options options{};
};

/// Where a pending task is in its life.
enum class task_state {
  delayed,  ///< Waiting for its due time (a first attempt, or a retry).
  ready,    ///< Due, and waiting for a worker, a per-type slot or its turn
            ///< in the catch-up after start(). cancel() still stops it.
  running,  ///< An attempt has started and cannot be stopped.
};

/// A pending task and where it is: what engine::status() returns.
struct task_status {
  delayq::task task;
  task_state state = task_state::delayed;
};

/// Counters since start(). Lateness is measured when an attempt starts on a
/// worker, against the task's due time, and is kept in a log-scale histogram
/// (each figure is the upper edge of its bucket, within 19%).
struct engine_stats {
  std::size_t pending = 0;      ///< Tasks held: waiting, retrying or running.
  std::size_t ready = 0;        ///< Due tasks waiting for a worker, a per-type slot
                                ///< or a cancel's store write (task_state::ready).
  std::size_t running = 0;      ///< Attempts started and not done.
  std::uint64_t scheduled = 0;  ///< Tasks accepted by schedule calls.
  std::uint64_t loaded = 0;     ///< Tasks loaded from the store by start().
  /// Tasks read in from the store after start(): due within the horizon now
  /// (engine_options::horizon), or named by a call.
  std::uint64_t paged = 0;
  /// engine_options::cluster: shards whose lease this instance holds now, and
  /// leases gained and lost since start() (0 without a cluster).
  std::size_t shards_held = 0;
  std::uint64_t shards_gained = 0;
  std::uint64_t shards_lost = 0;
  /// engine_options::cluster: held shards another member should own, kept
  /// until the attempts running on them settle (no attempt starts on them
  /// meanwhile); and lease rounds completed since start(), answered or not.
  std::size_t shards_leaving = 0;
  std::uint64_t lease_rounds = 0;
  std::uint64_t fired = 0;        ///< Attempts started.
  std::uint64_t succeeded = 0;    ///< Attempts that returned normally.
  std::uint64_t failed = 0;       ///< Attempts that threw or had no executor.
  std::uint64_t cancelled = 0;    ///< Successful cancel() calls.
  std::uint64_t quarantined = 0;  ///< Undecodable records set aside at start().
  std::uint64_t retried = 0;      ///< Failed attempts scheduled to run again.
  std::uint64_t timed_out = 0;    ///< Attempts that passed their timeout.
  std::uint64_t died = 0;         ///< Tasks that became dead letters since start().
  std::size_t dead = 0;           ///< Dead letters in the store now.
  std::uint64_t wakeups = 0;      ///< Times the wheel's timer fired (0 while nothing is due).
  std::size_t writes_queued = 0;  ///< Store writes queued and not yet sent.
  std::size_t writes_kept = 0;    ///< Store writes that failed and wait to be retried
                                  ///< (more than 0: the store is down or refusing).
  std::chrono::microseconds lateness_p50{0};
  std::chrono::microseconds lateness_p90{0};
  std::chrono::microseconds lateness_p99{0};
  std::chrono::microseconds lateness_max{0};
};

namespace detail {
class engine_core;

/// How async_schedule() hands its completion to the engine, type-erased so
/// the engine's code is not a template. Called exactly once, from any thread.
class schedule_completion {
 public:
  virtual ~schedule_completion() = default;
  virtual void complete(boost::system::error_code ec, std::string id) = 0;
};

/// Posts the handler to its associated executor (the engine's by default),
/// which is kept from running out of work until then.
template <class Handler>
class schedule_completion_for final : public schedule_completion {
 public:
  schedule_completion_for(Handler h, const boost::asio::any_io_executor& fallback)
      : handler_(std::move(h)),
        work_(boost::asio::make_work_guard(
            boost::asio::get_associated_executor(handler_, fallback))) {}
  void complete(boost::system::error_code ec, std::string id) override {
    auto ex = work_.get_executor();
    boost::asio::post(ex, [h = std::move(handler_), ec, id = std::move(id)]() mutable {
      std::move(h)(ec, std::move(id));
    });
    work_.reset();
  }

 private:
  Handler handler_;
  boost::asio::executor_work_guard<
      boost::asio::associated_executor_t<Handler, boost::asio::any_io_executor>>
      work_;
};
}  // namespace detail

/// The delayed-task engine: a hashed timing wheel ticked by an Asio
/// steady_timer on a strand of the caller's executor, a pool of worker threads
/// that run executors, and a task_store that keeps every acknowledged task
/// until its executor succeeded.
///
/// Example:
/// \code
///   boost::asio::io_context io;
///   delayq::executor_factory executors;
///   executors.add("order.cancel", [](const delayq::task& t) { cancel_order(t.payload); });
///   delayq::engine eng(io, executors, delayq::open_store("sqlite:tasks.db"));
///   eng.start();
///   eng.schedule("order.cancel", "order-42", std::chrono::minutes(30));
///   io.run();
/// \endcode
///
/// Delivery is at-least-once: a task is saved before schedule() returns and
/// removed only after its executor returned; a crash in between runs it again.
///
/// Thread safety: every member function is safe to call from any thread,
/// including from executors and from handlers on the engine's own
/// io_context. Calls that change a task (schedule, cancel, reschedule,
/// requeue, purge) return once the store has made the change durable;
/// concurrent calls share store writes (see docs/design.md).
class engine {
 public:
  using duration = std::chrono::milliseconds;
  using time_point = std::chrono::system_clock::time_point;

  /// An engine whose timer runs on a strand of `ex`, keeping its tasks in
  /// `store` (open one with delayq::open_store(), or pass a memory_store).
  /// Throws boost::system::system_error: errc::invalid_options when the
  /// options are inconsistent or `store` is null.
  engine(boost::asio::any_io_executor ex, executor_factory executors,
         std::unique_ptr<task_store> store, engine_options options = {});
  /// Same, on `io`'s executor.
  engine(boost::asio::io_context& io, executor_factory executors, std::unique_ptr<task_store> store,
         engine_options options = {});

  /// Stops the engine (no drain: nothing new starts) and waits for the
  /// attempts already running to return. Never throws.
  ~engine();
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;

  /// Loads every stored task into the wheel and starts ticking. Overdue tasks
  /// run at once, in due order, at engine_options::catch_up_rate; the rest at
  /// their due time. A stored task whose id or type the engine does not
  /// accept is moved to the store's quarantine (task_store::quarantine()).
  /// Errors: errc::already_started; the store's errors (nothing is started).
  /// With engine_options::cluster also: invalid_cluster_options,
  /// shard_mismatch (the store's shards() differs), unsupported (the store
  /// makes no lease tables), and the first lease round's errors.
  void start();
  void start(boost::system::error_code& ec);

  /// Schedules `type` with `payload` to run `delay` from now. Returns the
  /// task id once the task is durable.
  /// Errors: not_running, invalid_type, unknown_type, invalid_id,
  /// invalid_delay, due_too_far, payload_too_large, duplicate_id,
  /// queue_full, type_full, busy, and the store's errors (store_unavailable,
  /// store_error: nothing was stored; outcome_unknown: the store timed out
  /// and may still apply the write, see errc::outcome_unknown).
  /// With engine_options::cluster: not_owner for a task with an id
  /// (schedule_options::id) whose shard this instance does not hold.
  std::string schedule(std::string_view type, std::string payload, duration delay,
                       const schedule_options& options = {});
  std::string schedule(std::string_view type, std::string payload, duration delay,
                       const schedule_options& options, boost::system::error_code& ec);

  /// Schedules `type` to run at the wall-clock instant `due` (a past instant
  /// runs at once). Same errors as schedule().
  std::string schedule_at(std::string_view type, std::string payload, time_point due,
                          const schedule_options& options = {});
  std::string schedule_at(std::string_view type, std::string payload, time_point due,
                          const schedule_options& options, boost::system::error_code& ec);

  /// Schedules a batch as one atomic store write: either every task is
  /// stored (and the ids come back in order) or, on any error, none is. Each
  /// task's options apply to it; two tasks of one batch may not share an id.
  /// The throwing form names the first offending task by index.
  /// Errors: those of schedule_at(), for any task of the batch.
  std::vector<std::string> schedule_many(std::vector<task_spec> tasks);
  std::vector<std::string> schedule_many(std::vector<task_spec> tasks,
                                         boost::system::error_code& ec);
  /// Same, and on an error that one task caused, sets `bad` to its index.
  std::vector<std::string> schedule_many(std::vector<task_spec> tasks,
                                         boost::system::error_code& ec, std::size_t& bad);

  /// Schedules like schedule_at() without blocking the caller's thread: the
  /// task goes into the store's next write, and `token` completes with
  /// `(boost::system::error_code, std::string id)` once the task is durable
  /// or refused. Completions come in the order the writes land; none comes
  /// before its task is durable, and a task whose write failed is never
  /// acknowledged. Any Asio completion token works: a callback,
  /// boost::asio::use_future, boost::asio::use_awaitable. The handler runs
  /// on its associated executor (by default the engine's), which is kept
  /// busy until then. When engine_options::max_queued_writes writes are
  /// queued it fails with errc::busy rather than wait.
  template <class CompletionToken>
  auto async_schedule_at(std::string type, std::string payload, time_point due,
                         schedule_options options, CompletionToken&& token);
  /// async_schedule_at() with a delay from now.
  template <class CompletionToken>
  auto async_schedule(std::string type, std::string payload, duration delay,
                      schedule_options options, CompletionToken&& token);
  /// async_schedule() with default options.
  template <class CompletionToken>
  auto async_schedule(std::string type, std::string payload, duration delay,
                      CompletionToken&& token) {
    return async_schedule(std::move(type), std::move(payload), delay, schedule_options{},
                          std::forward<CompletionToken>(token));
  }

  /// Cancels a pending task. Returns true only if no attempt of the task
  /// starts after it returns, and the task has left the store: it was
  /// waiting for its due time (or a retry), or it was due and waiting for a
  /// worker, a per-type slot or its turn in the catch-up after start().
  /// Returns false, changing nothing, when no task with this id is pending
  /// or when its attempt is running now (an attempt cannot be interrupted;
  /// status() says running then; cancel it again once it has failed, if it
  /// is to be retried).
  /// Errors: not_running and the store's errors (the task stays scheduled);
  /// not_owner (engine_options::cluster: the id's shard is not held here, or
  /// its lease is not surely ours now; ask the shard's owner).
  bool cancel(std::string_view id);
  bool cancel(std::string_view id, boost::system::error_code& ec);

  /// Moves a task that is not running to `due`. Returns true only if the
  /// task will now run at `due` and not before; false, changing nothing, when
  /// no task with this id is pending or its attempt is running now.
  /// Errors: not_running, invalid_delay, due_too_far and the store's errors
  /// (the task keeps its old due time); not_owner as cancel().
  bool reschedule(std::string_view id, time_point due);
  bool reschedule(std::string_view id, time_point due, boost::system::error_code& ec);

  /// Adds `n` signals to the count-triggered task `id` (scheduled with
  /// schedule_options::trigger_count). Returns once the new count is durable
  /// in the store, so a crash never loses an acknowledged signal. When the
  /// count reaches the trigger count the task becomes due now (in the same
  /// store write) and runs at the next tick; its executor sees
  /// `signals >= trigger_count`. A count past the trigger count is kept as
  /// it is (saturating at 2^32-1). Retries after a failed attempt follow the
  /// retry policy; signals do not hasten them.
  /// Errors: not_running; invalid_signal (n is 0); not_found (no pending task
  /// has this id: unknown, finished, cancelled or dead); not_count_triggered
  /// (scheduled without a trigger count); already_triggered (its count was
  /// reached, or it is due, running or waiting for a retry: the signal is
  /// not counted); not_owner as cancel(); and the store's errors (the count
  /// stays as it was).
  signal_result signal(std::string_view id, std::uint32_t n = 1);
  signal_result signal(std::string_view id, std::uint32_t n, boost::system::error_code& ec);

  /// Dead letters, oldest death first: skips `offset`, returns at most
  /// `limit`. Errors: not_running, the store's (errc::unsupported for a store
  /// without dead letters).
  std::vector<dead_letter> dead_letters(std::size_t offset = 0, std::size_t limit = 100) const;
  std::vector<dead_letter> dead_letters(std::size_t offset, std::size_t limit,
                                        boost::system::error_code& ec) const;

  /// Puts the dead letter `id` back in the wheel, due at `due`, with its
  /// attempt count reset to 0; a count-triggered task comes back as an
  /// ordinary one (its trigger count is dropped). Returns false when there is no such dead
  /// letter. Errors: not_running, invalid_delay, due_too_far, duplicate_id (a
  /// live task has that id), queue_full, not_owner as cancel(), and the
  /// store's.
  bool requeue(std::string_view id, time_point due);
  bool requeue(std::string_view id, time_point due, boost::system::error_code& ec);

  /// Deletes the dead letter `id`. Returns false when there is none.
  /// Errors: not_running and the store's.
  bool purge(std::string_view id);
  bool purge(std::string_view id, boost::system::error_code& ec);

  /// A copy of the pending task with this id (waiting, due or running).
  /// Errors as status().
  std::optional<task> find(std::string_view id, boost::system::error_code& ec) const;
  /// Throwing form: boost::system::system_error.
  std::optional<task> find(std::string_view id) const;

  /// The pending task with this id and its state, or nothing when no task
  /// with this id is pending. Tells "will run later" (delayed, ready) from
  /// "running now". With engine_options::cluster or a horizon, a task this
  /// instance does not hold is read from the store (delayed or ready by its
  /// due time; whether it runs now only its owner knows): the call then
  /// blocks for a store round trip, so keep it off threads that must not
  /// wait. Errors (nothing returned; whether the task exists is unknown):
  /// the store's (errc::store_unavailable, errc::store_error...).
  std::optional<task_status> status(std::string_view id, boost::system::error_code& ec) const;
  /// Throwing form: boost::system::system_error.
  std::optional<task_status> status(std::string_view id) const;

  /// engine_options::cluster: the instance that can act on `id` (cancel,
  /// reschedule, signal, requeue, a schedule naming this id): this
  /// instance's name while it holds the lease of the id's shard; otherwise
  /// the member that should own the shard among the live members of the
  /// last answered lease round (rendezvous_owner()). That member holds the
  /// shard except during a hand-over, while the old holder waits for its
  /// running attempts on the shard to settle: a call there then answers
  /// not_owner.
  /// Empty without a cluster, before start(), and when no round named the
  /// members yet. Never touches the store.
  std::string owner_of(std::string_view id) const;

  /// engine_options::cluster: the live members of the last answered lease
  /// round, sorted (this instance among them); empty without a cluster or
  /// before start(). Never touches the store.
  std::vector<std::string> members() const;

  /// The next `limit` pending tasks not yet running, earliest due first;
  /// only those of `type` when it is not empty. Costs a pass over every
  /// pending task (an admin view, not a hot path).
  std::vector<task> upcoming(std::size_t limit, std::string_view type = {}) const;

  /// Tasks held: waiting, due or running.
  std::size_t pending() const;

  /// Counters and lateness percentiles.
  engine_stats stats() const;

  /// Per-type counters, gauges and histograms (lateness, execution time),
  /// and the store's (write latency and size, errors, outage): a snapshot
  /// for monitoring. delayq/prometheus.hpp renders it as Prometheus text.
  /// Costs a pass over the known types (not over the tasks).
  engine_metrics metrics() const;

  /// Stops taking new work (calls fail with errc::not_running), stops the
  /// timer, and waits up to `drain` for running attempts to return, then for
  /// the store writes queued so far. Returns true when no attempt is left
  /// running. Tasks that have not run stay in the store for the next
  /// start(). Safe to call twice, and before start(). Called from inside an
  /// executor of this engine it does not wait for attempts (its own is one
  /// of them): it returns at once, false if any attempt is running.
  bool stop(duration drain = std::chrono::seconds{30});

  /// The options in force.
  const engine_options& options() const noexcept;

  /// The store's description, e.g. "redis://127.0.0.1:6379/0" (never with a
  /// password) or "sqlite:tasks.db".
  std::string store() const;

  /// The executor the engine's timer runs on (a strand of it, in fact), as
  /// passed to the constructor.
  using executor_type = boost::asio::any_io_executor;
  executor_type get_executor() const noexcept;

 private:
  void async_schedule_erased(std::string type, std::string payload, time_point due,
                             schedule_options options,
                             std::unique_ptr<detail::schedule_completion> done);

  std::shared_ptr<detail::engine_core> core_;
};

template <class CompletionToken>
auto engine::async_schedule_at(std::string type, std::string payload, time_point due,
                               schedule_options options, CompletionToken&& token) {
  using signature = void(boost::system::error_code, std::string);
  auto initiation = [this](auto handler, std::string type, std::string payload, time_point due,
                           schedule_options options) {
    using handler_type = decltype(handler);
    auto done = std::make_unique<detail::schedule_completion_for<handler_type>>(std::move(handler),
                                                                                get_executor());
    async_schedule_erased(std::move(type), std::move(payload), due, std::move(options),
                          std::move(done));
  };
  return boost::asio::async_initiate<CompletionToken, signature>(
      initiation, token, std::move(type), std::move(payload), due, std::move(options));
}

template <class CompletionToken>
auto engine::async_schedule(std::string type, std::string payload, duration delay,
                            schedule_options options, CompletionToken&& token) {
  // now + a huge delay would overflow: map out-of-range delays to due times
  // that schedule_at() refuses with the same errors schedule() gives.
  time_point due;
  const auto now = std::chrono::system_clock::now();
  if (delay < duration{0})
    due = time_point{} - std::chrono::milliseconds{1};  // errc::invalid_delay
  else if (delay > this->options().max_delay ||
           delay > std::chrono::duration_cast<duration>(time_point::max() - now))
    due = time_point::max();  // errc::due_too_far
  else
    due = now + delay;
  return async_schedule_at(std::move(type), std::move(payload), due, std::move(options),
                           std::forward<CompletionToken>(token));
}

}  // namespace delayq
