#include "detail/engine_core.hpp"

#include <algorithm>
#include <queue>

#include "delayq/log.hpp"
#include "detail/task_state.hpp"

namespace delayq::detail {
namespace {

namespace tsw = task_state_word;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

bool transitional(tsw::state s) noexcept { return s == tsw::persisting || s == tsw::cancelling; }

std::string describe_task(std::string_view id, std::string_view type) {
  return "task " + std::string(id) + " (" + std::string(type) + ")";
}

}  // namespace

engine_core::engine_core(boost::asio::any_io_executor ex, executor_factory executors,
                         std::unique_ptr<task_store> store, engine_options options)
    : options_(std::move(options)),
      executors_(std::move(executors)),
      store_(std::move(store)),
      executor_(ex),
      types_(executors_, options_),
      failures_(options_.alerts),
      ticker_(ex, options_.tick),
      wheel_(options_.slots),
      writer_(*store_, store_writer::options{options_.max_queued_writes},
              [this](std::span<write_op> ops) { on_written(ops); }),
      dispatcher_(*this, types_, options_.workers, ticker_.strand(), lateness_) {
  for (const auto& [name, limit] : options_.type_concurrency) {
    boost::system::error_code ec;
    if (!valid_type(name)) continue;  // no task can have it
    if (const auto* t = types_.lookup(name, true, ec)) dispatcher_.set_limit(t->k, limit);
  }
}

engine_core::~engine_core() { shutdown(); }

void engine_core::shutdown() {
  dispatcher_.join();
  writer_.stop();
}

bool engine_core::running_check(boost::system::error_code& ec) const {
  if (state_.load(std::memory_order_acquire) == run_state::running) return true;
  ec = errc::not_running;
  return false;
}

// ------------------------------------------------------------------ wheel

std::uint32_t engine_core::tag(timer_wheel::handle h) const noexcept {
  // The word may be swapped by a worker at any time: always read atomically.
  return tsw::word(const_cast<timer_wheel&>(wheel_).tag(h)).load(std::memory_order_acquire);
}

void engine_core::set_tag(timer_wheel::handle h, std::uint32_t w) noexcept {
  tsw::word(wheel_.tag(h)).store(w, std::memory_order_release);
}

std::size_t& engine_core::kind_pending(std::uint16_t kind) {
  if (kind >= kind_pending_.size()) kind_pending_.resize(std::size_t{kind} + 1, 0);
  return kind_pending_[kind];
}

task engine_core::task_of(timer_wheel::handle h) const {
  task t;
  t.id = std::string(wheel_.id(h));
  t.type = types_.at(wheel_.kind(h)).name;
  t.payload = std::string(wheel_.payload(h));
  t.due = from_epoch_ms(wheel_.due_ms(h));
  t.attempts = wheel_.attempts(h);
  return t;
}

void engine_core::arm_locked(timer_wheel::handle h, std::int64_t due_ms) {
  set_tag(h, tsw::with_state(tag(h), tsw::armed));
  wheel_.arm(h, ticker_.tick_for(due_ms));
  note_armed_locked(wheel_.due_tick(h));
}

void engine_core::erase_locked(timer_wheel::handle h) {
  if (wheel_.is_indexed(h))
    --kind_pending(wheel_.kind(h));
  else
    --unindexed_;
  wheel_.erase(h);
}

void engine_core::wait_settled(std::unique_lock<spin_mutex>& lock, std::string_view id,
                               std::uint32_t hash) {
  changed_.wait(lock, [&] {
    const timer_wheel::handle h = wheel_.find(id, hash);
    return h == timer_wheel::npos || !transitional(tsw::state_of(tag(h)));
  });
}

// ------------------------------------------------------------------ lifecycle

void engine_core::start(boost::system::error_code& ec) {
  ec = {};
  std::unique_lock lock(mutex_);
  if (state_.load() != run_state::idle) {
    ec = errc::already_started;
    return;
  }
  // Nobody else changes the wheel before start() returns (calls fail with
  // not_running), so holding the lock across the load costs nothing.
  ticker_.anchor();
  const std::int64_t now = now_ms();
  const bool take = store_->in_process();
  std::vector<timer_wheel::handle> overdue;
  std::vector<std::pair<std::string, std::string>> rejected;  // id, why
  std::vector<std::string> taken;
  std::uint64_t loaded = 0;
  auto next_report = steady_clock::now() + std::chrono::seconds{1};
  const list_summary summary = store_->list(
      [&](task&& t) {
        std::string why;
        const type_registry::type_info* type = nullptr;
        if (!valid_id(t.id)) {
          why = "the engine does not accept its id";
        } else if (!valid_type(t.type)) {
          why = "the engine does not accept its type";
        } else {
          boost::system::error_code tec;
          type = types_.lookup(t.type, true, tec);
          if (!type) why = "more distinct task types than the engine holds";
        }
        if (!why.empty()) {
          rejected.emplace_back(std::move(t.id), std::move(why));
          return;
        }
        const std::int64_t due =
            std::clamp<std::int64_t>(to_epoch_ms(t.due), 0, latest_due_ms() - 1);
        const timer_wheel::handle h =
            wheel_.insert_detached({t.id, t.payload, type->k, due, t.attempts});
        if (h == timer_wheel::npos) {
          log(log_level::warning,
              "start: skipping a second stored copy of " + describe_task(t.id, t.type));
          return;
        }
        set_tag(h, tsw::with_state(tag(h), tsw::armed));
        ++kind_pending(type->k);
        ++loaded;
        if (due <= now && options_.catch_up_rate > 0)
          overdue.push_back(h);
        else
          wheel_.arm(h, ticker_.tick_for(due));
        if (take) {
          taken.push_back(std::move(t.id));
          if (taken.size() >= 10'000) {
            boost::system::error_code rec;
            store_->remove(taken, rec);
            taken.clear();
          }
        }
        if ((loaded & 0xffff) == 0 && steady_clock::now() >= next_report) {
          next_report = steady_clock::now() + std::chrono::seconds{1};
          log(log_level::info, "start: loaded " + std::to_string(loaded) + " tasks so far from " +
                                   store_->describe());
        }
      },
      ec);
  if (ec) {
    log(log_level::error, "start: loading " + store_->describe() + " failed: " + ec.message());
    // Leave nothing half-loaded behind: a later start() loads afresh.
    std::vector<timer_wheel::handle> all;
    wheel_.for_each([&](timer_wheel::handle h) { all.push_back(h); });
    for (timer_wheel::handle h : all) wheel_.erase(h);
    kind_pending_.clear();
    return;
  }
  if (take && !taken.empty()) {
    boost::system::error_code rec;
    store_->remove(taken, rec);
  }
  std::size_t quarantined = summary.quarantined;
  for (const auto& [id, why] : rejected) {
    boost::system::error_code qec;
    store_->quarantine(id, why, qec);
    if (!qec) {
      ++quarantined;
      log(log_level::error, "start: quarantined stored task '" + id + "': " + why);
    } else {
      log(log_level::warning, "start: skipping stored task '" + id + "': " + why +
                                  " (it could not be quarantined: " + qec.message() + ")");
    }
  }
  release_overdue(overdue);
  loaded_ = loaded;
  quarantined_ = quarantined;
  boost::system::error_code dead_ec;
  dead_ = store_->count_dead(dead_ec);
  if (dead_ec) dead_ = 0;  // a store without dead letters (errc::unsupported)
  state_.store(run_state::running, std::memory_order_release);
  armed_tick_ = wheel_.next_due_tick();
  if (armed_tick_ != timer_wheel::no_tick)
    ticker_.post([self = shared_from_this()] { self->rearm(); });
  log(log_level::info,
      "started with " + std::to_string(loaded) + " stored tasks from " + store_->describe());
}

void engine_core::release_overdue(std::vector<timer_wheel::handle>& overdue) {
  if (overdue.empty()) return;
  // Spread over the coming ticks at catch_up_rate per second, in due order.
  // Their due time stays as stored (executors and lateness see the truth);
  // only the tick they are released at moves. They are armed like any task,
  // so cancel() and reschedule() reach them while they wait their turn.
  std::stable_sort(overdue.begin(), overdue.end(),
                   [&](timer_wheel::handle a, timer_wheel::handle b) {
                     return wheel_.due_ms(a) < wheel_.due_ms(b);
                   });
  const double per_tick =
      options_.catch_up_rate * std::chrono::duration<double>(options_.tick).count();
  const std::uint64_t first = ticker_.current_tick();
  for (std::size_t k = 0; k < overdue.size(); ++k)
    wheel_.arm(overdue[k], first + static_cast<std::uint64_t>(static_cast<double>(k) / per_tick));
  log(log_level::info, std::to_string(overdue.size()) +
                           " tasks were overdue at start; releasing them at " +
                           std::to_string(options_.catch_up_rate) + " per second");
}

bool engine_core::stop(milliseconds drain) {
  {
    std::lock_guard lock(mutex_);
    const run_state s = state_.load();
    if (s == run_state::idle || s == run_state::stopped) {
      state_.store(run_state::stopped);
      return dispatcher_.running() == 0;
    }
    state_.store(run_state::stopping);
  }
  dispatcher_.stop_starting();
  ticker_.post([self = shared_from_this()] { self->ticker_.cancel(); });
  if (dispatcher_.in_attempt()) {
    // Called by an executor: its own attempt is running, so there is nothing
    // to drain into; waiting would wait for itself.
    state_.store(run_state::stopped);
    return false;
  }
  bool drained;
  {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, drain, [&] { return dispatcher_.running() == 0; });
    drained = dispatcher_.running() == 0;
    state_.store(run_state::stopped);
  }
  writer_.flush();  // removals of attempts that just succeeded, among others
  return drained;
}

