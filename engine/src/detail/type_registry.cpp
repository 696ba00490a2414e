#include "detail/type_registry.hpp"

#include <cstring>

namespace delayq::detail {

type_registry::type_registry(const executor_factory& executors, const engine_options& options)
    : executors_(executors), options_(options) {
  std::lock_guard lock(mutex_);
  // Registered types first, so their kinds are small and stable across runs.
  for (const std::string& name : executors_.types()) intern(name, hash(name));
}

type_registry::~type_registry() = default;

std::uint64_t type_registry::hash(std::string_view name) noexcept {
  // Every schedule call hashes its type: the first and last eight bytes and
  // the length, mixed, rather than a loop over every byte. Names differ in
  // their ends in practice; those that do not only share a probe run.
  const std::size_t n = name.size();
  std::uint64_t a = 0, b = 0;
  if (n >= 8) {
    std::memcpy(&a, name.data(), 8);
    std::memcpy(&b, name.data() + n - 8, 8);
  } else if (n >= 4) {
    std::uint32_t lo = 0, hi = 0;  // two loads that overlap: every byte, no loop
    std::memcpy(&lo, name.data(), 4);
    std::memcpy(&hi, name.data() + n - 4, 4);
    a = (std::uint64_t{hi} << 32) | lo;
  } else {
    for (std::size_t i = 0; i < n; ++i) a = (a << 8) | static_cast<unsigned char>(name[i]);
  }
  std::uint64_t h = (a ^ 0x9e3779b97f4a7c15ull) * 0xbf58476d1ce4e5b9ull;
  h ^= (b + n) * 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

const type_registry::type_info* type_registry::find(std::string_view name,
                                                    std::uint64_t h) const noexcept {
  const table* t = table_.load(std::memory_order_acquire);
  if (t == nullptr) return nullptr;
  for (std::size_t i = h & t->mask;; i = (i + 1) & t->mask) {
    const type_info* info = t->slots[i].load(std::memory_order_acquire);
    if (info == nullptr) return nullptr;
    if (info->name == name) return info;
  }
}

const type_registry::type_info* type_registry::lookup(std::string_view name, bool any,
                                                      boost::system::error_code& ec) {
  ec = {};
  const std::uint64_t h = hash(name);
  if (const type_info* info = find(name, h)) return info;
  if (!any && !executors_.contains(name)) {
    ec = errc::unknown_type;
    return nullptr;
  }
  std::lock_guard lock(mutex_);
  if (const type_info* info = find(name, h)) return info;  // interned meanwhile
  if (infos_.size() >= max_types) {
    ec = errc::invalid_type;
    return nullptr;
  }
  return intern(name, h);
}

// Under mutex_.
const type_registry::type_info* type_registry::intern(std::string_view name, std::uint64_t h) {
  auto info = std::make_unique<type_info>();
  info->name = std::string(name);
  info->k = static_cast<kind>(infos_.size());
  info->exec = executors_.find(name);
  auto retry = options_.retry_per_type.find(name);
  info->retry = retry == options_.retry_per_type.end() ? &options_.retry : &retry->second;
  if (auto t = options_.timeout_per_type.find(name); t != options_.timeout_per_type.end())
    info->timeout = t->second;
  if (auto c = options_.type_concurrency.find(name); c != options_.type_concurrency.end())
    info->concurrency = c->second;
  if (auto c = options_.type_capacity.find(name); c != options_.type_capacity.end())
    info->capacity = c->second;
  if (info->capacity != 0) info->pending.cap(info->capacity);
  const type_info* raw = info.get();
  infos_.push_back(std::move(info));
  publish(raw, h);
  size_.store(infos_.size(), std::memory_order_release);
  return raw;
}

// Under mutex_: makes `t` visible to lookup() and at(), growing the tables by
// copying when they are full.
void type_registry::publish(const type_info* t, std::uint64_t h) {
  if (infos_.size() > kind_capacity_) {
    const std::size_t cap = kind_capacity_ == 0 ? 16 : kind_capacity_ * 2;
    auto grown = std::make_unique<const type_info*[]>(cap);
    const type_info* const* old = kinds_.load(std::memory_order_relaxed);
    if (old != nullptr) std::memcpy(grown.get(), old, kind_capacity_ * sizeof(type_info*));
    kinds_.store(grown.get(), std::memory_order_release);
    kind_arrays_.push_back(std::move(grown));
    kind_capacity_ = cap;
  }
  // The kinds array is written in place beyond what readers can have been
  // given: kind t->k is handed out only through the table store below
  // (release), or under the engine's lock after lookup() returned.
  const_cast<const type_info**>(kinds_.load(std::memory_order_relaxed))[t->k] = t;

  table* cur = table_.load(std::memory_order_relaxed);
  if (cur == nullptr || infos_.size() * 2 > cur->mask + 1) {
    auto grown = std::make_unique<table>();
    const std::size_t size = cur == nullptr ? 64 : (cur->mask + 1) * 2;
    grown->mask = size - 1;
    grown->slots = std::make_unique<std::atomic<const type_info*>[]>(size);
    for (const auto& info : infos_) {
      if (info.get() == t) continue;
      std::size_t i = hash(info->name) & grown->mask;
      while (grown->slots[i].load(std::memory_order_relaxed) != nullptr) i = (i + 1) & grown->mask;
      grown->slots[i].store(info.get(), std::memory_order_relaxed);
    }
    table_.store(grown.get(), std::memory_order_release);
    tables_.push_back(std::move(grown));
    cur = tables_.back().get();
  }
  std::size_t i = h & cur->mask;
  while (cur->slots[i].load(std::memory_order_relaxed) != nullptr) i = (i + 1) & cur->mask;
  cur->slots[i].store(t, std::memory_order_release);
}

}  // namespace delayq::detail
