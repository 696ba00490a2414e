#include "detail/dispatcher.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <exception>
#include <mutex>

#include "detail/task_state.hpp"

namespace delayq::detail {
namespace {

namespace tsw = task_state_word;

// Outcomes are applied one at a time, unless a burst of at least
// `burst_backlog` due tasks waits for workers: then in batches of up to
// `settle_batch`, which take the engine's lock once. Outside bursts a slow
// executor must not hold the outcomes of the tasks before it (their removals,
// their retries) until it returns.
constexpr std::size_t settle_batch = 64;
constexpr std::size_t burst_backlog = 256;

// Set while a thread runs an attempt, so stop() called from an executor
// knows not to wait for itself.
thread_local const dispatcher* current_attempt = nullptr;

std::uint64_t micros_since(std::chrono::steady_clock::time_point t) noexcept {
  const auto us =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t)
          .count();
  return us > 0 ? static_cast<std::uint64_t>(us) : 0;
}

// A released task's due time, to the millisecond (floored, as due_at() does).
std::int64_t epoch_ms_of(std::chrono::system_clock::time_point t) noexcept {
  return std::chrono::floor<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

std::string describe(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    std::string what = ex.what();
    return what.empty() ? "exception with an empty message" : what;
  } catch (...) {
    return "exception of unknown type";
  }
}

}  // namespace

// An attempt that may end on another thread or by its timeout: whoever
// settles it first reports the outcome. An asynchronous attempt is also its
// completion's reporter: the completion's copies hold it, with run_tracked()
// while start() runs, and nothing else does (its timer's handlers hold it
// weakly). So when the last copy goes without having been called, the
// attempt goes with it, and its destructor reports it abandoned: one object
// where a guard of its own cost a second allocation a dispatched task (and
// 48 bytes a job delayq-server's broker holds ready).
struct dispatcher::attempt final : attempt_reporter {
  dispatcher* d = nullptr;
  std::shared_ptr<void> keep;  // the engine, and so this dispatcher
  // What the outcome names of its reference (not the whole ready_ref: one
  // attempt lives per task waiting in delayq-server's broker, a backlog).
  record_id h = 0;
  std::uint32_t tag = 0;
  std::uint16_t kind = 0;
  std::atomic<bool> settled{false};
  // The executor's copy: it may outlive the record's turn. It lives as long
  // as the attempt, which every copy of the completion holds, as
  // async_executor promises.
  task t;
  std::unique_ptr<async_executor> exec;
  std::shared_ptr<boost::asio::steady_timer> timer;
  type_counters* counters = nullptr;  // the type's, for the execution time
  std::chrono::steady_clock::time_point began{};

  attempt() = default;
  attempt(const attempt&) = delete;
  attempt& operator=(const attempt&) = delete;
  ~attempt() override {
    // Nobody ended it, and nobody can now: the completion's last copy went
    // uncalled (or it never had one: a start() that threw was settled).
    if (!settled.load(std::memory_order_acquire) && claim()) report(outcome::what::abandoned, {});
    // The timer is only touched on the strand: its last reference goes there.
    if (timer) boost::asio::post(d->strand_, [timer = std::move(timer)] {});
  }

  void report(attempt_end e, attempt_completion::stored_handler on_stored) override {
    settle(std::move(e), std::move(on_stored));
  }

  void settle(outcome::what w, std::string failure,
              attempt_completion::stored_handler on_stored = nullptr) {
    if (!claim()) {
      if (on_stored) on_stored(errc::attempt_ended);
      return;
    }
    report(w, std::move(failure), std::move(on_stored));
  }

