// engine_core: the skeleton every call that changes the task of one id
// follows (cancel, reschedule, requeue, signal), written once, and the wait
// for an id whose write is in flight that every call shares. The call
// itself brings only two steps: `prepare` (its checks that come after the
// owner's, off the lock) and `decide` (under the id's table lock, given the
// settled record of the id: the change to make, changes/*_change.cpp). The
// skeleton does the rest:
//
//   owner check -> prepare -> pin and fault in the id (a task past the
//   horizon is held from here) -> lock its table -> wait while a write about
//   the id is in flight (find_settled) -> fence -> decide -> settle at once
//   (nothing to write) or hand the change to the store writer -> wait for
//   the answer.
//
// Without a horizon (and so without a cluster, which always pages) the
// tables hold every task there is: the owner check and the fault-in are
// skipped, and no ownership is asked.
#pragma once

#include "detail/engine_core.hpp"

namespace delayq::detail {

template <class Lock>
timer_wheel::handle engine_core::find_settled(Lock& lock, task_table& t, std::string_view id,
                                              std::uint32_t hash) {
  // Calls on one id take effect in order, each seeing the settled outcome of
  // the last: a call finding the id's write in flight waits for it.
  bool waited = false;
  for (int round = 0;; ++round) {
    const timer_wheel::handle h = t.wheel.find(id, hash);
    if (t.busy(id, h)) {
      waited = true;
      ++t.waiters;
      t.changed.wait(lock);
      --t.waiters;
      continue;
    }
    // With a horizon, the write we waited for may have settled a task due
    // past it: the engine let go of it, the store has it. Hold it again.
    if (h != timer_wheel::npos || !waited || !horizon_on() || round > 16) return h;
    // (A caller that pinned the id never gets here: a pinned record is kept.)
    waited = false;
    lock.unlock();
    {
      boost::system::error_code ec;
      pins local(*this);
      fault_in(std::span(&id, 1), local, ec);
    }
    lock.lock();
  }
}

template <class Prepare, class Decide>
bool engine_core::change_id(std::string_view id, change_kind what, id_must must, Prepare&& prepare,
                            Decide&& decide, boost::system::error_code& ec) {
  const bool paging = horizon_on();
  if (paging && !owner_check(id, ec)) return false;  // clusters: only the owner can answer
  if (!prepare(ec)) return false;
  pins pinned(*this);
  if (paging) {
    fault_in(std::span(&id, 1), pinned, ec);
    if (ec) return false;
  }
  id_change d;
  d.hash = hash(id);
  task_table& t = table_for(d.hash);
  d.table = &t;
  t.wheel.prefetch(d.hash);  // the bucket loads while we lock
  const bool durable = writes(what);
  d.durable = durable;
  const auto call = durable ? std::make_shared<call_state>() : nullptr;
  call_state inline_result;
  after_lock after;
  bool queued = false;
  {
    std::unique_lock lock(t.mutex);
    if (state_.load() != run_state::running) {
      ec = errc::not_running;
      return false;
    }
    d.h = find_settled(lock, t, id, d.hash);
    if (must == id_must::be_free && d.h != timer_wheel::npos) {
      ec = errc::duplicate_id;
      return false;
    }
    // Before "not found": a shard lost since owner_check() had its records
    // let go, and its task lives on with the new owner (not_owner, not false).
    std::uint64_t fence = 0;
    if (!call_fence(id, fence, ec)) return false;
    if (!decide(d, ec)) return false;
    if (!durable) {
      settle_change(*d.made(), {}, inline_result, after);
    } else {
      write_op op = make_op(what, t, d.heap->h, what != change_kind::remove);
      op.fence = fence;
      d.heap->call = call;
      op.ctx = std::move(d.heap);
      queued = submit_locked(std::span(&op, 1), call, inline_result, after, true);
    }
  }
  run_after(after);
  return wait_answer(call, queued, inline_result, ec);
}

}  // namespace delayq::detail
