// delayq/engine.hpp - the delayed-task engine users embed in their Asio program.
// The facade only: its options and the values its calls return live in
// headers of their own (engine_options.hpp, schedule_options.hpp,
// task_status.hpp, engine_stats.hpp), all included here.
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

#include "delayq/detail/schedule_completion.hpp"
#include "delayq/direct_completion.hpp"
#include "delayq/engine_metrics.hpp"
#include "delayq/engine_options.hpp"
#include "delayq/engine_stats.hpp"
#include "delayq/error.hpp"
#include "delayq/executor.hpp"
#include "delayq/schedule.hpp"
#include "delayq/schedule_options.hpp"
#include "delayq/task.hpp"
#include "delayq/task_status.hpp"
#include "delayq/task_store.hpp"

namespace delayq {

namespace detail {
class engine_core;
namespace schedules {
class schedule_keeper;
}  // namespace schedules
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
  /// shard_mismatch (the store has no shard_store role, or its shards()
  /// differs), unsupported (the store makes no lease tables), and the first
  /// lease round's errors.
  void start();
  void start(boost::system::error_code& ec);

  /// Schedules `type` with `payload` to run `delay` from now. Returns the
  /// task id once the task is durable.
  /// Errors: not_running, invalid_type, unknown_type, invalid_id,
  /// invalid_delay, due_too_far, payload_too_large, duplicate_id,
  /// invalid_ttr (schedule_options::ttr), queue_full, type_full, busy, and
  /// the store's errors (store_unavailable,
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
  /// busy until then; a delayq::direct() completion instead runs where the
  /// outcome is learnt, unposted (direct_completion.hpp). When
  /// engine_options::max_queued_writes writes are queued it fails with
  /// errc::busy rather than wait.
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
  /// without dead letters: task_store::dead_letters() null).
  std::vector<dead_letter> dead_letters(std::size_t offset = 0, std::size_t limit = 100) const;
  std::vector<dead_letter> dead_letters(std::size_t offset, std::size_t limit,
                                        boost::system::error_code& ec) const;

  /// The dead letter `id`, if there is one: one store look-up, where a
  /// search through dead_letters() reads them all. Errors as dead_letters().
  std::optional<dead_letter> find_dead(std::string_view id, boost::system::error_code& ec) const;
  /// Throwing form: boost::system::system_error.
  std::optional<dead_letter> find_dead(std::string_view id) const;

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

  /// Whether the attempt of `t` (a task an executor was given) still runs
  /// under its shard's lease. Without engine_options::cluster: always true.
  /// With one: true while this instance holds the lease of t's shard with
  /// the token the attempt started under (task::fence), the lease is within
  /// its valid_until, and the shard is not being handed over; the same test
  /// the engine makes before it starts an attempt. An asynchronous executor
  /// that hands its task on later (delayq-server's consumers reserve it,
  /// maybe seconds after it fired) asks before it does, and abandons the
  /// attempt when it is false: the shard's owner runs the task then.
  /// Lock-free; never touches the store.
  bool attempt_current(const task& t) const noexcept;

  /// Now, by the clock the engine fires by: the system clock as read at
  /// start(), advanced since by the steady clock (before start(): the
  /// system clock). Turn a relative delay into a due time with it (the
  /// engine's delay forms do): a step of the system clock after start
  /// moves neither the tasks waiting nor the due times computed from it,
  /// so "in 2 s" is 2 s away however the system clock is set meanwhile.
  /// Whole milliseconds. Lock-free.
  std::chrono::system_clock::time_point now() const noexcept;

  /// engine_options::cluster: the live members of the last answered lease
  /// round, sorted (this instance among them); empty without a cluster or
  /// before start(). Never touches the store.
  std::vector<std::string> members() const;

  // ---- recurring schedules (delayq/schedule.hpp, docs/schedules.md) -------
  // Kept in the store's schedule_store role (memory, SQLite, Redis): without
  // it every call below answers errc::unsupported. Each occurrence becomes an
  // ordinary task "ID@MS", made once (a compare-and-set claim in the store,
  // then schedule_many() with on_conflict::keep) engine_options::
  // schedule_lookahead ahead of its time; retries, dead letters, leases and
  // every other call treat it as any task. In a cluster a schedule is kept
  // by the owner of its id's shard: upsert and remove elsewhere answer
  // not_owner (owner_of() names the owner); find, list and next read the
  // store anywhere.

