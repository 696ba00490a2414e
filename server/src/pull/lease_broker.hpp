// lease_broker: hands due tasks of pull types to remote consumers under
// leases (POST /v1/reserve, finish, fail, touch in docs/server.md).
//
// To the engine, a pulled task is one asynchronous attempt (async_executor):
// it fires as usual, and the server's fallback executor offers it here with
// its completion. The task stays in the store all along, so a crash of the
// server delivers it again after a restart. Here it is first *ready*
// (waiting for a consumer), then *reserved* under a lease: an opaque token
// unique to this attempt, with a deadline. Whatever ends the attempt calls
// the completion exactly once:
// - finish: success; the consumer is answered once the removal is durable;
// - fail: failure; answered once the retry or dead letter is durable;
// - the deadline passing: failure "lease expired after N ms";
// - a reserve answer that could not be written, a drain, or a cancel of a
//   ready task: the completion is dropped, which gives the task back to the
//   engine with its attempt not counted (async_executor's "abandon").
// A finish, fail or touch carrying any other lease gets stale_lease, so a
// slow consumer can never end the attempt that replaced its own.
//
// Consumers long-poll: a reserve that finds nothing waits (a timer per
// waiter) and is answered by the first offer of a type it asked for.
//
// Order: among the ready tasks of the types a reserve asks for, the lowest
// task::priority goes first, then the earliest due, then (beanstalkd's
// order among jobs put together) the lowest id number, then the one offered
// first. HTTP tasks have priority 0 unless they set one. A lease lasts the
// task's own ttr when it has one, else the reserve's. A paused type
// (pause()) is skipped by every reserve until its pause ends.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "delayq/executor.hpp"
#include "delayq/task.hpp"
#include "pull/slot_index.hpp"
#include "wire/request_codec.hpp"

namespace delayq::server {

/// A task handed to a consumer, with its lease.
struct leased_task {
  task t;
  std::string lease;
  /// When the lease ends unless it is touched.
  std::chrono::steady_clock::time_point deadline{};
};

/// How a reserve leases what it takes, beyond what reserve_request says.
struct lease_terms {
  /// When the lease passes its deadline: false (HTTP) fails the attempt
  /// ("lease expired", counted, retried by the retry policy); true
  /// (beanstalk) gives the task back uncounted, ready again at once, as
  /// beanstalkd does when a job's time-to-run ends.
  bool expiry_abandons = false;
};

/// Thread safety: every member is safe to call from any thread. Handlers
/// (reserve answers, on_stored) run on the thread that decides them, never
/// under the broker's lock: a reserve that finds a task ready calls its
/// handler before reserve() returns, a waiting one is answered on the
/// thread of the offer that served it or on the broker's executor (its
/// timeout), on_stored on the engine's.
class lease_broker {
 public:
  using clock = std::chrono::steady_clock;
  using reserve_handler = std::function<void(std::vector<leased_task>)>;
  /// Priorities below this count as urgent (beanstalkd's current-jobs-urgent).
  static constexpr std::uint32_t urgent_below = 1024;

  /// `instance` (under --cluster, else empty): every lease ends in
  /// "@" + instance, so that a finish, fail or touch made on another
  /// instance of the cluster is forwarded here, where the attempt runs,
  /// even while the task's shard is being handed over.
  explicit lease_broker(boost::asio::any_io_executor ex, std::string instance = {});

  /// The instance named at the end of `lease` (after its first '@'), or
  /// empty for a lease without one.
  static std::string instance_of(std::string_view lease);
  ~lease_broker();
  lease_broker(const lease_broker&) = delete;
  lease_broker& operator=(const lease_broker&) = delete;

  /// Called when a waiting reserve's time is up, before it is answered
  /// with nothing: delayq-server hands the engine's due tasks over there
  /// (engine::fire_due()), so a reserve whose deadline is not earlier than a
  /// task's due time gets the task. Set it before the first reserve; it
  /// runs with no lock of the broker held.
  void set_before_timeout(std::function<void()> f) { before_timeout_ = std::move(f); }

