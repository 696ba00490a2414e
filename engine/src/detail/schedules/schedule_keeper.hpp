// schedule_keeper: recurring schedules, as a component of their own that
// drives the engine through its public calls (schedule_many with caller
// ids and on_conflict::keep, cancel, owner_of) and keeps its schedules in
// the store's schedule_store role. The engine facade owns one and starts
// and stops it with the engine. Internal; docs/schedules.md is the design.
//
// One task per occurrence. A schedule's owner (the instance holding the
// shard of the schedule's id; the only engine, without a cluster) makes
// each occurrence a task a lookahead ahead of its time, in two steps:
//   1. claim: one compare-and-set write of the schedule's state (its
//      revision must be the one this keeper read), moving its cursor past
//      the occurrences it is about to make (and past missed ones it skips),
//      and recording where the claim began (doubt_ms);
//   2. make: the claimed occurrences become tasks, ids "ID@MS", through
//      engine::schedule_many() with on_conflict::keep (a task of another
//      instance's shard, in a cluster, through schedule_store::insert_absent).
// An occurrence is claimed once (the compare-and-set), and only claimed
// occurrences are made. A keeper that dies between the two steps leaves a
// claim in doubt: the next keeper makes again those of its occurrences that
// are still in the future (keep: a task made already stays one task; one in
// the future cannot have run), and counts the past ones as done: at most
// once, never twice.
//
// Thread safety: every public member is safe from any thread; one thread of
// its own makes the occurrences.
#pragma once

#include <boost/system/error_code.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "delayq/engine_stats.hpp"
#include "delayq/schedule.hpp"
#include "delayq/schedule_store.hpp"
#include "delayq/task_store.hpp"
#include "detail/schedules/schedule_codec.hpp"
#include "detail/schedules/timing.hpp"

namespace delayq {
class engine;
}  // namespace delayq

namespace delayq::detail::schedules {

/// What a keeper is told at construction.
struct keeper_options {
  /// How far ahead of its time an occurrence becomes a task (in a cluster
  /// at least two leases and a second: a dead owner's successor then takes
  /// the schedule over before its next occurrence is due).
  std::chrono::milliseconds lookahead{10000};
  /// Cluster: this instance's name (a schedule is kept by the owner of its
  /// id's shard: engine::owner_of()). Empty: no cluster, every schedule is
  /// this keeper's.
  std::string instance;
  std::size_t max_payload = std::size_t{1} << 20;
  /// Whether an occurrence's type has an executor (or the engine takes
  /// unregistered types): upsert refuses a type this says no to.
  std::function<bool(std::string_view)> type_known;
};

class schedule_keeper {
 public:
  using time_point = std::chrono::system_clock::time_point;

  /// `eng` and `store` must outlive the keeper.
  schedule_keeper(delayq::engine& eng, task_store& store, keeper_options options);
  ~schedule_keeper();
  schedule_keeper(const schedule_keeper&) = delete;
  schedule_keeper& operator=(const schedule_keeper&) = delete;

  /// After the engine started: reads the schedules this keeper owns and
  /// starts its thread. A store without schedules starts nothing (every
  /// call then answers errc::unsupported). Errors: the store's.
  void start(boost::system::error_code& ec);
  /// Stops the thread (waits for the batch it works on). Before the engine
  /// stops. Safe to call twice.
  void stop();

  /// engine::upsert_schedule(): true when created, false when replaced or
  /// unchanged.
  bool upsert(const schedule& s, boost::system::error_code& ec);
  bool remove(std::string_view id, boost::system::error_code& ec);
  std::optional<schedule> find(std::string_view id, boost::system::error_code& ec) const;
  std::vector<schedule> list(std::size_t offset, std::size_t limit,
                             boost::system::error_code& ec) const;
  std::size_t count(boost::system::error_code& ec) const;
  std::vector<time_point> next(std::string_view id, std::size_t n,
                               boost::system::error_code& ec) const;

  /// The keeper's counters, into `s`.
  void add_stats(engine_stats& s) const;

