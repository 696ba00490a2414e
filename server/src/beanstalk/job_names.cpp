#include "beanstalk/job_names.hpp"

namespace delayq::server::beanstalk {

job_names::job_names(std::size_t max_aliases) : max_aliases_(max_aliases) {}

std::optional<std::uint64_t> job_names::numeric(std::string_view id) {
  if (id.empty() || id.size() > 19 || id[0] == '0') return std::nullopt;
  std::uint64_t n = 0;
  for (const char c : id) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + static_cast<std::uint64_t>(c - '0');
  }
  // 19 digits fit in 64 bits; the top half is the aliases'.
  if (n >= alias_bit) return std::nullopt;
  return n;
}

std::uint64_t job_names::number_of(std::string_view id) {
  if (auto n = numeric(id)) return *n;
  // FNV-1a: stable across builds and instances (std::hash is neither).
  std::uint64_t h = 14695981039346656037ull;
  for (const char c : id) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  const std::uint64_t n = alias_bit | (h & (alias_bit - 1));
  std::lock_guard lock(mutex_);
  auto [it, added] = aliases_.try_emplace(n, id);
  if (!added) {
    it->second = std::string(id);
    return n;
  }
  order_.push_back(n);
  if (order_.size() > max_aliases_) {
    aliases_.erase(order_.front());
    order_.pop_front();
  }
  return n;
}

std::optional<std::string> job_names::id_of(std::uint64_t n) const {
  if (n == 0) return std::nullopt;
  if ((n & alias_bit) == 0) return std::to_string(n);
  std::lock_guard lock(mutex_);
  auto it = aliases_.find(n);
  if (it == aliases_.end()) return std::nullopt;
  return it->second;
}

}  // namespace delayq::server::beanstalk