// ------------------------------------------------------------------ scheduling

boost::system::error_code engine_core::check_spec(task_spec& spec, std::int64_t now,
                                                  checked_spec& out) {
  if (!valid_type(spec.type)) return errc::invalid_type;
  boost::system::error_code ec;
  out.type = types_.lookup(spec.type, options_.accept_unregistered_types, ec);
  if (!out.type) return ec;
  if (!spec.options.id.empty() && !valid_id(spec.options.id)) return errc::invalid_id;
  if (spec.payload.size() > options_.max_payload) return errc::payload_too_large;
  out.due_ms = due_at(spec.due, now, options_.max_delay, ec);
  if (ec) return ec;
  if (!spec.options.id.empty()) out.hash = wheel_.hash(spec.options.id);
  return {};
}

std::vector<std::string> engine_core::schedule(std::span<task_spec> specs,
                                               boost::system::error_code& ec, std::size_t& bad) {
  ec = {};
  bad = 0;
  if (!running_check(ec)) return {};
  const std::int64_t now = now_ms();
  std::vector<checked_spec> checked(specs.size());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    if ((ec = check_spec(specs[i], now, checked[i]))) {
      bad = i;
      return {};
    }
  }
  if (options_.when_write_queue_full == engine_options::queue_full_policy::wait &&
      writer_.persists_live())
    writer_.wait_for_room();
  const auto call = writer_.persists_live() ? std::make_shared<call_state>() : nullptr;
  call_state inline_result;
  after_lock after;
  bool queued = false;
  {
    std::unique_lock lock(mutex_);
    std::string waiting;
    for (;;) {
      if (state_.load() != run_state::running) {
        ec = errc::not_running;
        return {};
      }
      if (schedule_locked(specs, checked, call, inline_result, waiting, after)) break;
      wait_settled(lock, waiting, wheel_.hash(waiting));
    }
    queued = call && call->remaining > 0;
  }
  run_after(after);
  if (queued) {
    call->done.acquire();
    ec = call->ec;  // a store error is about the whole batch: `bad` stays 0
    return ec ? std::vector<std::string>{} : std::move(call->ids);
  }
  ec = inline_result.ec;
  if (ec) {
    bad = inline_result.bad;
    return {};
  }
  return std::move(inline_result.ids);
}

