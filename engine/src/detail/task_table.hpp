// One shard of the engine's tasks: the tasks whose id hashes to it, in a
// timing wheel of its own, under a lock of its own.
//
// The engine splits its tasks over several tables by id hash (a generated
// id picks its table first and is drawn to hash there), so that calls on
// different ids take different locks and a table's critical sections stay
// short: a schedule, a cancel or an attempt's outcome locks one table. What
// spans tables (a batch, a store read, start(), the queries) locks the
// tables it needs in index order (table_set_lock).
//
// A table holds, per record: the wheel's record (id, payload, kind, due
// time, attempts, the state word of task_state.hpp) and, only for the tasks
// that have them, the side tables (a trigger count and signals; a priority
// and a time-to-run), so ordinary tasks pay nothing for them. It also holds
// the calls waiting on one of its ids: async schedules deferred behind a
// write in flight, and ids an async schedule is looking up in the store.
//
// What a change does to a table is the change's (changes/*.cpp); which
// table, the engine's (engine_core).
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "delayq/detail/schedule_completion.hpp"
#include "delayq/schedule_options.hpp"
#include "delayq/task.hpp"
#include "delayq/timer_wheel.hpp"
#include "detail/spin_mutex.hpp"
#include "detail/task_state.hpp"

namespace delayq::detail {

/// A record of the engine: its table and its handle in that table's wheel,
/// packed in 64 bits (the table in the high half).
using record_id = std::uint64_t;
constexpr record_id make_record_id(std::uint32_t table, timer_wheel::handle h) noexcept {
  return (std::uint64_t{table} << 32) | h;
}
constexpr std::uint32_t table_of(record_id r) noexcept {
  return static_cast<std::uint32_t>(r >> 32);
}
constexpr timer_wheel::handle handle_of(record_id r) noexcept {
  return static_cast<timer_wheel::handle>(r);
}

/// An async schedule waiting for its id (a write in flight about it, or its
/// lookup in the store).
struct deferred_call {
  task_spec spec;
  std::unique_ptr<schedule_completion> done;
};

/// Thread safety: every member under `mutex`, but tag(), which reads the
/// state word atomically (a worker swaps it without the lock).
class task_table {
 public:
  struct trigger_counts {
    std::uint32_t count = 0, signals = 0;
  };
  struct task_attrs {
    std::uint32_t priority = 0, ttr_ms = 0;
  };

  /// Table number `index`, hashing ids as `same_hash` does (null: the
  /// first table, which draws the seed).
  task_table(std::uint32_t index, std::size_t slots, const timer_wheel* same_hash);
  task_table(const task_table&) = delete;
  task_table& operator=(const task_table&) = delete;

  const std::uint32_t index;
  mutable spin_mutex mutex;
  /// A transitional record settled, a lookup ended, or an attempt ended.
  mutable std::condition_variable_any changed;
  timer_wheel wheel;
  /// Records held that find() cannot reach (dead, superseded by a replace).
  std::size_t unindexed = 0;
  /// The next tick the timer must wake for this table (timer_wheel::no_tick).
  std::uint64_t armed_tick = timer_wheel::no_tick;
  /// Async schedules waiting for an id whose write is in flight.
  std::unordered_map<std::string, std::vector<deferred_call>> deferred;
  /// Ids an async schedule is looking up in the store (id -> serial).
  std::unordered_map<std::string, std::uint64_t> looking_up;
  /// Calls waiting on `changed` (only then is it notified).
  std::size_t waiters = 0;

  record_id ref(timer_wheel::handle h) const noexcept { return make_record_id(index, h); }

