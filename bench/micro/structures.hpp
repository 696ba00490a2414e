// structures.hpp - the four ways of holding pending delayed tasks that the
// micro benchmarks compare, behind one batch interface (templates, no virtual
// calls in the timed loops):
//
//   wheel_structure  delayq::timer_wheel (reserve()d, tasks staged outside the
//                    timed loop and moved in)
//   zset_structure   std::set<pair<due, id>> + unordered_map<id, due>: what a
//                    Redis ZSET does, without the network
//   heap_structure   a binary heap on a vector with lazy cancel: a generation
//                    map id -> generation; stale heap entries are skipped when
//                    they surface and compacted away when they outnumber the
//                    live ones
//   asio_structure   one Boost.Asio steady_timer per task on an io_context,
//                    in a preallocated vector; cancel is timer.cancel(), and
//                    the io_context is polled to run the aborted handlers
//
// A task is named by a key: an index into a pool of preformatted 12-character
// ids (std::string's small buffer holds them: no allocation per id). Due times
// are abstract ticks; every structure is told the absolute due tick.
#pragma once

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "delayq/task.hpp"
#include "delayq/timer_wheel.hpp"

// The batch operations stay out of line: one call per timed batch costs
// nothing measurable, and a profiler can collect exactly them
// (valgrind --toggle-collect='*_structure::cancel*', see docs/benchmarks.md).
#define DELAYQ_BENCH_BATCH [[gnu::noinline]]

namespace delayq::bench {

/// Ticks a new task is due in: uniform in [1, horizon]. 4 hours at the
/// engine's default 1 s tick, i.e. four revolutions of the default 3600 slots.
inline constexpr std::uint64_t horizon_ticks = 4 * 3600;

using key = std::uint32_t;
using id_pool = std::vector<std::string>;

class wheel_structure {
 public:
  static constexpr const char* name = "wheel";

  wheel_structure(const id_pool& ids, std::size_t capacity) : ids_(ids), wheel_(3600) {
    wheel_.reserve(capacity);
  }

  std::uint64_t now() const noexcept { return wheel_.now(); }
  std::size_t size() const noexcept { return wheel_.size(); }
  std::size_t memory_bytes() const noexcept { return wheel_.memory_bytes(); }

  // Outside the timed region: build the tasks a user would hand over.
  void stage(const key* keys, std::size_t n) {
    staged_.clear();
    for (std::size_t i = 0; i < n; ++i)
      staged_.push_back(task{.id = ids_[keys[i]], .type = "bench"});
  }
  // The untimed fill: the same work as schedule() under its own name, so a
  // profile of schedule() can leave the fill out.
  DELAYQ_BENCH_BATCH std::size_t preload(const key* keys, const std::uint64_t* dues,
                                         std::size_t n) {
    return schedule_impl(keys, dues, n);
  }
  DELAYQ_BENCH_BATCH std::size_t schedule(const key* keys, const std::uint64_t* dues,
                                          std::size_t n) {
    return schedule_impl(keys, dues, n);
  }
  [[gnu::always_inline]] std::size_t schedule_impl(const key*, const std::uint64_t* dues,
                                                   std::size_t n) {
    std::size_t ok = 0;
    for (std::size_t i = 0; i < n; ++i)
      ok += wheel_.insert(timer_wheel::item{staged_[i].id, staged_[i].payload}, dues[i]) !=
            timer_wheel::npos;
    return ok;
  }
  DELAYQ_BENCH_BATCH std::size_t cancel(const key* keys, std::size_t n) {
    std::size_t ok = 0;
    for (std::size_t i = 0; i < n; ++i) ok += wheel_.erase(std::string_view(ids_[keys[i]]));
    return ok;
  }
  DELAYQ_BENCH_BATCH std::size_t reschedule(const key* keys, const std::uint64_t* dues,
                                            std::size_t n) {
    std::size_t ok = 0;
    for (std::size_t i = 0; i < n; ++i)
      ok += wheel_.reschedule(std::string_view(ids_[keys[i]]), dues[i]);
    return ok;
  }
  // The same removals as cancel(), handed over as one batch.
  DELAYQ_BENCH_BATCH std::size_t cancel_many(const key* keys, std::size_t n) {
    return wheel_.erase_many(n, [&](std::size_t i) -> const std::string& { return ids_[keys[i]]; });
  }
  /// Releases scratch buffers of the benchmark itself (before memory is counted).
  void trim() { std::vector<task>().swap(staged_); }
  void prepare_fire() {}
  // The no-op sink drops each task: firing = handing it over and forgetting it.
  DELAYQ_BENCH_BATCH std::size_t fire_all() {
    return wheel_.advance(wheel_.now() + horizon_ticks,
                          [this](timer_wheel::handle h) { wheel_.erase(h); });
  }