  // What an asynchronous executor's completion reported.
  void settle(attempt_end e, attempt_completion::stored_handler on_stored) {
    if (!claim()) {
      if (on_stored) on_stored(errc::attempt_ended);
      return;
    }
    using k = attempt_end::kind;
    switch (e.what) {
      case k::succeeded: return report(outcome::what::succeeded, {}, std::move(on_stored));
      case k::failed: return report(outcome::what::failed, std::move(e.text), std::move(on_stored));
      case k::released:
        return report(outcome::what::released, {}, std::move(on_stored), epoch_ms_of(e.due),
                      e.priority);
      case k::buried:
        return report(outcome::what::buried, std::move(e.text), std::move(on_stored), 0,
                      e.priority);
    }
  }

  // Whether this caller is the one that ends the attempt.
  bool claim() noexcept { return !settled.exchange(true, std::memory_order_acq_rel); }

  // After a successful claim().
  void report(outcome::what w, std::string failure,
              attempt_completion::stored_handler on_stored = nullptr, std::int64_t due_ms = 0,
              std::optional<std::uint32_t> priority = {}) {
    if (timer) boost::asio::post(d->strand_, [timer = timer] { timer->cancel(); });
    // An abandoned attempt is started again later: it has no end to time.
    if (w != outcome::what::abandoned)
      counters->record(&type_counter_cells::execution, micros_since(began));
    outcome o{w, h, tsw::with_state(tag, tsw::running), kind, std::move(failure)};
    o.due_ms = due_ms;
    o.priority = priority;
    o.on_stored = std::move(on_stored);
    d->report(std::move(o));
  }
};

dispatcher::dispatcher(owner& o, const type_registry& types, std::size_t workers,
                       boost::asio::strand<boost::asio::any_io_executor> strand,
                       lateness_histogram& lateness)
    : owner_(o), types_(types), strand_(std::move(strand)), lateness_(lateness) {
  threads_.reserve(workers);
  for (std::size_t i = 0; i < workers; ++i)
    threads_.emplace_back([this, i] {
      set_counter_stripe(i);  // no two workers count on one cache line
      work();
    });
}

dispatcher::~dispatcher() { join(); }

void dispatcher::set_limit(std::uint16_t kind, std::size_t limit) {
  std::lock_guard lock(mutex_);
  gates_[kind].limit = limit;
}

void dispatcher::push(std::span<const ready_ref> refs) {
  if (refs.empty()) return;
  // Types started where they are found due (async_start::immediate) start
  // here, in order; the rest go to the workers. A type with a concurrency
  // gate waits for its slot with the others (the gates live on the queue).
  std::size_t first_queued = refs.size(), queued = 0;
  for (std::size_t i = 0; i < refs.size(); ++i) {
    if (immediate(refs[i].kind)) continue;
    if (first_queued == refs.size()) first_queued = i;
    ++queued;
  }
  if (queued < refs.size())
    for (const ready_ref& r : refs)
      if (immediate(r.kind)) start_now(r);
  if (queued == 0) return;
  std::size_t sleeping;
  {
    std::lock_guard lock(mutex_);
    for (std::size_t i = first_queued; i < refs.size(); ++i)
      if (!immediate(refs[i].kind)) ready_.push_back(refs[i]);
    sleeping = sleeping_;
  }
  if (sleeping == 0) return;
  if (queued == 1)
    wake_.notify_one();
  else
    wake_.notify_all();
}

bool dispatcher::immediate(std::uint16_t kind) const noexcept {
  // gates_ is fixed once set_limit() calls are done: read without the lock.
  return types_.at(kind).exec.start == async_start::immediate && gates_.count(kind) == 0;
}

