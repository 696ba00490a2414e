// engine_core: the calls that change tasks (schedule, async_schedule,
// cancel, reschedule, requeue, purge). Each decides under the lock, puts the
// record in a transitional state, and either settles at once (a change the
// store does not write) or hands a write_op to the store writer and settles
// when the write landed (engine_core_writes.cpp). cancel, reschedule and
// requeue (and signal, engine_core_signal.cpp) are each a decide step over
// the one skeleton of a call on an id (engine_core_id_call.hpp).
#include <array>
#include <unordered_map>
#include <vector>

#include "detail/engine_core.hpp"
#include "detail/engine_core_id_call.hpp"
#include "detail/task_state.hpp"

namespace delayq::detail {
namespace {

namespace tsw = task_state_word;
using std::chrono::milliseconds;

bool transitional(tsw::state s) noexcept { return s == tsw::persisting || s == tsw::cancelling; }

// Room for `n` values on the stack when n is small (a call schedules one
// task far more often than many), on the heap otherwise.
template <class T, std::size_t N>
class scratch {
 public:
  explicit scratch(std::size_t n) : n_(n) {
    if (n > N) heap_.resize(n);
  }
  T& operator[](std::size_t i) noexcept { return n_ > N ? heap_[i] : local_[i]; }
  T* data() noexcept { return n_ > N ? heap_.data() : local_.data(); }

