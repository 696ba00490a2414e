// The schedule change: a new task, or a task that takes the place of a
// held one with its id (on_conflict::replace), decided for every task of a
// schedule call at once (schedule_locked; a call of one task by
// schedule_one_locked, without a batch's plan; a lone new task on an
// in-process store with no horizon by insert_new_in_place_locked, decided
// and armed in one step) and settled by one of three changes:
//
//   insert_change            a new record: armed once its save landed,
//                            erased if it failed
//   replace_change           a held record, waiting or due, given the new
//                            content: armed either way, with the old content
//                            back if the save failed
//   replace_running_change   the held record runs now: a new record takes
//                            the id, the running one keeps running and its
//                            outcome touches nothing; if the save failed the
//                            id goes back to it
//
// The calls that decide it (schedule, schedule_many, async_schedule) are in
// schedule_calls.cpp.
#include <array>
#include <bit>

#include "detail/engine_core.hpp"
#include "detail/task_state.hpp"

namespace delayq::detail {
namespace {

namespace tsw = task_state_word;

// What a new record's landed save does (insert_change), also where there
// was nothing to write and nothing waits (settle_schedule_locked()): arms
// it, counts it, and lets a far one go to the store.
// insert_new_in_place_locked() does the same inline, without the eviction
// (it runs only with no horizon).
void land_insert(engine_core& e, task_table& t, timer_wheel::handle h, after_lock* after) {
  e.arm_locked(t, h, t.wheel.due_ms(h), after);
  e.note_scheduled(t, h);
  e.evict_if_far_locked(t, h);  // a far task: the store holds it now
}

class insert_change final : public change {
 public:
  using change::change;
  void landed(settle_context& c) override {
    land_insert(c.engine, c.table, h, &c.after);
    c.call.found = true;
  }
  void failed(settle_context& c, const boost::system::error_code&) override {
    c.engine.erase_locked(c.table, h);
  }
};

class replace_change final : public change {
 public:
  using change::change;
  void landed(settle_context& c) override {
    c.engine.note_scheduled(c.table, h);
    c.engine.arm_locked(c.table, h, c.table.wheel.due_ms(h), &c.after);
    c.engine.evict_if_far_locked(c.table, h);
  }
  void failed(settle_context& c, const boost::system::error_code&) override {
    timer_wheel& w = c.table.wheel;
    c.engine.kind_pending(w.kind(h)).add(-1);
    w.assign(h, {{}, old_payload, old_kind, old_due_ms, old_attempts});
    c.table.set_trigger(h, old_trigger, old_signals);
    c.table.set_attrs(h, old_attrs);
    c.engine.kind_pending(old_kind).add(1);
    // After a failed write the store may hold either version: keep it held.
    c.engine.arm_locked(c.table, h, w.due_ms(h), &c.after);
  }

  // What a failed save restores.
  std::string old_payload;
  std::int64_t old_due_ms = 0;
  std::uint32_t old_attempts = 0;
  std::uint16_t old_kind = 0;
  std::uint32_t old_trigger = 0, old_signals = 0;
  task_table::task_attrs old_attrs;
};

class replace_running_change final : public change {
 public:
  using change::change;
  void landed(settle_context& c) override {
    c.engine.arm_locked(c.table, h, c.table.wheel.due_ms(h), &c.after);
    c.engine.note_scheduled(c.table, h);
    c.engine.evict_if_far_locked(c.table, h);
  }
  void failed(settle_context& c, const boost::system::error_code&) override {
    c.engine.erase_locked(c.table, h);
    // Give the id back to the old version if it is still running.
    if (c.table.tag(old) == old_running_tag) c.engine.reindex_locked(c.table, old);
  }

  timer_wheel::handle old = timer_wheel::npos;  // the running record
  std::uint32_t old_running_tag = 0;            // its word as it was
};

// Room for `n` values on the stack when n is small (a call schedules one
// task far more often than many), on the heap otherwise.
template <class T, std::size_t N>
class scratch {
 public:
  explicit scratch(std::size_t n) : n_(n) {
    if (n > N) heap_.resize(n);
  }
  T& operator[](std::size_t i) noexcept { return n_ > N ? heap_[i] : local_[i]; }

