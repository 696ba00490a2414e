// engine_core: the calls that schedule (schedule, schedule_at,
// schedule_many, async_schedule): check the tasks, pick each one's table
// (a generated id is drawn here, before any lock), lock those tables, and
// decide (schedule_change.cpp). An async schedule never blocks its caller:
// one that finds its id's write in flight is deferred behind it, and one
// whose id may wait past the horizon is looked up on the pager's thread.
#include <bit>
#include <cstdint>

#include "detail/engine_core.hpp"
#include "detail/engine_core_id_call.hpp"
#include "detail/task_state.hpp"

namespace delayq::detail {

bool engine_core::running_check(boost::system::error_code& ec) const {
  if (state_.load(std::memory_order_acquire) == run_state::running) return true;
  ec = errc::not_running;
  return false;
}

void engine_core::draw_id(spec_ref& spec, std::string& id) {
  id = ids_.next();
  spec.id = id;
  spec.generated = true;
  spec.hash = hash(spec.id);
  spec.table = &table_for(spec.hash);
}

bool engine_core::wait_answer(const std::shared_ptr<call_state>& call, bool queued,
                              call_state& inline_call, boost::system::error_code& ec) {
  if (!queued) {
    ec = inline_call.ec;
    return inline_call.found;
  }
  call->done.acquire();
  ec = call->ec;
  return call->found;
}

// With a million tasks held, the id's index bucket is a cache miss, and a
// call on one task has nothing to overlap it with but its own checks: so
// the id is hashed and its bucket asked for first, and it loads while the
// call checks its arguments and reads the clock. check_spec() keeps the
// hash (and checks the id).
void engine_core::hash_early(spec_ref& spec) const noexcept {
  if (spec.id.empty()) return;
  spec.hash = hash(spec.id);
  spec.table = &table_for(spec.hash);
  spec.table->wheel.prefetch(spec.hash);
}

boost::system::error_code engine_core::check_spec(spec_ref& spec) {
  // A type the registry knows was valid when it was interned: the character
  // check is for names met for the first time.
  boost::system::error_code ec;
  if (spec.type) {
    // Set by the caller: the previous task of a batch had this type's name,
    // and passed the checks below.
  } else if (spec.type = types_.find(spec.type_name); !spec.type) {
    if (!valid_type(spec.type_name)) return errc::invalid_type;
    spec.type = types_.lookup(spec.type_name, options_.accept_unregistered_types, ec);
    if (!spec.type) return ec;
  } else if (!options_.accept_unregistered_types && !spec.type->exec) {
    return errc::unknown_type;  // interned from the store, never registered
  }
  if (!spec.id.empty() && !valid_id(spec.id)) return errc::invalid_id;
  if (spec.payload.size() > options_.max_payload) return errc::payload_too_large;
  if (!spec.id.empty() && !spec.table) {
    spec.hash = hash(spec.id);
    spec.table = &table_for(spec.hash);
  }
  return {};
}

std::string engine_core::schedule_delay(std::string_view type, std::string_view payload,
                                        std::chrono::milliseconds delay,
                                        const schedule_options& opts,
                                        boost::system::error_code& ec) {
  std::string id;  // every return names it: built in place (NRVO), not moved
  ec = {};
  if (!running_check(ec)) return id;
  spec_ref spec{type, payload, opts.id, opts.conflict};
  hash_early(spec);
  spec.trigger_count = opts.trigger_count;
  spec.priority = opts.priority;
  spec.ttr_ms = ttr_ms_of(opts.ttr, ec);
  if (ec) return id;
  // By the engine's clock: "in 2 s" is 2 s away however the system clock
  // is set meanwhile. One reading gives the due time and the stamp's floor
  // (a clock read is 40 ns here, a tenth of the call).
  const auto now = std::chrono::steady_clock::now();
  spec.order = schedule_order(now);
  spec.due_ms = due_after(delay, ticker_.ms_at(now), options_.max_delay, ec);
  if (ec || (ec = check_spec(spec))) return id;
  schedule_one_checked(spec, id, ec);
  if (ec) id.clear();  // a generated id drawn for a task refused
  return id;
}

std::string engine_core::schedule_at(std::string_view type, std::string_view payload,
                                     std::chrono::system_clock::time_point due,
                                     const schedule_options& opts, boost::system::error_code& ec) {
  std::string id;  // every return names it: built in place (NRVO), not moved
  ec = {};
  if (!running_check(ec)) return id;
  spec_ref spec{type, payload, opts.id, opts.conflict};
  hash_early(spec);
  spec.trigger_count = opts.trigger_count;
  spec.priority = opts.priority;
  spec.ttr_ms = ttr_ms_of(opts.ttr, ec);
  if (ec) return id;
  spec.order = schedule_order();
  spec.due_ms = due_at(due, now_ms(), options_.max_delay, ec);
  if (ec || (ec = check_spec(spec))) return id;
  schedule_one_checked(spec, id, ec);
  if (ec) id.clear();  // a generated id drawn for a task refused
  return id;
}

std::vector<std::string> engine_core::schedule(std::span<const task_spec> specs,
                                               boost::system::error_code& ec, std::size_t& bad) {
  ec = {};
  bad = 0;
  if (!running_check(ec)) return {};
  const std::int64_t now = now_ms();
  const std::uint64_t order = schedule_order();
  std::vector<spec_ref> refs(specs.size());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const task_spec& s = specs[i];
    refs[i] = spec_ref{s.type, s.payload, s.options.id, s.options.conflict};
    refs[i].order = order + i;  // same-instant tasks of a batch run in its order
    refs[i].trigger_count = s.options.trigger_count;
    refs[i].priority = s.options.priority;
    refs[i].ttr_ms = ttr_ms_of(s.options.ttr, ec);
    if (ec) {
      bad = i;
      return {};
    }
    refs[i].due_ms = due_at(s.due, now, options_.max_delay, ec);
    if (i > 0 && s.type == specs[i - 1].type) refs[i].type = refs[i - 1].type;  // looked up once
    if (ec || (ec = check_spec(refs[i]))) {
      bad = i;
      return {};
    }
  }
  std::vector<std::string> ids(specs.size());
  schedule_checked(refs, ids, ec, bad);
  if (ec) return {};
  return ids;
}

