#include "beanstalk/session_registry.hpp"

#include <algorithm>

#include "delayq/prometheus.hpp"

namespace delayq::server::beanstalk {

std::uint64_t session_registry::next_id() {
  std::lock_guard lock(mutex_);
  return ++next_id_;
}

void session_registry::track(std::uint64_t id, std::weak_ptr<session> s,
                             std::shared_ptr<idle_mark> mark) {
  std::lock_guard lock(mutex_);
  open_.insert_or_assign(id, tracked{std::move(s), std::move(mark)});
}

void session_registry::forget(std::uint64_t id) {
  std::lock_guard lock(mutex_);
  open_.erase(id);
}

std::shared_ptr<session> session_registry::take_longest_idle() {
  // A newcomer refused for want of an idle connection costs no scan.
  if (idle_.load(std::memory_order_relaxed) == 0) return nullptr;
  std::lock_guard lock(mutex_);
  int scans = 0;
  for (;;) {
    if (oldest_.empty()) {
      // Twice at most: the connections found idle by a scan may all be busy
      // (or idle again, younger) by the time they are claimed.
      if (scans++ == 2) return nullptr;
      for (const auto& [id, t] : open_)
        if (const std::int64_t since = t.mark->load(std::memory_order_acquire); since != 0)
          oldest_.emplace_back(since, id);
      const auto keep = std::min(oldest_.size(), cached_oldest);
      std::partial_sort(oldest_.begin(), oldest_.begin() + static_cast<std::ptrdiff_t>(keep),
                        oldest_.end());
      oldest_.resize(keep);
      std::reverse(oldest_.begin(), oldest_.end());
      continue;
    }
    auto [since, id] = oldest_.back();
    oldest_.pop_back();
    const auto it = open_.find(id);
    if (it == open_.end()) continue;  // closed since the scan
    std::shared_ptr<session> s = it->second.s.lock();
    if (!s) {
      open_.erase(it);  // gone without close() (the server stopping)
      continue;
    }
    // Lost to the connection itself (it began a command, or holds nothing
    // since later): the next.
    if (!it->second.mark->compare_exchange_strong(since, 0, std::memory_order_acq_rel)) continue;
    idle_.fetch_sub(1, std::memory_order_relaxed);
    return s;
  }
}

void session_registry::count_close(close_reason why) {
  std::lock_guard lock(mutex_);
  switch (why) {
    case close_reason::command_timeout: ++c_.command_timeouts; break;
    case close_reason::idle_timeout: ++c_.idle_timeouts; break;
    case close_reason::evicted: ++c_.evicted; break;
  }
}

void session_registry::count_refused() {
  std::lock_guard lock(mutex_);
  ++c_.refused;
}

void session_registry::render_metrics(std::string& out) const {
  const connection_counts c = counts();
  prometheus::family(out, "delayq_beanstalk_connections", "gauge",
                     "beanstalk connections open now.");
  prometheus::sample(out, "delayq_beanstalk_connections", {}, {}, c.current);
  prometheus::family(out, "delayq_beanstalk_connections_waiting", "gauge",
                     "beanstalk connections waiting in a reserve now.");
  prometheus::sample(out, "delayq_beanstalk_connections_waiting", {}, {}, c.waiting);
  prometheus::family(out, "delayq_beanstalk_connections_total", "counter",
                     "beanstalk connections accepted since start.");
  prometheus::sample(out, "delayq_beanstalk_connections_total", {}, {}, c.total);
  const char* closed = "delayq_beanstalk_connections_closed_total";
  prometheus::family(out, closed, "counter",
                     "beanstalk connections the server closed, by reason: command_timeout (a "
                     "command begun and not finished within --beanstalk-command-timeout), "
                     "idle_timeout (holding nothing for --beanstalk-idle-timeout), evicted (the "
                     "longest-idle one, to make room at --max-connections), refused (a newcomer "
                     "at --max-connections with no idle connection to close).");
  prometheus::sample(out, closed, "reason", "command_timeout", c.command_timeouts);
  prometheus::sample(out, closed, "reason", "idle_timeout", c.idle_timeouts);
  prometheus::sample(out, closed, "reason", "evicted", c.evicted);
  prometheus::sample(out, closed, "reason", "refused", c.refused);
}

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