 private:
  std::size_t n_;
  std::array<T, N> local_{};
  std::vector<T> heap_;
};

// The index of the first task of `specs` whose id an earlier one has, or
// specs.size(). By a hash set of the ids' hashes, in call order, so the
// first repeat met is the earliest (a batch holds up to 10,000 tasks:
// comparing each with every earlier one cost more than the rest of the
// call, and sorting the hashes a third of it).
template <class Specs>
std::size_t first_repeat(const Specs& specs) {
  const std::size_t n = specs.size();
  if (n < 2) return n;
  const std::size_t size = std::bit_ceil(2 * n);
  // Each bucket: index + 1 of a task (0: empty), probed by the hash's bits.
  std::vector<std::uint32_t> bucket(size, 0);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t b = specs[i].hash & (size - 1);; b = (b + 1) & (size - 1)) {
      if (bucket[b] == 0) {
        bucket[b] = static_cast<std::uint32_t>(i + 1);
        break;
      }
      const auto& earlier = specs[bucket[b] - 1];
      if (earlier.hash == specs[i].hash && earlier.id == specs[i].id) return i;
    }
  }
  return n;
}

}  // namespace

bool engine_core::schedule_locked(std::span<spec_ref> specs, std::span<std::string> ids,
                                  const std::shared_ptr<call_state>& call, call_state& out,
                                  std::string& waiting, after_lock& after, bool may_send) {
  const std::size_t n = specs.size();
  if (n == 1) return schedule_one_locked(specs[0], ids[0], call, out, waiting, after, may_send);
  using action = schedule_action;
  struct step {
    action what = action::insert;
    timer_wheel::handle h = timer_wheel::npos;
  };
  scratch<step, 4> plan(n);
  // A batch's index lookups each miss the cache: asked for `ahead` tasks
  // early, several are in flight at once (schedule_checked's prefetches of
  // a whole batch are long evicted or still queued by the time they count).
  constexpr std::size_t ahead = 8;
  for (std::size_t i = 0; i < n; ++i) {
    if (i + ahead < n) specs[i + ahead].table->wheel.prefetch(specs[i + ahead].hash);
    task_table& t = *specs[i].table;
    plan[i].h = t.wheel.find(specs[i].id, specs[i].hash);
    if (specs[i].generated && plan[i].h != timer_wheel::npos) {
      waiting.clear();  // a generated id that is held: the caller draws anew
      return false;
    }
    if (t.busy(specs[i].id, plan[i].h)) {
      waiting = std::string(specs[i].id);
      return false;
    }
  }

  // Decide every task before changing anything.
  std::size_t added = 0;
  auto fail = [&](errc e, std::size_t i) {
    out.ec = e;
    out.bad = i;
    return true;
  };
  // Two tasks of one call with one id: the later one is the error.
  const std::size_t first_dup = first_repeat(specs);
  for (std::size_t i = 0; i < n; ++i) {
    spec_ref& spec = specs[i];
    if (i == first_dup) {
      if (!spec.generated) return fail(errc::duplicate_id, i);
      waiting.clear();  // two generated ids alike: the caller draws anew
      return false;
    }
    if (!spec.generated) {  // a generated id is ids[i] already (spec.id views it)
      ids[i].clear();       // (a retry's earlier pass may have set it)
      ids[i].append(spec.id);
    }
    const timer_wheel::handle h = plan[i].h;
    if (h == timer_wheel::npos) {
      ++added;
      continue;
    }
    switch (spec.conflict) {
      case on_conflict::reject: return fail(errc::duplicate_id, i);
      case on_conflict::keep: plan[i].what = action::keep; break;
      case on_conflict::replace: plan[i] = {action::replace, h}; break;
    }
  }
  // Pending counts are the engine's, over every table: reserved here, with
  // atomics, before anything is inserted, and given back if the call fails.
  if (added > 0 && !pending_.reserve(added)) return fail(errc::queue_full, n - 1);
  // Per-type capacity: each task that adds to a capped type reserves its
  // place in order, so the first task that takes its type past the cap is
  // the one the error names; what was reserved goes back on a failure.
  std::vector<std::pair<type_registry::kind, std::size_t>> reserved;
  const auto give_back = [&] {
    if (added > 0) pending_.add(-static_cast<std::int64_t>(added));
    for (const auto& [k, m] : reserved) kind_pending(k).add(-static_cast<std::int64_t>(m));
  };
  for (std::size_t i = 0; i < n; ++i) {
    const auto* type = specs[i].type;
    if (type->capacity == 0 || plan[i].what == action::keep) continue;
    if (plan[i].what == action::insert ||
        (plan[i].what == action::replace && specs[i].table->wheel.kind(plan[i].h) != type->k)) {
      if (!type->pending.reserve(1)) {
        give_back();
        return fail(errc::type_full, i);
      }
      reserved.emplace_back(type->k, 1);
    }
  }
  // The records below take the counts just reserved: inserts and the new
  // type of a replace of a capped type (others are counted as they go).

  // Apply, in transitional states; then settle at once (nothing to write) or
  // hand the writes over as one group.
  const bool durable = writes(change_kind::save);
  std::vector<write_op> ops;
  if (durable) ops.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    // The lookups above brought the index's lines in, but a batch's own
    // writes since may have pushed them out: asked for again, ahead.
    if (i + ahead < n) specs[i + ahead].table->wheel.prefetch(specs[i + ahead].hash);
    if (plan[i].what == action::keep) continue;
    timer_wheel::handle h = plan[i].h;
    std::unique_ptr<change> made = apply_schedule_locked(specs[i], plan[i].what, h, durable);
    if (durable)
      ops.push_back(schedule_op_locked(specs[i], plan[i].what, h, std::move(made), call, i));
    else
      settle_schedule_locked(*specs[i].table, h, made.get(), out, after);
  }
  if (call) call->ids.assign(ids.begin(), ids.end());
  submit_locked(ops, call, out, after, may_send);
  return true;
}

