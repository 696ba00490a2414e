// The horizon (engine_options::horizon). With one, the wheel holds only the
// tasks due within it; the rest stay in the store's due index, and the pager
// reads them in, a page at a time, before they are due.
//
// The invariant: every stored task due at or before the watermark is held
// (or has a write about it in flight, which settles into the wheel). A task
// due later is held only while a call works on it; settle lets go of it
// again (engine_core::evict_if_far_locked). Moving the watermark from W0 to
// W1 follows three steps, so that no task is missed and none comes back
// after it went:
//
//   1. under the tables' locks: watermark = W1 (from here a schedule or
//      reschedule due by W1 stays held), and begin a read (erasures are
//      noted from here: note_gone());
//   2. writer flush: every write queued before step 1 is in the store, so
//      a far schedule of (W0, W1] that settled before step 1 can be read;
//   3. read (W0, W1] and hold each task unless its id is held (memory is
//      newer) or was erased since step 1 (cancelled, succeeded, let go).
//
// engine_core::fault_in() does the same for single ids a call names, so
// cancel() of a far task is as truthful as of a held one; a cluster's shard
// reads do it for a shard (cluster_ownership.hpp). A call pins the ids it
// looked up, so that their records are not let go before it decides.
//
// This class keeps the bookkeeping (the horizon, the watermark, the reads in
// progress and what was erased meanwhile, the pins) and the pager's thread,
// which also runs lookups an async call must not block its caller for. What
// a read does to the wheel is the engine's (engine_core_horizon.cpp).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>

#include "detail/spin_mutex.hpp"
#include "detail/task_table.hpp"

namespace delayq::detail {

/// Thread safety: every member is safe from any thread. The bookkeeping
/// has a lock of its own, taken under the tables' locks (never the other
/// way round); the three steps above hold the locks of the tables they
/// read into around steps 1 and 3.
class horizon_pager {
 public:
  /// What the pager's thread reads with. Implemented by engine_core.
  class host {
   public:
    /// Locks every table the pager reads into.
    virtual table_set_lock& mutex() const noexcept = 0;
    virtual bool running() const noexcept = 0;
    virtual void flush_writes() = 0;
    /// Reads (from, until] of the due index into the wheel, under read
    /// `seq`; false if the pager stopped first.
    virtual bool page_in(std::int64_t from, std::int64_t until, std::uint64_t seq) = 0;

   protected:
    ~host() = default;
  };

  horizon_pager() = default;
  ~horizon_pager() { stop(); }
  horizon_pager(const horizon_pager&) = delete;
  horizon_pager& operator=(const horizon_pager&) = delete;

  /// Whether the engine pages (set by start() before any pager or call).
  bool on() const noexcept { return horizon_ms_.load(std::memory_order_relaxed) > 0; }
  std::int64_t horizon_ms() const noexcept { return horizon_ms_.load(std::memory_order_relaxed); }
  /// start(): no horizon (0) or one, with its watermark.
  void set(std::int64_t horizon_ms, std::int64_t watermark) noexcept {
    horizon_ms_.store(horizon_ms, std::memory_order_relaxed);
    watermark_.store(watermark, std::memory_order_relaxed);
  }
  std::int64_t watermark() const noexcept { return watermark_.load(std::memory_order_acquire); }

  // ---- reads of the store ------------------------------------------------------
  std::uint64_t begin_read();
  void end_read(std::uint64_t seq);
  /// An indexed record of `id` leaves the index (erased or unindexed):
  /// reads in progress must not hold what they read of it.
  void note_gone(std::string_view id);
  bool erased_since(const std::string& id, std::uint64_t seq) const;

  // ---- pins --------------------------------------------------------------------
  void pin(const std::string& id);
  /// True when that was the id's last pin.
  bool unpin(const std::string& id);
  bool pinned(std::string_view id) const;

  // ---- the pager's thread ------------------------------------------------------
  /// Starts the thread (once): it moves the watermark a step ahead every
  /// horizon / 4 and has `h` read what it passed.
  void run(host& h);
  /// Runs `job` on the pager's thread, between pages.
  void post(std::function<void()> job);
  /// After a failed read: waits a little; false when the pager is stopping.
  bool wait_to_retry();
  /// Stops and joins the thread; runs the lookups still queued (they fail:
  /// the engine is stopping). Idempotent.
  void stop();

 private:
  void loop(host& h);

  std::atomic<std::int64_t> horizon_ms_{0};
  std::atomic<std::int64_t> watermark_{std::numeric_limits<std::int64_t>::max()};
  mutable spin_mutex state_;          // what follows, to pinned_
  std::atomic<bool> reading_{false};  // reads_ is not empty: note_gone() must note
  std::uint64_t erase_seq_ = 0;
  std::multiset<std::uint64_t> reads_;                     // the seq of each read in progress
  std::unordered_map<std::string, std::uint64_t> erased_;  // while reads_ is not empty
  std::unordered_map<std::string, std::uint32_t> pinned_;  // id -> pins

  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::deque<std::function<void()>> jobs_;
};

}  // namespace delayq::detail
