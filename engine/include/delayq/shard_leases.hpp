// delayq/shard_leases.hpp - the shard map and the lease table that lets
// several delayq instances share one store, with fencing tokens.
//
// The shard map. Every task lives in one of `cluster_options::shards`
// shards, chosen by shard_of(task id) alone: a stable hash that must never
// change, since it decides where stored tasks are found.
//
// Leases. An instance owns a shard while it holds the shard's lease: a record
// in the store with the owner's name, an expiry and a fencing token. The
// holder renews its leases every round (one round every lease/3); a lease
// not renewed for `cluster_options::lease` expires and may be taken by
// another instance. The token only grows: each new lease of a shard (another
// owner, or the same owner after it lapsed) gets the previous token + 1, a
// renewal keeps it. A write to a shard's tasks carries the writer's token,
// and the store refuses it when the shard's lease carries another one
// (fencing): an instance that stalled past its lease cannot touch a shard
// another instance took meanwhile.
//
// Balancing. Instances heartbeat a membership list (an entry lives for one
// lease). Each round every instance computes, for each shard, the desired
// owner among the live members by rendezvous hashing (rendezvous_owner():
// the member with the highest hash of (shard, member) wins). Every instance
// computes the same map without talking to the others, and a member that
// joins or leaves moves only the shards it wins or held, about 1/N of them.
// An instance takes the shards it should own when they are free or expired,
// gives away the shards it holds that another live member should own (that
// member takes them at its next round) unless the caller keeps them a while
// longer (renew()'s `keep`: the engine keeps a shard until the attempts
// running on it settled), and renews the rest. A lease is only
// ever taken when free or expired, so a shard never has two holders.
//
// Failover. A dead or stalled instance's membership entry and leases expire
// at most one lease after its last round. Every other instance runs a round
// just after the entry lapses (lease_round::next_round_in), which finds it
// gone and takes the shards it should now own: within a lease and the length
// of one round after its last round, under two leases. docs/scale-out.md has
// the whole story and the limits.
//
// This header knows no backend; make_redis_shard_leases()
// (delayq/redis_shard_leases.hpp) builds the Redis one.
#pragma once

#include "delayq/detail/boost_cxx20.hpp"  // first: Boost 1.74 + C++20

#include <boost/system/error_code.hpp>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "delayq/error.hpp"

namespace delayq {

/// How an instance takes part in a cluster of instances sharing one store.
struct cluster_options {
  /// How many shards tasks are split into: 1 to 16384. Every instance of a
  /// cluster must use the same number, and it cannot change while tasks are
  /// stored (shard_of() would send them elsewhere).
  std::uint32_t shards = 64;
  /// How long a lease (and a membership heartbeat) lives without renewal:
  /// 200 ms to 10 min. Rounds run every lease/3; a dead instance's shards
  /// are taken over within two leases.
  std::chrono::milliseconds lease{5000};
  /// This instance's name, unique among the live instances: 1 to 128 bytes
  /// from '!' to '~' (printable ASCII, no spaces). Empty: default_instance_name().
  std::string instance;

  /// errc::invalid_cluster_options when a field is out of range; when
  /// `message` is not null it says which and why.
  void validate(boost::system::error_code& ec, std::string* message = nullptr) const;
  /// Throwing form: boost::system::system_error with the reason.
  void validate() const;
};

/// "HOSTNAME:PID" of this process: the instance name used when
/// cluster_options::instance is empty. Unique among live processes as long
/// as host names are.
std::string default_instance_name();

/// The shard of a task: FNV-1a 64 of the id's bytes, passed through the
/// MurmurHash3 fmix64 finalizer, modulo `shards` (0 when shards is 0).
/// The finalizer matters: FNV-1a's low k bits depend only on the low k bits
/// of each byte, so modulo a power of two alone it would put "a" (0x61) and
/// "!" (0x21) in the same shard of 64. This function is part of the stored
/// format and never changes. Thread-safe: a pure function.
std::uint32_t shard_of(std::string_view task_id, std::uint32_t shards) noexcept;

/// The index in `members` of the member that should own `shard`: the one
/// with the highest weight fmix64(FNV-1a 64(member bytes, then the shard as
/// 4 little-endian bytes)), ties to the smaller name; members.size() when
/// `members` is empty. Every instance of a cluster must compute the same
/// answer, so this never changes either. Thread-safe: a pure function.
std::size_t rendezvous_owner(std::uint32_t shard, std::span<const std::string> members) noexcept;

/// A lease this instance holds.
struct shard_lease {
  std::uint32_t shard = 0;
  /// The fencing token: every write to the shard's tasks carries it.
  std::uint64_t token = 0;
  /// Until when the lease surely stays ours, on this machine's steady clock:
  /// the moment the round that renewed it was sent, plus the lease. Past
  /// it, another instance may hold the shard (the store still refuses our
  /// writes then, but our executions would no longer be exclusive).
  std::chrono::steady_clock::time_point valid_until{};

