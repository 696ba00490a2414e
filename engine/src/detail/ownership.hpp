// Which tasks this engine may hold and run, as one object the engine core is
// given at construction (make_ownership(), chosen by engine_options::cluster):
//
// - single_node_ownership (below): every id is ours, nothing is fenced. The
//   core calls it like any ownership, with no branch of its own on the kind;
//   each answer is a constant, so a call costs one virtual call (a few
//   nanoseconds against about a microsecond per fired task).
// - cluster_ownership (cluster_ownership.hpp): several engines share a
//   sharded store; this one holds leases on some shards and holds and runs
//   only their tasks. It keeps the lease table, its threads (lease rounds,
//   shard reads, the store's notices) and the fences of dispatched records.
//
// The core asks it, in a task's life:
//   a call naming an id    check() off the lock, fence_for() under it: the
//                          token the call's store write carries;
//   a read of the store    owns(): hold a record only of a shard held here;
//   the fire path          may_fire_locked() per due record (0: hold it back
//                          for hold_back()), may_start() before an attempt,
//                          fence_of_locked()/take_fence_locked() for the
//                          attempt's outcome write;
//   settle                 attempt_settled_locked(), then handover_check().
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/system/error_code.hpp>

#include "delayq/engine_options.hpp"
#include "delayq/engine_stats.hpp"
#include "delayq/task_store.hpp"
#include "delayq/timer_wheel.hpp"
#include "detail/spin_mutex.hpp"
#include "detail/task_table.hpp"

namespace delayq::detail {

/// Thread safety: as each member says; the engine core calls the `_locked`
/// ones under the lock of the record's table (a cluster's own state behind
/// them has a lock of its own), the host's under mutex().
class ownership {
 public:
  /// What the engine core lends an ownership that reads tasks into it (a
  /// cluster reading the shards it gains, or the tasks other instances
  /// saved). Implemented by engine_core.
  class host {
   public:
    using rejected_tasks = std::vector<std::pair<std::string, std::string>>;

    /// The lock of every table of the engine (the `_locked` members below
    /// need it held).
    virtual table_set_lock& mutex() const noexcept = 0;
    virtual bool running() const noexcept = 0;
    /// Every stored task due at or before it is held.
    virtual std::int64_t watermark_locked() const noexcept = 0;
    virtual bool held_locked(std::string_view id) const noexcept = 0;
    /// A read of the store begins: ids erased from here are noted, so a task
    /// read before its erase is not held again (see horizon_pager.hpp).
    virtual std::uint64_t begin_read_locked() = 0;
    virtual void end_read_locked(std::uint64_t seq) = 0;
    /// Holds a task the read found, unless held, erased since `seq`, or of a
    /// shard not held; one the engine cannot accept goes to `rejected`.
    virtual void hold_read_locked(const task& t, std::uint64_t seq, std::int64_t now,
                                  rejected_tasks& rejected) = 0;
    virtual void count_quarantined_locked(std::size_t n) noexcept = 0;
    /// Off the lock: moves what reads rejected to the store's quarantine.
    virtual void quarantine_rejected(const rejected_tasks& rejected) = 0;
    /// Lets go of the idle records of shards no longer held (owns() false);
    /// busy ones go when they settle.
    virtual void let_go_unowned_locked() = 0;
    /// The id of record `r` if an attempt on it is running, else empty.
    virtual std::string_view running_id_locked(record_id r) const noexcept = 0;
    /// Every write queued so far has landed (or is kept for a retry).
    virtual void flush_writes() = 0;
    /// How many failed writes are kept for a retry.
    virtual std::size_t writes_kept() const = 0;
    /// The dispatcher looks again at the references it withheld.
    virtual void check_starts() = 0;

   protected:
    ~host() = default;
  };

  using load_fn = std::function<void(task&&)>;

  virtual ~ownership() = default;

  /// True: every id is ours and nothing is fenced (single node). The core
  /// asks it once, at start(), to learn whether it loads the tasks itself.
  virtual bool owns_all() const noexcept = 0;

  // ---- lifecycle (once per engine) -------------------------------------------
  /// start(), under the engine's lock: joins (takes the first leases) and
  /// reads the held tasks due by `until` through `load`.
  virtual void start_locked(std::int64_t until, const load_fn& load, list_summary& summary,
                            boost::system::error_code& ec) = 0;
  /// After start() succeeded: starts the ownership's threads.
  virtual void run() = 0;
  /// Stops its threads and leaves (idempotent; from stop() and ~engine).
  virtual void stop() = 0;
  virtual void add_stats(engine_stats& s) const = 0;
  virtual std::string owner_of(std::string_view id) const = 0;
  virtual std::vector<std::string> members() const = 0;