std::string engine_core::schedule_delay(std::string_view type, std::string&& payload,
                                        milliseconds delay, const schedule_options& opts,
                                        boost::system::error_code& ec) {
  ec = {};
  if (!running_check(ec)) return {};
  const std::int64_t due = due_after(delay, now_ms(), options_.max_delay, ec);
  if (ec) return {};
  task_spec spec{std::string(type), std::move(payload), from_epoch_ms(due), opts};
  std::size_t bad = 0;
  auto ids = schedule(std::span(&spec, 1), ec, bad);
  return ids.empty() ? std::string{} : std::move(ids.front());
}

bool engine_core::schedule_locked(std::span<task_spec> specs, std::span<checked_spec> checked,
                                  const std::shared_ptr<call_state>& call, call_state& out,
                                  std::string& waiting_id, after_lock& after) {
  const std::size_t n = specs.size();
  // A call on an id whose write is in flight waits for it, so calls on one id
  // take effect in order and each sees the settled outcome of the last.
  for (std::size_t i = 0; i < n; ++i) {
    const std::string& id = specs[i].options.id;
    if (id.empty()) continue;
    const timer_wheel::handle h = wheel_.find(id, checked[i].hash);
    if (h != timer_wheel::npos && transitional(tsw::state_of(tag(h)))) {
      waiting_id = id;
      return false;
    }
  }

  // Decide every task before changing anything.
  enum class action : std::uint8_t { insert, keep, replace };
  struct step {
    action what = action::insert;
    timer_wheel::handle h = timer_wheel::npos;
  };
  std::vector<step> plan(n);
  std::vector<std::string> ids(n);
  std::size_t added = 0;
  auto fail = [&](errc e, std::size_t i) {
    out.ec = e;
    out.bad = i;
    return true;
  };
  for (std::size_t i = 0; i < n; ++i) {
    std::string& id = ids[i];
    id = specs[i].options.id;
    if (id.empty()) {
      do {
        id = ids_.next();
        checked[i].hash = wheel_.hash(id);
      } while (wheel_.find(id, checked[i].hash) != timer_wheel::npos ||
               std::find(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(i), id) !=
                   ids.begin() + static_cast<std::ptrdiff_t>(i));
    } else if (n > 1 && std::find(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(i), id) !=
                            ids.begin() + static_cast<std::ptrdiff_t>(i)) {
      return fail(errc::duplicate_id, i);
    }
    const timer_wheel::handle h = wheel_.find(id, checked[i].hash);
    if (h == timer_wheel::npos) {
      ++added;
      continue;
    }
    switch (specs[i].options.conflict) {
      case on_conflict::reject: return fail(errc::duplicate_id, i);
      case on_conflict::keep: plan[i].what = action::keep; break;
      case on_conflict::replace:
        plan[i].what = action::replace;
        plan[i].h = h;
        break;
    }
  }
  if (added > 0 && pending_locked() + added > options_.max_pending)
    return fail(errc::queue_full, n - 1);
  for (std::size_t i = 0; i < n; ++i) {
    const auto* type = checked[i].type;
    if (type->capacity == 0 || plan[i].what == action::keep) continue;
    std::size_t want = 0;
    for (std::size_t j = 0; j <= i; ++j)
      if (checked[j].type == type && plan[j].what != action::keep &&
          (plan[j].what == action::insert || wheel_.kind(plan[j].h) != type->k))
        ++want;
    if (want > 0 && kind_pending(type->k) + want > type->capacity) return fail(errc::type_full, i);
  }

  // Apply in memory, in transitional states, and hand the ops over.
  std::vector<write_op> ops;
  ops.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (plan[i].what == action::keep) continue;
    const task_spec& spec = specs[i];
    const checked_spec& c = checked[i];
    const timer_wheel::item it{ids[i], spec.payload, c.type->k, c.due_ms, 0};
    auto ctx = call ? std::make_unique<op_ctx>() : nullptr;
    if (ctx) {
      ctx->call = call;
      ctx->index = i;
    }
    purpose why = p_insert;
    timer_wheel::handle h = plan[i].h;
    if (plan[i].what == action::replace) {
      std::uint32_t w = tag(h);
      const tsw::state st = tsw::state_of(w);
      bool replaced = false;
      if (st == tsw::armed) {
        set_tag(h, tsw::with_state(w, tsw::persisting));
        replaced = true;
      } else if (st == tsw::queued) {
        // Take it from the ready queue before a worker starts it: the new
        // generation makes its queue reference stale.
        replaced = tsw::word(wheel_.tag(h))
                       .compare_exchange_strong(w, tsw::next_generation(w, tsw::persisting),
                                                std::memory_order_acq_rel);
        if (replaced) dispatcher_.count_ready(-1);
      }
      if (replaced) {
        why = p_replace;
        if (ctx) {
          ctx->old_payload = std::string(wheel_.payload(h));
          ctx->old_due_ms = wheel_.due_ms(h);
          ctx->old_attempts = wheel_.attempts(h);
          ctx->old_kind = wheel_.kind(h);
        }
        --kind_pending(wheel_.kind(h));
        wheel_.disarm(h);
        wheel_.assign(h, it);
        ++kind_pending(it.kind);
      } else {
        // Its attempt is running: let it finish, but its outcome must neither
        // remove nor retry what replaces it. It gives up the id (and with it
        // the store's record) to a new record.
        why = p_replace_running;
        if (ctx) ctx->old_running_tag = tag(h);
        --kind_pending(wheel_.kind(h));
        wheel_.unindex(h);
        ++unindexed_;
        const timer_wheel::handle old = h;
        h = wheel_.insert_detached(it, c.hash);
        set_tag(h, tsw::with_state(tag(h), tsw::persisting) | tsw::fresh);
        ++kind_pending(it.kind);
        write_op op = make_op(change_kind::save, why, h, true);
        op.aux = old;
        op.ctx = std::move(ctx);
        ops.push_back(std::move(op));
        continue;
      }
    } else {
      h = wheel_.insert_detached(it, c.hash);
      set_tag(h, tsw::with_state(tag(h), tsw::persisting) | tsw::fresh);
      ++kind_pending(it.kind);
    }
    write_op op = make_op(change_kind::save, why, h, true);
    op.ctx = std::move(ctx);
    ops.push_back(std::move(op));
  }
  out.ids = ids;
  if (call) call->ids = std::move(ids);
  bool refused = false;
  submit_locked(ops, call, out, after, refused);
  return true;
}