  /// Asked, under the broker's lock, before a ready task is leased: false
  /// when its attempt no longer runs under its shard's lease
  /// (engine::attempt_current(): the instance stalled or was cut off while
  /// the task waited for a consumer, and another instance owns it now).
  /// Such a task is given back uncounted instead of leased (counted in
  /// counters::stale): handing it out would have a consumer work on a task
  /// the shard's new owner runs, or ran and finished, already. Must not
  /// block or call back into the broker. Set before the first offer.
  void set_attempt_check(std::function<bool(const task&)> check) {
    attempt_check_ = std::move(check);
  }

  /// Gives back, uncounted, every ready task whose attempt is no longer
  /// current (set_attempt_check()): its shard was lost or is being handed
  /// over, and no consumer took it meanwhile. Returns how many. For
  /// engine_options::on_attempts_stale: a hand-over waits for the attempts
  /// on the shard, and a ready task is one until a consumer takes it.
  std::size_t release_stale();

  /// The engine's side: a due task of a pull type, and its attempt's
  /// completion. After close() the completion is dropped at once.
  void offer(const task& t, attempt_completion done);

  /// Answers `handler` (once) with up to `r.max` leased tasks of the types
  /// asked for, as soon as at least one is ready (before returning, when
  /// one is ready now), or with none after `r.wait`. Returns the waiter's
  /// number when it waits (for cancel_wait()), else 0.
  std::uint64_t reserve(const reserve_request& r, reserve_handler handler, lease_terms terms = {});

  /// Leases the task `id` if it is ready here (beanstalk's reserve-job);
  /// nullopt when it is not (not held, or reserved already).
  std::optional<leased_task> reserve_id(const std::string& id, std::chrono::milliseconds ttr,
                                        lease_terms terms = {});

  /// The ready task a reserve of `type` would get next, without leasing it.
  std::optional<task> peek_ready(const std::string& type);

  /// Holds back every reserve of `type` until now + `pause` (0 ends a
  /// pause); waiting consumers are served when it ends.
  void pause(const std::string& type, std::chrono::milliseconds pause);
  /// How long `type` stays paused from now (0: not paused).
  std::chrono::milliseconds paused_for(const std::string& type) const;

  /// The consumer of waiter `n` went away: answers it with nothing now, so
  /// no task is leased to a closed connection. No-op when already answered.
  void cancel_wait(std::uint64_t n);

  /// Gives tasks back whose reserve answer never reached the consumer: their
  /// attempts end uncounted and the engine offers them again.
  void give_back(const std::vector<leased_task>& tasks);

  enum class lease_result { ok, stale };
  /// Ends the attempt as a success; `on_stored` as attempt_completion says.
  lease_result finish(const std::string& id, const std::string& lease,
                      attempt_completion::stored_handler on_stored);
  /// Ends the attempt as a failure with `error`.
  lease_result fail(const std::string& id, const std::string& lease, std::string error,
                    attempt_completion::stored_handler on_stored);
  /// Moves the lease's deadline to now + `ttr` (or its length at reserve).
  lease_result touch(const std::string& id, const std::string& lease,
                     std::optional<std::chrono::milliseconds> ttr);
  /// Ends the attempt uncounted: the task waits until `due`, with
  /// `priority` when given (attempt_completion::release).
  lease_result release(const std::string& id, const std::string& lease,
                       std::chrono::system_clock::time_point due,
                       std::optional<std::uint32_t> priority,
                       attempt_completion::stored_handler on_stored);
  /// Ends the attempt by burying the task now (attempt_completion::bury).
  lease_result bury(const std::string& id, const std::string& lease, std::string reason,
                    std::optional<std::uint32_t> priority,
                    attempt_completion::stored_handler on_stored);

  /// A reserved task's lease: its token and deadline (none when the task is
  /// not reserved here).
  std::optional<leased_task> lease_of(const std::string& id) const;

  enum class held { none, ready, reserved };
  /// Where the task is here (none: not held, e.g. being pushed).
  held state_of(const std::string& id) const;

  /// Gives a ready (not reserved) task back to the engine uncounted, so a
  /// cancel or reschedule can reach it; false when it is not ready here.
  bool release_ready(const std::string& id);

