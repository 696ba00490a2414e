// persistence/redis/scripts.hpp - the Lua scripts of redis_store, and a
// write() batch encoded as the arguments of the write script. Internal.
//
// The write script. One write() batch is one call of one script: EVALSHA
// (EVAL when the server answers NOSCRIPT), with the four keys
//   KEYS[1] {P}:tasks (hash)   KEYS[2] {P}:due (sorted set)
//   KEYS[3] {P}:dead (hash)    KEYS[4] {P}:dead:by_time (sorted set)
// and four arguments per change, in order: kind, id, record, score.
//   s  save    HSET tasks id record, ZADD due score id
//   r  remove  HDEL tasks id, ZREM due id
//   b  bury    remove, then HSET dead id record, ZADD dead:by_time score id
//   v  revive  HDEL dead id, ZREM dead:by_time id, then save
//   p  purge   HDEL dead id, ZREM dead:by_time id
// Before it writes anything the script checks every argument and the type
// of every key the batch touches, and returns an error if one is wrong. A
// script that raised an error half-way would not be rolled back (Redis has
// no rollback), so the checks are what makes a batch all or nothing: once
// they pass, no command of the script can fail but for out-of-memory, and
// Redis refuses a script's first write, not a later one, when over
// `maxmemory`. A script runs alone on the server (no other command runs in
// between), and its effects reach the AOF and the replicas as one
// MULTI/EXEC.
//
// A batch leaves the keys in a state that depends only on the batch, not on
// what was stored before: running it twice is the same as running it once.
// So a batch may be sent again after a connection loss.
#pragma once

#include <utility>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "connection.hpp"
#include "delayq/task_store.hpp"
#include "key_schema.hpp"

namespace delayq::detail::redis {

/// The write script (above).
extern const char* const write_script;

/// The write script of the sharded layout (redis_options::shards > 0), one
/// call per shard's part of a batch, on that shard's four keys
/// `{P:s}:tasks` ... and, when a change of the part is fenced, KEYS[5] the
/// shard's lease key `{P:s}:lease`. ARGV[1] the notice channel `P:notify`,
/// ARGV[2] the shard, then five arguments per change: the four above and
/// the fencing token ('' for an unfenced change). Before it writes anything
/// it also checks, with redis_fence_lua's delayq_fence(), that the lease
/// carries every token given, and replies with an error starting
/// "DELAYQFENCE" when not (fence_error_prefix), after adding 1 to the field
/// `fence_refused` of the lease hash (a count of the refusals, kept where
/// they happen). After each save or revive it
/// PUBLISHes "SHARD DUE_MS ID" on the channel (the id last: it may hold
/// spaces).
extern const char* const sharded_write_script;
/// How the sharded write script's refusal of a stale token starts.
inline constexpr std::string_view fence_error_prefix = "DELAYQFENCE ";

/// Moves a record from KEYS[1] (and its id from the sorted set KEYS[2]) to
/// the quarantine hashes KEYS[3] (bytes) and KEYS[4] (reason ARGV[3]), only
/// if KEYS[1] still holds exactly ARGV[2] under ARGV[1]. Returns 1 if moved.
extern const char* const quarantine_script;

/// The same move for whatever KEYS[1] holds under ARGV[1], with reason
/// ARGV[2]: task_store::quarantine(). Returns 1 if a record moved.
extern const char* const quarantine_id_script;

/// `EVAL script 4 hash index q q_reason`: a call of quarantine_script or
/// quarantine_id_script on a hash (live tasks or dead letters), its index and
/// its quarantine hashes; the caller appends the ARGV. The command points
/// into the strings, which must outlive it.
command quarantine_call(const char* script, const std::string& hash, const std::string& index,
                        const std::string& q, const std::string& q_reason);

/// sequence_store::raise_to(): makes field ARGV[1] of the hash KEYS[1] (a
/// sequence's last number handed out) at least ARGV[2], a decimal integer
/// without leading zeros. Compared as decimal strings, not as Lua numbers
/// (doubles, exact only below 2^53). Returns 1 if it raised it.
extern const char* const sequence_raise_script;

/// One page of task_store::list_due(), loaded by the handshake beside the
/// write script (store_handshake.hpp, due_sha()). KEYS[1] {P}:tasks, KEYS[2] {P}:due;
/// ARGV: the cursor's due time ('-inf' for the default cursor), the cursor's
/// id, until_ms, limit. Finds the rank just after the cursor (ZRANK of the
/// cursor's id when it is still there with that score, else a binary search
/// of the run of members scored the cursor's due time, comparing bytewise),
/// then reads ZRANGE ... WITHSCORES from there, stopping at a score past
/// until_ms, and HMGETs the records. Returns triples: id, score, record (nil
/// when the hash has none: skipped, not counted, but read past); reads past
/// such members until it has `limit` records or the range ends. Read-only.
/// Cost: O(log N + limit) commands' worth (O(log N * log run) when the
/// cursor's member is gone).
extern const char* const due_script;

/// Drops ARGV[1] from the sorted set KEYS[2] when the hash KEYS[1] holds no
/// record for it. Returns 1 if dropped.
extern const char* const drop_dangling_script;

/// One write() batch as a call of the write script, in the wire format
/// (RESP): head() or eval_head(), then tail(). Encodes the records with the
/// record codec; the changes are not referenced after construction.
/// What a shard's part of a batch adds to the call (the sharded script).
struct shard_part {
  std::uint32_t shard = 0;
  std::string lease_key;  // {P:s}:lease
  std::string channel;    // P:notify
};

class write_batch {
 public:
  /// `shard` null: the unsharded script; else the sharded one for that
  /// shard (changes of other shards must not be given).
  write_batch(const store_keys& keys, std::span<const store_change> changes,
              const shard_part* shard = nullptr);

  bool empty() const noexcept { return changes_ == 0; }
  std::size_t size() const noexcept { return changes_; }
  /// `*N`, `EVALSHA`, `sha`.
  std::string head(std::string_view sha) const;
  /// `*N`, `EVAL`, the script's text.
  std::string eval_head() const;
  /// The key count, the keys and the arguments.
  const std::string& tail() const noexcept { return tail_; }

 private:
  std::size_t changes_ = 0;
  std::size_t args_ = 0;  // bulk strings in tail_
  const char* script_;
  std::string tail_;
};

/// Appends `arg` to `out` as a RESP bulk string.
void append_bulk(std::string& out, std::string_view arg);

}  // namespace delayq::detail::redis
