// delayq/memory_store.hpp - a task_store that keeps tasks in process memory.
#pragma once

#include <utility>

#include <mutex>
#include <string>
#include <unordered_map>

#include "delayq/task_store.hpp"

namespace delayq {

/// A task_store held in memory: nothing survives the process. For tests,
/// benchmarks and services whose tasks are cheap to lose; use redis_store or
/// sqlite_store when they are not.
///
/// Thread safety: all members are safe to call from any thread (one mutex).
class memory_store final : public task_store {
 public:
  using task_store::bury;
  using task_store::count_dead;
  using task_store::find_dead;
  using task_store::list;
  using task_store::list_dead;
  using task_store::purge;
  using task_store::remove;
  using task_store::revive;
  using task_store::save;

  void save(std::span<const task> tasks, boost::system::error_code& ec) override;
  void remove(std::span<const std::string> ids, boost::system::error_code& ec) override;
  list_summary list(const std::function<void(task&&)>& sink,
                    boost::system::error_code& ec) override;
  std::string describe() const override { return "memory:"; }

  void bury(std::span<const dead_letter> letters, boost::system::error_code& ec) override;
  std::vector<dead_letter> list_dead(std::size_t offset, std::size_t limit,
                                     boost::system::error_code& ec) override;
  std::optional<dead_letter> find_dead(std::string_view id, boost::system::error_code& ec) override;
  void revive(std::span<const task> tasks, boost::system::error_code& ec) override;
  void purge(std::span<const std::string> ids, boost::system::error_code& ec) override;
  std::size_t count_dead(boost::system::error_code& ec) override;

  /// The number of stored tasks.
  std::size_t size() const;

 private:
  mutable std::mutex mutex_;
  std::unordered_map<std::string, task> tasks_;
  std::unordered_map<std::string, dead_letter> dead_;
};

}  // namespace delayq
