// persistence/redis/lease_scripts.hpp - the Lua scripts of the shard lease
// table (delayq/redis_shard_leases.hpp). Internal.
//
// Each script touches one key (KEYS[1]) and reads the clock with TIME on the
// server. Redis 7 replicates a script's effects, not its text, so a write
// after TIME is allowed; older servers are asked to do the same with
// redis.replicate_commands(). Times are ms since the epoch; a lease or
// membership entry is live while its expiry is > now.
//
//   acquire  KEYS[1] {P:s}:lease  ARGV instance, lease_ms
//            Takes the lease when it is free, expired, or held under this
//            instance's name (a restarted incarnation, or our own acquire
//            whose reply was lost): token + 1 (HINCRBY), owner, expiry.
//            Returns the new token, or 0 when another instance holds it.
//   renew    KEYS[1] {P:s}:lease  ARGV instance, token, lease_ms
//            Pushes the expiry when owner and token match (even if it
//            expired meanwhile: the token did not change, so nobody took
//            it). Returns 1, or 0 when the lease is not ours any more.
//   release  KEYS[1] {P:s}:lease  ARGV instance, token
//            Deletes owner and expiry when owner and token match; the token
//            stays, so the next owner's is larger. Returns 1 or 0.
//   members  KEYS[1] {P}:members  ARGV instance, lease_ms
//            Drops the expired entries, heartbeats ours (expiry now +
//            lease_ms), returns the live names.
//   leave    KEYS[1] {P}:members  ARGV instance
//            Drops our entry. Returns 1 or 0.
#pragma once

namespace delayq::detail::redis {

enum class lease_script { acquire, renew, release, members, leave };
inline constexpr int lease_script_count = 5;

/// The text of a script (above).
const char* lease_script_text(lease_script s) noexcept;

}  // namespace delayq::detail::redis
