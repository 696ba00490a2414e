// The outcome changes: what an attempt's end does to its task, as the
// attempt settler judged it (attempt_settler.hpp): the task leaves the
// store (a success), waits again with one more attempt counted (a retry) or
// not (a release), or becomes a dead letter (the last failure, or a bury).
// Nobody waits for these writes: they are kept and written again until they
// land (store_writer), and the attempt's on_stored hears of the first
// outcome.
//
//   retry_change     armed at the retry's due time whatever the write's
//                    outcome (a failed write is kept; the store keeps the
//                    older count meanwhile), erased if a cluster's fence
//                    refused it (the shard's new owner runs it)
//   release_change   the same, with the attempt count unchanged
//   bury_change      counted when the attempt died (stats show it at once);
//                    uncounted if the fence refused it
//   (a success's removal settles nothing: its write has no context)
#include <algorithm>

#include "delayq/log.hpp"
#include "detail/engine_core.hpp"
#include "detail/task_state.hpp"

namespace delayq::detail {
namespace {

namespace tsw = task_state_word;
using std::chrono::milliseconds;

// A retry or a release: the new due time (and, a retry, the count) apply
// once the write is decided, whichever way it went.
class due_again_change final : public change {
 public:
  due_again_change(task_table* t, timer_wheel::handle h, std::int64_t due_ms, bool counts,
                   std::uint64_t fence)
      : change(t, h), due_ms(due_ms), counts(counts), fence(fence) {}
  void landed(settle_context& c) override { apply(c, true); }
  void failed(settle_context& c, const boost::system::error_code& ec) override {
    if (ec == errc::lease_lost)
      c.engine.erase_locked(c.table, h);  // its shard moved on: the new owner runs it
    else
      apply(c, false);
  }

  std::int64_t due_ms;
  bool counts;          // a retry: one more attempt counted
  std::uint64_t fence;  // the lease token the attempt ran under (clusters)

