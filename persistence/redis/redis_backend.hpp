// persistence/redis/redis_backend.hpp - what the role objects of one
// redis_store share (delayq/role_store.hpp): its options, key names, its
// connection (under a mutex), from the first async_write() the write
// pipeline, and the calls more than one role makes (a write batch, a
// quarantine, the parts of the sharded layout). Internal.
#pragma once

#include <utility>

#include <functional>
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

namespace delayq::detail::redis {

/// What the roles share. Made by redis_store, which hands it to its roles
/// by reference and to role_store as the roles' backend (destroyed after
/// every role).
///
/// Thread safety: `conn` is used under `mutex`, `shard_writes` under
/// `shard_write_mutex`; the rest is set at
/// construction and read-only after, but for the pipeline (created once,
/// under pipeline_mutex).
struct backend {
  explicit backend(redis_options o);
  ~backend();
  backend(const backend&) = delete;
  backend& operator=(const backend&) = delete;

  redis_options opts;
  std::string name;  // describe(), computed once
  store_keys keys;

  // The hash slot of the store's `{PREFIX}` keys (all of them, unsharded;
  // meta and settings, sharded).
  unsigned slot;

  // Where a task's keys are: one part (the `{PREFIX}` keys) unsharded, or
  // one per shard (`{PREFIX:s}`), in shard order (redis_shards.cpp).
  struct part {
    store_keys keys;
    unsigned slot;
    shard_part shard;  // its number, lease key and the channel
  };
  std::vector<part> parts;
  std::uint32_t shards() const noexcept { return opts.shards; }
  /// The part that holds `id`.
  const part& part_of(std::string_view id) const;

  std::mutex mutex;  // guards conn
  // The store's connection: one, or one per cluster node, routed by slot.
  cluster_router conn;

  // The sharded layout's writes (write_sharded()), on a connection of their
  // own ("PREFIX:writer"), so that a write, and every caller flushing the
  // engine's writes, never waits behind a read on `conn`.
  std::mutex shard_write_mutex;  // guards shard_writes
  cluster_router shard_writes;

  std::mutex pipeline_mutex;                 // guards the creation of pipeline, and pipeline_io
  boost::asio::any_io_executor pipeline_io;  // drive_writes_on()'s
  // Declared last: destroyed first, so it drains before the rest goes.
  std::unique_ptr<write_pipeline> pipeline;

  /// A batch of changes (task_store::write(), the dead letters' bury,
  /// revive and purge too): one call of the write script, all or nothing
  /// (write_sharded() in the sharded layout, on `shard_writes`). On the
  /// store's connection otherwise.
  void write(std::span<const store_change> changes, boost::system::error_code& ec);
  /// The batch queued for the write pipeline; `done` runs on its thread, in
  /// order, exactly once. Sharded: write() on the calling thread.
  void async_write(std::span<const store_change> changes,
                   std::function<void(boost::system::error_code)> done);
  /// redis_store::writes_in_flight; 1 sharded (the pipeline is per slot).
  std::size_t max_writes_in_flight() const noexcept;

  /// Sends one write batch on `c` and checks its reply (under mutex, in
  /// conn.run()).
  void send(connection& c, const write_batch& batch);

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

  /// The pipeline, started on first use: on the executor drive_writes_on()
  /// named before, if any (task_store::drive_writes_on()).
  write_pipeline& writer();
  void drive_writes_on(boost::asio::any_io_executor io);

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
  std::size_t quarantine(connection& c, const std::string& hash, const std::string& index,
                         const std::string& q, const std::string& q_reason,
                         const std::vector<bad_record>& bad, const char* kind);
};

}  // namespace delayq::detail::redis
