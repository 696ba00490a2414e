// persistence/redis/key_schema.hpp - the names of redis_store's keys
// (docs/persistence.md, "Key layout"). Internal.
//
// Every key of a store lives under the hash tag `{PREFIX}`, or, in the
// sharded layout, a shard's task keys under `{PREFIX:SHARD}`: one hash slot
// per key space, so a script's keys are on one node of a Redis Cluster. The
// meta key `{PREFIX}:meta` records the layout version and the shard count
// (store_handshake.hpp checks them). The connection (connection.hpp) knows
// none of these names: only the store's side does.
#pragma once

#include <cstdint>
#include <string>

namespace delayq::detail::redis {

/// The names of every key of one store (docs/persistence.md, key layout).
/// Thread safety: a plain value.
struct store_keys {
  explicit store_keys(const std::string& prefix);
  /// The keys of shard `shard` of a sharded store: the same names under the
  /// hash tag `{PREFIX:SHARD}` (the tag of the shard's lease key). Its meta
  /// and settings are never used: those stay under `{PREFIX}`.
  store_keys(const std::string& prefix, std::uint32_t shard);
  std::string tasks, due, quarantine, quarantine_reason, meta;
  std::string dead, dead_by_time, dead_quarantine, dead_quarantine_reason;
  std::string settings;
  /// The hash of sequences (sequence_store): name -> the last number handed
  /// out. Never used under a shard's tag: it stays under `{PREFIX}`.
  std::string sequences;
  /// The schedules (schedule_store): `{P}:schedules` and, with suffixes
  /// `:state`, `:rev` and `:ids`, their state, revisions and id index
  /// (redis_schedules.cpp). Under a shard's tag in the sharded layout.
  std::string schedules;
};

}  // namespace delayq::detail::redis
