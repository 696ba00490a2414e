// persistence/roles/lease_book.hpp - the bookkeeping of a shard lease
// table that no backend changes: which shards this instance should own
// (rendezvous hashing over the live members), what it holds, and what a
// round reports (lease_round). Internal.
//
// A backend's lease table (shard_leases) does the store's part of a round
// (renew, heartbeat, read the members, release, acquire: docs/scale-out.md,
// "Balancing") and keeps its answers here; finish() turns them into the
// lease_round the engine gets. The PostgreSQL lease table uses it; the Redis
// one keeps its own copy of the same logic (shard_leases_redis.cpp), which
// can move onto this class unchanged.
#pragma once

#include <utility>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "delayq/shard_leases.hpp"

namespace delayq::detail {

/// Thread safety: none; the lease table calls it under its own mutex.
class lease_book {
 public:
  using clock = std::chrono::steady_clock;

  explicit lease_book(cluster_options options);

  const cluster_options& options() const noexcept { return options_; }
  /// The leases held, by shard.
  std::map<std::uint32_t, shard_lease>& held() noexcept { return held_; }
  /// Whether this instance should own `shard` among the members of the last
  /// round (false before the first).
  bool mine(std::uint32_t shard) const noexcept { return !mine_.empty() && mine_[shard]; }

  /// The live members a round read, with the expiry of each one's heartbeat
  /// on the store's clock, and that clock's `now` (both in ms), read at
  /// `read_at` (after the answer came back: a lapse reckoned from it is no
  /// earlier on our clock than on the store's).
  void set_members(std::vector<std::pair<std::string, std::int64_t>> members, std::int64_t now,
                   clock::time_point read_at);

  /// What the round that started at `start` leaves: held, gained and lost
  /// against `before`, leaving, members and when to run the next round
  /// (scale-out.md, "Failover bound"). A failed round keeps only the leases
  /// whose valid_until has not passed.
  lease_round finish(clock::time_point start, const std::map<std::uint32_t, shard_lease>& before,
                     bool failed);

  /// Forgets everything (release_all()).
  void clear();

 private:
  cluster_options options_;
  std::map<std::uint32_t, shard_lease> held_;
  std::vector<std::string> members_;  // sorted, as of the last round
  std::vector<bool> mine_;            // by shard
  std::optional<clock::time_point> first_lapse_;
};

}  // namespace delayq::detail