// A lone task on an in-process store with no horizon (an engine embedded on
// memory_store, the usual case) writes nothing and pages nothing: it is
// decided and armed in one hold of its table's lock, without the general
// frame (pins, the write's call state, the after-lock lists, a batch's
// plan), which was a quarter of such a call's instructions
// (docs/benchmarks.md). A task that may be due at once (within
// due_at_once_slack_ms: handed to the workers once the lock is let go), a
// held id, or a table where a call waits on any id takes the general path.
void engine_core::schedule_one_checked(spec_ref& spec, std::string& id,
                                       boost::system::error_code& ec) {
  if (!horizon_on() && !writes(change_kind::save) &&
      spec.due_ms > ticker_.coarse_now_ms() + due_at_once_slack_ms) {
    if (spec.id.empty()) draw_id(spec, id);
    task_table& t = *spec.table;
    bool decided = false;
    {
      std::lock_guard lock(t.mutex);
      if (state_.load() != run_state::running) {
        ec = errc::not_running;
        return;
      }
      decided = insert_new_in_place_locked(spec, ec);
    }
    // No waiter to wake, where settle_change() wakes the table's: a waiter
    // waits for a held id's record in transit, and this id was not held.
    if (decided) {
      if (!ec && !spec.generated) id.append(spec.id);  // into an empty string: no overlap to check
      return;
    }
  }
  std::size_t bad = 0;
  schedule_checked(std::span(&spec, 1), std::span(&id, 1), ec, bad);
}

