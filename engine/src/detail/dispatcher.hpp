// The attempt runner: the ready queue, per-type concurrency gates, the worker
// threads, and what running one attempt takes (a synchronous executor, an
// asynchronous one, a timeout).
//
// The ticker hands it references to due tasks ({handle, state word}, see
// task_state.hpp). A worker pops one and starts it only by swapping its state
// word from queued to running; a reference whose word moved on (cancelled,
// rescheduled, re-queued) is dropped, or, for a task cancelled while queued,
// handed back so the engine frees its record. What attempts come to is
// given to the engine (settle()) as it ends, or, while a burst of due tasks
// waits for workers, in batches, so the engine takes its lock once per batch
// rather than once per task (dispatcher.cpp says when).
#pragma once

#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/strand.hpp>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "delayq/timer_wheel.hpp"
#include "detail/lateness_histogram.hpp"
#include "detail/spin_mutex.hpp"
#include "detail/striped.hpp"
#include "detail/task_table.hpp"
#include "detail/type_registry.hpp"

namespace delayq::detail {

/// A due task in the ready queue: which record, and the state word it was
/// queued with (it is still valid while the record's word equals it).
struct ready_ref {
  record_id h = 0;  // its table and its record there (task_table.hpp)
  std::uint32_t tag = 0;
  std::uint16_t kind = 0;
  timer_wheel::record_view v;
  std::uint32_t trigger_count = 0, signals = 0;  // a count-triggered task's, as it was queued
  std::uint32_t priority = 0, ttr_ms = 0;        // the task's, as it was queued
  std::uint64_t fence = 0;  // clusters: the lease token it was dispatched under (task::fence)
  std::uint64_t order = 0;  // when it was scheduled (task_table::stamp())
};

/// What became of a reference the dispatcher took.
struct outcome {
  enum class what : std::uint8_t {
    succeeded,  // the executor returned
    failed,     // it threw, reported a failure, or timed out
    hopeless,   // no executor for the type: retrying changes nothing
    abandoned,  // an asynchronous executor dropped its completion
    dead,       // never started: cancelled while queued; free the record
    withheld,   // never started: the owner's may_start() said no; hold it again
    released,   // the executor released it: due again at `due_ms`, not counted
    buried,     // the executor buried it: a dead letter now, whatever the retries left
  };
  what result = what::succeeded;
  record_id h = 0;        // its table and its record there
  std::uint32_t tag = 0;  // the word as the dispatcher left it
  std::uint16_t kind = 0;
  std::string failure;                    // failed, hopeless: why; buried: the dead letter's error
  std::int64_t due_ms = 0;                // released: when it is due again (ms since the epoch)
  std::optional<std::uint32_t> priority;  // released, buried: the task's new priority
  /// An asynchronous attempt's wish to hear when its outcome is durable.
  attempt_completion::stored_handler on_stored;
};

/// Thread safety: every member is safe from any thread.
class dispatcher {
 public:
  /// The engine's side.
  class owner {
   public:
    virtual ~owner() = default;
    /// Outcomes to apply, in the order they happened per task. Called with
    /// no dispatcher lock held, from a worker or an async executor's thread.
    virtual void settle(std::span<outcome> outcomes) = 0;
    /// Keeps the engine alive while an asynchronous attempt is out.
    virtual std::shared_ptr<void> keep_alive() = 0;
    /// Once check_starts() was called: asked, under the dispatcher's lock,
    /// just before a queued reference starts; false withholds it (outcome
    /// `withheld`). Must not take locks the owner holds while calling in.
    virtual bool may_start(const ready_ref& r) const noexcept = 0;
  };

  dispatcher(owner& o, const type_registry& types, std::size_t workers,
             boost::asio::strand<boost::asio::any_io_executor> strand,
             lateness_histogram& lateness);
  ~dispatcher();
  dispatcher(const dispatcher&) = delete;
  dispatcher& operator=(const dispatcher&) = delete;