void dispatcher::start_now(const ready_ref& c) {
  if (!starting_.load(std::memory_order_acquire)) {
    // Stopping: left in the queue, as pop() leaves references it would not
    // start (the engine keeps the task in the store for the next start).
    std::lock_guard lock(mutex_);
    ready_.push_back(c);
    return;
  }
  // pop()'s decision for one reference, on this thread.
  auto word = tsw::word(*c.v.tag());
  std::uint32_t cur = word.load(std::memory_order_acquire);
  for (;;) {
    if (cur == c.tag) {
      if (!word.compare_exchange_weak(cur, tsw::with_state(cur, tsw::running),
                                      std::memory_order_acq_rel, std::memory_order_acquire))
        continue;
      running_.fetch_add(1, std::memory_order_acq_rel);
      type_counters::add(types_.at(c.kind).counters.mine().running, 1);
      count_ready(c.kind, -1);
      if (check_starts_.load(std::memory_order_acquire) && !owner_.may_start(c)) {
        report(
            outcome{outcome::what::withheld, c.h, tsw::with_state(cur, tsw::running), c.kind, {}});
        return;
      }
      task t;
      run(c, t);
      return;
    }
    if (tsw::generation(cur) != tsw::generation(c.tag)) return;  // stale: the task moved on
    if (tsw::state_of(cur) == tsw::dead) {
      report(outcome{outcome::what::dead, c.h, cur, c.kind, {}});
      return;
    }
    if (tsw::state_of(cur) == tsw::cancelling && !(cur & tsw::orphaned)) {
      // A cancel's store write is in flight: leave the record to it.
      if (word.compare_exchange_weak(cur, cur | tsw::orphaned, std::memory_order_acq_rel,
                                     std::memory_order_acquire))
        return;
      continue;
    }
    return;
  }
}

void dispatcher::join() {
  {
    std::lock_guard lock(mutex_);
    exiting_ = true;
  }
  starting_.store(false, std::memory_order_release);
  wake_.notify_all();
  for (std::thread& t : threads_)
    if (t.joinable()) t.join();
}

std::size_t dispatcher::backlog() const {
  std::lock_guard lock(mutex_);
  std::size_t n = ready_.size();
  for (const auto& [kind, g] : gates_) n += g.waiting.size();
  return n;
}

bool dispatcher::in_attempt() const noexcept { return current_attempt == this; }

void dispatcher::work() {
  // Reused: a synchronous attempt leaves its strings their buffers for the
  // next (a tracked one takes them, as it took a copy before).
  task t;
  std::unique_lock lock(mutex_);
  for (;;) {
    ready_ref r;
    if (pop(r)) {
      lock.unlock();
      run(r, t);
      lock.lock();
      continue;
    }
    if (!outcomes_.empty()) {
      std::vector<outcome> batch;
      batch.swap(outcomes_);
      lock.unlock();
      owner_.settle(batch);
      lock.lock();
      continue;
    }
    if (exiting_) return;
    ++sleeping_;
    wake_.wait(lock);
    --sleeping_;
  }
}

bool dispatcher::pop(ready_ref& r) {
  while (!ready_.empty() && starting_.load(std::memory_order_acquire)) {
    // The word of a reference a few places back is a record's cache line,
    // a miss in a large wheel: ask for it while this one is started.
    constexpr std::size_t ahead = 4;
    if (ready_.size() > ahead) __builtin_prefetch(ready_[ahead].v.tag());
    const ready_ref c = ready_.front();
    ready_.pop_front();
    auto word = tsw::word(*c.v.tag());
    std::uint32_t cur = word.load(std::memory_order_acquire);
    for (;;) {
      if (cur == c.tag) {
        auto g = gates_.find(c.kind);
        if (g != gates_.end() && g->second.active >= g->second.limit) {
          g->second.waiting.push_back(c);  // its turn comes when one of its type ends
          break;
        }
        // The one place an attempt starts: if cancel() took the task first,
        // this fails and the loop looks at what it made of it.
        if (word.compare_exchange_weak(cur, tsw::with_state(cur, tsw::running),
                                       std::memory_order_acq_rel, std::memory_order_acquire)) {
          running_.fetch_add(1, std::memory_order_acq_rel);
          type_counters::add(types_.at(c.kind).counters.mine().running, 1);
          count_ready(c.kind, -1);
          if (check_starts_.load(std::memory_order_acquire) && !owner_.may_start(c)) {
            // Taken (so no cancel decides meanwhile) but not started: the
            // owner holds it again (a cluster whose lease on its shard
            // lapsed while it waited here, e.g. in a stall).
            outcomes_.push_back(outcome{
                outcome::what::withheld, c.h, tsw::with_state(cur, tsw::running), c.kind, {}});
            // Settled before anything else starts (work() settles when pop()
            // finds nothing): until then it looks running to the owner.
            return false;
          }
          if (g != gates_.end()) ++g->second.active;
          r = c;
          return true;
        }
        continue;
      }
      if (tsw::generation(cur) != tsw::generation(c.tag)) break;  // stale: the task moved on
      if (tsw::state_of(cur) == tsw::dead) {
        // Cancelled while queued: this reference was the record's last user.
        outcomes_.push_back(outcome{outcome::what::dead, c.h, cur, c.kind, {}});
        break;
      }
      if (tsw::state_of(cur) == tsw::cancelling && !(cur & tsw::orphaned)) {
        // A cancel's store write is in flight: leave the record to it.
        if (word.compare_exchange_weak(cur, cur | tsw::orphaned, std::memory_order_acq_rel,
                                       std::memory_order_acquire))
          break;
        continue;
      }
      break;
    }
  }
  return false;
}

