// engine_core: the skeleton every call that changes the task of one id
// follows (cancel, reschedule, requeue, signal), written once. The call
// itself brings only two steps: `prepare` (its checks that come after the
// owner's, off the lock) and `decide` (under the lock, given the settled
// record of the id: what to change). The skeleton does the rest:
//
//   owner check -> prepare -> pin and fault in the id (a task past the
//   horizon is held from here) -> lock -> wait while a write about the id is
//   in flight (find_settled) -> fence -> decide -> settle at once (nothing
//   to write) or hand the write to the store writer -> wait for the answer.
//
// Without a horizon (and so without a cluster, which always pages) the
// wheel holds every task there is: the owner check and the fault-in are
// skipped, and no ownership is asked.
#pragma once

#include "detail/engine_core.hpp"

namespace delayq::detail {

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
  d.hash = wheel_.hash(id);
  wheel_.prefetch(d.hash);  // the bucket loads while we lock
  const bool durable = writes(what);
  const auto call = durable ? std::make_shared<call_state>() : nullptr;
  call_state inline_result;
  after_lock after;
  bool queued = false;
  {
    std::unique_lock lock(mutex_);
    if (state_.load() != run_state::running) {
      ec = errc::not_running;
      return false;
    }
    d.h = find_settled(lock, id, d.hash);
    if (must == id_must::be_free && d.h != timer_wheel::npos) {
      ec = errc::duplicate_id;
      return false;
    }
    // Before "not found": a shard lost since owner_check() had its records
    // let go, and its task lives on with the new owner (not_owner, not false).
    std::uint64_t fence = 0;
    if (!call_fence_locked(id, fence, ec)) return false;
    if (!decide(d, ec)) return false;
    if (!durable) {
      settle_locked(change{d.why, d.h, d.aux, nullptr, {}, id}, inline_result, after);
    } else {
      write_op op = make_op(what, d.why, d.h, what != change_kind::remove);
      op.fence = fence;
      op.aux = d.aux;
      auto ctx = std::make_unique<op_ctx>();
      ctx->call = call;
      ctx->old_due_ms = d.old_due_ms;
      ctx->old_signals = d.old_signals;
      op.ctx = std::move(ctx);
      queued = submit_locked(std::span(&op, 1), call, inline_result, after, true);
    }
  }
  run_after(after);
  return wait_answer(call, queued, inline_result, ec);
}

}  // namespace delayq::detail
