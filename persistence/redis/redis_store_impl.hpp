// persistence/redis/redis_store_impl.hpp - what a redis_store holds: its
// options, key names, its connection (under a mutex) and, from the first
// async_write(), the write pipeline. Internal.
#pragma once

#include <utility>

#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cluster_router.hpp"
#include "connection.hpp"
#include "delayq/redis_store.hpp"
#include "key_schema.hpp"
#include "scripts.hpp"
#include "store_handshake.hpp"
#include "write_pipeline.hpp"

namespace delayq {

struct redis_store::impl {
  explicit impl(redis_options o);
  ~impl();

  redis_options opts;
  std::string name;  // describe(), computed once
  detail::redis::store_keys keys;

  // The hash slot of the store's `{PREFIX}` keys (all of them, unsharded;
  // meta and settings, sharded).
  unsigned slot;

  // Where a task's keys are: one part (the `{PREFIX}` keys) unsharded, or
  // one per shard (`{PREFIX:s}`), in shard order (redis_shards.cpp).
  struct part {
    detail::redis::store_keys keys;
    unsigned slot;
    detail::redis::shard_part shard;  // its number, lease key and the channel
  };
  std::vector<part> parts;
  std::uint32_t shards() const noexcept { return opts.shards; }
  /// The part that holds `id`.
  const part& part_of(std::string_view id) const;

  std::mutex mutex;  // guards conn
  // The store's connection: one, or one per cluster node, routed by slot.
  detail::redis::cluster_router conn;

  std::mutex pipeline_mutex;  // guards the creation of pipeline
  // Declared last: destroyed first, so it drains before the rest goes.
  std::unique_ptr<detail::redis::write_pipeline> pipeline;

  /// Sends one write batch on `c` and checks its reply (under mutex, in
  /// conn.run()).
  void send(detail::redis::connection& c, const detail::redis::write_batch& batch);

  /// write() in the sharded layout (redis_shards.cpp).
  void write_sharded(std::span<const store_change> changes, boost::system::error_code& ec);

  /// A record a list_due page read: a task, or the bytes of one that does
  /// not decode (and why).
  struct due_item {
    std::int64_t due_ms = 0;
    std::string id;
    std::optional<task> t;
    std::string raw, why;
  };
  /// list_due() over one part (redis_due.cpp). With `read`, the records
  /// read go there instead, none reaches `out` and none is quarantined.
  list_summary list_due_part(const part& p, due_cursor& after, std::int64_t until_ms,
                             std::size_t limit, std::vector<task>& out,
                             boost::system::error_code& ec, std::vector<due_item>* read = nullptr);
  /// list_due() across every shard, merged (redis_shards.cpp).
  list_summary list_due_merged(due_cursor& after, std::int64_t until_ms, std::size_t limit,
                               std::vector<task>& out, boost::system::error_code& ec);
  /// list_dead() of one part (redis_store.cpp).
  std::vector<dead_letter> list_dead_part(const part& p, std::size_t offset, std::size_t limit,
                                          boost::system::error_code& ec);
  /// list_dead() across every shard, merged (redis_shards.cpp).
  std::vector<dead_letter> list_dead_merged(std::size_t offset, std::size_t limit,
                                            boost::system::error_code& ec);

  /// Connects to the node of `slot` (and checks the key layout). Throws
  /// redis_failure. The caller holds a sigpipe_guard.
  void connect();

  /// The pipeline, started on first use.
  detail::redis::write_pipeline& writer();

  /// A record that failed to decode, as read from a hash.
  struct bad_record {
    std::string_view id;
    std::string_view raw;
    std::string why;
  };

  /// Moves each bad record from `hash` (and its id from the sorted set
  /// `index`) into the quarantine hashes `q` and `q_reason`: one script per
  /// record, atomic, and only if the field still holds the bytes that were
  /// read (another process may have written a good record since). Returns
  /// how many moved; logs each as "quarantined undecodable KIND 'ID'".
  /// On `c`, under mutex.
  std::size_t quarantine(detail::redis::connection& c, const std::string& hash,
                         const std::string& index, const std::string& q,
                         const std::string& q_reason, const std::vector<bad_record>& bad,
                         const char* kind);

  /// Decodes a dead-letter record read under `id`; a record filed under
  /// another id is as corrupt as one that does not decode.
  static std::optional<dead_letter> decode_dead(std::string_view id, std::string_view raw,
                                                std::string& why);
};

}  // namespace delayq
