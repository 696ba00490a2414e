// persistence/redis/lease_scripts.hpp - the Lua scripts of the shard lease
// table (delayq/redis_shard_leases.hpp). Internal.
//
// Each script touches one key (KEYS[1]) and reads the clock with TIME on the
// server. Redis 7 replicates a script's effects, not its text, so a write
// after TIME is allowed; older servers are asked to do the same with
// redis.replicate_commands(). Times are ms since the epoch; a lease or
// membership entry is live while its expiry is > now.
//
//   acquire  KEYS[1] {P:s}:lease  ARGV instance, lease_ms, incarnation
//            Takes the lease when it is free or expired: token + 1
//            (HINCRBY), owner, incarnation, expiry; returns the new token.
//            A live lease of this very incarnation (our own acquire whose
//            reply was lost) gets its expiry pushed and keeps its token.
//            Any other live lease, even one under our instance name (a
//            restart while the old process is stalled), is not taken:
//            returns 0. The incarnation is a random id per lease table.
//   renew    KEYS[1] {P:s}:lease  ARGV instance, token, lease_ms, incarnation
//            Pushes the expiry when owner, token and incarnation match (even
//            if it expired meanwhile: the token did not change, so nobody
//            took it). Returns 1, or 0 when the lease is not ours any more.
//   release  KEYS[1] {P:s}:lease  ARGV instance, token, incarnation
//            Deletes owner, incarnation and expiry when they and the token
//            match; the token stays, so the next owner's is larger. Returns
//            1 or 0.
//   members  KEYS[1] {P}:members  ARGV instance, lease_ms
//            Drops the expired entries, heartbeats ours (expiry now +
//            lease_ms), returns {now, {name, expiry, name, expiry, ...}}:
//            the live members with the expiry of their last heartbeat, so
//            the caller can run its next round when one of them lapses.
//   leave    KEYS[1] {P}:members  ARGV instance
//            Drops our entry. Returns 1 or 0.
#pragma once

namespace delayq::detail::redis {

enum class lease_script { acquire, renew, release, members, leave };
inline constexpr int lease_script_count = 5;

/// The text of a script (above).
const char* lease_script_text(lease_script s) noexcept;

}  // namespace delayq::detail::redis
