// persistence/redis/redis_shards.hpp - the shards role of the Redis store
// (its sharded layout, redis_options::shards > 0). Internal.
#pragma once

#include "delayq/shard_store.hpp"
#include "redis_backend.hpp"

namespace delayq::detail::redis {

/// The cluster interface of a store in the sharded layout: the lease table
/// (`{PREFIX:s}:lease`, delayq/redis_shard_leases.hpp), the notices of
/// saved tasks (redis_listener.cpp) and a shard's due tasks
/// (redis_due.cpp). Only a sharded store offers it.
///
/// Thread safety: every member may be called from any thread.
class shards_role final : public shard_store {
 public:
  explicit shards_role(backend& b) : b_(b) {}

  std::uint32_t shards() const noexcept override { return b_.opts.shards; }
  /// make_redis_shard_leases() on this store's options; errc::shard_mismatch
  /// when `cluster.shards` is not shards().
  std::unique_ptr<shard_leases> make_shard_leases(const cluster_options& cluster,
                                                  boost::system::error_code& ec) override;
  /// The pages of several shards in one round trip (the calls pipelined on
  /// the store's connection); one shard after the other on a Redis Cluster,
  /// whose nodes hold different shards.
  std::vector<list_summary> list_due_shards(std::span<const std::uint32_t> shards,
                                            std::span<due_cursor> after, std::int64_t until_ms,
                                            std::size_t limit,
                                            const std::function<void(std::size_t, task&&)>& sink,
                                            boost::system::error_code& ec) override;
  /// SUBSCRIBE `PREFIX:notify` on a connection of its own (on a Redis
  /// Cluster, the first seed that answers).
  std::unique_ptr<task_listener> listen(boost::system::error_code& ec) override;
  /// list_due() on the shard's keys; errc::shard_mismatch when `shard` is
  /// not below shards().
  list_summary list_due_shard(std::uint32_t shard, due_cursor& after, std::int64_t until_ms,
                              std::size_t limit, const std::function<void(task&&)>& sink,
                              boost::system::error_code& ec) override;

 private:
  backend& b_;
};

}  // namespace delayq::detail::redis
