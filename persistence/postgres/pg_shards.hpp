// persistence/postgres/pg_shards.hpp - the cluster role of the PostgreSQL
// store: its shards, the lease table (pg_leases.cpp) and the listener of
// saved tasks and changed settings (pg_listener.cpp). Internal.
//
// Leases live in the table leases, one row per shard (owner, incarnation,
// expires_ms on the database server's clock, token), members in the table
// members. A round is one transaction (renew what is held, heartbeat, read
// the members) and, when something changes hands, a second one (release,
// acquire, heartbeat): each one round trip in pipeline mode. The fence is
// checked by every write statement against the same rows (pg_schema.cpp).
//
// Notices: LISTEN/NOTIFY on the channel "delayq:SCHEMA". A write that saves
// tasks into shards another instance may own (an unfenced save: a new task
// from any instance) NOTIFYs once per shard part with every such task of the
// batch (pg_batch.hpp), in its transaction, so a notice comes at COMMIT,
// never before. What NOTIFY costs and why it was chosen:
// docs/persistence.md, "PostgreSQL".
#pragma once

#include <utility>

#include "delayq/shard_store.hpp"
#include "pg_backend.hpp"
#include "pg_tasks.hpp"

namespace delayq::detail::pg {

/// Thread safety: every member may be called from any thread.
class shards_role final : public shard_store {
 public:
  shards_role(backend& b, tasks_role& tasks) : b_(b), tasks_(tasks) {}

  std::uint32_t shards() const noexcept override { return b_.shards(); }
  std::unique_ptr<shard_leases> make_shard_leases(const cluster_options& cluster,
                                                  boost::system::error_code& ec) override;
  list_summary list_due_shard(std::uint32_t shard, due_cursor& after, std::int64_t until_ms,
                              std::size_t limit, const std::function<void(task&&)>& sink,
                              boost::system::error_code& ec) override;
  std::unique_ptr<task_listener> listen(boost::system::error_code& ec) override;

 private:
  backend& b_;
  tasks_role& tasks_;
};

/// The lease table on the schema of `options`, for one instance; it dials a
/// connection of its own on the first renew(). Does not need the store to
/// live on.
std::unique_ptr<shard_leases> make_pg_shard_leases(const postgres_options& options,
                                                   cluster_options cluster,
                                                   boost::system::error_code& ec);

/// A listener on the schema's channel, on a connection of its own.
std::unique_ptr<task_listener> make_pg_listener(const postgres_options& options,
                                                boost::system::error_code& ec);

/// Parses one NOTIFY payload (lines of pg_batch.hpp's notices) into
/// `out`; false for a line it cannot read (the rest are still read).
bool parse_notices(std::string_view payload, std::vector<task_notice>& out);

}  // namespace delayq::detail::pg
