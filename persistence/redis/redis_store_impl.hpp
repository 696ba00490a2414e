// persistence/redis/redis_store_impl.hpp - what a redis_store holds: its
// options, key names, its connection (under a mutex) and, from the first
// async_write(), the write pipeline. Internal.
#pragma once

#include <utility>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cluster_router.hpp"
#include "connection.hpp"
#include "delayq/redis_store.hpp"
#include "scripts.hpp"
#include "write_pipeline.hpp"

namespace delayq {

struct redis_store::impl {
  explicit impl(redis_options o);
  ~impl();

  redis_options opts;
  std::string name;  // describe(), computed once
  detail::redis::store_keys keys;

  // The hash slot of every key of the store (one hash tag, `{PREFIX}`).
  unsigned slot;

  std::mutex mutex;  // guards conn
  // The store's connection: one, or one per cluster node, routed by slot.
  detail::redis::cluster_router conn;

  std::mutex pipeline_mutex;  // guards the creation of pipeline
  // Declared last: destroyed first, so it drains before the rest goes.
  std::unique_ptr<detail::redis::write_pipeline> pipeline;

  /// Sends one write batch on `c` and checks its reply (under mutex, in
  /// conn.run()).
  void send(detail::redis::connection& c, const detail::redis::write_batch& batch);

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
