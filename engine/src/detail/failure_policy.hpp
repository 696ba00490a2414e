// What a failed attempt leads to: another attempt after a backoff, or a dead
// letter; and the alerts an operator should hear about.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "delayq/engine_options.hpp"
#include "delayq/task.hpp"

namespace delayq::detail {

/// Thread safety: none; the engine calls it under its lock (raise() without).
class failure_policy {
 public:
  explicit failure_policy(const alert_options& alerts, std::uint64_t seed = std::random_device{}());

  /// The largest wait before attempt `attempt` + 1 after attempt `attempt`
  /// failed: min(cap, base * 2^(attempt-1)), without overflow.
  static std::chrono::milliseconds ceiling(const retry_policy& p, std::uint32_t attempt) noexcept;

  /// A wait drawn uniformly from [0, ceiling(p, attempt)] ("full jitter":
  /// tasks that failed together spread out instead of retrying in waves).
  std::chrono::milliseconds backoff(const retry_policy& p, std::uint32_t attempt);

  /// Whether a task that has failed `attempts` times may run again.
  static bool may_retry(const retry_policy& p, std::uint32_t attempts, bool hopeless) noexcept {
    return !hopeless && attempts < p.max_attempts;
  }

  /// Counts an attempt's outcome for its type's failure rate; appends a
  /// failure_rate alert to `out` when the rate crosses the threshold upwards.
  void note_outcome(const std::string& type, bool ok, std::vector<alert>& out);

  /// Appends a task_died alert to `out` (when alerts are on).
  void note_death(const task& t, const std::string& error, std::vector<alert>& out) const;

  /// Calls the alert hook for each alert; an exception from it is logged.
  /// Call it without the engine's lock.
  void raise(const std::vector<alert>& alerts) const;

 private:
  static constexpr std::size_t buckets = 6;
  struct type_health {
    struct bucket {
      std::uint64_t index = 0, attempts = 0, failures = 0;
    };
    std::array<bucket, buckets> b{};
    bool alerting = false;
  };

  const alert_options& alerts_;
  std::mt19937_64 random_;
  std::unordered_map<std::string, type_health> health_;
};

}  // namespace delayq::detail
