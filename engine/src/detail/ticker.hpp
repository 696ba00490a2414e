// The engine's clock: a steady_timer on a strand of the user's executor,
// and the mapping between wall-clock due times and the wheel's ticks.
//
// Tick k is the instant anchor + k * tick on the steady clock, which is the
// start of a wall-clock millisecond (anchor() aligns them). Due times are
// wall-clock milliseconds; one is mapped to the first tick boundary at or
// after it once, when its task is armed, so a later step of the wall clock
// does not move tasks already waiting (docs/design.md). The timer is armed
// for the next due tick only, with an absolute deadline: it never wakes when
// nothing is due and never drifts, however late a handler runs.
#pragma once

#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <chrono>
#include <cstdint>
#include <ctime>

namespace delayq::detail {

/// Thread safety: tick math is safe from any thread once anchor() returned;
/// wait_until() and cancel() must run on strand().
class ticker {
 public:
  using strand_type = boost::asio::strand<boost::asio::any_io_executor>;

  ticker(const boost::asio::any_io_executor& ex, std::chrono::milliseconds tick)
      : tick_(tick), strand_(boost::asio::make_strand(ex)), timer_(strand_) {}

  const strand_type& strand() const noexcept { return strand_; }

  /// Starts the clock with tick 0 one tick in the past, so that a task
  /// already due (which the wheel files at tick 1) runs at once.
  ///
  /// Tick boundaries fall on the wall clock's millisecond boundaries: the
  /// steady anchor is moved back by the part of a millisecond the wall
  /// clock was into when read. Without that every task fired that fraction
  /// late (0 to 1 ms, the same for the engine's life, drawn anew at each
  /// start).
  ///
  /// The wall clock is read between two steady reads, so the mapping is
  /// ahead of it by at most their distance, lead(): read again while that
  /// is over a microsecond (a preemption between the reads). Ahead, so that
  /// a due time made from "now + delay" is never before the system clock's
  /// now + delay; and every firing decision allows for it (the timer waits
  /// lead() past a boundary, begun_ms() is behind the wall clock), so that
  /// no task starts before its due time by the system clock.
  void anchor() noexcept {
    std::chrono::steady_clock::time_point first, second;
    std::chrono::system_clock::time_point read;
    for (int attempt = 0; attempt < 16; ++attempt) {
      first = std::chrono::steady_clock::now();
      read = std::chrono::system_clock::now();
      second = std::chrono::steady_clock::now();
      if (second - first < std::chrono::microseconds{1}) break;
    }
    lead_ = second - first;
    const auto wall = read - tick_;
    const auto steady = first - tick_;
    const auto wall_ms = std::chrono::floor<std::chrono::milliseconds>(wall);
    anchor_wall_ = wall_ms;
    anchor_steady_ =
        steady - std::chrono::duration_cast<std::chrono::steady_clock::duration>(wall - wall_ms);
    anchor_ms_ = wall_ms.time_since_epoch().count();
    anchored_.store(true, std::memory_order_release);
  }

  /// How far the engine's clock may be ahead of the wall clock (a few tens
  /// of nanoseconds; under a microsecond unless anchor() was preempted
  /// sixteen times).
  std::chrono::steady_clock::duration lead() const noexcept { return lead_; }

  /// The last millisecond surely begun by the wall clock (now_ms(), less
  /// lead()): what firing decisions read, so that nothing starts early.
  std::int64_t begun_ms() const noexcept {
    if (!anchored_.load(std::memory_order_acquire)) return now_ms();
    return std::chrono::floor<std::chrono::milliseconds>(
               wall_at(std::chrono::steady_clock::now() - lead_).time_since_epoch())
        .count();
  }

  /// Wall-clock milliseconds by the engine's own clock: the system clock as
  /// read at anchor(), advanced since by the steady clock. It is the clock
  /// the wheel fires by, so "due now" and "in 2 s from now" mean the same
  /// instant to every part of the engine: a step of the system clock after
  /// start (NTP, an operator, a clock set seconds wrong) moves neither this
  /// nor the tasks waiting in the wheel. Before anchor(): the system clock.
  std::int64_t now_ms() const noexcept {
    if (!anchored_.load(std::memory_order_acquire))
      return std::chrono::duration_cast<std::chrono::milliseconds>(
                 std::chrono::system_clock::now().time_since_epoch())
          .count();
    // In the clocks' own resolution, floored to the millisecond once: read
    // right after anchor(), it is the system clock's millisecond, not one
    // or two before it.
    return std::chrono::floor<std::chrono::milliseconds>(
               wall_at(std::chrono::steady_clock::now()).time_since_epoch())
        .count();
  }

