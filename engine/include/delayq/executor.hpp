// delayq/executor.hpp - what runs a task, and the factory that picks it by type.
#pragma once

#include <boost/system/error_code.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "delayq/task.hpp"

namespace delayq {

/// Runs one attempt of a task.
///
/// Returning from execute() means the attempt succeeded and the task may leave
/// the store; throwing means it failed (the exception's what() is kept as the
/// reason) and the engine retries it later. Delivery is at-least-once: after a
/// crash an attempt that had started may run again, so executors should
/// deduplicate by `task::id` where running twice matters.
///
/// Thread safety: the engine makes a fresh executor for every attempt (through
/// executor_factory::make) and calls execute() once on it, from a worker
/// thread. Anything an executor shares with others must be thread-safe.
class executor {
 public:
  virtual ~executor() = default;
  /// Runs one attempt. Throw to report failure.
  virtual void execute(const task& t) = 0;
};

namespace detail {
class dispatcher;

/// How an attempt ended, as attempt_completion reports it (internal).
struct attempt_end {
  enum class kind : std::uint8_t { succeeded, failed, released, buried };
  kind what = kind::succeeded;
  std::string text;                             ///< failed: why; buried: the dead letter's error
  std::chrono::system_clock::time_point due{};  ///< released: when it is due again
  std::optional<std::uint32_t> priority;        ///< released, buried: the new priority
};

/// Where an attempt_completion reports: the engine's attempt. One object
/// shared by the completion's copies, so that copying a completion copies
/// a pointer, and a ready job a broker holds costs no std::function's heap
/// block.
struct attempt_reporter {
  virtual ~attempt_reporter() = default;
  virtual void report(attempt_end e, std::function<void(boost::system::error_code)> on_stored) = 0;
};
}  // namespace detail

/// How an asynchronous attempt reports its end: call it once, with an empty
/// string for success or the reason it failed; or release() the task to wait
/// again, or bury() it.
///
/// The forms with `on_stored` also say when the outcome is in the store:
/// `on_stored` is called once what the outcome changes there is durable
/// (a success: the task's removal; a failure: the retry's attempt count and
/// due time, or the dead letter; a release: the new due time and priority;
/// a bury: the dead letter), with an empty error_code; or with the store's
/// error (errc::store_unavailable, ...) when that write failed: the engine
/// keeps the change and writes it again until it lands, and a crash before
/// then runs the task once more; or with errc::attempt_ended when the
/// attempt had ended already (its timeout passed first) and the report was
/// ignored. It runs on the engine's writer thread, on the caller's, or (a
/// store that pipelines: max_writes_in_flight() > 1, as Redis and
/// PostgreSQL do) on the store's own thread, with no lock of the engine
/// held; it must not block. delayq-server answers a
/// consumer's finish only from it, so a 204 means the task is gone for good.
/// An attempt on a task that was replaced or cancelled while it ran changes
/// nothing in the store (the new version owns the id): its on_stored gets an
/// empty error_code.
///
/// Copies share one attempt. Thread safety: call from any thread; one call
/// in all per attempt (a second one is ignored, and its on_stored gets
/// errc::attempt_ended).
class attempt_completion {
 public:
  using stored_handler = std::function<void(boost::system::error_code)>;