  /// The most occurrences of one schedule a `missed: all` makes at once.
  static constexpr std::size_t max_missed = 1000;
  /// An occurrence further past than this when its claim is made is missed.
  static constexpr std::int64_t missed_grace_ms = 1000;
  /// Clusters: an occurrence of a claim left in doubt is made again only
  /// when it is due at least this far ahead. Its task often lives in another
  /// instance's shard, where it is stored with insert_absent(): a make
  /// decided just before the occurrence's time could land after that
  /// instance ran (and removed) the task the dead keeper had made, and make
  /// it again, to run twice (a second delivery that CI saw once fits this).
  /// An occurrence closer than this counts as done.
  static constexpr std::int64_t remake_margin_ms = 1000;

 private:
  // One schedule this keeper owns (under mutex_).
  struct entry {
    const std::string* id = nullptr;  // the map's key
    timing when;
    std::string type;
    std::string payload;
    std::uint32_t priority = 0;
    std::uint32_t ttr_ms = 0;
    on_conflict conflict = on_conflict::keep;
    missed_runs missed = missed_runs::skip;
    std::uint64_t revision = 0;
    schedule_state st;
    bool doubt_check = false;  // resolve [doubt, cursor) at the next claim
    bool seen = false;         // load_owned(): found in the store this time
    // Claimed, not yet tasks (a failed make): rare, so a pointer.
    std::unique_ptr<std::vector<std::int64_t>> pending;
    std::int64_t wake = -1;  // in timeline_ while >= 0
  };
  // By value: a node's address is stable, and one allocation a schedule
  // less than a pointer to it (docs/benchmarks.md, "Recurring schedules").
  using entry_map = std::unordered_map<std::string, entry>;

  // What one claim decided for an entry (outside the lock).
  struct claim {
    entry* e = nullptr;
    std::string id;
    schedule_state next;  // the state to write
    std::uint64_t expected = 0;
    std::vector<std::int64_t> make;  // occurrences to make tasks
    std::size_t missed = 0;
    bool write = true;  // false: only retrying `pending`
  };

  void run();
  // Whether calls can be answered: errc::unsupported without the store's
  // role, errc::not_running before start() and after stop().
  bool ready(boost::system::error_code& ec) const;
  bool owns(std::string_view id) const;
  // Reads every stored schedule this keeper owns into entries_ (replacing
  // the idle ones). Store errors leave what is held.
  void load_owned(boost::system::error_code& ec);
  // An entry from a stored record, or null (logged) when it does not decode.
  std::unique_ptr<entry> entry_of(const schedule_record& r) const;
  void arm_locked(entry& e, std::int64_t now);
  void disarm_locked(entry& e);
  // Decides the claim of `e` at `now`.
  claim plan(entry& e, std::int64_t now) const;
  // Writes the claims, makes their tasks; updates the entries.
  void carry_out(std::vector<claim>& claims);
  // Makes the occurrences tasks; returns those that could not be made yet.
  std::vector<std::pair<entry*, std::int64_t>> make_tasks(
      const std::vector<std::pair<entry*, std::int64_t>>& todo);
  // Cancels the tasks of `old`'s occurrences in [now, st.cursor_ms); returns
  // the latest one that could not be cancelled (it may run or have run), or
  // -1.
  std::int64_t cancel_made(const schedule& old, const schedule_state& st, std::int64_t now);
  // Busy ids: one claim or call at a time per schedule.
  void acquire(const std::string& id);
  void release(const std::string& id);

  delayq::engine& eng_;
  task_store& store_;
  schedule_store* schedules_ = nullptr;
  keeper_options opt_;

  mutable std::mutex mutex_;
  std::condition_variable cv_;       // the thread's wake-ups
  std::condition_variable idle_cv_;  // an id left busy_
  entry_map entries_;
  std::set<std::pair<std::int64_t, entry*>> timeline_;
  std::unordered_set<std::string> busy_;
  bool running_ = false;
  bool stopping_ = false;
  std::thread thread_;
  std::uint64_t seen_gained_ = 0, seen_lost_ = 0;

  std::uint64_t made_ = 0, missed_ = 0, lost_ = 0;
  // This keeper's mark on its claims (schedule_state::claimant).
  const std::uint64_t claimant_;
};

}  // namespace delayq::detail::schedules
