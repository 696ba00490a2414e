// delayq/engine.hpp - the delayed-task engine users embed in their Asio program.
#pragma once

#include <utility>  // before any Boost.Asio header: Boost 1.74 + C++20 needs it

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

/// How an engine is tuned. The defaults suit second-granularity business
/// delays ("cancel the order in 30 minutes").
struct engine_options {
  /// Resolution of the wheel: a task fires at the first tick boundary at or
  /// after its due time, so lateness is below one tick plus dispatch time.
  std::chrono::milliseconds tick{1000};
  /// Buckets in the wheel. One revolution is `tick * slots` (an hour by
  /// default); longer delays just wait more revolutions.
  std::size_t slots = 3600;
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
  /// Threads that carry async_schedule() calls to the store, so the caller
  /// never blocks. Concurrent calls share store writes (group commit).
  std::size_t async_threads = 2;
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
  std::size_t pending = 0;        ///< Tasks held: waiting, retrying or running.
  std::size_t running = 0;        ///< Attempts handed to workers and not done.
  std::uint64_t scheduled = 0;    ///< Tasks accepted by schedule calls.
  std::uint64_t loaded = 0;       ///< Tasks loaded from the store by start().
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
  std::chrono::microseconds lateness_p50{0};
  std::chrono::microseconds lateness_p90{0};
  std::chrono::microseconds lateness_p99{0};
  std::chrono::microseconds lateness_max{0};
};

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
///   delayq::engine eng(io, executors, std::make_unique<delayq::memory_store>());
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
/// io_context. Calls that change a task (schedule, cancel, reschedule) block
/// until the store has made the change durable.
class engine {
 public:
  using duration = std::chrono::milliseconds;
  using time_point = std::chrono::system_clock::time_point;

  /// An engine whose timer runs on a strand of `ex`, keeping its tasks in
  /// `store`. A null store means the default one: the URI in the
  /// environment variable DELAYQ_STORE, else Redis at
  /// redis://127.0.0.1:6379/0 (see open_store()).
  /// Throws boost::system::system_error: errc::invalid_options when the
  /// options are inconsistent; the default store's errors when it cannot be
  /// opened (for an unreachable Redis the message names the address and
  /// suggests `sqlite:` as the embedded alternative).
  engine(boost::asio::any_io_executor ex, executor_factory executors,
         std::unique_ptr<task_store> store, engine_options options = {});
  /// Same, on `io`'s executor.
  engine(boost::asio::io_context& io, executor_factory executors, std::unique_ptr<task_store> store,
         engine_options options = {});
  /// An engine on the default store (see above).
  engine(boost::asio::any_io_executor ex, executor_factory executors, engine_options options = {});
  /// Same, on `io`'s executor.
  engine(boost::asio::io_context& io, executor_factory executors, engine_options options = {});

  /// Stops the engine (no drain: nothing new starts) and waits for the
  /// attempts already running to return. Never throws.
  ~engine();
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;

  /// Loads every stored task into the wheel and starts ticking. Overdue tasks
  /// run at once, in due order; the rest at their due time.
  /// Errors: errc::already_started; the store's errors (nothing is started).
  void start();
  void start(boost::system::error_code& ec);

  /// Schedules `type` with `payload` to run `delay` from now. Returns the
  /// task id once the task is durable.
  /// Errors: invalid_type, unknown_type, invalid_id, invalid_delay,
  /// due_too_far, payload_too_large, duplicate_id, queue_full, not_running,
  /// and the store's errors. On error nothing was stored.
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

  /// Schedules like schedule_at() without blocking the caller: the store
  /// write happens on one of the engine's async_threads, and `token`
  /// completes with `(boost::system::error_code, std::string id)` once the
  /// task is durable or refused. Any Asio completion token works: a
  /// callback, boost::asio::use_future, boost::asio::use_awaitable. The
  /// handler runs on its associated executor (by default the engine's), which
  /// is kept busy until then.
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

  /// Cancels a pending task. Returns false when no task with this id is
  /// pending. A task whose attempt is running cannot be stopped, but it will
  /// not be retried; cancel() returns true for it.
  /// Errors: not_running and the store's errors (the task stays scheduled).
  bool cancel(std::string_view id);
  bool cancel(std::string_view id, boost::system::error_code& ec);

