// A mutex for critical sections of a few hundred nanoseconds.
//
// std::mutex (glibc) puts a thread that finds it locked to sleep in the
// kernel at once, and waking it costs microseconds: with four threads calling
// the engine on two cores, the engine's lock spent more time in futex calls
// than in the wheel, and throughput fell as threads were added. This one
// spins briefly first (the holder is almost always about to let go), then
// sleeps on the lock word like std::mutex. It is Drepper's three-state mutex
// ("Futexes Are Tricky") with a bounded spin in front, on C++20 atomic
// wait/notify (a futex on Linux).
#pragma once

#include <atomic>
#include <cstdint>

namespace delayq::detail {

/// Thread safety: a mutex; meets Lockable (usable with std::unique_lock and
/// std::condition_variable_any).
class spin_mutex {
 public:
  spin_mutex() = default;
  spin_mutex(const spin_mutex&) = delete;
  spin_mutex& operator=(const spin_mutex&) = delete;

  void lock() noexcept {
    std::uint32_t c = free;
    if (state_.compare_exchange_strong(c, locked, std::memory_order_acquire,
                                       std::memory_order_relaxed))
      return;
    for (int i = 0; i < spin_limit; ++i) {
      pause();
      if (state_.load(std::memory_order_relaxed) == free) {
        c = free;
        if (state_.compare_exchange_weak(c, locked, std::memory_order_acquire,
                                         std::memory_order_relaxed))
          return;
      }
    }
    // Sleep: mark the lock contended so that its holder wakes someone.
    c = state_.exchange(contended, std::memory_order_acquire);
    while (c != free) {
      state_.wait(contended, std::memory_order_relaxed);
      c = state_.exchange(contended, std::memory_order_acquire);
    }
  }

  bool try_lock() noexcept {
    std::uint32_t c = free;
    return state_.compare_exchange_strong(c, locked, std::memory_order_acquire,
                                          std::memory_order_relaxed);
  }

  void unlock() noexcept {
    if (state_.exchange(free, std::memory_order_release) == contended) state_.notify_one();
  }

 private:
  static constexpr std::uint32_t free = 0, locked = 1, contended = 2;
  // About a microsecond of pauses: longer than the engine's critical sections,
  // far shorter than a sleep and wake-up.
  static constexpr int spin_limit = 128;

  static void pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }

  std::atomic<std::uint32_t> state_{free};
};

}  // namespace delayq::detail
