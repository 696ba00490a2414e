// Metrics the engine keeps as it goes: fixed-bucket histograms and one set of
// per-type counters, hung on the type's record (type_registry::type_info),
// which every path that counts has already looked up. Each count is one
// relaxed atomic add: no lock, no map lookup, no allocation.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "delayq/engine_metrics.hpp"

namespace delayq::detail {

/// A histogram over integer observations (microseconds, or a count) with
/// fixed upper bounds; reported in the unit `scale` converts to.
/// Thread safety: record() and snapshot() are safe from any thread; a
/// snapshot taken during records may be off by the records in flight.
template <std::size_t N>
class fixed_histogram {
 public:
  using bounds = std::array<std::uint64_t, N>;

  explicit constexpr fixed_histogram(const bounds& upper) noexcept : upper_(upper) {}

  void record(std::uint64_t v) noexcept {
    // Prometheus buckets are inclusive (le): v goes to the first bound >= v.
    std::size_t i = 0;
    while (i < N && v > upper_[i]) ++i;
    counts_[i].fetch_add(1, std::memory_order_relaxed);
    sum_.fetch_add(v, std::memory_order_relaxed);
  }

  void snapshot(histogram_data& out, double scale) const {
    out.upper_bounds.resize(N);
    out.counts.resize(N + 1);
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i <= N; ++i) {
      seen += counts_[i].load(std::memory_order_relaxed);
      out.counts[i] = seen;
      if (i < N) out.upper_bounds[i] = static_cast<double>(upper_[i]) * scale;
    }
    // The count is the sum of the buckets read, so le="+Inf" equals _count
    // even while others record.
    out.count = seen;
    out.sum = static_cast<double>(sum_.load(std::memory_order_relaxed)) * scale;
  }

 private:
  const bounds& upper_;
  std::array<std::atomic<std::uint64_t>, N + 1> counts_{};
  std::atomic<std::uint64_t> sum_{0};
};

/// Bounds of attempt lateness and execution time, in microseconds (1 ms to
/// 5 min: the default tick is a second, so most lateness falls below it).
inline constexpr fixed_histogram<16>::bounds attempt_seconds_us = {
    1'000,   2'500,     5'000,     10'000,    25'000,     50'000,     100'000,    250'000,
    500'000, 1'000'000, 2'500'000, 5'000'000, 10'000'000, 30'000'000, 60'000'000, 300'000'000};
/// Bounds of a store write's latency, in microseconds (100 us to 10 s).
inline constexpr fixed_histogram<15>::bounds store_write_us = {
    100,    250,     500,     1'000,   2'500,     5'000,     10'000,    25'000,
    50'000, 100'000, 250'000, 500'000, 1'000'000, 2'500'000, 10'000'000};
/// Bounds of a store write's size, in changes (the writer's batch is at most 4096).
inline constexpr fixed_histogram<13>::bounds store_batch_changes = {
    1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096};

/// One type's counters. Thread safety: every member is an atomic.
struct type_counters {
  // Gauges, moved up and down by the paths that change them; signed, since
  // two threads' adds may land in either order.
  std::atomic<std::int64_t> ready{0};
  std::atomic<std::int64_t> running{0};
  // Counters.
  std::atomic<std::uint64_t> scheduled{0}, fired{0}, succeeded{0}, failed{0}, retried{0}, died{0},
      cancelled{0}, timed_out{0}, released{0};
  fixed_histogram<16> lateness{attempt_seconds_us};
  fixed_histogram<16> execution{attempt_seconds_us};

  static void add(std::atomic<std::uint64_t>& c) noexcept {
    c.fetch_add(1, std::memory_order_relaxed);
  }
  static void add(std::atomic<std::int64_t>& g, std::int64_t d) noexcept {
    g.fetch_add(d, std::memory_order_relaxed);
  }
};

}  // namespace delayq::detail