// ------------------------------------------------------------------ async schedule

void engine_core::async_schedule(task_spec spec, std::unique_ptr<schedule_completion> done) {
  boost::system::error_code ec;
  if (!running_check(ec)) return done->complete(ec, {});
  checked_spec checked;
  if ((ec = check_spec(spec, now_ms(), checked))) return done->complete(ec, {});
  auto call = std::make_shared<call_state>();
  call->async = std::move(done);
  call_state inline_result;
  after_lock after;
  bool queued = false;
  {
    std::unique_lock lock(mutex_);
    if (state_.load() != run_state::running) {
      lock.unlock();
      return call->async->complete(errc::not_running, {});
    }
    std::string waiting;
    const auto with_call = writer_.persists_live() ? call : nullptr;
    if (!schedule_locked(std::span(&spec, 1), std::span(&checked, 1), with_call, inline_result,
                         waiting, after)) {
      // Another write about this id is in flight: run this call when it has
      // settled, rather than block the caller's thread.
      deferred_[waiting].push_back(deferred_call{std::move(spec), std::move(call->async)});
      return;
    }
    queued = with_call && call->remaining > 0;
  }
  run_after(after);
  if (queued) return;  // on_written() completes it
  call->async->complete(inline_result.ec, inline_result.ec || inline_result.ids.empty()
                                              ? std::string{}
                                              : inline_result.ids[0]);
}

// ------------------------------------------------------------------ cancel, reschedule

