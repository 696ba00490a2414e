#include "delayq/memory_store.hpp"

#include <algorithm>

namespace delayq {

void memory_store::save(std::span<const task> tasks, boost::system::error_code& ec) {
  ec = {};
  std::lock_guard lock(mutex_);
  for (const task& t : tasks) tasks_.insert_or_assign(t.id, t);
}

void memory_store::remove(std::span<const std::string> ids, boost::system::error_code& ec) {
  ec = {};
  std::lock_guard lock(mutex_);
  for (const std::string& id : ids) tasks_.erase(id);
}

list_summary memory_store::list(const std::function<void(task&&)>& sink,
                                boost::system::error_code& ec) {
  ec = {};
  // Copy under the lock, call the sink outside it: a sink may call back into
  // this store.
  std::vector<task> copy;
  {
    std::lock_guard lock(mutex_);
    copy.reserve(tasks_.size());
    for (const auto& [id, t] : tasks_) copy.push_back(t);
  }
  for (task& t : copy) sink(std::move(t));
  return list_summary{copy.size(), 0};
}

void memory_store::bury(std::span<const dead_letter> letters, boost::system::error_code& ec) {
  ec = {};
  std::lock_guard lock(mutex_);
  for (const dead_letter& d : letters) {
    tasks_.erase(d.task.id);
    dead_.insert_or_assign(d.task.id, d);
  }
}

std::vector<dead_letter> memory_store::list_dead(std::size_t offset, std::size_t limit,
                                                 boost::system::error_code& ec) {
  ec = {};
  std::vector<const dead_letter*> all;
  std::lock_guard lock(mutex_);
  all.reserve(dead_.size());
  for (const auto& [id, d] : dead_) all.push_back(&d);
  std::sort(all.begin(), all.end(), [](const dead_letter* a, const dead_letter* b) {
    return a->died_at != b->died_at ? a->died_at < b->died_at : a->task.id < b->task.id;
  });
  std::vector<dead_letter> out;
  for (std::size_t i = offset; i < all.size() && out.size() < limit; ++i) out.push_back(*all[i]);
  return out;
}

std::optional<dead_letter> memory_store::find_dead(std::string_view id,
                                                   boost::system::error_code& ec) {
  ec = {};
  std::lock_guard lock(mutex_);
  auto it = dead_.find(std::string(id));
  if (it == dead_.end()) return std::nullopt;
  return it->second;
}

void memory_store::revive(std::span<const task> tasks, boost::system::error_code& ec) {
  ec = {};
  std::lock_guard lock(mutex_);
  for (const task& t : tasks) {
    dead_.erase(t.id);
    tasks_.insert_or_assign(t.id, t);
  }
}

void memory_store::purge(std::span<const std::string> ids, boost::system::error_code& ec) {
  ec = {};
  std::lock_guard lock(mutex_);
  for (const std::string& id : ids) dead_.erase(id);
}

std::size_t memory_store::count_dead(boost::system::error_code& ec) {
  ec = {};
  std::lock_guard lock(mutex_);
  return dead_.size();
}

std::size_t memory_store::size() const {
  std::lock_guard lock(mutex_);
  return tasks_.size();
}

}  // namespace delayq
