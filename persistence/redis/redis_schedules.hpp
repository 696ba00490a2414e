// persistence/redis/redis_schedules.hpp - the schedules role of the Redis
// store. Internal.
#pragma once

#include "delayq/schedule_store.hpp"
#include "redis_backend.hpp"

namespace delayq::detail::redis {

/// Recurring schedules, four keys per key space (redis_schedules.cpp has
/// the layout): a write of several schedules is one script per key space,
/// each compare-and-set on the revision; scan_schedules() reads each key
/// space on its own; insert_absent() stores a task only where no record
/// has its id.
///
/// Thread safety: every member may be called from any thread; calls are
/// serialized by the backend's mutex, which no visitor is called under.
class schedules_role final : public schedule_store {
 public:
  explicit schedules_role(backend& b) : b_(b) {}

  void write_schedules(std::span<const schedule_write> changes,
                       boost::system::error_code& ec) override;
  std::vector<std::optional<schedule_record>> find_schedules(
      std::span<const std::string> ids, boost::system::error_code& ec) override;
  /// Sharded: a page of every shard, merged (shards x limit records read).
  std::vector<schedule_record> list_schedules(std::string_view after, std::size_t limit,
                                              boost::system::error_code& ec) override;
  std::size_t count_schedules(boost::system::error_code& ec) override;
  void scan_schedules(std::size_t page,
                      const std::function<void(std::vector<schedule_record>&)>& visit,
                      boost::system::error_code& ec) override;
  void insert_absent(std::span<const task> tasks, boost::system::error_code& ec) override;

 private:
  backend& b_;
};

}  // namespace delayq::detail::redis