bool engine_core::cancel(std::string_view id, boost::system::error_code& ec) {
  ec = {};
  if (!running_check(ec)) return false;
  const std::uint32_t hash = wheel_.hash(id);
  const auto call = writer_.persists_live() ? std::make_shared<call_state>() : nullptr;
  call_state inline_result;
  after_lock after;
  bool queued = false;
  {
    std::unique_lock lock(mutex_);
    if (state_.load() != run_state::running) {
      ec = errc::not_running;
      return false;
    }
    wait_settled(lock, id, hash);
    const timer_wheel::handle h = wheel_.find(id, hash);
    if (h == timer_wheel::npos) return false;
    std::uint32_t w = tag(h);
    purpose why;
    if (tsw::state_of(w) == tsw::armed) {
      why = p_cancel;
      wheel_.disarm(h);
      set_tag(h, tsw::with_state(w, tsw::persisting));
    } else if (tsw::state_of(w) == tsw::queued &&
               tsw::word(wheel_.tag(h))
                   .compare_exchange_strong(w, tsw::with_state(w, tsw::cancelling),
                                            std::memory_order_acq_rel)) {
      // Due and not started: from here no worker can start it.
      why = p_cancel_queued;
    } else {
      return false;  // running now (or a worker just won the swap)
    }
    write_op op = make_op(change_kind::remove, why, h, false);
    if (call) {
      auto ctx = std::make_unique<op_ctx>();
      ctx->call = call;
      op.ctx = std::move(ctx);
    }
    bool refused = false;
    queued = submit_locked(std::span(&op, 1), call, inline_result, after, refused);
  }
  run_after(after);
  if (queued) {
    call->done.acquire();
    ec = call->ec;
    return call->found;
  }
  ec = inline_result.ec;
  return inline_result.found;
}

bool engine_core::reschedule(std::string_view id, std::chrono::system_clock::time_point due,
                             boost::system::error_code& ec) {
  ec = {};
  if (!running_check(ec)) return false;
  const std::int64_t due_ms = due_at(due, now_ms(), options_.max_delay, ec);
  if (ec) return false;
  const std::uint32_t hash = wheel_.hash(id);
  const auto call = writer_.persists_live() ? std::make_shared<call_state>() : nullptr;
  call_state inline_result;
  after_lock after;
  bool queued = false;
  {
    std::unique_lock lock(mutex_);
    if (state_.load() != run_state::running) {
      ec = errc::not_running;
      return false;
    }
    wait_settled(lock, id, hash);
    const timer_wheel::handle h = wheel_.find(id, hash);
    if (h == timer_wheel::npos) return false;
    std::uint32_t w = tag(h);
    if (tsw::state_of(w) == tsw::armed) {
      set_tag(h, tsw::with_state(w, tsw::persisting));
    } else if (tsw::state_of(w) == tsw::queued &&
               tsw::word(wheel_.tag(h))
                   .compare_exchange_strong(w, tsw::next_generation(w, tsw::persisting),
                                            std::memory_order_acq_rel)) {
      dispatcher_.count_ready(-1);
    } else {
      return false;  // running now
    }
    auto ctx = call ? std::make_unique<op_ctx>() : nullptr;
    if (ctx) {
      ctx->call = call;
      ctx->old_due_ms = wheel_.due_ms(h);
    }
    wheel_.disarm(h);
    wheel_.set_due_ms(h, due_ms);
    write_op op = make_op(change_kind::save, p_reschedule, h, true);
    op.ctx = std::move(ctx);
    bool refused = false;
    queued = submit_locked(std::span(&op, 1), call, inline_result, after, refused);
  }
  run_after(after);
  if (queued) {
    call->done.acquire();
    ec = call->ec;
    return call->found;
  }
  ec = inline_result.ec;
  return inline_result.found;
}

// ------------------------------------------------------------------ dead letters

std::vector<dead_letter> engine_core::dead_letters(std::size_t offset, std::size_t limit,
                                                   boost::system::error_code& ec) const {
  ec = {};
  if (!running_check(ec)) return {};
  // Straight to the store: dead letters are not kept in memory. Writes still
  // queued are flushed first, so a task that just died is listed.
  const_cast<store_writer&>(writer_).flush();
  return store_->list_dead(offset, limit, ec);
}

bool engine_core::requeue(std::string_view id, std::chrono::system_clock::time_point due,
                          boost::system::error_code& ec) {
  ec = {};
  if (!running_check(ec)) return false;
  const std::int64_t due_ms = due_at(due, now_ms(), options_.max_delay, ec);
  if (ec) return false;
  writer_.flush();
  std::optional<dead_letter> d = store_->find_dead(id, ec);
  if (ec || !d) return false;
  const std::uint32_t hash = wheel_.hash(id);
  const auto call = writer_.persists_live() ? std::make_shared<call_state>() : nullptr;
  call_state inline_result;
  after_lock after;
  bool queued = false;
  {
    std::unique_lock lock(mutex_);
    if (state_.load() != run_state::running) {
      ec = errc::not_running;
      return false;
    }
    wait_settled(lock, id, hash);
    if (wheel_.find(id, hash) != timer_wheel::npos) {
      ec = errc::duplicate_id;
      return false;
    }
    if (pending_locked() >= options_.max_pending) {
      ec = errc::queue_full;
      return false;
    }
    const type_registry::type_info* type =
        valid_type(d->task.type) ? types_.lookup(d->task.type, true, ec) : nullptr;
    if (!type) {
      if (!ec) ec = errc::invalid_type;
      return false;
    }
    if (type->capacity != 0 && kind_pending(type->k) >= type->capacity) {
      ec = errc::type_full;
      return false;
    }
    const timer_wheel::handle h =
        wheel_.insert_detached({d->task.id, d->task.payload, type->k, due_ms, 0}, hash);
    set_tag(h, tsw::with_state(tag(h), tsw::persisting) | tsw::fresh);
    ++kind_pending(type->k);
    write_op op = make_op(change_kind::revive, p_insert, h, true);
    op.aux = 1;  // a requeue: one dead letter fewer once it landed
    if (call) {
      auto ctx = std::make_unique<op_ctx>();
      ctx->call = call;
      op.ctx = std::move(ctx);
    }
    bool refused = false;
    queued = submit_locked(std::span(&op, 1), call, inline_result, after, refused);
  }
  run_after(after);
  if (queued) {
    call->done.acquire();
    ec = call->ec;
    return !ec;
  }
  ec = inline_result.ec;
  return !ec;
}