  /// Gives every ready task of `type` back to the engine (a push target was
  /// just registered: the engine offers them again, and they are pushed).
  std::size_t release_type(const std::string& type);

  /// Answers waiting consumers with nothing, and later reserves at once.
  /// The drain's first step: long polls must not hold it up.
  void stop_waiting();
  /// Gives every held task back, answers waiting consumers with nothing, and
  /// drops later offers. The drain's last step.
  void close();

  struct counters {
    std::size_t ready = 0;
    std::size_t reserved = 0;
    std::size_t waiting_consumers = 0;
    std::uint64_t reserved_total = 0;  ///< Leases granted.
    std::uint64_t finished = 0;
    std::uint64_t failed = 0;
    std::uint64_t expired = 0;  ///< Leases that ended by their deadline.
    std::uint64_t given_back = 0;
    /// Of those, ready tasks whose attempt had lost its shard's lease when a
    /// consumer came for them (set_attempt_check()).
    std::uint64_t stale = 0;
  };
  counters stats() const;

  /// One type's share (types never offered here are absent).
  struct type_counters {
    std::size_t ready = 0;     ///< Waiting for a consumer.
    std::size_t urgent = 0;    ///< Of those, with a priority below 1024 (beanstalk's "urgent").
    std::size_t reserved = 0;  ///< Leased now.
    std::uint64_t leased = 0;  ///< Leases granted.
    std::uint64_t expired = 0;
  };
  /// Per type, by name.
  std::map<std::string, type_counters, std::less<>> type_stats() const;

 private:
  // A reserved task's lease (a ready one has none).
  struct lease_state {
    std::string token;
    std::chrono::milliseconds ttr{0};
    clock::time_point deadline{};
    bool expiry_abandons = false;  // lease_terms of its lease
  };
  // A held task, in a slot of blocks_. It holds no copy of the task: `t` is
  // the attempt's own, which stays valid as long as a copy of `done` lives
  // (async_executor), and `done` lives here until the entry is removed. A
  // ready entry is about 64 bytes; a copy of the task would be twice that,
  // and this is per ready job (a backlog of them).
  struct entry {
    const task* t = nullptr;
    attempt_completion done;
    std::uint64_t seq = 0;               // the order it was offered in; 0: a free slot
    type_counters* per_type = nullptr;   // in per_type_ (map nodes stay put)
    std::unique_ptr<lease_state> lease;  // null while ready
  };
  struct waiter {
    std::uint64_t n = 0;
    reserve_request r;
    lease_terms terms;
    reserve_handler handler;
    std::shared_ptr<boost::asio::steady_timer> timer;
  };
  // A ready task's place in its type's order: handed out by priority, then
  // due time, then the id's number (a beanstalk job's id: the order it was
  // put in, when several were due in the same millisecond), then the order
  // offered (seq, unique). It names its entry by slot; the key is valid
  // while that slot holds the same offer (seq) and it is still ready, and
  // keys no longer valid are skipped lazily.
  struct ready_key {
    std::uint32_t priority = 0;
    std::uint32_t slot = 0;
    std::int64_t due_ms = 0;
    std::uint64_t number = 0;  // the id as a decimal number, else the largest
    std::uint64_t seq = 0;
    bool operator<(const ready_key& o) const {
      return std::tie(priority, due_ms, number, seq) <
             std::tie(o.priority, o.due_ms, o.number, o.seq);
    }
  };
  // A type's ready keys, a binary heap whose front is handed out first (a
  // heap of 32-byte keys, not a tree of nodes: a backlog's order costs
  // about 40 bytes a job).
  using ready_heap = std::vector<ready_key>;