 private:
  std::size_t n_;
  std::array<T, N> local_{};
  std::vector<T> heap_;
};

}  // namespace

bool engine_core::running_check(boost::system::error_code& ec) const {
  if (state_.load(std::memory_order_acquire) == run_state::running) return true;
  ec = errc::not_running;
  return false;
}

timer_wheel::handle engine_core::find_settled(std::unique_lock<spin_mutex>& lock,
                                              std::string_view id, std::uint32_t hash) {
  // Calls on one id take effect in order, each seeing the settled outcome of
  // the last: a call finding the id's write in flight waits for it.
  bool waited = false;
  for (int round = 0;; ++round) {
    const timer_wheel::handle h = wheel_.find(id, hash);
    if ((h != timer_wheel::npos && transitional(tsw::state_of(tag(h)))) ||
        (!looking_up_.empty() && looking_up_.count(std::string(id)) != 0)) {
      waited = true;
      changed_.wait(lock);
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

// ------------------------------------------------------------------ schedule

boost::system::error_code engine_core::check_spec(spec_ref& spec) {
  // A type the registry knows was valid when it was interned: the character
  // check is for names met for the first time.
  boost::system::error_code ec;
  spec.type = types_.find(spec.type_name);
  if (!spec.type) {
    if (!valid_type(spec.type_name)) return errc::invalid_type;
    spec.type = types_.lookup(spec.type_name, options_.accept_unregistered_types, ec);
    if (!spec.type) return ec;
  } else if (!options_.accept_unregistered_types && !spec.type->exec) {
    return errc::unknown_type;  // interned from the store, never registered
  }
  if (!spec.id.empty() && !valid_id(spec.id)) return errc::invalid_id;
  if (spec.payload.size() > options_.max_payload) return errc::payload_too_large;
  if (!spec.id.empty()) spec.hash = wheel_.hash(spec.id);
  return {};
}

std::string engine_core::schedule_delay(std::string_view type, std::string_view payload,
                                        milliseconds delay, const schedule_options& opts,
                                        boost::system::error_code& ec) {
  ec = {};
  if (!running_check(ec)) return {};
  spec_ref spec{type, payload, opts.id, opts.conflict};
  spec.trigger_count = opts.trigger_count;
  spec.priority = opts.priority;
  spec.ttr_ms = ttr_ms_of(opts.ttr, ec);
  if (ec) return {};
  spec.due_ms = due_after(delay, ticker_.now_ms(), options_.max_delay, ec);
  if (ec || (ec = check_spec(spec))) return {};
  std::string id;
  std::size_t bad = 0;
  schedule_checked(std::span(&spec, 1), std::span(&id, 1), ec, bad);
  return ec ? std::string{} : id;
}

std::string engine_core::schedule_at(std::string_view type, std::string_view payload,
                                     std::chrono::system_clock::time_point due,
                                     const schedule_options& opts, boost::system::error_code& ec) {
  ec = {};
  if (!running_check(ec)) return {};
  spec_ref spec{type, payload, opts.id, opts.conflict};
  spec.trigger_count = opts.trigger_count;
  spec.priority = opts.priority;
  spec.ttr_ms = ttr_ms_of(opts.ttr, ec);
  if (ec) return {};
  spec.due_ms = due_at(due, now_ms(), options_.max_delay, ec);
  if (ec || (ec = check_spec(spec))) return {};
  std::string id;
  std::size_t bad = 0;
  schedule_checked(std::span(&spec, 1), std::span(&id, 1), ec, bad);
  return ec ? std::string{} : id;
}

std::vector<std::string> engine_core::schedule(std::span<const task_spec> specs,
                                               boost::system::error_code& ec, std::size_t& bad) {
  ec = {};
  bad = 0;
  if (!running_check(ec)) return {};
  const std::int64_t now = now_ms();
  std::vector<spec_ref> refs(specs.size());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const task_spec& s = specs[i];
    refs[i] = spec_ref{s.type, s.payload, s.options.id, s.options.conflict};
    refs[i].trigger_count = s.options.trigger_count;
    refs[i].priority = s.options.priority;
    refs[i].ttr_ms = ttr_ms_of(s.options.ttr, ec);
    if (ec) {
      bad = i;
      return {};
    }
    refs[i].due_ms = due_at(s.due, now, options_.max_delay, ec);
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

void engine_core::schedule_checked(std::span<spec_ref> specs, std::span<std::string> ids,
                                   boost::system::error_code& ec, std::size_t& bad) {
  pins pinned(*this);  // before any lock: it unpins under the lock
  // Without a horizon the wheel holds every task there is (a cluster always
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
  for (const spec_ref& s : specs)
    if (!s.id.empty()) wheel_.prefetch(s.hash);  // the bucket loads while we lock
  call_state inline_result;
  after_lock after;
  bool queued = false;
  {
    std::unique_lock lock(mutex_);
    std::string waiting;
    for (;;) {
      if (state_.load() != run_state::running) {
        ec = errc::not_running;
        return;
      }
      if (schedule_locked(specs, ids, call, inline_result, waiting, after)) break;
      find_settled(lock, waiting, wheel_.hash(waiting));
    }
    queued = call && call->remaining > 0;
  }
  run_after(after);
  wait_answer(call, queued, inline_result, ec);
  // A store error is about the whole batch (bad stays 0); a decision about
  // one task names it.
  if (ec && !queued) bad = inline_result.bad;
}

bool engine_core::schedule_locked(std::span<spec_ref> specs, std::span<std::string> ids,
                                  const std::shared_ptr<call_state>& call, call_state& out,
                                  std::string& waiting_id, after_lock& after) {
  const std::size_t n = specs.size();
  enum class action : std::uint8_t { insert, keep, replace };
  struct step {
    action what = action::insert;
    timer_wheel::handle h = timer_wheel::npos;
  };
  scratch<step, 4> plan(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (specs[i].id.empty()) continue;
    plan[i].h = wheel_.find(specs[i].id, specs[i].hash);
    if ((plan[i].h != timer_wheel::npos && transitional(tsw::state_of(tag(plan[i].h)))) ||
        (!looking_up_.empty() && looking_up_.count(std::string(specs[i].id)) != 0)) {
      waiting_id = std::string(specs[i].id);
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
  auto earlier_has = [&](std::size_t i, std::string_view id) {
    for (std::size_t j = 0; j < i; ++j)
      if (specs[j].id == id) return true;
    return false;
  };
  for (std::size_t i = 0; i < n; ++i) {
    spec_ref& spec = specs[i];
    if (spec.id.empty()) {
      do {
        ids[i] = ids_.next();
        spec.hash = wheel_.hash(ids[i]);
      } while (wheel_.find(ids[i], spec.hash) != timer_wheel::npos || earlier_has(i, ids[i]));
      spec.id = ids[i];
    } else {
      if (n > 1 && earlier_has(i, spec.id)) return fail(errc::duplicate_id, i);
      ids[i] = spec.id;
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
  if (added > 0 && pending_locked() + added > options_.max_pending)
    return fail(errc::queue_full, n - 1);
  // Per-type capacity: what the call adds to each capped type, counted in one
  // pass (a batch may hold 10,000 tasks; this runs under the lock). The first
  // task that takes its type past the cap is the one the error names.
  std::unordered_map<type_registry::kind, std::size_t> adding;
  for (std::size_t i = 0; i < n; ++i) {
    const auto* type = specs[i].type;
    if (type->capacity == 0 || plan[i].what == action::keep) continue;
    std::size_t& want = adding[type->k];
    if (plan[i].what == action::insert ||
        (plan[i].what == action::replace && wheel_.kind(plan[i].h) != type->k))
      ++want;
    if (want > 0 && kind_pending(type->k) + want > type->capacity) return fail(errc::type_full, i);
  }

  // Apply, in transitional states; then settle at once (nothing to write) or
  // hand the writes over as one group.
  const bool durable = writes(change_kind::save);
  std::vector<write_op> ops;
  if (durable) ops.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (plan[i].what == action::keep) continue;
    const spec_ref& spec = specs[i];
    const timer_wheel::item it{spec.id, spec.payload, spec.type->k, spec.due_ms, 0};
    std::unique_ptr<op_ctx> ctx;
    if (call) {
      ctx = std::make_unique<op_ctx>();
      ctx->call = call;
      ctx->index = i;
    }
    change c;
    c.why = p_insert;
    c.h = plan[i].h;
    if (plan[i].what == action::replace) {
      std::uint32_t w = tag(c.h);
      bool replaced = false;
      if (tsw::state_of(w) == tsw::armed) {
        set_tag(c.h, tsw::with_state(w, tsw::persisting));
        replaced = true;
      } else if (tsw::state_of(w) == tsw::queued) {
        // Take it from the ready queue before a worker starts it: the new
        // generation makes its queue reference stale.
        replaced = tsw::word(wheel_.tag(c.h))
                       .compare_exchange_strong(w, tsw::next_generation(w, tsw::persisting),
                                                std::memory_order_acq_rel);
        if (replaced) dispatcher_.count_ready(wheel_.kind(c.h), -1);
      }
      if (replaced) {
        c.why = p_replace;
        if (ctx) {
          ctx->old_payload = std::string(wheel_.payload(c.h));
          ctx->old_due_ms = wheel_.due_ms(c.h);
          ctx->old_attempts = wheel_.attempts(c.h);
          ctx->old_kind = wheel_.kind(c.h);
          const trigger_counts old = trigger_of(c.h);
          ctx->old_trigger = old.count;
          ctx->old_signals = old.signals;
          const task_attrs old_attrs = attrs_of(c.h);
          ctx->old_priority = old_attrs.priority;
          ctx->old_ttr_ms = old_attrs.ttr_ms;
        }
        --kind_pending(wheel_.kind(c.h));
        wheel_.disarm(c.h);
        wheel_.assign(c.h, it);
        set_trigger_locked(c.h, spec.trigger_count, 0);
        set_attrs_locked(c.h, {spec.priority, spec.ttr_ms});
        ++kind_pending(it.kind);
      } else {
        // Its attempt is running: let it finish, but its outcome must neither
        // remove nor retry what replaces it. It gives up the id (and with it
        // the store's record) to a new record.
        c.why = p_replace_running;
        c.aux = c.h;
        if (ctx) ctx->old_running_tag = tag(c.h);
        --kind_pending(wheel_.kind(c.h));
        pager_.note_gone_locked(wheel_.id(c.h));
        wheel_.unindex(c.h);
        ++unindexed_;
        c.h = timer_wheel::npos;
      }
    }
    if (c.h == timer_wheel::npos) {
      c.h = wheel_.insert_detached(it, spec.hash);
      set_tag(c.h, tsw::with_state(tag(c.h), tsw::persisting) | tsw::fresh);
      if (spec.trigger_count > 0) set_trigger_locked(c.h, spec.trigger_count, 0);
      if (spec.priority != 0 || spec.ttr_ms != 0)
        set_attrs_locked(c.h, {spec.priority, spec.ttr_ms});
      ++kind_pending(it.kind);
    }
    c.id = spec.id;
    if (durable) {
      write_op op = make_op(change_kind::save, c.why, c.h, true);
      // Clusters: a replace of a held record is fenced: it must not land once
      // another instance holds the shard (and read the old copy). A new
      // record is written unfenced, as any instance may.
      op.fence = c.why == p_replace || c.why == p_replace_running ? owner_->token_for(spec.id) : 0;
      op.aux = c.aux;
      op.ctx = std::move(ctx);
      ops.push_back(std::move(op));
    } else {
      settle_locked(c, out, after);  // nothing to write: it holds at once
    }
  }
  if (call) call->ids.assign(ids.begin(), ids.end());
  submit_locked(ops, call, out, after);
  return true;
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
  ref.trigger_count = spec.options.trigger_count;
  ref.priority = spec.options.priority;
  ref.ttr_ms = ttr_ms_of(spec.options.ttr, ec);
  if (ec) return done->complete(ec, {});
  ref.due_ms = due_at(spec.due, now_ms(), options_.max_delay, ec);
  if (ec || (ec = check_spec(ref))) return done->complete(ec, {});
  if (!ref.id.empty() && !owner_check(ref.id, ec)) return done->complete(ec, {});  // clusters
  const bool durable = writes(change_kind::save);
  auto call = durable ? std::make_shared<call_state>() : nullptr;
  call_state inline_result;
  after_lock after;
  std::string id;
  bool queued = false;
  {
    std::unique_lock lock(mutex_);
    if (state_.load() != run_state::running) {
      lock.unlock();
      return done->complete(errc::not_running, {});
    }
    if (call) call->async = std::move(done);
    if (looked_up != 0) {
      release_lookup_locked(spec.options.id, looked_up);  // decided on below, in this hold
    } else if (horizon_on() && !ref.id.empty() && ref.conflict != on_conflict::replace &&
               wheel_.find(ref.id, ref.hash) == timer_wheel::npos) {
      // Not held: it may wait past the horizon. Look it up on the pager's
      // thread (an async call does not block its caller); until then other
      // calls on the id wait behind this one (see find_settled).
      const std::string key(ref.id);  // before `spec` moves: ref views into it
      auto job = std::make_shared<deferred_call>(
          deferred_call{std::move(spec), call ? std::move(call->async) : std::move(done)});
      if (looking_up_.count(key) != 0) {
        deferred_[key].push_back(std::move(*job));
        return;
      }
      const std::uint64_t serial = ++lookup_serial_;
      looking_up_.emplace(key, serial);
      lock.unlock();
      pager_.post([this, job, serial] { run_lookup(*job, serial); });
      return;
    }
    std::string waiting;
    if (!schedule_locked(std::span(&ref, 1), std::span(&id, 1), call, inline_result, waiting,
                         after)) {
      // Another write about this id is in flight: run this call when it has
      // settled, rather than block the caller's thread.
      deferred_[waiting].push_back(
          deferred_call{std::move(spec), call ? std::move(call->async) : std::move(done)});
      return;
    }
    queued = call && call->remaining > 0;
  }
  run_after(after);
  if (queued) return;  // on_written() completes it
  auto& handler = call ? call->async : done;
  handler->complete(inline_result.ec, inline_result.ec ? std::string{} : id);
}

bool engine_core::release_lookup_locked(std::string_view id, std::uint64_t serial) {
  const auto it = looking_up_.find(std::string(id));
  if (it == looking_up_.end() || it->second != serial) return false;
  looking_up_.erase(it);
  return true;
}

void engine_core::run_lookup(deferred_call& job, std::uint64_t serial) {
  const std::string id = job.spec.options.id;
  {
    boost::system::error_code ec;
    pins pinned(*this);
    const std::string_view key = id;
    fault_in(std::span(&key, 1), pinned, ec);
    if (ec) {
      {
        std::lock_guard lock(mutex_);
        release_lookup_locked(id, serial);
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
    std::lock_guard lock(mutex_);
    release_lookup_locked(id, serial);
    if (deferred_.count(id) != 0) after.deferred.push_back(id);
  }
  run_after(after);
  changed_.notify_all();
}

// ------------------------------------------------------------------ cancel, reschedule

bool engine_core::cancel(std::string_view id, boost::system::error_code& ec) {
  ec = {};
  if (!running_check(ec)) return false;
  return change_id(
      id, change_kind::remove, id_must::be_held, [](boost::system::error_code&) { return true; },
      [&](id_change& d, boost::system::error_code&) {
        if (d.h == timer_wheel::npos) return false;
        std::uint32_t w = tag(d.h);
        if (tsw::state_of(w) == tsw::armed) {
          d.why = p_cancel;
          wheel_.disarm(d.h);
          set_tag(d.h, tsw::with_state(w, tsw::persisting));
          return true;
        }
        if (tsw::state_of(w) == tsw::queued &&
            tsw::word(wheel_.tag(d.h))
                .compare_exchange_strong(w, tsw::with_state(w, tsw::cancelling),
                                         std::memory_order_acq_rel)) {
          d.why = p_cancel_queued;  // due and not started: from here no worker can start it
          return true;
        }
        return false;  // running now (or a worker just won the swap)
      },
      ec);
}

bool engine_core::reschedule(std::string_view id, std::chrono::system_clock::time_point due,
                             boost::system::error_code& ec) {
  ec = {};
  if (!running_check(ec)) return false;
  std::int64_t due_ms = 0;
  return change_id(
      id, change_kind::save, id_must::be_held,
      [&](boost::system::error_code& pec) {
        due_ms = due_at(due, now_ms(), options_.max_delay, pec);
        return !pec;
      },
      [&](id_change& d, boost::system::error_code&) {
        if (d.h == timer_wheel::npos) return false;
        const timer_wheel::handle h = d.h;
        std::uint32_t w = tag(h);
        if (tsw::state_of(w) == tsw::armed) {
          set_tag(h, tsw::with_state(w, tsw::persisting));
        } else if (tsw::state_of(w) == tsw::queued &&
                   tsw::word(wheel_.tag(h))
                       .compare_exchange_strong(w, tsw::next_generation(w, tsw::persisting),
                                                std::memory_order_acq_rel)) {
          // Taken from the ready queue: its reference there is stale now.
          dispatcher_.count_ready(wheel_.kind(h), -1);
        } else {
          return false;  // running now
        }
        d.why = p_reschedule;
        d.old_due_ms = wheel_.due_ms(h);
        wheel_.disarm(h);
        wheel_.set_due_ms(h, due_ms);
        return true;
      },
      ec);
}

// ------------------------------------------------------------------ dead letters

std::vector<dead_letter> engine_core::dead_letters(std::size_t offset, std::size_t limit,
                                                   boost::system::error_code& ec) const {
  ec = {};
  if (!running_check(ec)) return {};
  // Straight to the store: dead letters are not kept in memory. Writes still
  // queued are flushed first, so a task that just died is listed.
  const_cast<store_writer&>(writer_).flush();
  dead_letter_store* const dead = dead_letters_of(*store_, ec);  // null: unsupported
  return dead ? dead->list_dead(offset, limit, ec) : std::vector<dead_letter>{};
}

std::optional<dead_letter> engine_core::find_dead(std::string_view id,
                                                  boost::system::error_code& ec) const {
  ec = {};
  if (!running_check(ec)) return std::nullopt;
  const_cast<store_writer&>(writer_).flush();  // as dead_letters()
  dead_letter_store* const dead = dead_letters_of(*store_, ec);
  return dead ? dead->find_dead(id, ec) : std::nullopt;
}

bool engine_core::requeue(std::string_view id, std::chrono::system_clock::time_point due,
                          boost::system::error_code& ec) {
  ec = {};
  if (!running_check(ec)) return false;
  std::int64_t due_ms = 0;
  std::optional<dead_letter> d;
  // A revive always goes to the writer (change_kind::revive): even a store
  // that keeps no live tasks holds the dead letter (it writes a purge then).
  return change_id(
      id, change_kind::revive, id_must::be_free,
      [&](boost::system::error_code& pec) {
        due_ms = due_at(due, now_ms(), options_.max_delay, pec);
        if (pec) return false;
        writer_.flush();
        dead_letter_store* const dead = dead_letters_of(*store_, pec);  // null: unsupported
        if (dead) d = dead->find_dead(id, pec);
        return !pec && d.has_value();
      },
      [&](id_change& c, boost::system::error_code& dec) {
        if (pending_locked() >= options_.max_pending) {
          dec = errc::queue_full;
          return false;
        }
        const type_registry::type_info* type =
            valid_type(d->task.type) ? types_.lookup(d->task.type, true, dec) : nullptr;
        if (!type) {
          if (!dec) dec = errc::invalid_type;
          return false;
        }
        if (type->capacity != 0 && kind_pending(type->k) >= type->capacity) {
          dec = errc::type_full;
          return false;
        }
        c.h = wheel_.insert_detached({d->task.id, d->task.payload, type->k, due_ms, 0}, c.hash);
        set_tag(c.h, tsw::with_state(tag(c.h), tsw::persisting) | tsw::fresh);
        set_attrs_locked(c.h, attrs_from(d->task));  // a requeue keeps its priority and ttr
        ++kind_pending(type->k);
        c.why = p_insert;
        c.aux = 1;  // a requeue: one dead letter fewer once it landed
        return true;
      },
      ec);
}

bool engine_core::purge(std::string_view id, boost::system::error_code& ec) {
  ec = {};
  if (!running_check(ec)) return false;
  writer_.flush();
  dead_letter_store* const dead = dead_letters_of(*store_, ec);  // null: unsupported
  if (!dead) return false;
  std::optional<dead_letter> d = dead->find_dead(id, ec);
  if (ec || !d) return false;
  const auto call = std::make_shared<call_state>();
  call_state inline_result;
  after_lock after;
  bool queued = false;
  {
    std::unique_lock lock(mutex_);
    write_op op;
    op.what = change_kind::purge;
    op.purpose = p_purge;
    op.handle = timer_wheel::npos;
    op.t.id = std::string(id);
    auto ctx = std::make_unique<op_ctx>();
    ctx->call = call;
    op.ctx = std::move(ctx);
    queued = submit_locked(std::span(&op, 1), call, inline_result, after);
  }
  run_after(after);
  return wait_answer(call, queued, inline_result, ec);
}

}  // namespace delayq::detail