bool engine_core::purge(std::string_view id, boost::system::error_code& ec) {
  ec = {};
  if (!running_check(ec)) return false;
  writer_.flush();
  std::optional<dead_letter> d = store_->find_dead(id, ec);
  if (ec || !d) return false;
  const auto call = writer_.persists_live() ? std::make_shared<call_state>() : nullptr;
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
    if (call) {
      auto ctx = std::make_unique<op_ctx>();
      ctx->call = call;
      op.ctx = std::move(ctx);
    }
    bool refused = false;
    queued = submit_locked(std::span(&op, 1), call, inline_result, after, refused);
  }
  run_after(after);
  if (queued) {
    call->done.acquire();
    ec = call->ec;
    return call->found;
  }
  ec = inline_result.ec;
  return inline_result.found;
}

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
                                call_state& inline_call, after_lock& after, bool& refused) {
  refused = false;
  if (ops.empty()) return false;
  if (call) call->remaining = ops.size();
  switch (writer_.submit(ops)) {
    case store_writer::result::queued: return true;
    case store_writer::result::busy:
      refused = true;
      for (write_op& op : ops) op.ec = errc::busy;
      break;
    case store_writer::result::done: break;
  }
  // Settled on this thread, before anyone else could see the records'
  // transitional states.
  if (call) call->remaining = 0;
  for (write_op& op : ops) settle_op_locked(op, inline_call, after);
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
      settle_op_locked(op, call, after);
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

void engine_core::settle_op_locked(write_op& op, call_state& call, after_lock& after) {
  const bool ok = !op.ec;
  if (!ok && !call.ec) call.ec = op.ec;
  const timer_wheel::handle h = op.handle;
  auto* ctx = static_cast<op_ctx*>(op.ctx.get());
  bool settled_record = h != timer_wheel::npos;
  switch (static_cast<purpose>(op.purpose)) {
    case p_none: settled_record = false; break;
    case p_insert:
      if (ok) {
        arm_locked(h, wheel_.due_ms(h));
        call.found = true;
        if (op.aux == 1) {
          if (dead_ > 0) --dead_;
        } else {
          ++scheduled_;
        }
      } else {
        erase_locked(h);
      }
      break;
    case p_replace:
      if (ok) {
        ++scheduled_;
      } else if (ctx) {
        --kind_pending(wheel_.kind(h));
        wheel_.assign(h, {{}, ctx->old_payload, ctx->old_kind, ctx->old_due_ms, ctx->old_attempts});
        ++kind_pending(ctx->old_kind);
      }
      arm_locked(h, wheel_.due_ms(h));
      break;
    case p_replace_running:
      if (ok) {
        arm_locked(h, wheel_.due_ms(h));
        ++scheduled_;
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
        erase_locked(h);
        ++cancelled_;
        call.found = true;
      } else {
        arm_locked(h, wheel_.due_ms(h));
      }
      break;
    case p_cancel_queued: {
      auto word = tsw::word(wheel_.tag(h));
      std::uint32_t w = word.load(std::memory_order_acquire);
      if (ok) {
        ++cancelled_;
        call.found = true;
        dispatcher_.count_ready(-1);
        --kind_pending(wheel_.kind(h));
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
          after.requeue.push_back(ready_ref{h, q, wheel_.kind(h), wheel_.view(h)});
        }
      }
      break;
    }
    case p_reschedule:
      if (ok)
        call.found = true;
      else if (ctx)
        wheel_.set_due_ms(h, ctx->old_due_ms);
      arm_locked(h, wheel_.due_ms(h));
      break;
    case p_retry:
      // Armed whatever the outcome: a failed write is kept and retried, and
      // the retry runs meanwhile (the store keeps the older attempt count).
      if (state_.load() == run_state::running)
        arm_locked(h, wheel_.due_ms(h));
      else
        erase_locked(h);  // stopping: the store has it for the next start
      break;
    case p_purge:
      settled_record = false;
      if (ok) {
        call.found = true;
        if (dead_ > 0) --dead_;
      }
      break;
  }
  if (settled_record && !deferred_.empty() && !op.t.id.empty() && deferred_.count(op.t.id) != 0)
    after.deferred.push_back(op.t.id);
}

