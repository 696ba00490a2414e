// Task types, interned: each type name gets a 16-bit kind the wheel stores in
// a task's record, and everything the engine needs to know about a type is
// resolved once, here, instead of looked up by name on every call and every
// attempt.
//
// Lookups are lock-free (every schedule call makes one, from any thread); a
// new type is interned under a mutex and published by swapping in grown
// copies of the tables. Old tables are kept until the registry goes, so a
// reader that loaded one just before a swap stays safe; they add up to less
// than the newest one. Types are never forgotten: a process that schedules an
// unbounded number of distinct types (only possible with
// accept_unregistered_types or a fallback executor) hits max_types.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "delayq/engine_options.hpp"
#include "delayq/executor.hpp"
#include "detail/striped.hpp"
#include "detail/type_counters.hpp"

namespace delayq::detail {

/// Thread safety: lookup(), at() and size() are safe from any thread at any
/// time; type_info::counters are atomics.
class type_registry {
 public:
  using kind = std::uint16_t;
  static constexpr std::size_t max_types = 65535;

  /// What the engine knows of one type.
  struct type_info {
    std::string name;
    kind k = 0;
    executor_factory::binding exec;  // empty: no executor (dead letter at once)
    const retry_policy* retry = nullptr;
    std::chrono::milliseconds timeout{0};  // 0: none
    std::size_t concurrency = 0;           // 0: no limit but the workers
    std::size_t capacity = 0;              // 0: no limit but max_pending
    // Metrics, counted by whichever path already holds this record.
    mutable type_counters counters;
    // Tasks of this type the engine holds (find() reaches them), over every
    // table: reserved before an insert when the type has a capacity.
    mutable pending_count pending;
  };

  /// `executors` and `options` must outlive the registry.
  type_registry(const executor_factory& executors, const engine_options& options);
  ~type_registry();
  type_registry(const type_registry&) = delete;
  type_registry& operator=(const type_registry&) = delete;

  /// The type named `name`: an executor is registered for it (by name or as
  /// the fallback), or `any` allows any type (accept_unregistered_types, and
  /// start(), which loads whatever the store holds). Null with `ec` set:
  /// errc::unknown_type, or errc::invalid_type past max_types. The name must
  /// be valid already.
  const type_info* lookup(std::string_view name, bool any, boost::system::error_code& ec);

  /// The type named `name` if it was interned, else null. Never interns.
  const type_info* find(std::string_view name) const noexcept { return find(name, hash(name)); }

  /// The type of kind `k` (as returned by lookup()).
  const type_info& at(kind k) const noexcept { return *kinds_.load(std::memory_order_acquire)[k]; }

  /// Types interned so far: kinds 0 to size() - 1 are valid for at().
  std::size_t size() const noexcept { return size_.load(std::memory_order_acquire); }

 private:
  struct table {
    std::size_t mask = 0;
    std::unique_ptr<std::atomic<const type_info*>[]> slots;
  };
  static std::uint64_t hash(std::string_view name) noexcept;
  const type_info* find(std::string_view name, std::uint64_t h) const noexcept;
  const type_info* intern(std::string_view name, std::uint64_t h);
  void publish(const type_info* t, std::uint64_t h);

  const executor_factory& executors_;
  const engine_options& options_;
  std::atomic<table*> table_{nullptr};
  std::atomic<const type_info* const*> kinds_{nullptr};
  std::mutex mutex_;  // guards interning and everything below
  std::vector<std::unique_ptr<table>> tables_;
  std::vector<std::unique_ptr<const type_info*[]>> kind_arrays_;
  std::size_t kind_capacity_ = 0;
  std::vector<std::unique_ptr<type_info>> infos_;
  std::atomic<std::size_t> size_{0};  // published after the kinds array holds the type
};

}  // namespace delayq::detail
