// delayq/executor.hpp - what runs a task, and the factory that picks it by type.
#pragma once

#include <functional>
#include <map>
#include <memory>
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

  /// A new executor for `type`, or null when no maker is registered.
  std::unique_ptr<executor> make(std::string_view type) const;
  /// Whether a maker is registered for `type`.
  bool contains(std::string_view type) const;
  /// The registered types, sorted.
  std::vector<std::string> types() const;

 private:
  std::map<std::string, maker, std::less<>> makers_;
};

}  // namespace delayq
