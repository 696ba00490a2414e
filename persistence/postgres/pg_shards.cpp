// persistence/postgres/pg_shards.cpp - see pg_shards.hpp.
#include "pg_shards.hpp"

#include "delayq/log.hpp"

namespace delayq::detail::pg {

std::unique_ptr<shard_leases> shards_role::make_shard_leases(const cluster_options& cluster,
                                                             boost::system::error_code& ec) {
  ec = {};
  if (cluster.shards != b_.shards()) {
    ec = errc::shard_mismatch;
    log(log_level::error, b_.name() + ": a lease table for " + std::to_string(cluster.shards) +
                              " shards asked of a store of " + std::to_string(b_.shards()));
    return nullptr;
  }
  return make_pg_shard_leases(b_.options(), cluster, ec);
}

list_summary shards_role::list_due_shard(std::uint32_t shard, due_cursor& after,
                                         std::int64_t until_ms, std::size_t limit,
                                         const std::function<void(task&&)>& sink,
                                         boost::system::error_code& ec) {
  if (shard >= b_.shards()) {
    ec = errc::shard_mismatch;
    return {};
  }
  return tasks_.due_pages(shard, after, until_ms, limit, sink, ec);
}

std::unique_ptr<task_listener> shards_role::listen(boost::system::error_code& ec) {
  return make_pg_listener(b_.options(), ec);
}

}  // namespace delayq::detail::pg
