// engine_core: the write path: ops to the store writer, and what their
// outcome does to the records (settle_locked, by the op's purpose). What an
// attempt's outcome does is decided by attempt_settler and applied in
// engine_core_fire.cpp.
#include "detail/engine_core.hpp"
#include "detail/task_state.hpp"

namespace delayq::detail {
namespace {

namespace tsw = task_state_word;
using std::chrono::milliseconds;

}  // namespace

// ------------------------------------------------------------------ the write path

write_op engine_core::make_op(change_kind what, purpose why, timer_wheel::handle h,
                              bool with_task) {
  write_op op;
  op.what = what;
  op.purpose = why;
  op.handle = h;
  // A store that keeps no live tasks reads nothing of a live change.
  const bool live = what == change_kind::save || what == change_kind::remove;
  if (live && !writer_.persists_live()) return op;
  if (with_task)
    op.t = task_of(h);
  else
    op.t.id = std::string(wheel_.id(h));
  return op;
}

bool engine_core::submit_locked(std::span<write_op> ops, const std::shared_ptr<call_state>& call,
                                call_state& inline_call, after_lock& after, bool may_send) {
  if (ops.empty()) return false;
  if (call) call->remaining = ops.size();
  switch (writer_.submit(ops, may_send)) {
    case store_writer::result::queued: return true;
    case store_writer::result::send:
      after.send = true;  // written by this thread once the lock is let go
      return true;
    case store_writer::result::busy:
      for (write_op& op : ops) op.ec = errc::busy;
      break;
    case store_writer::result::done: break;
  }
  // Settled on this thread, before anyone else could see the records'
  // transitional states.
  if (call) call->remaining = 0;
  for (write_op& op : ops) {
    if (op.on_stored) after.stored.emplace_back(std::move(op.on_stored), op.ec);
    settle_locked(change{static_cast<purpose>(op.purpose), op.handle, op.aux,
                         static_cast<op_ctx*>(op.ctx.get()), op.ec, op.t.id},
                  inline_call, after);
  }
  return false;
}

void engine_core::on_written(std::span<write_op> ops) {
  after_lock after;
  {
    std::lock_guard lock(mutex_);
    call_state none;
    for (write_op& op : ops) {
      auto* ctx = static_cast<op_ctx*>(op.ctx.get());
      call_state& call = ctx ? *ctx->call : none;
      if (op.on_stored) after.stored.emplace_back(std::move(op.on_stored), op.ec);
      settle_locked(
          change{static_cast<purpose>(op.purpose), op.handle, op.aux, ctx, op.ec, op.t.id}, call,
          after);
      if (ctx && --call.remaining == 0) {
        if (call.async)
          after.async.push_back(ctx->call);
        else
          after.calls.push_back(&call);
      }
    }
  }
  run_after(after);
}

void engine_core::settle_locked(const change& op, call_state& call, after_lock& after) {
  const bool ok = !op.ec;
  if (!ok && !call.ec) call.ec = op.ec;
  const timer_wheel::handle h = op.h;
  op_ctx* ctx = op.ctx;
  bool settled_record = h != timer_wheel::npos;
  switch (op.why) {
    case p_none: settled_record = false; break;
    case p_bury:
      // Counted when the attempt died, so that stats() shows it at once; a
      // write refused by the fence (the shard moved on) made no dead letter:
      // the new owner runs the task again.
      settled_record = false;
      if (op.ec == errc::lease_lost && dead_ > 0) --dead_;
      break;
    case p_insert:
      if (ok) {
        arm_locked(h, wheel_.due_ms(h), &after);
        call.found = true;
        if (op.aux == 1) {
          if (dead_ > 0) --dead_;
        } else {
          ++scheduled_;
          count(h, &type_counters::scheduled);
        }
        evict_if_far_locked(h);  // a far task: the store holds it now
      } else {
        erase_locked(h);
      }
      break;
    case p_replace:
      if (ok) {
        ++scheduled_;
        count(h, &type_counters::scheduled);
      } else if (ctx) {
        --kind_pending(wheel_.kind(h));
        wheel_.assign(h, {{}, ctx->old_payload, ctx->old_kind, ctx->old_due_ms, ctx->old_attempts});
        set_trigger_locked(h, ctx->old_trigger, ctx->old_signals);
        set_attrs_locked(h, {ctx->old_priority, ctx->old_ttr_ms});
        ++kind_pending(ctx->old_kind);
      }
      arm_locked(h, wheel_.due_ms(h), &after);
      if (ok) evict_if_far_locked(h);  // after a failed write the store may hold either
      break;
    case p_replace_running:
      if (ok) {
        arm_locked(h, wheel_.due_ms(h), &after);
        ++scheduled_;
        count(h, &type_counters::scheduled);
        evict_if_far_locked(h);
      } else {
        erase_locked(h);
        // Give the id back to the old version if it is still running.
        const auto old = static_cast<timer_wheel::handle>(op.aux);
        if (ctx && tag(old) == ctx->old_running_tag && !wheel_.is_indexed(old) &&
            wheel_.reindex(old)) {
          --unindexed_;
          ++kind_pending(wheel_.kind(old));
        }
      }
      break;
    case p_cancel:
      if (ok) {
        count(h, &type_counters::cancelled);
        erase_locked(h);
        ++cancelled_;
        call.found = true;
      } else {
        arm_locked(h, wheel_.due_ms(h), &after);  // held: the failed remove may yet land
      }
      break;
    case p_cancel_queued: {
      auto word = tsw::word(wheel_.tag(h));
      std::uint32_t w = word.load(std::memory_order_acquire);
      if (ok) {
        ++cancelled_;
        count(h, &type_counters::cancelled);
        call.found = true;
        dispatcher_.count_ready(wheel_.kind(h), -1);
        --kind_pending(wheel_.kind(h));
        pager_.note_gone_locked(wheel_.id(h));
        wheel_.unindex(h);
        ++unindexed_;
        // Its queue reference frees the record, unless a worker already let
        // go of it (orphaned): then nobody else will.
        while (!(w & tsw::orphaned) && !word.compare_exchange_weak(w, tsw::with_state(w, tsw::dead),
                                                                   std::memory_order_acq_rel)) {
        }
        if (w & tsw::orphaned) erase_locked(h);
      } else {
        // The cancel failed: the task is due again, as it was.
        while (!(w & tsw::orphaned) &&
               !word.compare_exchange_weak(w, tsw::with_state(w, tsw::queued),
                                           std::memory_order_acq_rel)) {
        }
        if (w & tsw::orphaned) {
          const std::uint32_t q = tsw::next_queued(w);
          word.store(q, std::memory_order_release);
          after.requeue.push_back(ready_of(h, q));
        }
      }
      break;
    }
    case p_reschedule:
      if (ok)
        call.found = true;
      else if (ctx)
        wheel_.set_due_ms(h, ctx->old_due_ms);
      arm_locked(h, wheel_.due_ms(h), &after);
      if (ok) evict_if_far_locked(h);
      break;
    case p_retry:
      // Armed whatever the outcome: a failed write is kept and retried, and
      // the retry runs meanwhile (the store keeps the older attempt count).
      if (op.ec == errc::lease_lost) {
        erase_locked(h);  // its shard moved on: the new owner runs it
      } else if (state_.load() == run_state::running) {
        wheel_.set_attempts(h, wheel_.attempts(h) + 1);
        wheel_.set_due_ms(h, static_cast<std::int64_t>(op.aux));
        arm_locked(h, wheel_.due_ms(h), &after);
        if (ok) evict_if_far_locked(h);  // a kept write: the store holds the old due time
      } else {
        erase_locked(h);  // stopping: the store has it for the next start
      }
      break;
    case p_release:
      // As a retry, with the attempt count unchanged.
      if (op.ec == errc::lease_lost) {
        erase_locked(h);
      } else if (state_.load() == run_state::running) {
        wheel_.set_due_ms(h, static_cast<std::int64_t>(op.aux));
        arm_locked(h, wheel_.due_ms(h), &after);
        if (ok) evict_if_far_locked(h);
      } else {
        erase_locked(h);
      }
      break;
    case p_signal:
      if (ok) {
        call.found = true;
      } else if (ctx) {
        set_trigger_locked(h, trigger_of(h).count, ctx->old_signals);
        wheel_.set_due_ms(h, ctx->old_due_ms);
      }
      arm_locked(h, wheel_.due_ms(h), &after);
      if (ok) evict_if_far_locked(h);
      break;
    case p_purge:
      settled_record = false;
      if (ok) {
        call.found = true;
        if (dead_ > 0) --dead_;
      }
      break;
  }
  if (settled_record && !deferred_.empty() && !op.id.empty()) {
    const std::string id(op.id);
    if (deferred_.count(id) != 0) after.deferred.push_back(id);
  }
}

void engine_core::run_after(after_lock& after) {
  if (after.calls.empty() && after.async.empty() && after.requeue.empty() && after.alerts.empty() &&
      after.deferred.empty() && after.stored.empty() && !after.send)
    return;  // the usual case: a call settled in place, nothing to wake
  if (after.send) {
    // This thread is the store writer's sender: its change goes out now,
    // and its outcome is settled here (on_written) before the call waits.
    after.send = false;
    writer_.send();
  }
  // Due tasks first: those of immediate types (async_start::immediate) are
  // started before the calls that made them due are answered, so an answer
  // (a 201, beanstalk's INSERTED or RELEASED) means the task was handed on.
  if (!after.requeue.empty()) dispatcher_.push(after.requeue);
  for (auto& [handler, ec] : after.stored) handler(ec);
  for (call_state* c : after.calls) c->done.release();  // the last touch: the caller owns it
  for (auto& c : after.async)
    c->async->complete(c->ec, c->ec || c->ids.empty() ? std::string{} : c->ids[0]);
  if (!after.alerts.empty()) failures_.raise(after.alerts);
  for (const std::string& id : after.deferred) {
    std::vector<deferred_call> calls;
    {
      std::lock_guard lock(mutex_);
      auto it = deferred_.find(id);
      if (it == deferred_.end()) continue;
      calls = std::move(it->second);
      deferred_.erase(it);
    }
    for (deferred_call& d : calls) async_schedule_ref(d.spec, d.done);
  }
  if (!after.calls.empty() || !after.async.empty() || !after.requeue.empty() ||
      !after.deferred.empty())
    changed_.notify_all();
}

}  // namespace delayq::detail