void engine_core::run_after(after_lock& after) {
  for (call_state* c : after.calls) c->done.release();  // the last touch: the caller owns it
  for (auto& c : after.async)
    c->async->complete(c->ec, c->ec || c->ids.empty() ? std::string{} : c->ids[0]);
  if (!after.requeue.empty()) dispatcher_.push(after.requeue);
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
    for (deferred_call& d : calls) async_schedule(std::move(d.spec), std::move(d.done));
  }
  if (!after.calls.empty() || !after.async.empty() || !after.requeue.empty() ||
      !after.deferred.empty())
    changed_.notify_all();
}

// ------------------------------------------------------------------ attempts

void engine_core::settle(std::span<outcome> outcomes) {
  after_lock after;
  call_state none;
  {
    std::lock_guard lock(mutex_);
    std::vector<write_op> ops;
    const bool stopping = state_.load() != run_state::running;
    for (outcome& o : outcomes) {
      const timer_wheel::handle h = o.h;
      if (o.result == outcome::what::dead) {
        erase_locked(h);  // cancelled while queued: its last reference let go
        continue;
      }
      dispatcher_.attempt_done();
      const type_registry::type_info& type = types_.at(o.kind);
      const bool ok = o.result == outcome::what::succeeded;
      if (o.result != outcome::what::abandoned) {
        ok ? ++succeeded_ : ++failed_;
        failures_.note_outcome(type.name, ok, after.alerts);
      }
      if (!wheel_.is_indexed(h)) {
        // Replaced while it ran: the new version owns the id and the store.
        erase_locked(h);
        continue;
      }
      if (o.result == outcome::what::abandoned) {
        if (stopping) {
          erase_locked(h);  // as it was in the store, for the next start
        } else {
          set_tag(h, tsw::with_state(tag(h), tsw::armed));
          wheel_.arm(h, ticker_.current_tick() + 1);
          note_armed_locked(wheel_.due_tick(h));
        }
        continue;
      }
      if (ok) {
        // At-least-once: the task leaves the store only now. Nobody waits for
        // the removal; a crash before it lands runs the task once more.
        write_op op = make_op(change_kind::remove, p_none, h, false);
        op.must_land = true;
        ops.push_back(std::move(op));
        erase_locked(h);
        continue;
      }
      const std::uint32_t attempts = wheel_.attempts(h) + 1;
      wheel_.set_attempts(h, attempts);
      const retry_policy& policy = *type.retry;
      if (!failure_policy::may_retry(policy, attempts, o.result == outcome::what::hopeless)) {
        write_op op = make_op(change_kind::bury, p_none, h, true);
        op.error = o.failure;
        op.died_at = std::chrono::floor<milliseconds>(std::chrono::system_clock::now());
        op.must_land = true;
        log(log_level::error, describe_task(op.t.id, type.name) + " is a dead letter after " +
                                  std::to_string(attempts) + " attempts: " + o.failure);
        ++died_;
        ++dead_;
        failures_.note_death(op.t, o.failure, after.alerts);
        ops.push_back(std::move(op));
        erase_locked(h);
        continue;
      }
      const milliseconds wait = failures_.backoff(policy, attempts);
      wheel_.set_due_ms(h, now_ms() + wait.count());
      ++retried_;
      log(log_level::warning, describe_task(wheel_.id(h), type.name) + " attempt " +
                                  std::to_string(attempts) + " of " +
                                  std::to_string(policy.max_attempts) + " failed: " + o.failure +
                                  "; retrying in " + std::to_string(wait.count()) + " ms");
      // The new count is written before the retry is armed (settle arms it),
      // without the worker waiting for it.
      set_tag(h, tsw::with_state(tag(h), tsw::persisting));
      write_op op = make_op(change_kind::save, p_retry, h, true);
      op.must_land = true;
      ops.push_back(std::move(op));
    }
    bool refused = false;
    for (write_op& op : ops) submit_locked(std::span(&op, 1), nullptr, none, after, refused);
  }
  run_after(after);
  changed_.notify_all();  // stop() may be waiting for attempts to end
}

// ------------------------------------------------------------------ the clock

void engine_core::note_armed_locked(std::uint64_t tick) {
  if (tick < armed_tick_ && state_.load(std::memory_order_relaxed) == run_state::running) {
    armed_tick_ = tick;
    ticker_.post([self = shared_from_this()] { self->rearm(); });
  }
}

// On the strand: points the timer at armed_tick_.
void engine_core::rearm() {
  std::uint64_t tick;
  {
    std::lock_guard lock(mutex_);
    if (state_.load() != run_state::running) return;
    tick = armed_tick_;
  }
  if (tick == timer_wheel::no_tick) return;
  ticker_.wait_until(tick, [self = shared_from_this()](const boost::system::error_code& ec) {
    if (!ec) self->on_tick();
  });
}

