// delayq/engine.hpp - the delayed-task engine users embed in their Asio program.
#pragma once

#include <utility>  // before any Boost.Asio header: Boost 1.74 + C++20 needs it

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/system/error_code.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "delayq/error.hpp"
#include "delayq/executor.hpp"
#include "delayq/task.hpp"
#include "delayq/task_store.hpp"

namespace delayq {

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
  /// Wait before a failed attempt runs again.
  std::chrono::milliseconds retry_backoff{1000};
  /// Most attempts of one type running at once, per type; a type not listed
  /// is limited only by `workers`. Tasks over the limit wait their turn in due
  /// order.
  std::map<std::string, std::size_t, std::less<>> type_concurrency;
  /// When false (the default) schedule() rejects a type that has no executor
  /// with errc::unknown_type. Set it in a process that schedules work for
  /// types registered elsewhere.
  bool accept_unregistered_types = false;
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

  /// An engine whose timer runs on a strand of `ex`. `store` must not be null.
  /// Throws boost::system::system_error (errc::invalid_options) when the
  /// options are inconsistent, std::invalid_argument for a null store.
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

  /// A copy of the pending task with this id (waiting, retrying or running).
  std::optional<task> find(std::string_view id) const;

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

 private:
  class impl;
  std::shared_ptr<impl> impl_;
};

}  // namespace delayq
