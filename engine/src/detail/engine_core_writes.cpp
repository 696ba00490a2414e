// engine_core: the write path. A change decided under its table's lock
// travels to the store writer in a write_op (the change is its context),
// and comes back, once the write landed or failed, to settle under that
// table's lock again (the change's landed() or failed()). What settling
// finds to do with no lock held (wake a caller, complete a handler, hand a
// due task over, raise an alert, run the calls deferred on an id) is done
// by run_after().
#include "detail/engine_core.hpp"
#include "detail/task_state.hpp"

namespace delayq::detail {

write_op engine_core::make_op(change_kind what, const task_table& t, timer_wheel::handle h,
                              bool with_task) {
  write_op op;
  op.what = what;
  // A store that keeps no live tasks reads nothing of a live change.
  const bool live = what == change_kind::save || what == change_kind::remove;
  if (live && !writer_.persists_live()) return op;
  if (with_task)
    op.t = task_of(t, h);
  else
    op.t.id = std::string(t.wheel.id(h));
  return op;
}

bool engine_core::submit_locked(std::span<write_op> ops, const std::shared_ptr<call_state>& call,
                                call_state& inline_call, after_lock& after, bool may_send) {
  if (ops.empty()) return false;
  if (call) call->remaining = ops.size();
  switch (writer_.submit(ops, may_send)) {
    case store_writer::result::queued: return true;
    case store_writer::result::send:
      after.send = true;  // written by this thread once the locks are let go
      return true;
    case store_writer::result::kick:
      after.kick = true;  // handed to the store by this thread once the locks are let go
      return true;
    case store_writer::result::busy:
      for (write_op& op : ops) op.ec = errc::busy;
      break;
    case store_writer::result::done: break;
  }
  // Settled on this thread, before anyone else could see the records'
  // transitional states (the caller holds their tables' locks).
  if (call) call->remaining = 0;
  for (write_op& op : ops) {
    if (op.on_stored) after.stored.emplace_back(std::move(op.on_stored), op.ec);
    if (op.ctx) settle_change(static_cast<change&>(*op.ctx), op.ec, inline_call, after);
  }
  return false;
}

void engine_core::on_written(std::span<write_op> ops) {
  after_lock after;
  call_state none;
  for (write_op& op : ops) {
    auto* c = static_cast<change*>(op.ctx.get());
    if (op.on_stored) after.stored.emplace_back(std::move(op.on_stored), op.ec);
    if (!c) continue;
    call_state& call = c->call ? *c->call : none;
    if (c->table) {
      std::lock_guard lock(c->table->mutex);
      settle_change(*c, op.ec, call, after);
    } else {
      settle_change(*c, op.ec, call, after);  // a purge, a bury: no record
    }
    if (c->call && --call.remaining == 0) {
      if (call.async)
        after.async.push_back(c->call);
      else
        after.calls.push_back(&call);
    }
  }
  run_after(after);
}

void engine_core::settle_change(change& c, const boost::system::error_code& ec, call_state& call,
                                after_lock& after) {
  if (ec && !call.ec) call.ec = ec;
  if (!c.table) {
    settle_context ctx{*this, *tables_[0], call, after};
    if (ec)
      c.failed(ctx, ec);
    else
      c.landed(ctx);
    return;
  }
  task_table& t = *c.table;
  // Calls deferred behind this id's write may go on once it settled.
  std::string id;
  if (c.settles_record() && !t.deferred.empty()) id = std::string(t.wheel.id(c.h));
  settle_context ctx{*this, t, call, after};
  if (ec)
    c.failed(ctx, ec);
  else
    c.landed(ctx);
  if (!id.empty() && t.deferred.count(id) != 0) after.deferred.emplace_back(&t, std::move(id));
  if (t.waiters > 0) after.notify.push_back(&t);
}

void engine_core::run_after(after_lock& after) {
  if (after.empty()) return;  // the usual case: a call settled in place, nothing to wake
  if (after.send) {
    // This thread is the store writer's sender: its change goes out now,
    // and its outcome is settled here (on_written) before the call waits.
    after.send = false;
    writer_.send();
  }
  if (after.kick) {
    // Handed to the store's own thread from here, which reports it (store
    // writer, "Hand-offs"): no detour through the writer thread.
    after.kick = false;
    writer_.kick();
  }
  // Due tasks first: those of immediate types (async_start::immediate) are
  // started before the calls that made them due are answered, so an answer
  // (a 201, beanstalk's INSERTED or RELEASED) means the task was handed on.
  if (!after.requeue.empty())
    dispatcher_.push(std::span<const ready_ref>(after.requeue.data(), after.requeue.size()));
  for (auto& [handler, ec] : after.stored) handler(ec);
  for (call_state* c : after.calls) c->done.release();  // the last touch: the caller owns it
  for (auto& c : after.async)
    c->async->complete(c->ec, c->ec || c->ids.empty() ? std::string{} : c->ids[0]);
  if (!after.alerts.empty()) failures_.raise(after.alerts);
  // Calls waiting for an id of these tables to settle (condition_variable_any
  // takes its own lock before the waiter lets go of the table's, so a
  // notify after the change was made under the table's lock is not missed).
  for (task_table* t : after.notify) t->changed.notify_all();
  // On the pager's thread: a read of the store waits for the writes queued
  // before it, and this may be the writer's thread.
  for (std::string& id : after.reread)
    pager_.post([this, id = std::move(id)] {
      boost::system::error_code ec;
      pins p(*this);
      const std::string_view key = id;
      fault_in(std::span(&key, 1), p, ec);
    });
  for (auto& [t, id] : after.deferred) {
    std::vector<deferred_call> calls;
    {
      std::lock_guard lock(t->mutex);
      auto it = t->deferred.find(id);
      if (it == t->deferred.end()) continue;
      calls = std::move(it->second);
      t->deferred.erase(it);
    }
    for (deferred_call& d : calls) async_schedule_ref(d.spec, d.done);
  }
}

}  // namespace delayq::detail