  /// Limits attempts of `kind` running at once (before any push()).
  void set_limit(std::uint16_t kind, std::size_t limit);

  /// Queues due tasks, in the order given, and wakes workers; those of
  /// types started where they are found (async_start::immediate) start on
  /// this thread before it returns. Call it holding no lock of the owner.
  void push(std::span<const ready_ref> refs);

  /// From now on ask owner::may_start() before each attempt starts (a
  /// cluster: a reference may wait in the queue past its shard's lease).
  void check_starts() noexcept { check_starts_.store(true, std::memory_order_release); }

  /// No attempt starts from now on (queued references stay where they are).
  void stop_starting() noexcept { starting_.store(false, std::memory_order_release); }

  /// Stops and joins the worker threads (each finishes its attempt first).
  void join();

  /// Attempts started whose outcome has not been settled.
  std::size_t running() const noexcept { return running_.load(std::memory_order_acquire); }
  /// Attempts fired since construction.
  std::uint64_t fired() const noexcept { return fired_.load(); }
  /// Attempts that passed their type's timeout.
  std::uint64_t timed_out() const noexcept { return timed_out_.load(std::memory_order_relaxed); }
  /// References waiting in the ready queue or behind a gate (some may be stale).
  std::size_t backlog() const;

  /// Whether the calling thread is running an attempt of this dispatcher
  /// (an executor calling back into the engine).
  bool in_attempt() const noexcept;

  /// Called once an outcome of a task of `kind` was settled: the attempt no
  /// longer counts.
  void attempt_done(std::uint16_t kind) noexcept {
    type_counters::add(types_.at(kind).counters.mine().running, -1);
    running_.fetch_sub(1, std::memory_order_acq_rel);
  }

  /// Due tasks not started: the owner counts a task of `kind` in when it
  /// queues it and out when it takes it back (cancel, reschedule, replace); a
  /// worker counts it out when it starts it.
  void count_ready(std::uint16_t kind, std::ptrdiff_t delta) noexcept {
    type_counters::add(types_.at(kind).counters.mine().ready, delta);
    ready_count_.add(delta);
  }
  std::size_t ready() const noexcept {
    const std::ptrdiff_t n = ready_count_.load();
    return n > 0 ? static_cast<std::size_t>(n) : 0;
  }

 private:
  struct gate {
    std::size_t limit = 0;
    std::size_t active = 0;
    std::deque<ready_ref> waiting;
  };
  struct attempt;  // an attempt that may outlive its worker (async or timed)
  friend struct attempt;

  void work();
  // Whether references of `kind` start on the thread that pushes them.
  bool immediate(std::uint16_t kind) const noexcept;
  // Starts (or drops, or hands back) one reference on this thread.
  void start_now(const ready_ref& r);
  // Under mutex_: the next reference to start, or false. Stale and dead
  // references met on the way are dealt with.
  bool pop(ready_ref& r);
  void run(const ready_ref& r, task& t);
  void run_tracked(const ready_ref& r, const type_registry::type_info& ti, task& t);
  void report(outcome o);
  void release_gate(std::uint16_t kind);

  owner& owner_;
  const type_registry& types_;
  boost::asio::strand<boost::asio::any_io_executor> strand_;
  lateness_histogram& lateness_;

  mutable spin_mutex mutex_;
  std::condition_variable_any wake_;
  std::deque<ready_ref> ready_;
  std::unordered_map<std::uint16_t, gate> gates_;  // fixed after set_limit() calls
  std::vector<outcome> outcomes_;
  std::size_t sleeping_ = 0;
  bool exiting_ = false;

  std::atomic<bool> starting_{true};
  std::atomic<bool> check_starts_{false};
  std::atomic<std::size_t> running_{0};
  striped_counter<std::ptrdiff_t> ready_count_;  // each worker adds to its own stripe
  striped_counter<std::uint64_t> fired_;
  std::atomic<std::uint64_t> timed_out_{0};
  std::vector<std::thread> threads_;  // last: started once everything above is set
};

}  // namespace delayq::detail