// On the strand: everything due up to now (every missed tick, in order) goes
// to the dispatcher; then the timer sleeps until the next due tick.
void engine_core::on_tick() {
  wakeups_.fetch_add(1, std::memory_order_relaxed);
  std::vector<ready_ref> due;
  {
    std::lock_guard lock(mutex_);
    if (state_.load() != run_state::running) return;
    wheel_.advance(ticker_.current_tick(), [&](timer_wheel::handle h) {
      const std::uint32_t w = tsw::next_queued(tag(h));
      set_tag(h, w);
      due.push_back(ready_ref{h, w, wheel_.kind(h), wheel_.view(h)});
    });
    // One tick may hold tasks due at different milliseconds, and a reload
    // puts many overdue tasks in one tick: hand them over in due order.
    if (due.size() > 1) {
      std::int64_t lo = due.front().v.due_ms(), hi = lo;
      for (const ready_ref& r : due) {
        lo = std::min(lo, r.v.due_ms());
        hi = std::max(hi, r.v.due_ms());
      }
      if (hi - lo < 4096) {
        // The usual case: a tick's worth of milliseconds. Counting sort.
        std::vector<std::uint32_t> count(static_cast<std::size_t>(hi - lo) + 2, 0);
        for (const ready_ref& r : due) ++count[static_cast<std::size_t>(r.v.due_ms() - lo) + 1];
        for (std::size_t i = 1; i < count.size(); ++i) count[i] += count[i - 1];
        std::vector<ready_ref> sorted(due.size());
        for (const ready_ref& r : due)
          sorted[count[static_cast<std::size_t>(r.v.due_ms() - lo)]++] = r;
        due.swap(sorted);
      } else {
        std::stable_sort(due.begin(), due.end(), [](const ready_ref& a, const ready_ref& b) {
          return a.v.due_ms() < b.v.due_ms();
        });
      }
    }
    armed_tick_ = wheel_.next_due_tick();
    dispatcher_.count_ready(static_cast<std::ptrdiff_t>(due.size()));
  }
  dispatcher_.push(due);
  rearm();
}

// ------------------------------------------------------------------ queries

std::optional<task> engine_core::find(std::string_view id) const {
  auto s = status(id);
  if (!s) return std::nullopt;
  return std::move(s->task);
}

std::optional<task_status> engine_core::status(std::string_view id) const {
  std::lock_guard lock(mutex_);
  const timer_wheel::handle h = wheel_.find(id);
  if (h == timer_wheel::npos) return std::nullopt;
  const std::uint32_t w = tag(h);
  if (w & tsw::fresh) return std::nullopt;  // not acknowledged yet
  task_state st = task_state::delayed;
  switch (tsw::state_of(w)) {
    case tsw::armed:
    case tsw::persisting:
      st = wheel_.due_ms(h) <= now_ms() ? task_state::ready : task_state::delayed;
      break;
    case tsw::queued:
    case tsw::cancelling: st = task_state::ready; break;
    case tsw::running: st = task_state::running; break;
    case tsw::dead: return std::nullopt;
  }
  return task_status{task_of(h), st};
}

std::vector<task> engine_core::upcoming(std::size_t limit, std::string_view type) const {
  std::vector<task> out;
  if (limit == 0) return out;
  std::lock_guard lock(mutex_);
  int kind = -1;
  if (!type.empty()) {
    boost::system::error_code ec;
    const auto* t =
        valid_type(type) ? const_cast<type_registry&>(types_).lookup(type, false, ec) : nullptr;
    if (!t) return out;
    kind = t->k;
  }
  // The `limit` earliest, by a bounded max-heap over every held record.
  using entry = std::pair<std::int64_t, timer_wheel::handle>;
  std::priority_queue<entry> best;
  wheel_.for_each([&](timer_wheel::handle h) {
    if (!wheel_.is_indexed(h)) return;
    const std::uint32_t w = tag(h);
    if ((w & tsw::fresh) || tsw::state_of(w) == tsw::running) return;
    if (kind >= 0 && wheel_.kind(h) != kind) return;
    const entry e{wheel_.due_ms(h), h};
    if (best.size() < limit) {
      best.push(e);
    } else if (e < best.top()) {
      best.pop();
      best.push(e);
    }
  });
  out.resize(best.size());
  for (std::size_t i = best.size(); i-- > 0;) {
    out[i] = task_of(best.top().second);
    best.pop();
  }
  return out;
}

std::size_t engine_core::pending() const {
  std::lock_guard lock(mutex_);
  return pending_locked();
}

engine_stats engine_core::stats() const {
  engine_stats s;
  {
    std::lock_guard lock(mutex_);
    s.pending = pending_locked();
    s.scheduled = scheduled_;
    s.loaded = loaded_;
    s.succeeded = succeeded_;
    s.failed = failed_;
    s.cancelled = cancelled_;
    s.quarantined = quarantined_;
    s.retried = retried_;
    s.died = died_;
    s.dead = dead_;
  }
  s.ready = dispatcher_.ready();
  s.running = dispatcher_.running();
  s.fired = dispatcher_.fired();
  s.timed_out = dispatcher_.timed_out();
  s.wakeups = wakeups_.load(std::memory_order_relaxed);
  s.writes_queued = writer_.queued();
  s.writes_kept = writer_.kept();
  s.lateness_p50 = lateness_.quantile(0.50);
  s.lateness_p90 = lateness_.quantile(0.90);
  s.lateness_p99 = lateness_.quantile(0.99);
  s.lateness_max = lateness_.max();
  return s;
}

}  // namespace delayq::detail
