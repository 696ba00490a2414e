#include "delayq/memory_store.hpp"

#include <algorithm>
#include <cstdint>

namespace delayq {
namespace {

constexpr std::size_t max_spare_nodes = 64;  // per stripe

}  // namespace

memory_store::memory_store() = default;
memory_store::~memory_store() = default;

std::size_t memory_store::stripe_of(std::string_view id) noexcept {
  // FNV-1a over the id's last bytes: cheap, and generated ids differ at the end.
  const std::size_t n = std::min<std::size_t>(id.size(), 8);
  std::uint64_t h = 14695981039346656037ull;
  for (std::size_t i = id.size() - n; i < id.size(); ++i) {
    h ^= static_cast<unsigned char>(id[i]);
    h *= 1099511628211ull;
  }
  return static_cast<std::size_t>(h ^ (h >> 29)) % stripe_count;
}

void memory_store::upsert(stripe& s, const task& t) {
  if (auto it = s.tasks.find(t.id); it != s.tasks.end()) {
    it->second = t;
    return;
  }
  if (s.spare.empty()) {
    s.tasks.emplace(t.id, t);
    return;
  }
  map::node_type node = std::move(s.spare.back());
  s.spare.pop_back();
  node.key() = t.id;
  node.mapped() = t;
  s.tasks.insert(std::move(node));
}

void memory_store::erase(stripe& s, const std::string& id) {
  auto it = s.tasks.find(id);
  if (it == s.tasks.end()) return;
  map::node_type node = s.tasks.extract(it);
  if (s.spare.size() < max_spare_nodes) {
    if (s.spare.capacity() == 0) s.spare.reserve(max_spare_nodes);
    s.spare.push_back(std::move(node));
  }
}

std::vector<std::unique_lock<std::mutex>> memory_store::lock_all() const {
  std::vector<std::unique_lock<std::mutex>> locks;
  locks.reserve(stripe_count);
  for (const stripe& s : stripes_) locks.emplace_back(s.mutex);
  return locks;
}

void memory_store::save(std::span<const task> tasks, boost::system::error_code& ec) {
  ec = {};
  if (tasks.size() == 1) {
    stripe& s = stripes_[stripe_of(tasks[0].id)];
    std::lock_guard lock(s.mutex);
    upsert(s, tasks[0]);
    return;
  }
  const auto locks = lock_all();  // the batch becomes visible at once
  for (const task& t : tasks) upsert(stripes_[stripe_of(t.id)], t);
}

void memory_store::remove(std::span<const std::string> ids, boost::system::error_code& ec) {
  ec = {};
  if (ids.size() == 1) {
    stripe& s = stripes_[stripe_of(ids[0])];
    std::lock_guard lock(s.mutex);
    erase(s, ids[0]);
    return;
  }
  const auto locks = lock_all();
  for (const std::string& id : ids) erase(stripes_[stripe_of(id)], id);
}

list_summary memory_store::list(const std::function<void(task&&)>& sink,
                                boost::system::error_code& ec) {
  ec = {};
  // Copy under the locks, call the sink outside them: a sink may call back
  // into this store.
  std::vector<task> copy;
  {
    const auto locks = lock_all();
    std::size_t n = 0;
    for (const stripe& s : stripes_) n += s.tasks.size();
    copy.reserve(n);
    for (const stripe& s : stripes_)
      for (const auto& [id, t] : s.tasks) copy.push_back(t);
  }
  for (task& t : copy) sink(std::move(t));
  return list_summary{copy.size(), 0};
}

void memory_store::bury(std::span<const dead_letter> letters, boost::system::error_code& ec) {
  ec = {};
  const auto locks = lock_all();
  std::lock_guard lock(dead_mutex_);
  for (const dead_letter& d : letters) {
    erase(stripes_[stripe_of(d.task.id)], d.task.id);
    dead_.insert_or_assign(d.task.id, d);
  }
}

std::vector<dead_letter> memory_store::list_dead(std::size_t offset, std::size_t limit,
                                                 boost::system::error_code& ec) {
  ec = {};
  std::vector<const dead_letter*> all;
  std::lock_guard lock(dead_mutex_);
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
  std::lock_guard lock(dead_mutex_);
  auto it = dead_.find(std::string(id));
  if (it == dead_.end()) return std::nullopt;
  return it->second;
}

void memory_store::revive(std::span<const task> tasks, boost::system::error_code& ec) {
  ec = {};
  const auto locks = lock_all();
  std::lock_guard lock(dead_mutex_);
  for (const task& t : tasks) {
    dead_.erase(t.id);
    upsert(stripes_[stripe_of(t.id)], t);
  }
}

void memory_store::purge(std::span<const std::string> ids, boost::system::error_code& ec) {
  ec = {};
  std::lock_guard lock(dead_mutex_);
  for (const std::string& id : ids) dead_.erase(id);
}

std::size_t memory_store::count_dead(boost::system::error_code& ec) {
  ec = {};
  std::lock_guard lock(dead_mutex_);
  return dead_.size();
}

std::size_t memory_store::size() const {
  const auto locks = lock_all();
  std::size_t n = 0;
  for (const stripe& s : stripes_) n += s.tasks.size();
  return n;
}

}  // namespace delayq
