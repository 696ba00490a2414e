#include "delayq/memory_store.hpp"

#include <algorithm>
#include <limits>

namespace delayq {

memory_store::memory_store() = default;
memory_store::~memory_store() = default;

void memory_store::apply(const store_change& c) {
  const task& t = *c.task;
  switch (c.what) {
    case change_kind::save: tasks_.insert_or_assign(t.id, t); break;
    case change_kind::remove: tasks_.erase(t.id); break;
    case change_kind::bury:
      tasks_.erase(t.id);
      dead_.insert_or_assign(t.id, dead_letter{t, std::string(c.error), c.died_at});
      break;
    case change_kind::revive:
      dead_.erase(t.id);
      tasks_.insert_or_assign(t.id, t);
      break;
    case change_kind::purge: dead_.erase(t.id); break;
  }
}

void memory_store::write(std::span<const store_change> changes, boost::system::error_code& ec) {
  ec = {};
  std::lock_guard lock(mutex_);
  for (const store_change& c : changes) apply(c);
}

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

void memory_store::quarantine(std::string_view id, std::string_view reason,
                              boost::system::error_code& ec) {
  ec = {};
  std::lock_guard lock(mutex_);
  auto it = tasks_.find(std::string(id));
  if (it == tasks_.end()) return;
  quarantine_.insert_or_assign(it->first, std::pair(std::move(it->second), std::string(reason)));
  tasks_.erase(it);
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

std::vector<std::pair<std::string, std::string>> memory_store::load_settings(
    boost::system::error_code& ec) {
  ec = {};
  std::lock_guard lock(mutex_);
  return {settings_.begin(), settings_.end()};
}

void memory_store::save_setting(std::string_view key, std::string_view value,
                                boost::system::error_code& ec) {
  ec = {};
  std::lock_guard lock(mutex_);
  settings_.insert_or_assign(std::string(key), std::string(value));
}

std::uint64_t memory_store::allocate(std::string_view name, std::uint64_t count,
                                     boost::system::error_code& ec) {
  ec = {};
  if (!valid_sequence_call(name, count)) {
    ec = errc::invalid_options;
    return 0;
  }
  std::lock_guard lock(mutex_);
  auto it = sequences_.find(name);
  const std::uint64_t first = it == sequences_.end() ? 1 : it->second;
  if (count > std::numeric_limits<std::uint64_t>::max() - first) {
    ec = errc::invalid_options;  // would pass the last number
    return 0;
  }
  if (it == sequences_.end()) it = sequences_.emplace(std::string(name), first).first;
  it->second = first + count;
  return first;
}

void memory_store::raise_to(std::string_view name, std::uint64_t next,
                            boost::system::error_code& ec) {
  ec = {};
  if (!valid_sequence_call(name, 1)) {
    ec = errc::invalid_options;
    return;
  }
  std::lock_guard lock(mutex_);
  auto it = sequences_.find(name);
  if (it == sequences_.end())
    sequences_.emplace(std::string(name), std::max<std::uint64_t>(next, 1));
  else
    it->second = std::max(it->second, next);
}

bool memory_store::erase_setting(std::string_view key, boost::system::error_code& ec) {
  ec = {};
  std::lock_guard lock(mutex_);
  const auto it = settings_.find(key);
  if (it == settings_.end()) return false;
  settings_.erase(it);
  return true;
}

void memory_store::write_schedules(std::span<const schedule_write> changes,
                                   boost::system::error_code& ec) {
  ec = {};
  std::lock_guard lock(mutex_);
  for (const schedule_write& w : changes) {
    auto it = schedules_.find(w.id);
    const std::uint64_t now = it == schedules_.end() ? 0 : it->second.revision;
    w.applied = now == w.expected && (w.what == schedule_write::kind::put || now != 0);
    if (!w.applied) continue;
    switch (w.what) {
      case schedule_write::kind::put:
        if (it == schedules_.end())
          it = schedules_.emplace(std::string(w.id), schedule_record{std::string(w.id)}).first;
        it->second.definition = std::string(w.definition);
        it->second.state = std::string(w.state);
        it->second.revision = now + 1;
        break;
      case schedule_write::kind::state:
        it->second.state = std::string(w.state);
        it->second.revision = now + 1;
        break;
      case schedule_write::kind::erase: schedules_.erase(it); break;
    }
  }
}

std::vector<std::optional<schedule_record>> memory_store::find_schedules(
    std::span<const std::string> ids, boost::system::error_code& ec) {
  ec = {};
  std::vector<std::optional<schedule_record>> out;
  out.reserve(ids.size());
  std::lock_guard lock(mutex_);
  for (const std::string& id : ids) {
    auto it = schedules_.find(id);
    out.push_back(it == schedules_.end() ? std::nullopt : std::optional(it->second));
  }
  return out;
}

std::vector<schedule_record> memory_store::list_schedules(std::string_view after, std::size_t limit,
                                                          boost::system::error_code& ec) {
  ec = {};
  std::vector<schedule_record> out;
  std::lock_guard lock(mutex_);
  for (auto it = schedules_.upper_bound(after); it != schedules_.end() && out.size() < limit; ++it)
    out.push_back(it->second);
  return out;
}

std::size_t memory_store::count_schedules(boost::system::error_code& ec) {
  ec = {};
  std::lock_guard lock(mutex_);
  return schedules_.size();
}

std::size_t memory_store::size() const {
  std::lock_guard lock(mutex_);
  return tasks_.size();
}

std::size_t memory_store::quarantined() const {
  std::lock_guard lock(mutex_);
  return quarantine_.size();
}

}  // namespace delayq
