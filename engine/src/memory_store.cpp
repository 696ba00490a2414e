#include "delayq/memory_store.hpp"

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

std::size_t memory_store::size() const {
  std::lock_guard lock(mutex_);
  return tasks_.size();
}

}  // namespace delayq