  attempt_completion() = default;
  /// Ends the attempt: success when `failure` is empty.
  void operator()(std::string failure) const { (*this)(std::move(failure), nullptr); }
  /// Ends the attempt, and calls `on_stored` once its outcome is durable.
  void operator()(std::string failure, stored_handler on_stored) const {
    detail::attempt_end e;
    e.what =
        failure.empty() ? detail::attempt_end::kind::succeeded : detail::attempt_end::kind::failed;
    e.text = std::move(failure);
    report(std::move(e), std::move(on_stored));
  }
  /// Ends the attempt without counting it (no failure, no retry counted): the
  /// task waits again until `due`, with `priority` when given (beanstalkd's
  /// release). `on_stored` is called once the change is durable.
  ///
  /// The task keeps its attempt count (task::attempts) and fires again at
  /// `due` (at once when `due` has passed; a `due` past the engine's
  /// max_delay is cut to it). Counted in engine_stats::released, as neither
  /// a success nor a failure. `on_stored` may be null.
  void release(std::chrono::system_clock::time_point due, std::optional<std::uint32_t> priority,
               stored_handler on_stored) const {
    detail::attempt_end e;
    e.what = detail::attempt_end::kind::released;
    e.due = due;
    e.priority = priority;
    report(std::move(e), std::move(on_stored));
  }
  /// Ends the attempt by burying the task now, whatever the retry policy says:
  /// it becomes a dead letter with `reason` as its error, with `priority` when
  /// given (beanstalkd's bury). On a store without dead letters it is dropped
  /// like a dead task there (below).
  ///
  /// The dead letter's attempt count includes this attempt, as a bury after
  /// the last retry does; it is counted in engine_stats::died (not as a
  /// failure) and raises the dead-letter alert. On a store without
  /// dead_letters() nothing is written: the store keeps the task as it was
  /// last written, the engine lets go of it until its next start(), which
  /// runs it again (an in-process store keeps no copy: the task is lost),
  /// and `on_stored` gets errc::unsupported. `on_stored` may be null.
  void bury(std::string reason, std::optional<std::uint32_t> priority,
            stored_handler on_stored) const {
    detail::attempt_end e;
    e.what = detail::attempt_end::kind::buried;
    e.text = std::move(reason);
    e.priority = priority;
    report(std::move(e), std::move(on_stored));
  }
  /// Whether this completion belongs to an attempt.
  explicit operator bool() const noexcept { return static_cast<bool>(report_); }

 private:
  friend class detail::dispatcher;
  explicit attempt_completion(std::shared_ptr<detail::attempt_reporter> r)
      : report_(std::move(r)) {}
  void report(detail::attempt_end e, stored_handler on_stored) const {
    if (!report_) throw std::bad_function_call();  // as calling an empty std::function
    report_->report(std::move(e), std::move(on_stored));
  }
  std::shared_ptr<detail::attempt_reporter> report_;
};

/// Runs one attempt of a task and reports its end later, through a callback,
/// so an attempt that waits on I/O does not hold a worker thread.
///
/// start() begins the attempt and returns; the executor then calls `done`
/// exactly once, from any thread: with an empty string for success, or with
/// the reason it failed. Throwing from start() fails the attempt. The task
/// passed to start() stays valid until `done` has been called, and for as
/// long as any copy of `done` exists: an executor that keeps `done` may keep
/// a reference to the task beside it instead of a copy (delayq-server's
/// lease broker does, for every job waiting for a consumer).
///
/// The executor object lives until the attempt ends; pass `done` on to the
/// operation that completes, and do not keep it inside the executor itself
/// (the two would keep each other alive).
///
/// Destroying the last copy of `done` without calling it abandons the
/// attempt: it does not count, the task keeps its attempt count and stays
/// stored, and the engine makes it ready again one tick later (while the
/// engine stops, it stays stored for the next start()). delayq-server uses
/// this to give back tasks nobody reserved when it shuts down.
///
/// If the type has an execution timeout and it passes first, the attempt
/// counts as failed and is retried; a late call of `done` is ignored. The
/// attempt itself may still finish (at-least-once): deduplicate by task id.
///
/// Thread safety: one executor per attempt, as for executor.
class async_executor {
 public:
  using completion = attempt_completion;
  virtual ~async_executor() = default;
  /// Begins one attempt; call `done` when it ends.
  virtual void start(const task& t, completion done) = 0;
};

/// Where the engine calls an asynchronous executor's start().
enum class async_start : std::uint8_t {
  /// On one of the engine's worker threads (the default): start() may take
  /// its time, as a synchronous executor may.
  worker,
  /// Directly on the thread that finds the task due, once the engine has let
  /// go of its locks: the engine's timer, or the caller whose change made the
  /// task due (a schedule due now, a reschedule or requeue to now, a release,
  /// a triggering signal), before that call returns or completes. For a
  /// start() that only hands the task on and returns at once (into a queue or
  /// onto a socket of the program's own): it saves two thread hand-offs per
  /// attempt, and a task due when its write lands has been handed on by the
  /// time the call that wrote it answers. A type with a concurrency limit
  /// (engine_options::type_concurrency) still starts on a worker. start()
  /// must not block, and must not wait for a call of this engine that waits
  /// (a blocking schedule, cancel or stop) to return.
  immediate,
};

/// Maps task types to the executors that run them.
///
/// Example:
/// \code
///   delayq::executor_factory f;
///   f.add("order.cancel", [&](const delayq::task& t) { orders.cancel(t.payload); });
///   f.add("reminder.send", [] { return std::make_unique<reminder_sender>(); });
/// \endcode
///
/// Thread safety: add() is not thread-safe; make(), contains() and types() are
/// safe to call concurrently once the factory is no longer being modified (the
/// engine copies the factory it is given, so later changes do not reach it).
class executor_factory {
 public:
  /// Makes a new executor for one attempt.
  using maker = std::function<std::unique_ptr<executor>()>;
  /// A plain function that runs an attempt; shared by all attempts of the
  /// type, so it must be safe to call from several threads at once.
  using function = std::function<void(const task&)>;

