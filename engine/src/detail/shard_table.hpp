// The engine's view of its shard leases (engine_options::cluster): per shard,
// whether it is held, the lease's fencing token, until when the lease is
// surely ours, and whether it is being handed over (another member should
// own it: no attempt starts on it until it is given away). The lease thread writes it (under the
// engine's lock, so that a change and what it does to the wheel are one step); the fire path and
// the calls read it under the same lock. The fields are atomics so that
// stats() can count without the lock.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string_view>

#include "delayq/shard_leases.hpp"

namespace delayq::detail {

/// Thread safety: set()/clear() from one thread at a time (the engine does it
/// under its lock); the readers from any thread.
class shard_table {
 public:
  using clock = std::chrono::steady_clock;

  explicit shard_table(std::uint32_t shards)
      : shards_(shards), slots_(std::make_unique<slot[]>(shards)) {}

  std::uint32_t size() const noexcept { return shards_; }
  std::uint32_t shard(std::string_view id) const noexcept { return shard_of(id, shards_); }

  bool held(std::uint32_t s) const noexcept {
    return slots_[s].token.load(std::memory_order_acquire) != 0;
  }
  /// The token of a lease that is held and surely ours at `now`; 0 otherwise
  /// (not held, or its valid_until passed without a renewal).
  std::uint64_t valid_token(std::uint32_t s, clock::time_point now) const noexcept {
    const std::uint64_t t = slots_[s].token.load(std::memory_order_acquire);
    if (t == 0) return 0;
    const auto until = slots_[s].valid_until.load(std::memory_order_acquire);
    return now.time_since_epoch().count() < until ? t : 0;
  }
  std::uint64_t valid_token(std::string_view id) const noexcept {
    return valid_token(shard(id), clock::now());
  }
  /// The token of the lease held, valid or not; 0 when not held. A read
  /// that began under one token is stale once it changed (lost, taken again).
  std::uint64_t token(std::uint32_t s) const noexcept {
    return slots_[s].token.load(std::memory_order_acquire);
  }
  /// Whether the shard is held and being handed over (lease_round::leaving).
  bool leaving(std::uint32_t s) const noexcept {
    return slots_[s].leaving.load(std::memory_order_acquire);
  }
  void set_leaving(std::uint32_t s, bool on) noexcept {
    if (slots_[s].leaving.exchange(on, std::memory_order_acq_rel) != on)
      leaving_.fetch_add(on ? 1 : -1, std::memory_order_relaxed);
  }
  std::size_t leaving_count() const noexcept {
    const std::ptrdiff_t n = leaving_.load(std::memory_order_relaxed);
    return n > 0 ? static_cast<std::size_t>(n) : 0;
  }

  void set(const shard_lease& l) noexcept {
    slot& s = slots_[l.shard];
    if (s.token.load(std::memory_order_relaxed) == 0) held_.fetch_add(1, std::memory_order_relaxed);
    s.valid_until.store(l.valid_until.time_since_epoch().count(), std::memory_order_release);
    s.token.store(l.token, std::memory_order_release);
  }
  void clear(std::uint32_t s) noexcept {
    set_leaving(s, false);
    if (slots_[s].token.exchange(0, std::memory_order_acq_rel) != 0)
      held_.fetch_sub(1, std::memory_order_relaxed);
  }
  std::size_t held_count() const noexcept { return held_.load(std::memory_order_relaxed); }

 private:
  struct slot {
    std::atomic<std::uint64_t> token{0};  // 0: not held (tokens start at 1)
    std::atomic<clock::rep> valid_until{0};
    std::atomic<bool> leaving{false};
  };
  const std::uint32_t shards_;
  std::unique_ptr<slot[]> slots_;
  std::atomic<std::size_t> held_{0};
  std::atomic<std::ptrdiff_t> leaving_{0};
};

}  // namespace delayq::detail
