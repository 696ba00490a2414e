// A change to a task: what the engine decided under its table's lock, and
// what follows once the store write that carries it landed or failed.
//
// Every call that changes a task decides one (or, a batch, several) and
// follows one path:
//
//   decide (under the table's lock: validate against what is held, put the
//   record in a transitional state) -> write (a write_op carrying the
//   change, to the store writer; a change the store does not keep is not
//   written) -> landed() or failed() (under the table's lock again).
//
// Each kind of change is a class of its own, in a file named after it, with
// the call that decides it where there is one:
//
//   schedule_change.cpp     a new task, a replace of a held one, a replace of
//                           a running one (schedule, schedule_many,
//                           async_schedule: schedule_calls.cpp)
//   cancel_change.cpp       cancel of a waiting task, of a due one
//   reschedule_change.cpp   a new due time
//   signal_change.cpp       a count-triggered task's signals
//   requeue_change.cpp      a dead letter back as a task, and purge
//   outcome_change.cpp      an attempt's outcome: removal, retry, release,
//                           bury (engine_core::settle)
//
// A change reaches the table through settle_context: the table (its
// record), the call waiting for it, what to do once the lock is let go, and
// the engine's services a change needs (arming, erasing, counting).
#pragma once

#include <atomic>
#include <boost/container/small_vector.hpp>
#include <boost/system/error_code.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <semaphore>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "delayq/detail/schedule_completion.hpp"
#include "delayq/timer_wheel.hpp"
#include "detail/dispatcher.hpp"
#include "detail/failure_policy.hpp"
#include "detail/store_writer.hpp"
#include "detail/task_table.hpp"

namespace delayq::detail {

class engine_core;

/// One API call's answer, filled in as its changes settle.
struct call_state {
  std::atomic<std::size_t> remaining{0};  // its ops not settled yet
  boost::system::error_code ec;
  std::vector<std::string> ids;  // schedule: one per task
  bool found = false;            // cancel, reschedule, requeue, purge
  std::size_t bad = 0;           // schedule: which task an error is about
  std::binary_semaphore done{0};
  std::unique_ptr<schedule_completion> async;
};

/// What settling found to do once the table's lock is let go.
struct after_lock {
  std::vector<call_state*> calls;                  // blocking callers to wake
  std::vector<std::shared_ptr<call_state>> async;  // handlers to call
  // Due references to hand over: one inline, the task a lone schedule that
  // is due at once arms (a put of beanstalk's made ready), with no allocation.
  boost::container::small_vector<ready_ref, 1> requeue;
  std::vector<alert> alerts;
  // Ids whose deferred async calls may run now, with their table.
  std::vector<std::pair<task_table*, std::string>> deferred;
  // attempt_completion's on_stored handlers and what to tell them
  std::vector<std::pair<std::function<void(boost::system::error_code)>, boost::system::error_code>>
      stored;
  std::vector<task_table*> notify;  // tables whose waiters to wake
  std::vector<std::string> reread;  // ids to read from the store again (clusters)
  bool send = false;                // this thread is the store writer's sender now
  bool kick = false;                // this thread hands the queued batch to the store

  bool empty() const noexcept {
    return calls.empty() && async.empty() && requeue.empty() && alerts.empty() &&
           deferred.empty() && stored.empty() && notify.empty() && reread.empty() && !send && !kick;
  }
};

class change;

/// What a change settles with, under `table`'s lock.
struct settle_context {
  engine_core& engine;
  task_table& table;
  call_state& call;
  after_lock& after;
};

/// A change about record `h` of a table (npos for none: a purge), carried by
/// its write_op (op_context) until its outcome is known.
class change : public op_context {
 public:
  change(task_table* table, timer_wheel::handle h) : table(table), h(h) {}
  /// The write landed (or there was none to make).
  virtual void landed(settle_context& c) = 0;
  /// The write failed with `ec` (errc::lease_lost: a cluster's fence refused it).
  virtual void failed(settle_context& c, const boost::system::error_code& ec) = 0;
  /// Whether it settles a record (calls deferred on its id may go on then).
  virtual bool settles_record() const noexcept { return h != timer_wheel::npos; }

  /// Its table (null: none, a purge) and record there.
  task_table* table;
  timer_wheel::handle h;
  /// The call waiting for it, if any.
  std::shared_ptr<call_state> call;
  /// Which task of a schedule call.
  std::size_t index = 0;
};

}  // namespace delayq::detail
