// persistence/redis/redis_tasks.hpp - the tasks role of the Redis store:
// the live tasks, their writes (with the dead-letter changes of a batch),
// the recovery read and the horizon's reads. Internal.
#pragma once

#include <utility>

#include "delayq/task_store.hpp"
#include "redis_backend.hpp"

namespace delayq::detail::redis {

/// The live tasks (task_store): a hash of records and a sorted set of due
/// times per key space. write() is the backend's: one call of the write
/// script per batch (per shard touched, sharded), which carries the batch's
/// dead-letter changes too; async_write() goes through the backend's write
/// pipeline. list() streams every key space on a connection of its own
/// (redis_list.cpp); list_due() and find() read on the store's connection
/// (redis_due.cpp). Every read moves what does not decode to
/// `{PREFIX}:quarantine`.
///
/// Thread safety: every member may be called from any thread; calls on the
/// store's connection are serialized by the backend's mutex, which no sink
/// is called under.
class tasks_role final : public task_store {
 public:
  using task_store::list;
  using task_store::remove;
  using task_store::save;
  using task_store::write;

  explicit tasks_role(backend& b) : b_(b) {}

  void write(std::span<const store_change> changes, boost::system::error_code& ec) override {
    b_.write(changes, ec);
  }
  void async_write(std::span<const store_change> changes,
                   std::function<void(boost::system::error_code)> done) override {
    b_.async_write(changes, std::move(done));
  }
  std::size_t max_writes_in_flight() const noexcept override { return b_.max_writes_in_flight(); }
  /// The write pipeline's (write_pipeline.hpp); ignored in the sharded
  /// layout, which writes on the calling thread.
  void drive_writes_on(boost::asio::any_io_executor io) override {
    b_.drive_writes_on(std::move(io));
  }
  void save(std::span<const task> tasks, boost::system::error_code& ec) override;
  void remove(std::span<const std::string> ids, boost::system::error_code& ec) override;
  list_summary list(const std::function<void(task&&)>& sink,
                    boost::system::error_code& ec) override;
  /// One page: one call of a read-only Lua script (EVALSHA) that finds the
  /// rank after the cursor in `{PREFIX}:due` (ZRANK of the cursor's id, or a
  /// binary search of the members sharing its due time when that id is
  /// gone), reads the page with ZRANGE ... WITHSCORES and its records with
  /// HMGET: O(log N + limit). Members with equal scores are ordered
  /// bytewise by Redis, which is list_due()'s order. A member without a
  /// record is skipped (read past, not counted). Undecodable records are
  /// quarantined as list() does. Sharded: every shard's page, merged. On
  /// error `after` is unchanged and nothing reaches the sink.
  list_summary list_due(due_cursor& after, std::int64_t until_ms, std::size_t limit,
                        const std::function<void(task&&)>& sink,
                        boost::system::error_code& ec) override;
  /// One HMGET of `{PREFIX}:tasks` per key space asked.
  std::vector<std::optional<task>> find(std::span<const std::string> ids,
                                        boost::system::error_code& ec) override;
  /// Moves the live record `id` to `{PREFIX}:quarantine` (its bytes) and
  /// `{PREFIX}:quarantine:reason` (`reason`), dropping it from `{PREFIX}:due`:
  /// one script, atomic.
  void quarantine(std::string_view id, std::string_view reason,
                  boost::system::error_code& ec) override;
  std::string describe() const override { return b_.name; }

 private:
  backend& b_;
};

}  // namespace delayq::detail::redis