  /// The state word of record `h` (task_state.hpp), read atomically.
  std::uint32_t tag(timer_wheel::handle h) const noexcept {
    return task_state_word::word(const_cast<timer_wheel&>(wheel).tag(h))
        .load(std::memory_order_acquire);
  }
  void set_tag(timer_wheel::handle h, std::uint32_t w) noexcept {
    task_state_word::word(wheel.tag(h)).store(w, std::memory_order_release);
  }
  /// Whether the record is in transit (a store write about it in flight).
  bool transitional(timer_wheel::handle h) const noexcept {
    const auto s = task_state_word::state_of(tag(h));
    return s == task_state_word::persisting || s == task_state_word::cancelling;
  }
  /// Whether a call on `id` must wait: its record is in transit, or an async
  /// schedule is looking it up.
  bool busy(std::string_view id, timer_wheel::handle h) const {
    return (h != timer_wheel::npos && transitional(h)) ||
           (!looking_up.empty() && looking_up.count(std::string(id)) != 0);
  }

  trigger_counts trigger_of(timer_wheel::handle h) const;
  /// set_trigger(h, 0, 0) forgets.
  void set_trigger(timer_wheel::handle h, std::uint32_t count, std::uint32_t signals);
  task_attrs attrs_of(timer_wheel::handle h) const;
  /// set_attrs(h, {}) forgets.
  void set_attrs(timer_wheel::handle h, task_attrs a);
  /// The record's side-table entries and the record itself go.
  void forget(timer_wheel::handle h);

  /// When record h's task was scheduled: tasks of several tables due at
  /// the same instant run in the order they were scheduled, as one wheel
  /// runs those of one tick in the order they were armed. The stamp is
  /// `floor` (the steady clock's nanoseconds, read by the call before it
  /// took the lock, plus a task's index in its batch) or one more than the
  /// table's last stamp, whichever is greater. So one table's stamps rise
  /// in the order its records are armed (order_by_due merges on that), and
  /// a stamp is never later than the instant it is made (each stamp of a
  /// table is made over a nanosecond after the one before): a call that
  /// begins after another returned stamps later, whichever tables they use.
  void stamp(timer_wheel::handle h, std::uint64_t floor) {
    if (h >= order_.size()) order_.resize(std::max<std::size_t>(2 * order_.size(), h + 1024));
    last_stamp_ = std::max(floor, last_stamp_ + 1);
    order_[h] = last_stamp_;
  }
  std::uint64_t order_of(timer_wheel::handle h) const noexcept {
    return h < order_.size() ? order_[h] : 0;
  }

  /// Tasks this table holds that find() reaches.
  std::size_t held() const noexcept { return wheel.size() - unindexed; }

 private:
  std::unordered_map<timer_wheel::handle, trigger_counts> triggers_;
  // By handle, as order_: a put of beanstalk's carries both, so a map's node
  // was an allocation a put. Empty until some task has either (the engine's
  // own callers rarely do).
  std::vector<task_attrs> attrs_;
  std::vector<std::uint64_t> order_;  // by handle (stamp())
  std::uint64_t last_stamp_ = 0;
};

/// A floor for task_table::stamp(): the steady clock at `t`.
inline std::uint64_t schedule_order(std::chrono::steady_clock::time_point t) noexcept {
  return static_cast<std::uint64_t>(t.time_since_epoch().count());
}
/// The same, now.
inline std::uint64_t schedule_order() noexcept {
  return schedule_order(std::chrono::steady_clock::now());
}

/// Locks a set of tables in index order (so two such locks never deadlock)
/// and unlocks them: a BasicLockable. `all` of an engine's tables is what
/// start(), a store read and a cluster's reads lock.
class table_set_lock {
 public:
  table_set_lock() = default;
  explicit table_set_lock(std::vector<task_table*> tables) : tables_(std::move(tables)) {}
  void assign(std::vector<task_table*> tables) { tables_ = std::move(tables); }
  void lock() const noexcept {
    for (task_table* t : tables_) t->mutex.lock();
  }
  void unlock() const noexcept {
    for (auto it = tables_.rbegin(); it != tables_.rend(); ++it) (*it)->mutex.unlock();
  }

 private:
  std::vector<task_table*> tables_;  // ascending index
};

}  // namespace delayq::detail