  /// Creates the schedule `s.id`, or replaces it. Returns true when it was
  /// created, false when it replaced one (or found it unchanged: a PUT of
  /// the same schedule twice writes once). Returns once the schedule is
  /// durable in the store and its occurrences due within the lookahead are
  /// tasks (claimed in the store, at least: one whose task could not be made
  /// yet is made by the keeper, late if need be). A replaced schedule's
  /// occurrences made tasks already (those due within the lookahead) are
  /// cancelled where this instance can (in a cluster: those of the shards it
  /// holds), and the new definition applies after the last one that could
  /// not be (or had started or run already).
  /// Errors: not_running; invalid_schedule (check_schedule() says which
  /// field and why); payload_too_large (engine_options::max_payload);
  /// unknown_type (no executor for the type, see
  /// engine_options::accept_unregistered_types); not_owner (a cluster: the
  /// id's shard is another instance's); unsupported (the store keeps no
  /// schedules); busy (the schedule kept changing under other writers: try
  /// again); the store's (store_unavailable, store_error, outcome_unknown:
  /// nothing, or, for outcome_unknown, possibly the schedule, was stored).
  bool upsert_schedule(const delayq::schedule& s);
  bool upsert_schedule(const delayq::schedule& s, boost::system::error_code& ec);

  /// Removes the schedule `id`: no occurrence of it is made a task after
  /// this returns, and those made already (due within the lookahead) are
  /// cancelled where this instance can (as upsert_schedule()). Returns false
  /// when there is no such schedule. Errors: as upsert_schedule() but for
  /// the checks of `s`.
  bool remove_schedule(std::string_view id);
  bool remove_schedule(std::string_view id, boost::system::error_code& ec);

  /// The schedule `id`, or nothing. One store read. Errors: not_running,
  /// unsupported, corrupt_record (stored by a newer version), the store's.
  std::optional<delayq::schedule> find_schedule(std::string_view id) const;
  std::optional<delayq::schedule> find_schedule(std::string_view id,
                                                boost::system::error_code& ec) const;

  /// Stored schedules in id order (byte order): skips `offset`, returns at
  /// most `limit`. Reads offset + limit records. Errors as find_schedule().
  std::vector<delayq::schedule> list_schedules(std::size_t offset = 0,
                                               std::size_t limit = 100) const;
  std::vector<delayq::schedule> list_schedules(std::size_t offset, std::size_t limit,
                                               boost::system::error_code& ec) const;
  /// How many schedules are stored. Errors as find_schedule().
  std::size_t count_schedules() const;
  std::size_t count_schedules(boost::system::error_code& ec) const;

  /// The next `n` occurrences of schedule `id` after now, earliest first
  /// (fewer when it ends), as UTC instants: schedule_occurrences() of the
  /// stored schedule. Errors: not_found (no such schedule), and those of
  /// find_schedule().
  std::vector<time_point> next_occurrences(std::string_view id, std::size_t n) const;
  std::vector<time_point> next_occurrences(std::string_view id, std::size_t n,
                                           boost::system::error_code& ec) const;

  /// The next `limit` pending tasks not yet running, earliest due first;
  /// only those of `type` when it is not empty. Costs a pass over every
  /// pending task (an admin view, not a hot path).
  std::vector<task> upcoming(std::size_t limit, std::string_view type = {}) const;

  /// Tasks held: waiting, due or running.
  std::size_t pending() const;

  /// Hands every task due by now (the wall clock's, to the millisecond) to
  /// its executor at once, instead of at the timer's next wake-up, and
  /// returns how many. Nothing fires before its due time. For a caller
  /// about to answer "nothing is due" when a deadline of its own passes (a
  /// consumer's wait ending the instant a task comes due): the task, not the
  /// timeout, wins, as it would on one loop. Tasks of immediate types
  /// (async_start::immediate) have been started when it returns. Call it
  /// holding no lock an executor takes. Does nothing unless running.
  std::size_t fire_due();

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

  /// What the destructor does, now: stop() without a drain, then waits for
  /// the running attempts to return and for every store write in flight to
  /// land (kept writes get one more try), and leaves the cluster. Later
  /// writes (an attempt ending late) are made on the caller's thread. Call
  /// it while the io_context runs when the store was told to complete its
  /// writes there (task_store::drive_writes_on()): a write in flight needs
  /// it to land, and the destructor would otherwise wait for it for ever.
  /// Safe to call twice, one call after the other (not concurrently with
  /// itself or stop()); the destructor calls it. Never from an executor of
  /// this engine (it joins the attempts' threads) or from a handler of the
  /// io_context its store completes writes on (it waits for them there).
  void close();

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
  // Recurring schedules: a component of its own that drives this engine
  // through the calls above; started after the core, stopped before it.
  std::unique_ptr<detail::schedules::schedule_keeper> keeper_;
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
  const auto now = this->now();
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