  /// now_ms() as of steady instant `t`, read by the caller: a call that
  /// needs the steady clock for something else too reads it once. Before
  /// anchor(): the system clock now.
  std::int64_t ms_at(std::chrono::steady_clock::time_point t) const noexcept {
    if (!anchored_.load(std::memory_order_acquire))
      return std::chrono::duration_cast<std::chrono::milliseconds>(
                 std::chrono::system_clock::now().time_since_epoch())
          .count();
    return std::chrono::floor<std::chrono::milliseconds>(wall_at(t).time_since_epoch()).count();
  }

  /// The wall-clock instant, by the engine's clock, of steady instant `t`
  /// (once anchor() returned).
  std::chrono::system_clock::time_point wall_at(
      std::chrono::steady_clock::time_point t) const noexcept {
    return anchor_wall_ +
           std::chrono::duration_cast<std::chrono::system_clock::duration>(t - anchor_steady_);
  }

  /// The steady instant tick `tick` begins at.
  std::chrono::steady_clock::time_point boundary(std::uint64_t tick) const noexcept {
    return anchor_steady_ +
           tick * std::chrono::duration_cast<std::chrono::steady_clock::duration>(tick_);
  }

  /// The first tick at or after wall-clock `due_ms` (0 for the past).
  std::uint64_t tick_for(std::int64_t due_ms) const noexcept {
    if (due_ms <= anchor_ms_) return 0;
    const auto offset = static_cast<std::uint64_t>(due_ms - anchor_ms_);
    const auto t = static_cast<std::uint64_t>(tick_.count());
    return (offset + t - 1) / t;
  }

  /// now_ms(), read from the coarse monotonic clock (a few nanoseconds,
  /// at most a scheduler tick behind now_ms(), never ahead of it).
  std::int64_t coarse_now_ms() const noexcept {
    if (!anchored_.load(std::memory_order_acquire)) return now_ms();
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    const auto mono = std::chrono::steady_clock::time_point(
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            std::chrono::seconds{ts.tv_sec} + std::chrono::nanoseconds{ts.tv_nsec}));
    return std::chrono::floor<std::chrono::milliseconds>(wall_at(mono).time_since_epoch()).count();
  }

  /// The last tick whose boundary is at or before wall-clock `now_ms`:
  /// every task filed at it or before is due by `now_ms` (0 before the
  /// anchor).
  std::uint64_t last_tick_by(std::int64_t now_ms) const noexcept {
    if (now_ms <= anchor_ms_) return 0;
    return static_cast<std::uint64_t>(now_ms - anchor_ms_) /
           static_cast<std::uint64_t>(tick_.count());
  }

  /// The last tick surely begun by the wall clock (its boundary plus
  /// lead() is past).
  std::uint64_t current_tick() const noexcept {
    const auto since = std::chrono::steady_clock::now() - lead_ - anchor_steady_;
    return since.count() < 0 ? 0 : static_cast<std::uint64_t>(since / tick_);
  }

  /// On the strand: calls `h(error_code)` when tick `tick` has surely
  /// begun by the wall clock (its boundary, plus lead()).
  template <class Handler>
  void wait_until(std::uint64_t tick, Handler&& h) {
    timer_.expires_at(boundary(tick) + lead_);
    timer_.async_wait(std::forward<Handler>(h));
  }

  /// On the strand: calls `h(error_code)` at steady instant `at`.
  template <class Handler>
  void wait_until_instant(std::chrono::steady_clock::time_point at, Handler&& h) {
    timer_.expires_at(at);
    timer_.async_wait(std::forward<Handler>(h));
  }

  /// On the strand: cancels the wait.
  void cancel() { timer_.cancel(); }

  /// Runs `fn` on the strand.
  template <class Fn>
  void post(Fn&& fn) {
    boost::asio::post(strand_, std::forward<Fn>(fn));
  }

 private:
  const std::chrono::milliseconds tick_;
  strand_type strand_;
  boost::asio::steady_timer timer_;
  std::chrono::steady_clock::time_point anchor_steady_{};
  std::int64_t anchor_ms_ = 0;
  std::chrono::system_clock::time_point anchor_wall_{};
  std::chrono::steady_clock::duration lead_{};
  std::atomic<bool> anchored_{false};
};

}  // namespace delayq::detail