void dispatcher::run(const ready_ref& r, task& t) {
  const type_registry::type_info& ti = types_.at(r.kind);
  t.id.assign(r.v.id());
  t.type.assign(ti.name);
  t.payload.assign(r.v.payload());
  t.due = from_epoch_ms(r.v.due_ms());
  t.attempts = r.v.attempts();
  t.trigger_count = r.trigger_count;
  t.signals = r.signals;
  t.priority = r.priority;
  t.ttr = std::chrono::milliseconds{r.ttr_ms};
  t.fence = r.fence;
  const auto started = std::chrono::system_clock::now();
  const auto late = std::chrono::duration_cast<std::chrono::microseconds>(started - t.due);
  lateness_.record(late);
  fired_.add(1);
  type_counters& tc = ti.counters;
  type_counters::add(tc.mine().fired);
  tc.record(&type_counter_cells::lateness,
            late.count() > 0 ? static_cast<std::uint64_t>(late.count()) : 0);

  const bool sync = ti.exec.fn != nullptr || ti.exec.make != nullptr;
  if (!ti.exec) {
    // Nothing will change by retrying: straight to the dead letters.
    report(outcome{outcome::what::hopeless, r.h, tsw::with_state(r.tag, tsw::running), r.kind,
                   "no executor registered for type " + ti.name});
    return;
  }
  if (!sync || ti.timeout.count() > 0) {
    run_tracked(r, ti, t);
    return;
  }
  std::string failure;
  const auto began = std::chrono::steady_clock::now();
  current_attempt = this;
  try {
    if (ti.exec.fn) {
      (*ti.exec.fn)(t);
    } else {
      std::unique_ptr<executor> e = (*ti.exec.make)();
      if (!e) throw std::runtime_error("the executor maker of type " + ti.name + " returned null");
      e->execute(t);
    }
  } catch (...) {
    failure = describe(std::current_exception());
  }
  current_attempt = nullptr;
  tc.record(&type_counter_cells::execution, micros_since(began));
  report(outcome{failure.empty() ? outcome::what::succeeded : outcome::what::failed, r.h,
                 tsw::with_state(r.tag, tsw::running), r.kind, std::move(failure)});
}