 private:
  const id_pool& ids_;
  timer_wheel wheel_;
  std::vector<task> staged_;
};

class zset_structure {
 public:
  static constexpr const char* name = "zset";

  zset_structure(const id_pool& ids, std::size_t capacity) : ids_(ids) {
    due_of_.reserve(capacity);
  }

  std::uint64_t now() const noexcept { return now_; }
  std::size_t size() const noexcept { return due_of_.size(); }
  std::size_t memory_bytes() const noexcept { return 0; }

  void stage(const key*, std::size_t) {}
  // The untimed fill: the same work as schedule() under its own name, so a
  // profile of schedule() can leave the fill out.
  DELAYQ_BENCH_BATCH std::size_t preload(const key* keys, const std::uint64_t* dues,
                                         std::size_t n) {
    return schedule_impl(keys, dues, n);
  }
  DELAYQ_BENCH_BATCH std::size_t schedule(const key* keys, const std::uint64_t* dues,
                                          std::size_t n) {
    return schedule_impl(keys, dues, n);
  }
  [[gnu::always_inline]] std::size_t schedule_impl(const key* keys, const std::uint64_t* dues,
                                                   std::size_t n) {
    std::size_t ok = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const std::string& id = ids_[keys[i]];
      if (!due_of_.emplace(id, dues[i]).second) continue;
      by_due_.emplace(dues[i], id);
      ++ok;
    }
    return ok;
  }
  DELAYQ_BENCH_BATCH std::size_t cancel(const key* keys, std::size_t n) {
    std::size_t ok = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const std::string& id = ids_[keys[i]];
      auto it = due_of_.find(id);
      if (it == due_of_.end()) continue;
      by_due_.erase(entry(it->second, id));
      due_of_.erase(it);
      ++ok;
    }
    return ok;
  }
  DELAYQ_BENCH_BATCH std::size_t reschedule(const key* keys, const std::uint64_t* dues,
                                            std::size_t n) {
    std::size_t ok = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const std::string& id = ids_[keys[i]];
      auto it = due_of_.find(id);
      if (it == due_of_.end()) continue;
      // Reuse the tree node, as ZADD on an existing member does.
      auto node = by_due_.extract(entry(it->second, id));
      node.value().first = dues[i];
      by_due_.insert(std::move(node));
      it->second = dues[i];
      ++ok;
    }
    return ok;
  }
  void trim() {}
  void prepare_fire() {}
  DELAYQ_BENCH_BATCH std::size_t fire_all() {
    now_ += horizon_ticks;
    std::size_t fired = 0;
    while (!by_due_.empty() && by_due_.begin()->first <= now_) {
      due_of_.erase(by_due_.begin()->second);
      by_due_.erase(by_due_.begin());
      ++fired;
    }
    return fired;
  }

 private:
  using entry = std::pair<std::uint64_t, std::string>;
  const id_pool& ids_;
  std::uint64_t now_ = 0;
  std::set<entry> by_due_;
  std::unordered_map<std::string, std::uint64_t> due_of_;
};

class heap_structure {
 public:
  static constexpr const char* name = "heap";

  heap_structure(const id_pool& ids, std::size_t capacity) : ids_(ids) {
    heap_.reserve(capacity);
    live_.reserve(capacity);
  }

