// delayq/memory_store.hpp - a task_store that keeps tasks in process memory.
#pragma once

#include <utility>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "delayq/schedule_store.hpp"
#include "delayq/task_store.hpp"

namespace delayq {

/// A task_store held in memory, with dead letters, settings, sequences and
/// schedules (the roles of dead_letter_store, settings_store, sequence_store
/// and schedule_store):
/// nothing survives the process. For tests,
/// benchmarks and services whose tasks are cheap to lose; use redis_store or
/// sqlite_store when they are not.
///
/// It says in_process(): an engine given one takes the live tasks it holds at
/// start() and from then on keeps live tasks in its own wheel only, with no
/// second copy here; dead letters and settings stay in the store. Used on its
/// own (tests, copy_tasks()) it is a complete store.
///
/// Thread safety: all members are safe to call from any thread; one mutex
/// makes every call, and every write() batch, atomic.
class memory_store final : public task_store,
                           public dead_letter_store,
                           public settings_store,
                           public sequence_store,
                           public schedule_store {
 public:
  using dead_letter_store::bury;
  using dead_letter_store::count_dead;
  using dead_letter_store::find_dead;
  using dead_letter_store::list_dead;
  using dead_letter_store::purge;
  using dead_letter_store::revive;
  using task_store::list;
  using task_store::remove;
  using task_store::save;
  using task_store::write;

  memory_store();
  ~memory_store() override;

  void write(std::span<const store_change> changes, boost::system::error_code& ec) override;
  void save(std::span<const task> tasks, boost::system::error_code& ec) override;
  void remove(std::span<const std::string> ids, boost::system::error_code& ec) override;
  list_summary list(const std::function<void(task&&)>& sink,
                    boost::system::error_code& ec) override;
  void quarantine(std::string_view id, std::string_view reason,
                  boost::system::error_code& ec) override;
  std::string describe() const override { return "memory:"; }
  bool in_process() const noexcept override { return true; }
  dead_letter_store* dead_letters() noexcept override { return this; }
  delayq::settings_store* settings() noexcept override { return this; }
  delayq::sequence_store* sequences() noexcept override { return this; }
  delayq::schedule_store* schedules() noexcept override { return this; }

  void bury(std::span<const dead_letter> letters, boost::system::error_code& ec) override;
  std::vector<dead_letter> list_dead(std::size_t offset, std::size_t limit,
                                     boost::system::error_code& ec) override;
  std::optional<dead_letter> find_dead(std::string_view id, boost::system::error_code& ec) override;
  void revive(std::span<const task> tasks, boost::system::error_code& ec) override;
  void purge(std::span<const std::string> ids, boost::system::error_code& ec) override;
  std::size_t count_dead(boost::system::error_code& ec) override;

  std::vector<std::pair<std::string, std::string>> load_settings(
      boost::system::error_code& ec) override;
  void save_setting(std::string_view key, std::string_view value,
                    boost::system::error_code& ec) override;
  bool erase_setting(std::string_view key, boost::system::error_code& ec) override;

  /// Sequences in a map under the store's mutex. A sequence ends at
  /// 2^64 - 1: errc::invalid_options past it.
  std::uint64_t allocate(std::string_view name, std::uint64_t count,
                         boost::system::error_code& ec) override;
  void raise_to(std::string_view name, std::uint64_t next, boost::system::error_code& ec) override;

  /// Schedules in a map under the store's mutex.
  void write_schedules(std::span<const schedule_write> changes,
                       boost::system::error_code& ec) override;
  std::vector<std::optional<schedule_record>> find_schedules(
      std::span<const std::string> ids, boost::system::error_code& ec) override;
  std::vector<schedule_record> list_schedules(std::string_view after, std::size_t limit,
                                              boost::system::error_code& ec) override;
  std::size_t count_schedules(boost::system::error_code& ec) override;

  /// The number of stored live tasks.
  std::size_t size() const;
  /// The number of quarantined records.
  std::size_t quarantined() const;

 private:
  // Under mutex_.
  void apply(const store_change& c);

  mutable std::mutex mutex_;
  std::unordered_map<std::string, task> tasks_;
  std::unordered_map<std::string, dead_letter> dead_;
  std::unordered_map<std::string, std::pair<task, std::string>> quarantine_;  // task, reason
  std::map<std::string, std::string, std::less<>> settings_;
  std::map<std::string, std::uint64_t, std::less<>> sequences_;  // name -> next number
  std::map<std::string, schedule_record, std::less<>> schedules_;
};

}  // namespace delayq
