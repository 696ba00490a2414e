// delayq/engine_stats.hpp - the engine's counters (engine::stats()). A plain
// value: a snapshot taken under the engine's lock.
#pragma once

#include <utility>

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace delayq {

/// Counters since start(). Lateness is measured when an attempt starts on a
/// worker, against the task's due time, and is kept in a log-scale histogram
/// (each figure is the upper edge of its bucket, within 19%).
///
/// Thread safety: a plain value, like the structs it holds.
struct engine_stats {
  std::size_t pending = 0;      ///< Tasks held: waiting, retrying or running.
  std::size_t ready = 0;        ///< Due tasks waiting for a worker, a per-type slot
                                ///< or a cancel's store write (task_state::ready);
                                ///< a tick of 256 tasks or more counts from up to
                                ///< 5 ms before it (docs/design.md, "Time").
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
  /// Attempts their executor released to wait again
  /// (attempt_completion::release()): counted neither in succeeded nor in
  /// failed.
  std::uint64_t released = 0;
  std::size_t dead = 0;           ///< Dead letters in the store now.
  std::uint64_t wakeups = 0;      ///< Times the wheel's timer fired (0 while nothing is due;
                                  ///< twice for a tick of 256 tasks or more).
  std::size_t writes_queued = 0;  ///< Store writes queued and not yet sent.
  std::size_t writes_kept = 0;    ///< Store writes that failed and wait to be retried
                                  ///< (more than 0: the store is down or refusing).
  /// Recurring schedules (docs/schedules.md): those this engine keeps now
  /// (in a cluster, those of the shards it holds); since start(), the
  /// occurrences it made tasks, those it skipped as missed (missed_runs),
  /// and those it could not make (a type without executor, a payload over
  /// the limit: each logged).
  std::size_t schedules = 0;
  std::uint64_t occurrences_made = 0;
  std::uint64_t occurrences_missed = 0;
  std::uint64_t occurrences_lost = 0;
  std::chrono::microseconds lateness_p50{0};
  std::chrono::microseconds lateness_p90{0};
  std::chrono::microseconds lateness_p99{0};
  std::chrono::microseconds lateness_max{0};
};

}  // namespace delayq
