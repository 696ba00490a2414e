// persistence/postgres/pg_tasks.hpp - the tasks role of the PostgreSQL
// store: the live tasks, their writes (with the dead-letter changes of a
// batch), the recovery read and the horizon's reads. Internal.
#pragma once

#include <utility>

#include "delayq/task_store.hpp"
#include "pg_backend.hpp"

namespace delayq::detail::pg {

/// The live tasks (task_store). Writes: pg_batch.hpp, one transaction per
/// batch; async_write() through the backend's pipeline (pg_writer.hpp).
/// list(): one COPY ... TO STDOUT (FORMAT binary) on a connection of its
/// own, decoded as it streams (pg_list.cpp). list_due() and find(): one
/// statement each on a call connection.
///
/// Thread safety: every member may be called from any thread.
class tasks_role final : public task_store {
 public:
  using task_store::list;
  using task_store::remove;
  using task_store::save;
  using task_store::write;

  /// How many async_write() batches the pipeline keeps in flight.
  static constexpr std::size_t writes_in_flight = 16;

  explicit tasks_role(backend& b) : b_(b) {}

  void write(std::span<const store_change> changes, boost::system::error_code& ec) override;
  void async_write(std::span<const store_change> changes,
                   std::function<void(boost::system::error_code)> done) override;
  std::size_t max_writes_in_flight() const noexcept override { return writes_in_flight; }
  void drive_writes_on(boost::asio::any_io_executor io) override {
    b_.drive_writes_on(std::move(io));
  }
  void save(std::span<const task> tasks, boost::system::error_code& ec) override;
  void remove(std::span<const std::string> ids, boost::system::error_code& ec) override;
  list_summary list(const std::function<void(task&&)>& sink,
                    boost::system::error_code& ec) override;
  list_summary list_due(due_cursor& after, std::int64_t until_ms, std::size_t limit,
                        const std::function<void(task&&)>& sink,
                        boost::system::error_code& ec) override;
  std::vector<std::optional<task>> find(std::span<const std::string> ids,
                                        boost::system::error_code& ec) override;
  void quarantine(std::string_view id, std::string_view reason,
                  boost::system::error_code& ec) override;
  std::string describe() const override { return b_.name(); }

  /// list_due() of one shard (the shard role's list_due_shard()); `shard`
  /// -1: every shard, merged (a page of each: shards x limit rows).
  list_summary due_pages(std::int64_t shard, due_cursor& after, std::int64_t until_ms,
                         std::size_t limit, const std::function<void(task&&)>& sink,
                         boost::system::error_code& ec);

 private:
  /// Moves the row `id` to the quarantine table when it still holds `raw`
  /// (null: whatever it holds); logs it. Returns false (and sets ec) when
  /// the statement failed.
  bool quarantine_row(std::string_view id, const std::string_view* raw, std::string_view reason,
                      boost::system::error_code& ec);
  void quarantine_on(connection& c, std::string_view id, const std::string_view* raw,
                     std::string_view reason);

  backend& b_;
};

}  // namespace delayq::detail::pg
