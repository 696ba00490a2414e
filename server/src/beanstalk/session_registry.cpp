#include "beanstalk/session_registry.hpp"

namespace delayq::server::beanstalk {

void session_registry::opened() {
  std::lock_guard lock(mutex_);
  ++c_.current;
  ++c_.total;
}

void session_registry::closed(bool producer, bool worker) {
  std::lock_guard lock(mutex_);
  --c_.current;
  if (producer) --c_.producers;
  if (worker) --c_.workers;
}

void session_registry::became(bool producer, bool worker) {
  std::lock_guard lock(mutex_);
  if (producer) ++c_.producers;
  if (worker) ++c_.workers;
}

void session_registry::use(const std::string& from, const std::string& to) {
  std::lock_guard lock(mutex_);
  if (!from.empty()) {
    auto it = tubes_.find(from);
    if (it != tubes_.end() && --it->second.using_ == 0 && it->second.watching == 0)
      tubes_.erase(it);
  }
  if (!to.empty()) ++tubes_[to].using_;
}

void session_registry::watch(const std::string& tube, int delta) {
  std::lock_guard lock(mutex_);
  auto& t = tubes_[tube];
  t.watching = static_cast<std::size_t>(static_cast<long>(t.watching) + delta);
  if (t.watching == 0 && t.using_ == 0 && t.waiting == 0) tubes_.erase(tube);
}

void session_registry::wait(const std::vector<std::string>& tubes, int delta) {
  std::lock_guard lock(mutex_);
  c_.waiting = static_cast<std::size_t>(static_cast<long>(c_.waiting) + delta);
  for (const std::string& tube : tubes) {
    auto& t = tubes_[tube];
    t.waiting = static_cast<std::size_t>(static_cast<long>(t.waiting) + delta);
  }
}

connection_counts session_registry::counts() const {
  std::lock_guard lock(mutex_);
  return c_;
}

session_registry::tube_counts session_registry::of(const std::string& tube) const {
  std::lock_guard lock(mutex_);
  auto it = tubes_.find(tube);
  return it == tubes_.end() ? tube_counts{} : it->second;
}

std::vector<std::string> session_registry::tubes() const {
  std::lock_guard lock(mutex_);
  std::vector<std::string> out;
  for (const auto& [name, t] : tubes_) out.push_back(name);
  return out;
}

}  // namespace delayq::server::beanstalk