  /// Registers (or replaces) the maker for `type`.
  executor_factory& add(std::string type, maker m);
  /// Registers (or replaces) a function as the executor for `type`.
  executor_factory& add(std::string type, function fn);

  /// Makes a new asynchronous executor for one attempt.
  using async_maker = std::function<std::unique_ptr<async_executor>()>;
  /// A function that begins an attempt and calls the completion when it
  /// ends; shared by all attempts of the type, so it must be thread-safe.
  using async_function = std::function<void(const task&, async_executor::completion)>;
  /// Registers (or replaces) an asynchronous executor for `type`, started
  /// where `how` says (async_start).
  executor_factory& add_async(std::string type, async_maker m,
                              async_start how = async_start::worker);
  executor_factory& add_async(std::string type, async_function fn,
                              async_start how = async_start::worker);

  /// Registers the executor of every type that has none of its own: a
  /// synchronous or an asynchronous one (the last call wins). With a
  /// fallback, contains() is true for every type. delayq-server uses one to
  /// hand any type to its push or pull machinery.
  executor_factory& set_fallback(maker m);
  executor_factory& set_fallback(function fn);
  executor_factory& set_fallback_async(async_maker m, async_start how = async_start::worker);
  executor_factory& set_fallback_async(async_function fn, async_start how = async_start::worker);
  /// Whether a fallback is registered.
  bool has_fallback() const noexcept { return static_cast<bool>(fallback_.bind()); }

  /// A new executor for `type`, or null when no synchronous one is registered.
  std::unique_ptr<executor> make(std::string_view type) const;
  /// A new asynchronous executor for `type`, or null when none is registered.
  std::unique_ptr<async_executor> make_async(std::string_view type) const;
  /// Whether an executor (of either kind) is registered for `type`, or a
  /// fallback is.
  bool contains(std::string_view type) const;
  /// The types registered by name, sorted (not the fallback).
  std::vector<std::string> types() const;

  /// How the attempts of one type run, as registered: exactly one member is
  /// set, or none when nothing (not even a fallback) is registered. The
  /// engine resolves this once per type and calls a plain function directly,
  /// with no executor object per attempt. Pointers stay valid as long as the
  /// factory is not modified.
  struct binding {
    const function* fn = nullptr;
    const maker* make = nullptr;
    const async_function* async_fn = nullptr;
    const async_maker* async_make = nullptr;
    /// An asynchronous one: where its start() runs.
    async_start start = async_start::worker;
    explicit operator bool() const noexcept { return fn || make || async_fn || async_make; }
  };
  /// The binding of `type`, or of the fallback when `type` has none.
  binding find(std::string_view type) const;

 private:
  // One registration: a plain function or a maker, synchronous or not.
  struct entry {
    std::shared_ptr<const function> fn;
    maker make;
    std::shared_ptr<const async_function> async_fn;
    async_maker async_make;
    async_start start = async_start::worker;
    binding bind() const noexcept;
  };
  entry& slot(std::string type);

  std::map<std::string, entry, std::less<>> entries_;
  entry fallback_;
};

}  // namespace delayq
