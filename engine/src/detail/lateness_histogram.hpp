// A lock-free log-scale histogram of lateness in microseconds.
//
// Four buckets per power of two (so a bucket's upper edge is within 19% of
// any value in it), 64 octaves: covers a microsecond to centuries in 256
// relaxed atomic counters, recorded from worker threads without a lock, each
// worker in a copy of its own.
#pragma once

#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>

#include "detail/striped.hpp"

namespace delayq::detail {

class lateness_histogram {
 public:
  void record(std::chrono::microseconds late) noexcept {
    const std::uint64_t us = late.count() > 0 ? static_cast<std::uint64_t>(late.count()) : 0;
    buckets_.mine()[bucket_of(us)].fetch_add(1, std::memory_order_relaxed);
    std::uint64_t seen = max_.load(std::memory_order_relaxed);
    while (us > seen && !max_.compare_exchange_weak(seen, us, std::memory_order_relaxed)) {
    }
  }

  /// The upper edge of the bucket holding the q-quantile (0 < q <= 1).
  std::chrono::microseconds quantile(double q) const noexcept {
    std::array<std::uint64_t, bucket_count> snap{};
    std::uint64_t total = 0;
    buckets_.each([&](const buckets& b) {
      for (std::size_t i = 0; i < bucket_count; ++i) {
        const std::uint64_t n = b[i].load(std::memory_order_relaxed);
        snap[i] += n;
        total += n;
      }
    });
    if (total == 0) return std::chrono::microseconds{0};
    // Nearest rank: the smallest value with at least q of the samples at or
    // below it.
    auto rank = static_cast<std::uint64_t>(std::ceil(q * static_cast<double>(total)));
    if (rank == 0) rank = 1;
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i < bucket_count; ++i) {
      seen += snap[i];
      if (seen >= rank) {
        const std::uint64_t edge = upper_edge(i);
        const std::uint64_t mx = max_.load(std::memory_order_relaxed);
        return std::chrono::microseconds{static_cast<std::int64_t>(edge < mx ? edge : mx)};
      }
    }
    return max();
  }

  std::chrono::microseconds max() const noexcept {
    return std::chrono::microseconds{
        static_cast<std::int64_t>(max_.load(std::memory_order_relaxed))};
  }

 private:
  static constexpr std::size_t sub = 4;
  static constexpr std::size_t bucket_count = 64 * sub;

  // Values 0..3 get buckets of their own; above, the octave and the two bits
  // after the leading one pick the bucket.
  static std::size_t bucket_of(std::uint64_t v) noexcept {
    if (v < sub) return static_cast<std::size_t>(v);
    const unsigned octave = 63u - static_cast<unsigned>(std::countl_zero(v));  // >= 2
    const auto frac = static_cast<std::size_t>((v >> (octave - 2)) & (sub - 1));
    const std::size_t b = (octave - 1) * sub + frac;
    return b < bucket_count ? b : bucket_count - 1;
  }

  static std::uint64_t upper_edge(std::size_t b) noexcept {
    if (b < sub) return b;
    const std::size_t octave = b / sub + 1;
    const std::size_t frac = b % sub;
    if (octave >= 63) return UINT64_MAX;
    return ((std::uint64_t{sub} + frac + 1) << (octave - 2)) - 1;
  }

  using buckets = std::array<std::atomic<std::uint64_t>, bucket_count>;
  striped<buckets> buckets_;  // a worker's own (striped.hpp)
  std::atomic<std::uint64_t> max_{0};
};

}  // namespace delayq::detail