void engine_core::schedule_checked(std::span<spec_ref> specs, std::span<std::string> ids,
                                   boost::system::error_code& ec, std::size_t& bad) {
  pins pinned(*this);  // before any lock: it unpins under the lock
  // Without a horizon the tables hold every task there is (a cluster always
  // pages: with none, nothing here asks who owns an id).
  if (horizon_on()) {
    for (std::size_t i = 0; i < specs.size(); ++i) {
      // Clusters: a task with an id only on its shard's owner (only it can
      // tell a duplicate); a generated id goes anywhere (written, then let go).
      if (!specs[i].id.empty() && !owner_check(specs[i].id, ec)) {
        bad = i;
        return;
      }
    }
    // A task with this id may wait past the horizon, in the store only:
    // reject and keep must see it. A replace overwrites it either way.
    std::vector<std::string_view> named;
    for (const spec_ref& s : specs)
      if (!s.id.empty() && s.conflict != on_conflict::replace) named.push_back(s.id);
    fault_in(named, pinned, ec);
    if (ec) return;
  }
  const bool durable = writes(change_kind::save);
  if (durable && options_.when_write_queue_full == engine_options::queue_full_policy::wait)
    writer_.wait_for_room();
  const auto call = durable ? std::make_shared<call_state>() : nullptr;
  // Generated ids are drawn here, before any lock: an id picks its table.
  const auto draw = [&] {
    for (std::size_t i = 0; i < specs.size(); ++i)
      if (specs[i].id.empty() || specs[i].generated) draw_id(specs[i], ids[i]);
  };
  draw();
  for (const spec_ref& s : specs) s.table->wheel.prefetch(s.hash);  // loads while we lock
  call_state inline_result;
  after_lock after;
  bool queued = false;
  const auto decide = [&](auto& lock) {
    std::string waiting;
    for (;;) {
      if (state_.load() != run_state::running) {
        ec = errc::not_running;
        return false;
      }
      // A blocking call waits for its write: it may as well make it.
      if (schedule_locked(specs, ids, call, inline_result, waiting, after, true)) {
        // Read under the locks: once they are let go the writer may settle it.
        queued = call && call->remaining > 0;
        return true;
      }
      if (waiting.empty()) return false;  // a generated id was held: draw anew
      const std::uint32_t h = hash(waiting);
      find_settled(lock, table_for(h), waiting, h);
    }
  };
  for (;;) {
    bool decided;
    if (specs.size() == 1) {
      std::unique_lock lock(specs[0].table->mutex);
      decided = decide(lock);
    } else {
      // The tables the batch touches, in index order (at most 64: a mask,
      // where sorting a pointer a task cost more than the lookups).
      std::uint64_t touched = 0;
      for (const spec_ref& s : specs) touched |= std::uint64_t{1} << s.table->index;
      std::vector<task_table*> tables;
      for (; touched != 0; touched &= touched - 1)
        tables.push_back(tables_[static_cast<std::size_t>(std::countr_zero(touched))].get());
      table_set_lock set(std::move(tables));
      std::unique_lock lock(set);
      decided = decide(lock);
    }
    if (ec) return;
    if (decided) break;
    draw();
  }
  run_after(after);
  wait_answer(call, queued, inline_result, ec);
  // A store error is about the whole batch (bad stays 0); a decision about
  // one task names it.
  if (ec && !queued) bad = inline_result.bad;
}

// ------------------------------------------------------------------ async schedule

void engine_core::async_schedule(task_spec spec, std::unique_ptr<schedule_completion> done) {
  async_schedule_ref(spec, done);
}

