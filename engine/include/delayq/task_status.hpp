// delayq/task_status.hpp - what the engine reports about one pending task:
// its state (engine::status()) and what a signal did (engine::signal()).
// Plain values.
#pragma once

#include <utility>

#include <cstdint>

#include "delayq/task.hpp"

namespace delayq {

/// Where a pending task is in its life.
enum class task_state {
  delayed,  ///< Waiting for its due time (a first attempt, or a retry).
  ready,    ///< Due, and waiting for a worker, a per-type slot or its turn
            ///< in the catch-up after start(). cancel() still stops it.
  running,  ///< An attempt has started and cannot be stopped.
};

/// A pending task and where it is: what engine::status() returns.
///
/// Thread safety: a plain value, like the structs it holds.
struct task_status {
  delayq::task task;
  task_state state = task_state::delayed;
};

/// What engine::signal() did.
///
/// Thread safety: a plain value, like the structs it holds.
struct signal_result {
  std::uint32_t signals = 0;        ///< Signals received now, this one included.
  std::uint32_t trigger_count = 0;  ///< The task's trigger count.
  bool triggered = false;           ///< The count is reached: the task is due now.
};

}  // namespace delayq
