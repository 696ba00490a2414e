// delayq/memory_store.hpp - a task_store that keeps tasks in process memory.
#pragma once

#include <utility>

#include <array>
#include <cstddef>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "delayq/task_store.hpp"

namespace delayq {

/// A task_store held in memory: nothing survives the process. For tests,
/// benchmarks and services whose tasks are cheap to lose; use redis_store or
/// sqlite_store when they are not.
///
/// Its writes are inline (inline_writes() is true): the engine calls it
/// directly under its own lock, with no group commit.
///
/// Thread safety: all members are safe to call from any thread. Live tasks
/// are spread over lock stripes by id, so calls on different ids rarely
/// wait for each other; a batch, list() and size() lock every stripe and
/// see or make one consistent state.
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

  memory_store();
  ~memory_store() override;

  void save(std::span<const task> tasks, boost::system::error_code& ec) override;
  void remove(std::span<const std::string> ids, boost::system::error_code& ec) override;
  list_summary list(const std::function<void(task&&)>& sink,
                    boost::system::error_code& ec) override;
  std::string describe() const override { return "memory:"; }
  bool inline_writes() const noexcept override { return true; }

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
  using map = std::unordered_map<std::string, task>;
  static constexpr std::size_t stripe_count = 16;
  // One cache line (at least) per stripe, so stripes locked by different
  // threads do not share one.
  struct alignas(64) stripe {
    mutable std::mutex mutex;
    map tasks;
    // Nodes of removed tasks, reused by the next inserts: a schedule +
    // cancel cycle then allocates nothing here.
    std::vector<map::node_type> spare;
  };
  static std::size_t stripe_of(std::string_view id) noexcept;
  // Under s.mutex.
  static void upsert(stripe& s, const task& t);
  static void erase(stripe& s, const std::string& id);
  // Locks every stripe, in order.
  std::vector<std::unique_lock<std::mutex>> lock_all() const;

  std::array<stripe, stripe_count> stripes_;
  mutable std::mutex dead_mutex_;  // taken after a stripe's mutex, never before
  std::unordered_map<std::string, dead_letter> dead_;
};

}  // namespace delayq
