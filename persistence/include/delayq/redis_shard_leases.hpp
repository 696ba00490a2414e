// delayq/redis_shard_leases.hpp - the shard lease table (shard_leases.hpp)
// in Redis, and the names of its keys.
#pragma once

#include <utility>

#include <boost/system/error_code.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "delayq/redis_store.hpp"
#include "delayq/shard_leases.hpp"

namespace delayq {

/// The shard lease table of one instance in the Redis server `redis`
/// (`redis.prefix` names the cluster: every instance of one cluster uses the
/// same prefix and the same `cluster.shards`).
///
/// Keys (docs/scale-out.md), ready for Redis Cluster: every script touches
/// the keys of one hash tag only.
/// - redis_lease_key(PREFIX, s) = `{PREFIX:s}:lease`, a hash per shard:
///   `owner` (instance name), `expires_ms` (Redis server time, ms since the
///   epoch), `token` (the fencing token; it only grows, and stays when the
///   lease is released).
/// - redis_members_key(PREFIX) = `{PREFIX}:members`, a sorted set of
///   instance names scored by the expiry (ms) of their last heartbeat.
/// The scripts read the clock with `TIME` on the server, so the instances'
/// clocks do not matter.
///
/// The object connects lazily, on the first renew(), with a connection of
/// its own (client name "delayq:PREFIX:leases"), and reconnects like
/// redis_store does. Its destructor sends nothing: leases not released with
/// release_all() expire after one lease.
///
/// Errors: errc::invalid_cluster_options (cluster.validate() failed);
/// renew() and release_all() fail as redis_store's calls do
/// (errc::store_unavailable, errc::outcome_unknown, errc::store_error).
///
/// Thread safety: see shard_leases.
std::unique_ptr<shard_leases> make_redis_shard_leases(const redis_options& redis,
                                                      cluster_options cluster);
/// Error-code form: null and `ec` set on failure; `message` (when not null)
/// gets the reason.
std::unique_ptr<shard_leases> make_redis_shard_leases(const redis_options& redis,
                                                      cluster_options cluster,
                                                      boost::system::error_code& ec,
                                                      std::string* message = nullptr);

/// `{PREFIX:SHARD}:lease`: the lease hash of one shard.
std::string redis_lease_key(std::string_view prefix, std::uint32_t shard);
/// `{PREFIX}:members`: the membership sorted set.
std::string redis_members_key(std::string_view prefix);

/// The fence, as Lua source that defines
///   `local function delayq_fence(lease_key, token)`
/// returning true when the lease hash `lease_key` still carries `token` (a
/// decimal string, as shard_lease::token prints). Every script that removes,
/// retries or buries a task of shard s must start with this check against
/// `{PREFIX:s}:lease` and the writer's token, and write nothing when it
/// fails: that is what makes a stale owner harmless. A lease that expired
/// but was not taken by anyone still passes (its token did not change, and
/// nobody else holds the shard); one taken since by another instance, or by
/// a new incarnation of this one after the lease lapsed, does not. The lease key must be one of the
/// script's KEYS and share its hash tag with the task keys it guards.
extern const char* const redis_fence_lua;

}  // namespace delayq