  std::uint64_t now() const noexcept { return now_; }
  std::size_t size() const noexcept { return live_.size(); }
  std::size_t memory_bytes() const noexcept { return 0; }

  void stage(const key*, std::size_t) {}
  // The untimed fill: the same work as schedule() under its own name, so a
  // profile of schedule() can leave the fill out.
  DELAYQ_BENCH_BATCH std::size_t preload(const key* keys, const std::uint64_t* dues,
                                         std::size_t n) {
    return schedule_impl(keys, dues, n);
  }
  DELAYQ_BENCH_BATCH std::size_t schedule(const key* keys, const std::uint64_t* dues,
                                          std::size_t n) {
    return schedule_impl(keys, dues, n);
  }
  [[gnu::always_inline]] std::size_t schedule_impl(const key* keys, const std::uint64_t* dues,
                                                   std::size_t n) {
    std::size_t ok = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const std::string& id = ids_[keys[i]];
      const std::uint64_t gen = ++generation_;
      if (!live_.emplace(id, gen).second) continue;
      push(dues[i], gen, id);
      ++ok;
    }
    return ok;
  }
  // Lazy: forget the generation; the heap entry is dropped when it surfaces.
  DELAYQ_BENCH_BATCH std::size_t cancel(const key* keys, std::size_t n) {
    std::size_t ok = 0;
    for (std::size_t i = 0; i < n; ++i) ok += live_.erase(ids_[keys[i]]);
    return ok;
  }
  DELAYQ_BENCH_BATCH std::size_t reschedule(const key* keys, const std::uint64_t* dues,
                                            std::size_t n) {
    std::size_t ok = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const std::string& id = ids_[keys[i]];
      auto it = live_.find(id);
      if (it == live_.end()) continue;
      it->second = ++generation_;
      push(dues[i], it->second, id);
      ++ok;
    }
    return ok;
  }
  void trim() {}
  void prepare_fire() {}
  DELAYQ_BENCH_BATCH std::size_t fire_all() {
    now_ += horizon_ticks;
    std::size_t fired = 0;
    while (!heap_.empty() && heap_.front().due <= now_) {
      std::pop_heap(heap_.begin(), heap_.end(), later{});
      entry& e = heap_.back();
      if (auto it = live_.find(e.id); it != live_.end() && it->second == e.generation) {
        live_.erase(it);
        ++fired;
      }
      heap_.pop_back();
    }
    return fired;
  }

 private:
  struct entry {
    std::uint64_t due;
    std::uint64_t generation;
    std::string id;
  };
  struct later {
    bool operator()(const entry& a, const entry& b) const noexcept {
      return a.due != b.due ? a.due > b.due : a.generation > b.generation;
    }
  };

  void push(std::uint64_t due, std::uint64_t gen, const std::string& id) {
    // Stale entries may at most double the heap; then drop them all at once
    // (amortised O(1) per cancel or reschedule, charged to the push that pays).
    if (heap_.size() >= 2 * live_.size() + 64) compact();
    heap_.push_back(entry{due, gen, id});
    std::push_heap(heap_.begin(), heap_.end(), later{});
  }
  void compact() {
    std::erase_if(heap_, [this](const entry& e) {
      auto it = live_.find(e.id);
      return it == live_.end() || it->second != e.generation;
    });
    std::make_heap(heap_.begin(), heap_.end(), later{});
  }

  const id_pool& ids_;
  std::uint64_t now_ = 0;
  std::uint64_t generation_ = 0;
  std::vector<entry> heap_;
  std::unordered_map<std::string, std::uint64_t> live_;
};

class asio_structure {
 public:
  static constexpr const char* name = "asio";

  // Keys index the timers directly: this structure does no lookup by id,
  // which favours it over the others.
  asio_structure(const id_pool&, std::size_t capacity) {
    timers_.reserve(capacity);
    for (std::size_t i = 0; i < capacity; ++i) timers_.emplace_back(io_);
    armed_.assign(capacity, false);
  }

  std::uint64_t now() const noexcept { return now_; }
  std::size_t size() const noexcept { return size_; }
  std::size_t memory_bytes() const noexcept { return 0; }