 private:
  void apply(settle_context& c, bool ok) {
    if (!c.engine.is_running()) {
      c.engine.erase_locked(c.table, h);  // stopping: the store has it for the next start
      return;
    }
    // A write that failed (the store unreachable: it is kept) or landed
    // while the shard's lease ran out: armed here, the earlier tenure's copy
    // would run again on a shard another instance may have run it on since.
    if (c.engine.drop_if_tenure_ended_locked(c.table, h, fence, c.after)) return;
    timer_wheel& w = c.table.wheel;
    if (counts) w.set_attempts(h, w.attempts(h) + 1);
    w.set_due_ms(h, due_ms);
    c.engine.arm_locked(c.table, h, due_ms, &c.after);
    if (ok) c.engine.evict_if_far_locked(c.table, h);  // a kept write: the store has the old one
  }
};

class bury_change final : public change {
 public:
  bury_change() : change(nullptr, timer_wheel::npos) {}
  void landed(settle_context&) override {}
  void failed(settle_context& c, const boost::system::error_code& ec) override {
    // Counted when the attempt died; a write refused by the fence (the
    // shard moved on) made no dead letter: the new owner runs the task again.
    if (ec == errc::lease_lost) c.engine.note_dead(-1);
  }
};

}  // namespace

void engine_core::settle(std::span<outcome> outcomes) {
  // Before any attempt is counted out of running(): stop() waits for both
  // to reach 0, and then flushes the writer, which must find the writes
  // queued below (the removal of an attempt that succeeded during the
  // drain). Counted out of running() first, with the write queued after the
  // flush, stop() returned before it was written.
  settling_.fetch_add(1);
  after_lock after;
  call_state none;
  bool leaving_settled = false;
  const bool stopping = state_.load() != run_state::running;
  // Outcomes of one table in a row settle under one hold of its lock.
  std::size_t i = 0;
  while (i < outcomes.size()) {
    task_table& t = table_of_record(outcomes[i].h);
    std::size_t end = i + 1;
    while (end < outcomes.size() && table_of(outcomes[end].h) == t.index) ++end;
    std::lock_guard lock(t.mutex);
    // Most outcomes end in an erase, whose index bucket is a cache miss in a
    // large wheel: ask for every bucket of the batch before the first.
    if (end - i > 1)
      for (std::size_t k = i; k < end; ++k) t.wheel.prefetch_index_of(handle_of(outcomes[k].h));
    for (; i < end; ++i) {
      outcome& o = outcomes[i];
      const timer_wheel::handle h = handle_of(o.h);
      // Clusters: the lease token the attempt was dispatched under fences
      // its outcome write (a shard taken meanwhile refuses it: lease_lost);
      // the last attempt on a shard being handed over may be this one.
      if (!leaving_settled) leaving_settled = owner_->attempt_settled_locked(t.wheel.id(h));
      const std::uint64_t fence = owner_->take_fence_locked(o.h);
      if (o.result == outcome::what::dead) {
        erase_locked(t, h);  // cancelled while queued: its last reference let go
        continue;
      }
      dispatcher_.attempt_done(o.kind);
      const type_registry::type_info& type = types_.at(o.kind);
      const attempt_settler::verdict v =
          settler_.decide(o, type, t.wheel.id(h), t.wheel.attempts(h), !t.wheel.is_indexed(h),
                          stopping, after.alerts, ticker_.now_ms());
      write_op op;
      std::unique_ptr<task> died;  // buried into the dead letters
      bool died_asked = false;
      switch (v.what) {
        case attempt_settler::verdict_kind::drop_replaced:
          if (o.on_stored) after.stored.emplace_back(std::move(o.on_stored), errc::ok);
          erase_locked(t, h);
          continue;
        case attempt_settler::verdict_kind::drop:
          erase_locked(t, h);  // as it was in the store, for the next start
          continue;
        case attempt_settler::verdict_kind::rearm:
          // Clusters: an attempt dispatched under a lease this instance no
          // longer holds (lost, maybe taken again since under a new token)
          // comes back from an earlier tenure: the shard's owner (or this
          // instance's new tenure, which read the store afresh) decides on
          // the task. Held again, it could run a task another instance ran
          // and finished meanwhile.
          if (drop_if_tenure_ended_locked(t, h, fence, after)) continue;
          t.set_tag(h, tsw::with_state(t.tag(h), tsw::armed));
          t.wheel.arm(h, ticker_.current_tick() + 1);
          note_armed_locked(t, t.wheel.due_tick(h));
          continue;
        case attempt_settler::verdict_kind::remove:
          // At-least-once: the task leaves the store only now. Nobody waits
          // for the removal; a crash before it lands runs the task once more.
          op = make_op(change_kind::remove, t, h, false);  // no context: nothing to settle
          erase_locked(t, h);
          break;
        case attempt_settler::verdict_kind::bury: {
          const bool asked = o.result == outcome::what::buried;  // attempt_completion::bury()
          op = make_op(change_kind::bury, t, h, true);
          op.t.attempts = v.attempts;
          if (o.priority) op.t.priority = *o.priority;  // attempt_completion::bury()
          if (store_->dead_letters() == nullptr) {
            // A store without the dead-letter role (docs/failure-handling.md)
            // gets no bury: the store writer groups changes of many callers
            // into one batch, and one change the store refuses would fail the
            // others with it. The store keeps the task as its last retry
            // wrote it, and the next start() runs it again; no dead letter is
            // counted, since none exists.
            settler_.note_death(op.t, type, o.failure, after.alerts, false, asked);
            if (store_->in_process())  // it gave its tasks to the tables at start()
              log(log_level::error, "task " + op.t.id +
                                        " is dropped: an in-process store without dead "
                                        "letters keeps no copy of it");
            if (o.on_stored) after.stored.emplace_back(std::move(o.on_stored), errc::unsupported);
            erase_locked(t, h);
            continue;
          }
          op.error = o.failure;
          op.died_at = std::chrono::floor<milliseconds>(std::chrono::system_clock::now());
          op.ctx = std::make_unique<bury_change>();
          // Counted once the write is queued (below): dead_letters() flushes
          // the writer, so a death stats() counts is one it lists.
          died = std::make_unique<task>(op.t);
          died_asked = asked;
          erase_locked(t, h);
          break;
        }
        case attempt_settler::verdict_kind::retry:
          // The new count and due time are written before the retry is armed,
          // and the record shows them only then (due_again_change applies
          // them), without the worker waiting for the write.
          t.set_tag(h, tsw::with_state(t.tag(h), tsw::persisting));
          op = make_op(change_kind::save, t, h, true);
          op.t.attempts = v.attempts;
          op.t.due = from_epoch_ms(v.due_ms);
          op.ctx = std::make_unique<due_again_change>(&t, h, v.due_ms, true, fence);
          break;
        case attempt_settler::verdict_kind::release: {
          // A retry's write without the attempt counted: the new due time
          // (and priority) are written before the task is armed again. The
          // due time is bounded as a schedule's is: not before the epoch
          // (it fires at once), not past max_delay from now.
          std::int64_t due = std::clamp<std::int64_t>(v.due_ms, 0, latest_due_ms() - 1);
          const std::int64_t now = now_ms();
          if (due > now && due - now > options_.max_delay.count())
            due = now + options_.max_delay.count();
          t.set_tag(h, tsw::with_state(t.tag(h), tsw::persisting));
          if (o.priority) t.set_attrs(h, {*o.priority, t.attrs_of(h).ttr_ms});
          op = make_op(change_kind::save, t, h, true);
          op.t.due = from_epoch_ms(due);
          op.ctx = std::make_unique<due_again_change>(&t, h, due, false, fence);
          break;
        }
      }
      op.must_land = true;
      op.fence = fence;
      op.on_stored = std::move(o.on_stored);
      submit_locked(std::span(&op, 1), nullptr, none, after, options_.caller_writes);
      if (died) {
        settler_.note_death(*died, type, o.failure, after.alerts, true, died_asked);
        note_dead(1);
      }
    }
  }
  run_after(after);
  settling_.fetch_sub(1);
  // stop() may be waiting for attempts to end, and may have begun since this
  // call read `stopping`: read the state again after the count fell (both in
  // seq_cst order: either stop() sees the count at 0, or this sees it
  // stopping). A state that was not running stays so (start() runs once).
  if (state_.load() != run_state::running) attempts_ended();
  if (leaving_settled) owner_->handover_check();
}

}  // namespace delayq::detail
