// Metrics the engine keeps as it goes: fixed-bucket histograms and one set of
// per-type counters, hung on the type's record (type_registry::type_info),
// which every path that counts has already looked up. Each count is one
// relaxed atomic add, on the calling thread's stripe (striped.hpp): no lock,
// no map lookup, no allocation, no cache line shared with another worker.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "delayq/engine_metrics.hpp"
#include "detail/striped.hpp"

namespace delayq::detail {

/// The counts of a histogram over integer observations (microseconds, or a
/// count) with N fixed upper bounds, kept elsewhere (fixed_histogram, or a
/// type's bounds). Thread safety: record() and add_to() are safe from any
/// thread; a read taken during records may be off by the records in flight.
template <std::size_t N>
struct histogram_cells {
  using bounds = std::array<std::uint64_t, N>;

  void record(const bounds& upper, std::uint64_t v) noexcept {
    // Prometheus buckets are inclusive (le): v goes to the first bound >= v.
    std::size_t i = 0;
    while (i < N && v > upper[i]) ++i;
    counts[i].fetch_add(1, std::memory_order_relaxed);
    sum.fetch_add(v, std::memory_order_relaxed);
  }
  /// Adds these counts (per bucket, not cumulative) and sum to the totals.
  void add_to(std::array<std::uint64_t, N + 1>& total, std::uint64_t& total_sum) const noexcept {
    for (std::size_t i = 0; i <= N; ++i) total[i] += counts[i].load(std::memory_order_relaxed);
    total_sum += sum.load(std::memory_order_relaxed);
  }
  /// Per-bucket counts and a sum, as Prometheus reports them.
  static void report(const bounds& upper, const std::array<std::uint64_t, N + 1>& count,
                     std::uint64_t total_sum, histogram_data& out, double scale) {
    out.upper_bounds.resize(N);
    out.counts.resize(N + 1);
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i <= N; ++i) {
      seen += count[i];
      out.counts[i] = seen;
      if (i < N) out.upper_bounds[i] = static_cast<double>(upper[i]) * scale;
    }
    // The count is the sum of the buckets read, so le="+Inf" equals _count
    // even while others record.
    out.count = seen;
    out.sum = static_cast<double>(total_sum) * scale;
  }

  std::array<std::atomic<std::uint64_t>, N + 1> counts{};
  std::atomic<std::uint64_t> sum{0};
};

/// A histogram with its bounds, recorded by one thread at a time mostly (the
/// store writer's). Thread safety: record() and snapshot() are safe from any
/// thread.
template <std::size_t N>
class fixed_histogram {
 public:
  using bounds = typename histogram_cells<N>::bounds;

  explicit constexpr fixed_histogram(const bounds& upper) noexcept : upper_(upper) {}

  void record(std::uint64_t v) noexcept { cells_.record(upper_, v); }

  void snapshot(histogram_data& out, double scale) const {
    std::array<std::uint64_t, N + 1> count{};
    std::uint64_t sum = 0;
    cells_.add_to(count, sum);
    histogram_cells<N>::report(upper_, count, sum, out, scale);
  }

 private:
  const bounds& upper_;
  histogram_cells<N> cells_;
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

/// One stripe of one type's counters (type_counters).
struct type_counter_cells {
  // Gauges, moved up and down by the paths that change them; signed, since
  // two threads' adds may land in either order (and a stripe's alone may
  // be below zero: a task counted in on one thread and out on another).
  std::atomic<std::int64_t> ready{0}, running{0};
  // Counters.
  std::atomic<std::uint64_t> scheduled{0}, fired{0}, succeeded{0}, failed{0}, retried{0}, died{0},
      cancelled{0}, timed_out{0}, released{0};
  // Bounds: attempt_seconds_us.
  histogram_cells<16> lateness, execution;
};

/// One type's counters, striped: a thread counts in its own stripe (mine()),
/// so that two workers running tasks of one type do not move one cache line
/// between their cores at every count; a read sums the stripes. Four
/// stripes of 384 bytes a type: a cap on what a client that makes many
/// types costs (the registry holds at most 65,535), and enough for the
/// workers of a small machine to count apart. Thread safety: every member
/// is safe from any thread.
class type_counters {
 public:
  static constexpr std::size_t stripes = 4;
  using counter = std::atomic<std::uint64_t> type_counter_cells::*;
  using gauge = std::atomic<std::int64_t> type_counter_cells::*;
  using histogram = histogram_cells<16> type_counter_cells::*;

  /// The calling thread's stripe, to count in.
  type_counter_cells& mine() noexcept { return s_.mine(); }

  static void add(std::atomic<std::uint64_t>& c) noexcept {
    c.fetch_add(1, std::memory_order_relaxed);
  }
  static void add(std::atomic<std::int64_t>& g, std::int64_t d) noexcept {
    g.fetch_add(d, std::memory_order_relaxed);
  }
  /// Records `us` in histogram `h` (lateness or execution).
  void record(histogram h, std::uint64_t us) noexcept {
    (mine().*h).record(attempt_seconds_us, us);
  }

  std::uint64_t sum(counter c) const noexcept {
    std::uint64_t n = 0;
    s_.each([&](const type_counter_cells& x) { n += (x.*c).load(std::memory_order_relaxed); });
    return n;
  }
  std::int64_t sum(gauge g) const noexcept {
    std::int64_t n = 0;
    s_.each([&](const type_counter_cells& x) { n += (x.*g).load(std::memory_order_relaxed); });
    return n;
  }
  void snapshot(histogram h, histogram_data& out, double scale) const {
    std::array<std::uint64_t, 17> count{};
    std::uint64_t total = 0;
    s_.each([&](const type_counter_cells& x) { (x.*h).add_to(count, total); });
    histogram_cells<16>::report(attempt_seconds_us, count, total, out, scale);
  }

 private:
  striped<type_counter_cells, stripes> s_;
};

}  // namespace delayq::detail