  /// Moves a waiting task to `due`. Returns false when no task with this id is
  /// waiting (unknown, finished, or running right now).
  /// Errors: invalid_delay, due_too_far, not_running and the store's errors
  /// (the task keeps its old due time).
  bool reschedule(std::string_view id, time_point due);
  bool reschedule(std::string_view id, time_point due, boost::system::error_code& ec);

  /// Dead letters, oldest death first: skips `offset`, returns at most
  /// `limit`. Errors: the store's (errc::unsupported for a store without
  /// dead letters).
  std::vector<dead_letter> dead_letters(std::size_t offset = 0, std::size_t limit = 100) const;
  std::vector<dead_letter> dead_letters(std::size_t offset, std::size_t limit,
                                        boost::system::error_code& ec) const;

  /// Puts the dead letter `id` back in the wheel, due at `due`, with its
  /// attempt count reset to 0. Returns false when there is no such dead
  /// letter. Errors: invalid_delay, due_too_far, duplicate_id (a live task
  /// has that id), not_running, and the store's.
  bool requeue(std::string_view id, time_point due);
  bool requeue(std::string_view id, time_point due, boost::system::error_code& ec);

  /// Deletes the dead letter `id`. Returns false when there is none.
  /// Errors: not_running and the store's.
  bool purge(std::string_view id);
  bool purge(std::string_view id, boost::system::error_code& ec);

  /// A copy of the pending task with this id (waiting, retrying or running).
  std::optional<task> find(std::string_view id) const;

  /// The pending task with this id and its state, or nothing when no task
  /// with this id is pending. Tells "will run later" (delayed, ready) from
  /// "running now".
  std::optional<task_status> status(std::string_view id) const;

  /// The next `limit` pending tasks not yet running, earliest due first;
  /// only those of `type` when it is not empty. Costs a pass over every
  /// pending task (an admin view, not a hot path).
  std::vector<task> upcoming(std::size_t limit, std::string_view type = {}) const;

  /// Tasks held: waiting, retrying or running.
  std::size_t pending() const;

  /// Counters and lateness percentiles.
  engine_stats stats() const;

  /// Stops taking new work (schedule calls fail with errc::not_running),
  /// stops the timer, and waits up to `drain` for running attempts to
  /// return. Returns true when none is left running. Tasks that have not run
  /// stay in the store for the next start(). Safe to call twice, and before
  /// start().
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
  // Where async_schedule() runs its blocking part.
  boost::asio::any_io_executor async_executor() const;
  duration options_max_delay() const noexcept;

  class impl;
  std::shared_ptr<impl> impl_;
};

template <class CompletionToken>
auto engine::async_schedule_at(std::string type, std::string payload, time_point due,
                               schedule_options options, CompletionToken&& token) {
  using signature = void(boost::system::error_code, std::string);
  auto initiation = [this](auto handler, std::string type, std::string payload, time_point due,
                           schedule_options options) {
    // Keeps the handler's executor (the user's io_context, typically) from
    // running out of work while the store write is in flight.
    auto work =
        boost::asio::make_work_guard(boost::asio::get_associated_executor(handler, get_executor()));
    boost::asio::post(async_executor(), [this, handler = std::move(handler), work = std::move(work),
                                         type = std::move(type), payload = std::move(payload), due,
                                         options = std::move(options)]() mutable {
      boost::system::error_code ec;
      std::string id = schedule_at(type, std::move(payload), due, options, ec);
      auto ex = work.get_executor();
      boost::asio::post(ex, [handler = std::move(handler), ec, id = std::move(id)]() mutable {
        std::move(handler)(ec, std::move(id));
      });
      work.reset();
    });
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
  if (delay < duration{0})
    due = time_point{} - std::chrono::milliseconds{1};  // errc::invalid_delay
  else if (delay > options_max_delay())
    due = time_point::max();  // errc::due_too_far
  else
    due = std::chrono::system_clock::now() + delay;
  return async_schedule_at(std::move(type), std::move(payload), due, std::move(options),
                           std::forward<CompletionToken>(token));
}

}  // namespace delayq