void dispatcher::run_tracked(const ready_ref& r, const type_registry::type_info& ti, task& t) {
  auto a = std::make_shared<attempt>();
  a->d = this;
  a->keep = owner_.keep_alive();
  a->h = r.h;
  a->tag = r.tag;
  a->kind = r.kind;
  a->t = std::move(t);  // run() is done with it
  a->counters = &ti.counters;
  a->began = std::chrono::steady_clock::now();
  if (ti.timeout.count() > 0) {
    a->timer = std::make_shared<boost::asio::steady_timer>(strand_);
    // The timer is only touched on the strand.
    // Weakly: an attempt whose completion's copies are gone is abandoned
    // then, not kept until its timeout.
    boost::asio::post(strand_, [w = std::weak_ptr<attempt>(a), after = ti.timeout] {
      const std::shared_ptr<attempt> a = w.lock();
      if (!a) return;
      a->timer->expires_after(after);
      a->timer->async_wait([w, after](const boost::system::error_code& ec) {
        if (ec) return;
        const std::shared_ptr<attempt> a = w.lock();
        if (!a) return;
        std::string why = "timed out after " + std::to_string(after.count()) + " ms";
        // Claimed before it is counted: a completion racing the timer
        // must not find the attempt counted as timed out and still win.
        if (!a->claim()) return;
        a->d->timed_out_.fetch_add(1, std::memory_order_relaxed);
        type_counters::add(a->counters->mine().timed_out);
        a->report(outcome::what::failed, std::move(why));
      });
    });
  }
  const bool sync = ti.exec.fn != nullptr || ti.exec.make != nullptr;
  if (sync) {
    std::string failure;
    current_attempt = this;
    try {
      if (ti.exec.fn) {
        (*ti.exec.fn)(a->t);
      } else {
        std::unique_ptr<executor> e = (*ti.exec.make)();
        if (!e)
          throw std::runtime_error("the executor maker of type " + ti.name + " returned null");
        e->execute(a->t);
      }
    } catch (...) {
      failure = describe(std::current_exception());
    }
    current_attempt = nullptr;
    const auto result = failure.empty() ? outcome::what::succeeded : outcome::what::failed;
    a->settle(result, std::move(failure));
    return;
  }
  try {
    if (ti.exec.async_make) {
      a->exec = (*ti.exec.async_make)();
      if (!a->exec)
        throw std::runtime_error("the async executor maker of type " + ti.name + " returned null");
    }
    async_executor::completion done{a};  // with `a` (until this returns), all that holds it
    if (a->exec)
      a->exec->start(a->t, std::move(done));
    else
      (*ti.exec.async_fn)(a->t, std::move(done));
    // A completion dropped uncalled meanwhile: `a` goes below, and with it
    // the attempt, abandoned (~attempt).
  } catch (...) {
    // Not abandoned, whatever copies of the completion the throw let go.
    a->settle(outcome::what::failed, describe(std::current_exception()));
  }
}

void dispatcher::report(outcome o) {
  std::unique_lock lock(mutex_);
  if (o.result != outcome::what::dead) release_gate(o.kind);
  if (outcomes_.size() + 1 < settle_batch && ready_.size() >= burst_backlog && starting_.load()) {
    if (outcomes_.capacity() == 0) outcomes_.reserve(settle_batch);
    outcomes_.push_back(std::move(o));
    return;
  }
  if (outcomes_.empty()) {
    // The usual case outside bursts: this one alone, with no vector made.
    lock.unlock();
    owner_.settle(std::span(&o, 1));
    return;
  }
  outcomes_.push_back(std::move(o));
  std::vector<outcome> batch;
  batch.swap(outcomes_);
  lock.unlock();
  owner_.settle(batch);
}

// Under mutex_.
void dispatcher::release_gate(std::uint16_t kind) {
  auto g = gates_.find(kind);
  if (g == gates_.end()) return;
  if (g->second.active > 0) --g->second.active;
  // Hand the freed slot to the next waiting reference that is still valid;
  // stale ones go along to pop(), which deals with them.
  bool woke = false;
  while (!g->second.waiting.empty()) {
    const ready_ref c = g->second.waiting.front();
    g->second.waiting.pop_front();
    ready_.push_front(c);
    woke = true;
    if (tsw::word(*c.v.tag()).load(std::memory_order_acquire) == c.tag) break;
  }
  if (woke && sleeping_ > 0) wake_.notify_one();
}

}  // namespace delayq::detail