bool engine_core::schedule_one_locked(spec_ref& spec, std::string& id,
                                      const std::shared_ptr<call_state>& call, call_state& out,
                                      std::string& waiting, after_lock& after, bool may_send) {
  using action = schedule_action;
  task_table& t = *spec.table;
  timer_wheel::handle h = t.wheel.find(spec.id, spec.hash);
  if (spec.generated && h != timer_wheel::npos) {
    waiting.clear();  // a generated id that is held: the caller draws anew
    return false;
  }
  if (t.busy(spec.id, h)) {
    waiting = std::string(spec.id);
    return false;
  }
  auto fail = [&](errc e) {
    out.ec = e;
    out.bad = 0;
    return true;
  };
  action what = action::insert;
  if (h != timer_wheel::npos) {
    switch (spec.conflict) {
      case on_conflict::reject: return fail(errc::duplicate_id);
      case on_conflict::keep: what = action::keep; break;
      case on_conflict::replace: what = action::replace; break;
    }
  }
  // A generated id is the caller's string already (spec.id views it).
  if (!spec.generated) {
    id.clear();  // (a retry's earlier pass may have set it)
    id.append(spec.id);
  }
  if (what == action::keep) {
    if (call) call->ids.assign(1, id);
    return true;
  }
  if (const errc e = reserve_one_locked(spec, what, t, h); e != errc::ok) return fail(e);
  const bool durable = writes(change_kind::save);
  std::unique_ptr<change> made = apply_schedule_locked(spec, what, h, durable);
  if (!durable) {
    settle_schedule_locked(t, h, made.get(), out, after);
    return true;
  }
  write_op op = schedule_op_locked(spec, what, h, std::move(made), call, 0);
  if (call) call->ids.assign(1, id);
  submit_locked(std::span(&op, 1), call, out, after, may_send);
  return true;
}

// The counts of one task, as schedule_locked() reserves them for a batch.
errc engine_core::reserve_one_locked(const spec_ref& spec, schedule_action what,
                                     const task_table& t, timer_wheel::handle h) {
  if (what == schedule_action::insert && !pending_.reserve(1)) return errc::queue_full;
  const auto* type = spec.type;
  if (type->capacity != 0 && (what == schedule_action::insert || t.wheel.kind(h) != type->k) &&
      !type->pending.reserve(1)) {
    if (what == schedule_action::insert) pending_.add(-1);
    return errc::type_full;
  }
  return errc::ok;
}

bool engine_core::insert_new_in_place_locked(spec_ref& spec, boost::system::error_code& ec) {
  task_table& t = *spec.table;
  if (!t.looking_up.empty() || !t.deferred.empty()) return false;  // calls wait on some id
  // Read again under the lock: a caller that waited for it may find its
  // task due at once now, which the general path hands to the workers.
  if (spec.due_ms <= ticker_.coarse_now_ms() + due_at_once_slack_ms) return false;
  timer_wheel::handle h = t.wheel.find(spec.id, spec.hash);
  if (h != timer_wheel::npos) return false;  // held: a duplicate, a keep or a replace
  if (const errc e = reserve_one_locked(spec, schedule_action::insert, t, h); e != errc::ok) {
    ec = e;
    return true;
  }
  apply_schedule_locked(spec, schedule_action::insert, h, false);
  // land_insert(), in place: nothing is written, and the caller saw that
  // the task is not due at once, so it goes to the wheel (no after_lock to
  // hand it to the workers); with no horizon nothing is evicted.
  arm_locked(t, h, spec.due_ms, nullptr);
  note_scheduled(t, h);
  return true;
}