  void stage(const key*, std::size_t) {}
  // The untimed fill: the same work as schedule() under its own name, so a
  // profile of schedule() can leave the fill out.
  DELAYQ_BENCH_BATCH std::size_t preload(const key* keys, const std::uint64_t* dues,
                                         std::size_t n) {
    return schedule_impl(keys, dues, n);
  }
  DELAYQ_BENCH_BATCH std::size_t schedule(const key* keys, const std::uint64_t* dues,
                                          std::size_t n) {
    return schedule_impl(keys, dues, n);
  }
  [[gnu::always_inline]] std::size_t schedule_impl(const key* keys, const std::uint64_t* dues,
                                                   std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) arm(keys[i], dues[i]);
    size_ += n;
    return n;
  }
  DELAYQ_BENCH_BATCH std::size_t cancel(const key* keys, std::size_t n) {
    std::size_t ok = 0;
    for (std::size_t i = 0; i < n; ++i) {
      ok += timers_[keys[i]].cancel();
      armed_[keys[i]] = false;
    }
    size_ -= ok;
    run_aborted();
    return ok;
  }
  DELAYQ_BENCH_BATCH std::size_t reschedule(const key* keys, const std::uint64_t* dues,
                                            std::size_t n) {
    std::size_t ok = 0;
    for (std::size_t i = 0; i < n; ++i) {
      ok += timers_[keys[i]].expires_at(deadline(dues[i]));  // cancels the pending wait
      timers_[keys[i]].async_wait(handler());
    }
    run_aborted();
    return ok;
  }
  void trim() {}
  // Moves every armed timer's deadline into the past (untimed), so that
  // fire_all() finds them all expired.
  void prepare_fire() {
    // Cancel and drain first: polling after arming in the past would fire them.
    for (std::size_t k = 0; k < timers_.size(); ++k)
      if (armed_[k]) timers_[k].cancel();
    run_aborted();
    past_ = true;
    for (std::size_t k = 0; k < timers_.size(); ++k)
      if (armed_[k]) {
        timers_[k].expires_at(deadline(now_ + 1 + k % horizon_ticks));
        timers_[k].async_wait(handler());
      }
  }
  DELAYQ_BENCH_BATCH std::size_t fire_all() {
    const std::size_t before = fired_;
    io_.restart();
    io_.run();
    const std::size_t fired = fired_ - before;
    size_ -= fired;
    std::fill(armed_.begin(), armed_.end(), false);
    now_ += horizon_ticks;
    past_ = false;
    return fired;
  }

 private:
  // The no-op completion: counts the waits that expired (not the aborted ones).
  struct on_expiry {
    asio_structure* self;
    void operator()(const boost::system::error_code& ec) const { self->fired_ += !ec; }
  };
  on_expiry handler() noexcept { return on_expiry{this}; }
  std::chrono::steady_clock::time_point deadline(std::uint64_t due) const {
    // Future deadlines: a day from construction plus the due tick in ms, so
    // nothing expires during the schedule / cancel / reschedule benchmarks.
    // Past ones: the due tick in ns after the steady clock's epoch (boot).
    if (past_) return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(due));
    return base_ + std::chrono::milliseconds(due);
  }
  void arm(key k, std::uint64_t due) {
    timers_[k].expires_at(deadline(due));
    timers_[k].async_wait(handler());
    armed_[k] = true;
  }
  // Runs the operation_aborted handlers that cancel() queued: part of what a
  // cancel costs, and without it they pile up in the io_context.
  void run_aborted() {
    if (io_.stopped()) io_.restart();
    io_.poll();
  }

  boost::asio::io_context io_{1};
  std::vector<boost::asio::steady_timer> timers_;
  std::vector<bool> armed_;
  std::chrono::steady_clock::time_point base_ =
      std::chrono::steady_clock::now() + std::chrono::hours(24);
  std::uint64_t now_ = 0;
  std::size_t size_ = 0;
  std::size_t fired_ = 0;
  bool past_ = false;
};

}  // namespace delayq::bench
