// delayq/engine_metrics.hpp - a snapshot of an engine's metrics, per task
// type, as engine::metrics() returns it and delayq/prometheus.hpp renders it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace delayq {

/// A histogram with fixed buckets, as Prometheus reads one: `counts[i]` is
/// the number of observations at or below `upper_bounds[i]` (cumulative),
/// and the last entry of `counts` (one more than `upper_bounds`) is every
/// observation, the `le="+Inf"` bucket, equal to `count`.
struct histogram_data {
  std::vector<double> upper_bounds;   ///< Ascending; +Inf not included.
  std::vector<std::uint64_t> counts;  ///< Cumulative, upper_bounds.size() + 1 entries.
  std::uint64_t count = 0;            ///< Observations in all.
  double sum = 0;                     ///< Their sum, in the histogram's unit.
};

/// One task type's counts. Counters are since the engine was constructed;
/// gauges are now.
struct type_metrics {
  std::string type;  ///< The type's name (user input: escape it when printing).
  // Gauges.
  std::size_t pending = 0;  ///< Tasks held: waiting, due or running.
  std::size_t ready = 0;    ///< Due and waiting for a worker or a per-type slot (a tick
                            ///< of 256 tasks or more: from up to 5 ms before it).
  std::size_t running = 0;  ///< Attempts started and not ended.
  // Counters.
  std::uint64_t scheduled = 0;  ///< Tasks accepted by schedule calls (a replace counts).
  std::uint64_t fired = 0;      ///< Attempts started.
  std::uint64_t succeeded = 0;  ///< Attempts that succeeded.
  std::uint64_t failed = 0;     ///< Attempts that failed (threw, reported, timed out).
  std::uint64_t retried = 0;    ///< Failed attempts scheduled to run again.
  std::uint64_t died = 0;       ///< Tasks that became dead letters.
  std::uint64_t cancelled = 0;  ///< Successful cancel() calls.
  std::uint64_t timed_out = 0;  ///< Attempts that passed their type's timeout.
  /// Attempts their executor released (attempt_completion::release()):
  /// neither succeeded nor failed.
  std::uint64_t released = 0;
  /// Seconds from a task's due time to the start of its attempt.
  histogram_data lateness_seconds;
  /// Seconds from the start of an attempt to its end (an asynchronous one:
  /// to its completion, or to its timeout).
  histogram_data execution_seconds;
};

/// The engine's store writes.
struct store_metrics {
  /// Seconds from handing a batch to the store to its outcome, per batch.
  histogram_data write_seconds;
  /// Changes per batch written.
  histogram_data write_batch_size;
  std::uint64_t write_errors = 0;  ///< Batches (or single writes) that failed.
  std::size_t writes_queued = 0;   ///< Changes queued and not yet sent.
  std::size_t writes_kept = 0;     ///< Changes that failed and wait to be written again.
  /// True while changes are kept for retry or the last write failed: the
  /// store is unreachable or refusing writes.
  bool outage = false;
};

/// What engine::metrics() returns.
struct engine_metrics {
  /// Every type the engine knows (registered, scheduled or loaded), in the
  /// order it learned them.
  std::vector<type_metrics> types;
  store_metrics store;
  std::uint64_t loaded = 0;       ///< Tasks loaded from the store by start().
  std::uint64_t quarantined = 0;  ///< Undecodable records set aside at start().
  std::size_t dead = 0;           ///< Dead letters in the store now.
  std::uint64_t wakeups = 0;      ///< Times the wheel's timer fired (twice for a heavy tick).
};

}  // namespace delayq
