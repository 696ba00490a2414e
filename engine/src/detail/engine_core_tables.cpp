// engine_core: the services the changes settle with, each under the lock of
// the table it names: arming a record (or handing a due one over at once),
// erasing one, taking it out of the index and back, letting a far one go
// (the horizon), and the copies of a record a write or an executor gets.
#include <ctime>

#include "delayq/log.hpp"
#include "detail/changes/change.hpp"
#include "detail/engine_core.hpp"
#include "detail/task_state.hpp"

namespace delayq::detail {
namespace {
namespace tsw = task_state_word;
}  // namespace

void engine_core::arm_locked(task_table& t, timer_wheel::handle h, std::int64_t due_ms,
                             after_lock* after) {
  // A task already due when its write lands (a schedule without delay, a
  // reschedule or release to now, a triggering signal) goes to the
  // dispatcher at once. Through the wheel it would wait for the next tick
  // boundary: the ticker files a due time at the first boundary at or after
  // it, and the boundary of the tick now running is the wheel's past.
  // Due by the wheel's own clock (ticker::begun_ms()), not the system clock:
  // a system clock stepped ahead would send tasks that are seconds away to
  // the workers now. The precise clock is read only when the coarse one (a
  // few nanoseconds, a few milliseconds behind at most) cannot tell: most
  // tasks are armed for later, and a schedule arms one each.
  if (after != nullptr && due_ms <= ticker_.coarse_now_ms() + due_at_once_slack_ms &&
      due_ms <= ticker_.begun_ms() &&
      state_.load(std::memory_order_relaxed) == run_state::running &&
      owner_->may_fire_locked(t.ref(h), t.wheel.id(h), std::chrono::steady_clock::now()) != 0) {
    if (t.wheel.is_armed(h)) t.wheel.disarm(h);
    const std::uint32_t w = tsw::next_queued(t.tag(h));
    t.set_tag(h, w);
    dispatcher_.count_ready(t.wheel.kind(h), 1);
    after->requeue.push_back(ready_of(t, h, w));
    return;
  }
  t.set_tag(h, tsw::with_state(t.tag(h), tsw::armed));
  t.wheel.arm(h, ticker_.tick_for(due_ms));
  note_armed_locked(t, t.wheel.due_tick(h));
}

void engine_core::erase_locked(task_table& t, timer_wheel::handle h) {
  if (t.wheel.is_indexed(h)) {
    kind_pending(t.wheel.kind(h)).add(-1);
    pending_.add(-1);
    note_gone_locked(t, h);  // see the horizon
  } else {
    --t.unindexed;
  }
  t.forget(h);
}

void engine_core::unindex_locked(task_table& t, timer_wheel::handle h) {
  kind_pending(t.wheel.kind(h)).add(-1);
  pending_.add(-1);
  note_gone_locked(t, h);
  t.wheel.unindex(h);
  ++t.unindexed;
}

bool engine_core::reindex_locked(task_table& t, timer_wheel::handle h) {
  if (t.wheel.is_indexed(h) || !t.wheel.reindex(h)) return false;
  --t.unindexed;
  kind_pending(t.wheel.kind(h)).add(1);
  pending_.add(1);
  return true;
}

void engine_core::evict_if_far_locked(task_table& t, timer_wheel::handle h) {
  if (!horizon_on() || !t.wheel.is_indexed(h)) return;
  const std::uint32_t w = t.tag(h);
  if (tsw::state_of(w) != tsw::armed || (w & tsw::fresh)) return;
  // A task of a shard another instance holds is never held here (clusters).
  const bool owned = owner_->owns(t.wheel.id(h));
  if (owned && t.wheel.due_ms(h) <= pager_.watermark()) return;
  // A type with a capacity is held whole: its count must see every task.
  if (owned && types_.at(t.wheel.kind(h)).capacity != 0) return;
  // A call that looked the id up decides on it next: keep it until then.
  if (pager_.pinned(t.wheel.id(h))) return;
  erase_locked(t, h);  // the store has it; the pager brings it back in time
}

bool engine_core::drop_if_tenure_ended_locked(task_table& t, timer_wheel::handle h,
                                              std::uint64_t fence, after_lock& after) {
  if (fence == 0) return false;  // a single node, or an attempt without a lease
  const std::string_view id = t.wheel.id(h);
  const std::uint64_t held = owner_->held_token(id);
  if (held == fence) return false;
  if (held != 0) after.reread.emplace_back(id);
  erase_locked(t, h);
  return true;
}

task engine_core::task_of(const task_table& t, timer_wheel::handle h) const {
  task out;
  out.id = std::string(t.wheel.id(h));
  out.type = types_.at(t.wheel.kind(h)).name;
  out.payload = std::string(t.wheel.payload(h));
  out.due = from_epoch_ms(t.wheel.due_ms(h));
  out.attempts = t.wheel.attempts(h);
  const task_table::trigger_counts tc = t.trigger_of(h);
  out.trigger_count = tc.count;
  out.signals = tc.signals;
  const task_table::task_attrs a = t.attrs_of(h);
  out.priority = a.priority;
  out.ttr = std::chrono::milliseconds{a.ttr_ms};
  return out;
}

ready_ref engine_core::ready_of(const task_table& t, timer_wheel::handle h,
                                std::uint32_t word) const {
  ready_ref r{t.ref(h), word, t.wheel.kind(h), t.wheel.view(h)};
  const task_table::trigger_counts tc = t.trigger_of(h);
  r.trigger_count = tc.count;
  r.signals = tc.signals;
  const task_table::task_attrs a = t.attrs_of(h);
  r.priority = a.priority;
  r.ttr_ms = a.ttr_ms;
  r.fence = owner_->fence_of_locked(t.ref(h));
  r.order = t.order_of(h);
  return r;
}

}  // namespace delayq::detail
