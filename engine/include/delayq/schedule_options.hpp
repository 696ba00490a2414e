// delayq/schedule_options.hpp - what a schedule call asks for besides type,
// payload and due time (schedule_options), and one task of a batch
// (task_spec). Plain values.
#pragma once

#include <utility>

#include <chrono>
#include <cstdint>
#include <string>

namespace delayq {

/// What schedule() does when a task with the same id is pending.
enum class on_conflict {
  reject,   ///< Fail with errc::duplicate_id (the default).
  replace,  ///< Replace type, payload and due time; the id stays.
  keep,     ///< Keep the pending task untouched and return its id.
};

/// Per-call options of schedule() and schedule_at().
///
/// Thread safety: a plain value, like the structs it holds.
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
  /// The task's priority (task::priority): lower goes first among the ready
  /// tasks of a pull consumer. Stored; the engine does not order by it.
  std::uint32_t priority = 0;
  /// The task's time to run when a consumer reserves it (task::ttr); 0: the
  /// consumer's own choice. 0 to 2^32 - 1 ms (errc::invalid_ttr otherwise).
  std::chrono::milliseconds ttr{0};
};

/// One task of a schedule_many() call.
///
/// Thread safety: a plain value, like the structs it holds.
struct task_spec {
  std::string type;
  std::string payload;
  std::chrono::system_clock::time_point due{};
  schedule_options options{};
};

}  // namespace delayq