  // ---- a call naming an id ----------------------------------------------------
  /// Off the lock: errc::not_owner unless the id is surely ours now.
  virtual bool check(std::string_view id, boost::system::error_code& ec) const = 0;
  /// Under the lock, as a call decides: the token its write carries, so that
  /// it is refused (lease_lost) once another instance took the id's shard.
  /// False with errc::not_owner when the lease is not surely ours now.
  virtual bool fence_for(std::string_view id, std::uint64_t& fence,
                         boost::system::error_code& ec) const = 0;
  /// The token now for a write that may go unfenced when 0.
  virtual std::uint64_t token_for(std::string_view id) const noexcept = 0;
  /// The token of the lease this instance holds on the id's shard, surely
  /// valid now or not; 0 when it holds none (a single node: always 0).
  virtual std::uint64_t held_token(std::string_view id) const noexcept = 0;
  /// Under the lock (or from a reader): whether a record of `id` may be held.
  virtual bool owns(std::string_view id) const noexcept = 0;

  // ---- the fire path ----------------------------------------------------------
  /// Under the record's table lock, per due record: the token it fires
  /// under (kept for its outcome), or 0: hold it back for hold_back() and
  /// ask again.
  virtual std::uint64_t may_fire_locked(record_id r, std::string_view id,
                                        std::chrono::steady_clock::time_point now) = 0;
  virtual std::chrono::milliseconds hold_back() const noexcept = 0;
  /// Before an attempt starts: its lease is surely ours and still `fence`.
  virtual bool may_start(std::string_view id, std::uint64_t fence) const noexcept = 0;
  /// The token record `r` was dispatched under (0: none); take_ forgets it.
  virtual std::uint64_t fence_of_locked(record_id r) const noexcept = 0;
  virtual std::uint64_t take_fence_locked(record_id r) noexcept = 0;
  /// Under the lock: an attempt on `id` settled. True when the lease thread
  /// should look at once for a shard it can hand over (handover_check()).
  virtual bool attempt_settled_locked(std::string_view id) noexcept = 0;
  virtual void handover_check() = 0;

  // ---- the pager --------------------------------------------------------------
  /// The shards the pager reads, one after the other; false: the whole
  /// due index.
  virtual bool page_by_shard(std::vector<std::uint32_t>& shards) const = 0;
};

/// One engine alone with its store: every id is ours; each answer is a
/// constant.
class single_node_ownership final : public ownership {
 public:
  bool owns_all() const noexcept override { return true; }
  void start_locked(std::int64_t, const load_fn&, list_summary&,
                    boost::system::error_code&) override {}
  void run() override {}
  void stop() override {}
  void add_stats(engine_stats&) const override {}
  std::string owner_of(std::string_view) const override { return {}; }
  std::vector<std::string> members() const override { return {}; }
  bool check(std::string_view, boost::system::error_code&) const override { return true; }
  bool fence_for(std::string_view, std::uint64_t& fence,
                 boost::system::error_code&) const override {
    fence = 0;
    return true;
  }
  std::uint64_t token_for(std::string_view) const noexcept override { return 0; }
  std::uint64_t held_token(std::string_view) const noexcept override { return 0; }
  bool owns(std::string_view) const noexcept override { return true; }
  std::uint64_t may_fire_locked(record_id, std::string_view,
                                std::chrono::steady_clock::time_point) override {
    return 1;
  }
  std::chrono::milliseconds hold_back() const noexcept override { return {}; }
  bool may_start(std::string_view, std::uint64_t) const noexcept override { return true; }
  std::uint64_t fence_of_locked(record_id) const noexcept override { return 0; }
  std::uint64_t take_fence_locked(record_id) noexcept override { return 0; }
  bool attempt_settled_locked(std::string_view) noexcept override { return false; }
  void handover_check() override {}
  bool page_by_shard(std::vector<std::uint32_t>&) const override { return false; }
};

/// The ownership engine_options::cluster asks for: a cluster_ownership when
/// set, else a single_node_ownership. `store` and `host` must outlive it.
std::unique_ptr<ownership> make_ownership(const engine_options& options, task_store& store,
                                          ownership::host& host);

}  // namespace delayq::detail