  // Under mutex_: leases up to `max` ready tasks of `types` (empty: any).
  // Completions of stale ready tasks (set_attempt_check()) go to `stale`,
  // for the caller to drop after the lock.
  std::vector<leased_task> take_locked(const std::vector<std::string>& types, std::size_t max,
                                       std::chrono::milliseconds ttr, lease_terms terms,
                                       clock::time_point now,
                                       std::vector<attempt_completion>& stale);
  // Under mutex_: false (and the entry given back into `stale`) when the
  // ready entry in `slot`'s attempt is no longer current.
  bool current_locked(std::uint32_t slot, std::vector<attempt_completion>& stale);
  void lease_locked(std::uint32_t slot, std::chrono::milliseconds ttr, lease_terms terms,
                    clock::time_point now, std::vector<leased_task>& out);
  // Under mutex_: the ready queue's best valid key of `type` (invalid keys
  // on the way are dropped), or null.
  const ready_key* best_ready_locked(const std::string& type);
  // Under mutex_: whether `k` still names a ready entry.
  bool valid_locked(const ready_key& k) const;
  // Under mutex_: a held entry stops being ready (leased, given back, gone).
  void unready_locked(entry& e);
  // Under mutex_: the slot of task `id`, if it is held.
  std::optional<std::uint32_t> find_locked(std::string_view id) const;
  // Under mutex_: calls `f(slot)` for every held entry.
  template <class F>
  void for_each_held_locked(F&& f);
  entry& at(std::uint32_t slot) { return blocks_[slot / block_size][slot % block_size]; }
  const entry& at(std::uint32_t slot) const {
    return blocks_[slot / block_size][slot % block_size];
  }
  // Under mutex_: a free slot for a new entry.
  std::uint32_t new_slot_locked();
  // Under mutex_: removes the entry in `slot` and frees it; returns it, for
  // the caller to drop after the lock (its completion may call the engine).
  entry remove_locked(std::uint32_t slot);
  // Under mutex_: when nothing is held, frees what a backlog grew.
  void shrink_when_idle_locked();
  // Under mutex_: serves waiting consumers from what is ready now; the
  // handlers to answer are appended to `answers`.
  void serve_waiters_locked(
      std::vector<std::pair<reserve_handler, std::vector<leased_task>>>& answers,
      std::vector<attempt_completion>& stale);
  // Under mutex_: arms the timer that serves waiting consumers when the
  // earliest pause ends.
  void arm_pause_end_locked();
  // Under mutex_: the attempt's entry if `lease` is its current one; removes it.
  std::optional<entry> end_lease_locked(const std::string& id, const std::string& lease);
  // finish, fail, release, bury: ends the attempt under `lease` with `end`
  // (called with its completion, outside the lock), counting it in `count`
  // (null: not counted).
  template <class End>
  lease_result end_attempt(const std::string& id, const std::string& lease,
                           std::uint64_t counters::*count, End&& end);
  void arm_sweep_locked(clock::time_point when);
  // Under mutex_: drops queue fronts that are no longer ready, and the queue
  // when it is empty, so released entries do not pile up.
  void trim_locked(const std::string& type);
  void sweep();
  void answer(reserve_handler h, std::vector<leased_task> tasks);
  std::string new_lease();
  static ready_key key_of(const task& t, std::uint64_t seq, std::uint32_t slot);
  std::string lease_suffix_;  // "@" + instance, or empty

  boost::asio::any_io_executor ex_;
  std::function<void()> before_timeout_;
  std::function<bool(const task&)> attempt_check_;  // set before the first offer
  mutable std::mutex mutex_;
  bool closed_ = false;
  bool no_wait_ = false;
  std::uint64_t seq_ = 0;
  // The entries, in blocks that never move, so a slot number stays valid;
  // freed slots are reused.
  static constexpr std::uint32_t block_size = 4096;
  std::vector<std::unique_ptr<entry[]>> blocks_;
  std::vector<std::uint32_t> free_slots_;
  // Held task ids to their slots.
  slot_index held_;
  std::map<std::string, ready_heap, std::less<>> ready_;
  std::map<std::string, clock::time_point, std::less<>> paused_until_;
  std::shared_ptr<boost::asio::steady_timer> pause_timer_;
  std::set<std::pair<clock::time_point, std::string>> deadlines_;
  std::list<waiter> waiters_;
  std::uint64_t waiter_seq_ = 0;
  boost::asio::steady_timer sweep_timer_;
  clock::time_point sweep_at_ = clock::time_point::max();
  std::uint64_t lease_counter_ = 0;
  counters counters_;
  std::map<std::string, type_counters, std::less<>> per_type_;  // never shrinks
};

}  // namespace delayq::server
