// Counters many threads add to at once, striped so that they do not share a
// cache line.
//
// One atomic that two workers both add to on every attempt moves its cache
// line between their cores at each add: a fired task counted a dozen such
// adds, and a burst of 2,000 tasks due in one millisecond finished 0.5 ms
// later with them than without them (docs/benchmarks.md, "Recurring
// schedules"). Each thread adds to a stripe of its own, 64 bytes apart;
// a read sums the stripes, so it may miss the adds in flight, as a read of
// one atomic may.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace delayq::detail {

inline constexpr std::size_t counter_stripes = 8;

namespace striping {
inline std::atomic<std::size_t> next_stripe{0};
// counter_stripes: not chosen yet.
inline thread_local std::size_t this_thread_stripe = counter_stripes;
}  // namespace striping

/// The stripe the calling thread adds to: threads take them in turn when
/// they first count, unless set_counter_stripe() chose one.
inline std::size_t counter_stripe() noexcept {
  std::size_t& s = striping::this_thread_stripe;
  if (s == counter_stripes)
    s = striping::next_stripe.fetch_add(1, std::memory_order_relaxed) % counter_stripes;
  return s;
}

/// Gives the calling thread stripe `i` (modulo the count): the engine's
/// workers take one each, so that no two of them share one.
inline void set_counter_stripe(std::size_t i) noexcept {
  striping::this_thread_stripe = i % counter_stripes;
}

/// `Cell` once per stripe, each on cache lines of its own; `N` stripes
/// (a thread adds to stripe counter_stripe() % N).
template <class Cell, std::size_t N = counter_stripes>
class striped {
 public:
  /// The calling thread's.
  Cell& mine() noexcept { return cells_[counter_stripe() % N].cell; }
  /// Every stripe's, to sum.
  template <class Fn>
  void each(Fn&& fn) const {
    for (const auto& c : cells_) fn(c.cell);
  }

 private:
  struct alignas(64) padded {
    Cell cell{};
  };
  std::array<padded, N> cells_{};
};

/// An integer counter or gauge. Thread safety: add() and load() are safe
/// from any thread.
template <class T>
class striped_counter {
 public:
  void add(T d) noexcept { s_.mine().fetch_add(d, std::memory_order_relaxed); }
  T load() const noexcept {
    T sum = 0;
    s_.each([&](const std::atomic<T>& c) { sum += c.load(std::memory_order_relaxed); });
    return sum;
  }

 private:
  striped<std::atomic<T>> s_;
};

/// A count of held tasks that many threads move at once, which a cap may
/// bound (engine_options::max_pending, a type's capacity). Uncapped (the
/// default) each thread moves a stripe of its own: one atomic that every
/// schedule and cancel moved took its cache line from core to core, and four
/// threads on two cores did 1.29-1.68x of one, and 1.79-1.82x striped
/// (docs/benchmarks.md, "Memory per ready job, and the engine's counts"). Capped, every move is on
/// one atomic, so that reserve() keeps the cap exactly. The cap is set once, before the count is
/// shared.
///
/// Thread safety: reserve(), add() and load() are safe from any thread;
/// cap() only before any of them.
class pending_count {
 public:
  static constexpr std::size_t uncapped = static_cast<std::size_t>(-1);

  void cap(std::size_t limit) noexcept { limit_ = limit; }

  /// Adds n unless that takes the count past the cap; true if added.
  bool reserve(std::size_t n) noexcept {
    const auto d = static_cast<std::int64_t>(n);
    if (limit_ == uncapped) {
      stripes_.mine().fetch_add(d, std::memory_order_relaxed);
      return true;
    }
    const std::int64_t after = one_.fetch_add(d, std::memory_order_relaxed) + d;
    if (after <= 0 || static_cast<std::uint64_t>(after) <= limit_) return true;
    one_.fetch_sub(d, std::memory_order_relaxed);
    return false;
  }
  void add(std::int64_t d) noexcept {
    if (limit_ == uncapped)
      stripes_.mine().fetch_add(d, std::memory_order_relaxed);
    else
      one_.fetch_add(d, std::memory_order_relaxed);
  }
  /// The count; with moves in flight on other threads it may miss them, as
  /// a read of one atomic may.
  std::int64_t load() const noexcept {
    if (limit_ != uncapped) return one_.load(std::memory_order_relaxed);
    std::int64_t sum = 0;
    stripes_.each(
        [&](const std::atomic<std::int64_t>& c) { sum += c.load(std::memory_order_relaxed); });
    return sum;
  }

 private:
  std::size_t limit_ = uncapped;
  alignas(64) std::atomic<std::int64_t> one_{0};
  striped<std::atomic<std::int64_t>> stripes_;
};

}  // namespace delayq::detail
