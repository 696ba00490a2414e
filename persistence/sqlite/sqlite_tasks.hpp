// persistence/sqlite/sqlite_tasks.hpp - the tasks role of the SQLite
// store: the live tasks, their writes (with the dead-letter changes of a
// batch), the recovery read and the horizon's reads. Internal.
#pragma once

#include <utility>

#include "delayq/task_store.hpp"
#include "sqlite_backend.hpp"

namespace delayq::detail::sqlite {

/// The live tasks (task_store), in the table `tasks`. write() is the
/// backend's: one `BEGIN IMMEDIATE` transaction per batch, which carries
/// the batch's dead-letter changes too; async_write() goes through the
/// backend's write thread. list() streams the table through one SELECT on
/// a read connection of its own (sqlite_tasks.cpp); list_due() and find()
/// read on the store's connection (sqlite_due.cpp). Every read moves what
/// does not decode to the `quarantine` table (source 'tasks').
///
/// Thread safety: every member may be called from any thread; calls are
/// serialized by the backend's mutex, which no sink is called under.
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
  /// 2 with sqlite_options::write_thread (the engine forms the next batch
  /// while SQLite commits one), else 1.
  std::size_t max_writes_in_flight() const noexcept override {
    return b_.options().write_thread ? 2 : 1;
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

 private:
  backend& b_;
};

}  // namespace delayq::detail::sqlite