  friend bool operator==(const shard_lease&, const shard_lease&) = default;
};

/// What one round left this instance with.
struct lease_round {
  /// Every lease held now, by shard.
  std::vector<shard_lease> held;
  /// Shards held now and not before this round, ascending.
  std::vector<std::uint32_t> gained;
  /// Shards held before this round and not now, ascending: given away to
  /// their desired owner, found taken by another (our lease had lapsed, or
  /// another process runs under our instance name), or, after a failed
  /// round, past their valid_until. A shard lost and taken again within one
  /// round (its token changed) is in both `lost` and `gained`: whatever was
  /// done under the old token is fenced.
  std::vector<std::uint32_t> lost;
  /// Shards held now that another live member should own, ascending: the
  /// round kept them because the caller named them in renew()'s `keep` (it
  /// is not done with them yet). Empty after a failed round.
  std::vector<std::uint32_t> leaving;
  /// The live members this round saw (this instance included), sorted. Empty
  /// after a failed round.
  std::vector<std::string> members;
  /// When to run the next round, counted from when renew() returned: lease/3
  /// after this one started, or sooner: just after the heartbeat of another
  /// member lapses (one that stopped renewing), so that its shards are taken
  /// as soon as its leases have lapsed, not up to a round later.
  std::chrono::milliseconds next_round_in{0};
};

/// The lease table of one instance: one renew() a round keeps its share of
/// the shards, release_all() leaves the cluster. Backends implement it
/// (make_redis_shard_leases()).
///
/// Example:
/// \code
///   auto leases = delayq::make_redis_shard_leases(redis, {.shards = 64});
///   for (;;) {
///     boost::system::error_code ec;
///     delayq::lease_round r = leases->renew(ec);
///     // start the shards in r.gained, stop those in r.lost
///     std::this_thread::sleep_for(r.next_round_in);
///   }
/// \endcode
///
/// Thread safety: all members may be called from any thread; calls are
/// serialized (a round blocks for up to a few store round trips).
class shard_leases {
 public:
  virtual ~shard_leases() = default;

  /// One round: heartbeat the membership, renew the leases held, release
  /// the ones another live member should own, take the free or expired ones
  /// this instance should own. Returns what it holds now and what changed.
  ///
  /// `keep` (ascending): held shards not to give away this round even when another live
  /// member should own them: they are renewed instead and listed in
  /// lease_round::leaving. The engine keeps a shard it should give away
  /// until it stopped starting attempts on it and the last one settled and
  /// its outcome landed, so that a hand-over never runs a task twice; the
  /// desired owner waits meanwhile (it only takes free or expired leases).
  ///
  /// Errors (the round stopped part-way; `held` keeps the leases whose
  /// valid_until has not passed, `lost` has the others, and the next round
  /// sorts out the rest): errc::store_unavailable, errc::outcome_unknown (a
  /// write got no answer in time), errc::store_error.
  virtual lease_round renew(std::span<const std::uint32_t> keep, boost::system::error_code& ec) = 0;
  /// renew(keep, ec) keeping nothing: gives away at once.
  lease_round renew(boost::system::error_code& ec) { return renew({}, ec); }
  /// Throwing form: boost::system::system_error.
  lease_round renew();

  /// Leaves the cluster: releases every lease held but those in `keep` (ascending) and
  /// drops the membership entry, so the others take the shards at their next
  /// round. The leases in `keep` (attempts still run on them: a stop whose
  /// drain timed out) are left to expire after one lease, and the others
  /// take them then. Afterwards nothing is held, whatever happened (a lease
  /// that could not be released expires too). A later renew() joins again.
  /// Errors as renew().
  virtual void release_all(std::span<const std::uint32_t> keep, boost::system::error_code& ec) = 0;
  /// release_all(keep, ec) keeping nothing.
  void release_all(boost::system::error_code& ec) { release_all({}, ec); }
  /// Throwing form: boost::system::system_error.
  void release_all();

  /// The options in use (instance name filled in).
  virtual const cluster_options& options() const noexcept = 0;
};

}  // namespace delayq