std::unique_ptr<change> engine_core::apply_schedule_locked(const spec_ref& spec,
                                                           schedule_action what,
                                                           timer_wheel::handle& h, bool durable) {
  task_table& t = *spec.table;
  timer_wheel& w = t.wheel;
  const timer_wheel::item it{spec.id, spec.payload, spec.type->k, spec.due_ms, 0};
  const bool capped = spec.type->capacity != 0;
  std::unique_ptr<change> made;
  if (what == schedule_action::replace) {
    std::uint32_t word = t.tag(h);
    bool replaced = false;
    if (tsw::state_of(word) == tsw::armed) {
      t.set_tag(h, tsw::with_state(word, tsw::persisting));
      replaced = true;
    } else if (tsw::state_of(word) == tsw::queued) {
      // Take it from the ready queue before a worker starts it: the new
      // generation makes its queue reference stale.
      replaced = tsw::word(w.tag(h)).compare_exchange_strong(
          word, tsw::next_generation(word, tsw::persisting), std::memory_order_acq_rel);
      if (replaced) dispatcher_.count_ready(w.kind(h), -1);
    }
    const bool kind_reserved = capped && w.kind(h) != it.kind;
    if (replaced) {
      auto c = std::make_unique<replace_change>(&t, h);
      c->old_payload = std::string(w.payload(h));
      c->old_due_ms = w.due_ms(h);
      c->old_attempts = w.attempts(h);
      c->old_kind = w.kind(h);
      const task_table::trigger_counts old = t.trigger_of(h);
      c->old_trigger = old.count;
      c->old_signals = old.signals;
      c->old_attrs = t.attrs_of(h);
      kind_pending(w.kind(h)).add(-1);
      w.disarm(h);
      w.assign(h, it);
      t.set_trigger(h, spec.trigger_count, 0);
      t.set_attrs(h, {spec.priority, spec.ttr_ms});
      if (!kind_reserved) kind_pending(it.kind).add(1);
      made = std::move(c);
    } else {
      // Its attempt is running: let it finish, but its outcome must neither
      // remove nor retry what replaces it. It gives up the id (and with it
      // the store's record) to a new record.
      const timer_wheel::handle old = h;
      const std::uint32_t old_word = t.tag(old);
      unindex_locked(t, old);
      h = w.insert_detached(it, spec.hash);
      t.set_tag(h, tsw::with_state(t.tag(h), tsw::persisting) | tsw::fresh);
      if (spec.trigger_count > 0) t.set_trigger(h, spec.trigger_count, 0);
      if (spec.priority != 0 || spec.ttr_ms != 0) t.set_attrs(h, {spec.priority, spec.ttr_ms});
      pending_.add(1);
      if (!kind_reserved) kind_pending(it.kind).add(1);
      auto c = std::make_unique<replace_running_change>(&t, h);
      c->old = old;
      c->old_running_tag = old_word;
      made = std::move(c);
    }
  } else {
    // A new record: its pending count was reserved by the caller, and its id
    // was looked up under this lock.
    h = w.insert_absent(it, spec.hash);
    t.set_tag(h, tsw::with_state(t.tag(h), tsw::persisting) | tsw::fresh);
    if (spec.trigger_count > 0) t.set_trigger(h, spec.trigger_count, 0);
    if (spec.priority != 0 || spec.ttr_ms != 0) t.set_attrs(h, {spec.priority, spec.ttr_ms});
    if (!capped) kind_pending(it.kind).add(1);
    if (durable) made = std::make_unique<insert_change>(&t, h);
  }
  t.stamp(h, spec.order);
  return made;
}

write_op engine_core::schedule_op_locked(const spec_ref& spec, schedule_action what,
                                         timer_wheel::handle h, std::unique_ptr<change> made,
                                         const std::shared_ptr<call_state>& call,
                                         std::size_t index) {
  write_op op = make_op(change_kind::save, *spec.table, h, true);
  // Clusters: a replace of a held record is fenced: it must not land once
  // another instance holds the shard (and read the old copy). A new record
  // is written unfenced, as any instance may.
  op.fence = what == schedule_action::replace ? owner_->token_for(spec.id) : 0;
  made->call = call;
  made->index = index;
  op.ctx = std::move(made);
  return op;
}

void engine_core::settle_schedule_locked(task_table& t, timer_wheel::handle h, change* made,
                                         call_state& out, after_lock& after) {
  if (made) {
    settle_change(*made, {}, out, after);  // nothing to write: it holds at once
  } else if (t.waiters == 0 && t.deferred.empty()) {
    // The usual case: a new record, and no call waiting on any id of this
    // table (settle_change() would find none to wake or run).
    land_insert(*this, t, h, &after);
    out.found = true;
  } else {
    insert_change c(&t, h);  // with no allocation
    settle_change(c, {}, out, after);
  }
}

}  // namespace delayq::detail
