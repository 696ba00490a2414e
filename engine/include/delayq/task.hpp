// delayq/task.hpp - the unit of work the engine schedules, stores and runs.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace delayq {

/// One delayed task.
///
/// `due` is an absolute wall-clock instant: it is what the stores persist
/// (as epoch milliseconds), so a task keeps its true due time across
/// restarts. `attempts` counts the executions that have started and failed
/// so far; it is 0 for a task that never ran.
///
/// A count-triggered task (`trigger_count` > 0, see
/// schedule_options::trigger_count) runs when it has received
/// `trigger_count` signals (engine::signal()) or at `due`, whichever comes
/// first. Its executor tells which by `signals`: `signals >= trigger_count`
/// means the count was reached (and `due` is then the instant it was
/// reached), fewer means the deadline fired.
///
/// Thread safety: a plain value; distinct objects may be used concurrently.
struct task {
  std::string id;
  std::string type;
  std::string payload;  ///< Opaque bytes; NUL bytes are allowed.
  std::chrono::system_clock::time_point due{};
  std::uint32_t attempts = 0;
  /// Signals that make the task run early; 0: an ordinary task.
  std::uint32_t trigger_count = 0;
  /// Signals received so far (durable: each acknowledged signal is stored).
  std::uint32_t signals = 0;
  /// For a pull consumer (delayq-server's beanstalkd listener): among the
  /// ready tasks it hands out, a lower number goes first (beanstalkd's
  /// meaning; 0 is the most urgent). Stored with the task; the engine itself
  /// does not order by it: it fires tasks by due time.
  std::uint32_t priority = 0;
  /// The lease a consumer gets when it reserves this task (its time to run,
  /// beanstalkd's TTR); 0: the consumer's own choice. Stored with the task
  /// to the millisecond, at most 2^32 - 1 ms (engine::schedule() refuses a
  /// negative or longer one with errc::invalid_ttr); the engine itself does
  /// not read it (an executor's time limit is its type's timeout).
  std::chrono::milliseconds ttr{0};
  /// Clusters (engine_options::cluster), in the copy an executor gets: the
  /// fencing token of the shard lease the attempt runs under; 0 otherwise
  /// (never stored). A receiver that keeps the highest token seen per shard
  /// (shard_of()) can refuse the work of an instance that lost its lease
  /// while it stalled (docs/scale-out.md, "Fencing downstream").
  std::uint64_t fence = 0;

  friend bool operator==(const task&, const task&) = default;
};

/// Whether `type` is a name a task type may have: 1-128 bytes of A-Z, a-z,
/// 0-9, '.', '_', ':' and '-' (errc::invalid_type otherwise). For tools
/// that take type names from users before an engine sees them.
bool is_valid_type(std::string_view type) noexcept;

/// A task that will not run again by itself: its last allowed attempt failed,
/// or it could never run (no executor for its type). It stays in the store,
/// out of the wheel, until it is requeued or purged.
///
/// Thread safety: a plain value.
struct dead_letter {
  delayq::task task;  ///< As it was at its last attempt (`attempts` counts them).
  std::string error;  ///< Why the last attempt failed.
  std::chrono::system_clock::time_point died_at{};

  friend bool operator==(const dead_letter&, const dead_letter&) = default;
};

/// Milliseconds since the Unix epoch: the unit stores persist due times in.
inline std::int64_t to_epoch_ms(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

/// The inverse of to_epoch_ms().
inline std::chrono::system_clock::time_point from_epoch_ms(std::int64_t ms) {
  return std::chrono::system_clock::time_point{
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::milliseconds{ms})};
}

}  // namespace delayq