void engine_core::async_schedule_ref(task_spec& spec, std::unique_ptr<schedule_completion>& done,
                                     std::uint64_t looked_up) {
  boost::system::error_code ec;
  if (!running_check(ec)) return done->complete(ec, {});
  spec_ref ref{spec.type, spec.payload, spec.options.id, spec.options.conflict};
  hash_early(ref);
  ref.order = schedule_order();
  ref.trigger_count = spec.options.trigger_count;
  ref.priority = spec.options.priority;
  ref.ttr_ms = ttr_ms_of(spec.options.ttr, ec);
  if (ec) return done->complete(ec, {});
  ref.due_ms = due_at(spec.due, now_ms(), options_.max_delay, ec);
  if (ec || (ec = check_spec(ref))) return done->complete(ec, {});
  if (!ref.id.empty() && !owner_check(ref.id, ec)) return done->complete(ec, {});  // clusters
  std::string id;
  if (ref.id.empty()) draw_id(ref, id);
  const bool durable = writes(change_kind::save);
  auto call = durable ? std::make_shared<call_state>() : nullptr;
  call_state inline_result;
  after_lock after;
  bool queued = false;
  task_table& t = *ref.table;
  {
    std::unique_lock lock(t.mutex);
    if (state_.load() != run_state::running) {
      lock.unlock();
      return done->complete(errc::not_running, {});
    }
    if (call) call->async = std::move(done);
    if (looked_up != 0) {
      release_lookup_locked(t, spec.options.id, looked_up);  // decided on below, in this hold
    } else if (horizon_on() && !ref.generated && ref.conflict != on_conflict::replace &&
               t.wheel.find(ref.id, ref.hash) == timer_wheel::npos) {
      // Not held: it may wait past the horizon. Look it up on the pager's
      // thread (an async call does not block its caller); until then other
      // calls on the id wait behind this one (see find_settled).
      const std::string key(ref.id);  // before `spec` moves: ref views into it
      auto job = std::make_shared<deferred_call>(
          deferred_call{std::move(spec), call ? std::move(call->async) : std::move(done)});
      if (t.looking_up.count(key) != 0) {
        t.deferred[key].push_back(std::move(*job));
        return;
      }
      const std::uint64_t serial = ++lookup_serial_;
      t.looking_up.emplace(key, serial);
      lock.unlock();
      pager_.post([this, job, serial] { run_lookup(*job, serial); });
      return;
    }
    std::string waiting;
    for (;;) {
      if (schedule_locked(std::span(&ref, 1), std::span(&id, 1), call, inline_result, waiting,
                          after, options_.caller_writes))
        break;
      if (!waiting.empty()) {
        // Another write about this id is in flight: run this call when it
        // has settled, rather than block the caller's thread.
        t.deferred[waiting].push_back(
            deferred_call{std::move(spec), call ? std::move(call->async) : std::move(done)});
        return;
      }
      // A generated id that is held: another one, if it falls in this table
      // (which is locked); else the call starts over.
      id = ids_.next();
      ref.id = id;
      ref.hash = hash(ref.id);
      if (&table_for(ref.hash) != &t) {
        lock.unlock();
        spec.options.id.clear();
        auto& handler = call ? call->async : done;
        return async_schedule_ref(spec, handler);
      }
    }
    queued = call && call->remaining > 0;
  }
  run_after(after);
  if (queued) return;  // on_written() completes it
  auto& handler = call ? call->async : done;
  handler->complete(inline_result.ec, inline_result.ec ? std::string{} : id);
}

bool engine_core::release_lookup_locked(task_table& t, std::string_view id, std::uint64_t serial) {
  const auto it = t.looking_up.find(std::string(id));
  if (it == t.looking_up.end() || it->second != serial) return false;
  t.looking_up.erase(it);
  return true;
}

void engine_core::run_lookup(deferred_call& job, std::uint64_t serial) {
  const std::string id = job.spec.options.id;
  task_table& t = table_for(hash(id));
  {
    boost::system::error_code ec;
    pins pinned(*this);
    const std::string_view key = id;
    fault_in(std::span(&key, 1), pinned, ec);
    if (ec) {
      {
        std::lock_guard lock(t.mutex);
        release_lookup_locked(t, id, serial);
      }
      job.done->complete(ec, {});
    } else {
      async_schedule_ref(job.spec, job.done, serial);  // releases it as it decides
    }
  }
  // Released one way or the other (an early error of the call too): the
  // calls that waited behind it go on.
  after_lock after;
  {
    std::lock_guard lock(t.mutex);
    release_lookup_locked(t, id, serial);
    if (t.deferred.count(id) != 0) after.deferred.emplace_back(&t, id);
    if (t.waiters > 0) after.notify.push_back(&t);
  }
  run_after(after);
}

}  // namespace delayq::detail
