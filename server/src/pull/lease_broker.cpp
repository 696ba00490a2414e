#include "pull/lease_broker.hpp"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <charconv>

#include "security/secure_random.hpp"

namespace delayq::server {
namespace {

// Orders a ready heap: std::push_heap keeps the largest in front, so the
// comparison is turned around to keep in front the key handed out first.
struct ready_after {
  template <class Key>
  bool operator()(const Key& a, const Key& b) const {
    return b < a;
  }
};

}  // namespace

lease_broker::lease_broker(boost::asio::any_io_executor ex, std::string instance)
    : ex_(boost::asio::make_strand(ex)),
      pause_timer_(std::make_shared<boost::asio::steady_timer>(ex_)),
      sweep_timer_(ex_) {
  if (!instance.empty()) lease_suffix_ = "@" + instance;
}

std::string lease_broker::instance_of(std::string_view lease) {
  const std::size_t at = lease.find('@');
  return at == std::string_view::npos ? std::string{} : std::string(lease.substr(at + 1));
}

// Handlers hold `this`: the owner stops the io_context before destroying us.
lease_broker::~lease_broker() = default;

std::string lease_broker::new_lease() {
  // 128 bits from the kernel's CSPRNG make a lease unguessable, even to a
  // consumer that saw many others (a lease is all a finish, fail or touch
  // asks for); the counter makes them unique within one run however the
  // random draws fall.
  char counter[24];
  counter[0] = '-';
  const auto end = std::to_chars(counter + 1, counter + sizeof counter, ++lease_counter_, 16).ptr;
  std::string token;
  token.reserve(32 + static_cast<std::size_t>(end - counter) + lease_suffix_.size());
  append_random_hex(token, 16);
  token.append(counter, end);
  token += lease_suffix_;
  return token;
}

void lease_broker::offer(const task& t, attempt_completion done) {
  std::vector<std::pair<reserve_handler, std::vector<leased_task>>> answers;
  std::vector<attempt_completion> stale;  // dropped after the lock, on return
  std::unique_lock lock(mutex_);
  if (closed_) {
    lock.unlock();
    return;  // `done` is dropped on return: the engine keeps the task
  }
  // Replaced ids: the engine ended the old attempt before it offers a new one,
  // but a late offer must never orphan a held completion.
  std::optional<entry> old;  // dropped after the lock, like every completion
  if (const auto s = find_locked(t.id)) {
    entry& o = at(*s);
    if (!o.lease) {
      unready_locked(o);
    } else {
      deadlines_.erase({o.lease->deadline, t.id});
      --counters_.reserved;
      --o.per_type->reserved;
    }
    old = remove_locked(*s);
  }
  const std::uint32_t slot = new_slot_locked();
  entry& e = at(slot);
  e.t = &t;  // the attempt's task: valid while `done` lives (async_executor)
  e.done = std::move(done);
  e.seq = ++seq_;
  e.per_type = &per_type_[t.type];
  ++e.per_type->ready;
  if (t.priority < urgent_below) ++e.per_type->urgent;
  held_.insert(t.id, slot);
  ++counters_.ready;
  ready_heap& q = ready_[t.type];
  q.push_back(key_of(t, seq_, slot));
  std::push_heap(q.begin(), q.end(), ready_after{});
  // The oldest waiting consumer that asked for this type gets it (and
  // whatever else is ready for it).
  serve_waiters_locked(answers, stale);
  lock.unlock();
  for (auto& [h, out] : answers) answer(std::move(h), std::move(out));
}

void lease_broker::serve_waiters_locked(
    std::vector<std::pair<reserve_handler, std::vector<leased_task>>>& answers,
    std::vector<attempt_completion>& stale) {
  if (ready_.empty()) return;
  const auto now = clock::now();
  for (auto w = waiters_.begin(); w != waiters_.end();) {
    auto out = take_locked(w->r.types, w->r.max, w->r.ttr, w->terms, now, stale);
    if (out.empty()) {
      ++w;
      continue;
    }
    answers.emplace_back(std::move(w->handler), std::move(out));
    boost::asio::post(ex_, [timer = w->timer] { timer->cancel(); });
    w = waiters_.erase(w);
    if (ready_.empty()) return;
  }
}

void lease_broker::unready_locked(entry& e) {
  --counters_.ready;
  --e.per_type->ready;
  if (e.t->priority < urgent_below) --e.per_type->urgent;
}

std::optional<std::uint32_t> lease_broker::find_locked(std::string_view id) const {
  return held_.find(id, [this](std::uint32_t s) { return std::string_view(at(s).t->id); });
}

template <class F>
void lease_broker::for_each_held_locked(F&& f) {
  for (std::uint32_t slot = 0; slot < blocks_.size() * block_size; ++slot)
    if (at(slot).seq != 0) f(slot);
}

std::uint32_t lease_broker::new_slot_locked() {
  if (free_slots_.empty()) {
    const auto first = static_cast<std::uint32_t>(blocks_.size() * block_size);
    blocks_.push_back(std::make_unique<entry[]>(block_size));
    // Handed out lowest first, so a small backlog stays in one block.
    for (std::uint32_t i = block_size; i-- > 0;) free_slots_.push_back(first + i);
  }
  const std::uint32_t slot = free_slots_.back();
  free_slots_.pop_back();
  return slot;
}

lease_broker::entry lease_broker::remove_locked(std::uint32_t slot) {
  entry& e = at(slot);
  // Before the task may go, with `done`.
  held_.erase(e.t->id, [this](std::uint32_t s) { return std::string_view(at(s).t->id); });
  entry out = std::move(e);
  e = entry{};  // seq 0: the slot's old ready keys are invalid from now on
  free_slots_.push_back(slot);
  return out;
}

void lease_broker::shrink_when_idle_locked() {
  // A backlog of over 512 jobs that drained hands its memory back: the
  // blocks, the index and the heaps would otherwise stay at the backlog's
  // peak for good (about 90 bytes a job). Only when nothing is held, so no slot is named anywhere
  // (every ready key left is stale); callers call it once they are done
  // with keys and slots.
  if (held_.size() != 0 || blocks_.empty()) return;
  ready_.clear();  // every key left is stale
  // A small broker keeps its one block and its index (at most 1,024
  // buckets): freeing and making them again for every job of a lone worker
  // (put, reserve, delete, and nothing held in between) cost a tenth of the
  // server's CPU on that path, a block being 4,096 entries to construct.
  if (blocks_.size() == 1 && held_.capacity() <= 1024 && free_slots_.size() == block_size) return;
  blocks_.clear();
  std::vector<std::uint32_t>().swap(free_slots_);
  held_.clear();
}

bool lease_broker::valid_locked(const ready_key& k) const {
  const entry& e = at(k.slot);
  return e.seq == k.seq && !e.lease;
}

std::uint64_t lease_broker::reserve(const reserve_request& r, reserve_handler handler,
                                    lease_terms terms) {
  std::vector<attempt_completion> stale;  // dropped after the lock, on return
  std::unique_lock lock(mutex_);
  std::vector<leased_task> out;
  if (!closed_) out = take_locked(r.types, r.max, r.ttr, terms, clock::now(), stale);
  if (!out.empty() || r.wait.count() == 0 || closed_ || no_wait_) {
    lock.unlock();
    answer(std::move(handler), std::move(out));
    return 0;
  }
  waiter w;
  w.n = ++waiter_seq_;
  w.r = r;
  w.terms = terms;
  w.handler = std::move(handler);
  w.timer = std::make_shared<boost::asio::steady_timer>(ex_);
  const std::uint64_t n = w.n;
  auto timer = w.timer;
  waiters_.push_back(std::move(w));
  lock.unlock();
  // Timers are only touched on the strand: this wait is posted before any
  // cancel of it can be.
  boost::asio::post(ex_, [this, timer, n, wait = r.wait] {
    timer->expires_after(wait);
    timer->async_wait([this, n](const boost::system::error_code& ec) {
      if (ec) return;
      // A task due by now wins over the timeout: what the engine holds due
      // is offered first (and may answer this waiter), as one loop would
      // decide both. The timer and the engine's tick are two clocks apart.
      if (before_timeout_) before_timeout_();
      reserve_handler h;
      {
        std::lock_guard lock(mutex_);
        for (auto w = waiters_.begin(); w != waiters_.end(); ++w) {
          if (w->n != n) continue;
          h = std::move(w->handler);
          waiters_.erase(w);
          break;
        }
      }
      if (h) h({});
    });
  });
  return n;
}

void lease_broker::cancel_wait(std::uint64_t n) {
  reserve_handler h;
  {
    std::lock_guard lock(mutex_);
    for (auto w = waiters_.begin(); w != waiters_.end(); ++w) {
      if (w->n != n) continue;
      h = std::move(w->handler);
      boost::asio::post(ex_, [timer = w->timer] { timer->cancel(); });
      waiters_.erase(w);
      break;
    }
  }
  if (h) answer(std::move(h), {});
}

lease_broker::ready_key lease_broker::key_of(const task& t, std::uint64_t seq, std::uint32_t slot) {
  std::uint64_t number = 0;
  bool numeric = !t.id.empty() && t.id.size() <= 19 && t.id[0] != '0';
  for (const char c : t.id) {
    if (c < '0' || c > '9') {
      numeric = false;
      break;
    }
    number = number * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return {t.priority, slot, to_epoch_ms(t.due), numeric ? number : ~std::uint64_t{0}, seq};
}

const lease_broker::ready_key* lease_broker::best_ready_locked(const std::string& type) {
  auto q = ready_.find(type);
  if (q == ready_.end()) return nullptr;
  // The front key is valid when its slot still holds the same offer (seq),
  // ready; anything else is dropped on the way.
  ready_heap& keys = q->second;
  while (!keys.empty()) {
    if (valid_locked(keys.front())) return &keys.front();
    std::pop_heap(keys.begin(), keys.end(), ready_after{});
    keys.pop_back();
  }
  return nullptr;
}

bool lease_broker::current_locked(std::uint32_t slot, std::vector<attempt_completion>& stale) {
  entry& e = at(slot);
  if (!attempt_check_ || attempt_check_(*e.t)) return true;
  unready_locked(e);
  stale.push_back(std::move(remove_locked(slot).done));
  ++counters_.given_back;
  ++counters_.stale;
  return false;
}

std::vector<leased_task> lease_broker::take_locked(const std::vector<std::string>& types,
                                                   std::size_t max, std::chrono::milliseconds ttr,
                                                   lease_terms terms, clock::time_point now,
                                                   std::vector<attempt_completion>& stale) {
  std::vector<leased_task> out;
  const auto paused = [&](const std::string& type) {
    auto p = paused_until_.find(type);
    return p != paused_until_.end() && now < p->second;
  };
  while (out.size() < max) {
    const ready_key* best = nullptr;
    const std::string* best_type = nullptr;
    const auto consider = [&](const std::string& type) {
      if (paused(type)) return;
      const ready_key* k = best_ready_locked(type);
      if (k && (!best || *k < *best)) {
        best = k;
        best_type = &type;
      }
    };
    if (types.empty()) {
      for (const auto& kv : ready_) consider(kv.first);
    } else {
      for (const std::string& type : types) consider(type);
    }
    if (!best) break;
    const std::uint32_t slot = best->slot;
    ready_heap& q = ready_.find(*best_type)->second;
    std::pop_heap(q.begin(), q.end(), ready_after{});
    q.pop_back();
    if (!current_locked(slot, stale)) continue;
    lease_locked(slot, ttr, terms, now, out);
  }
  std::erase_if(ready_, [](const auto& kv) { return kv.second.empty(); });
  shrink_when_idle_locked();
  return out;
}

void lease_broker::lease_locked(std::uint32_t slot, std::chrono::milliseconds ttr,
                                lease_terms terms, clock::time_point now,
                                std::vector<leased_task>& out) {
  entry& e = at(slot);
  unready_locked(e);
  e.lease = std::make_unique<lease_state>();
  lease_state& l = *e.lease;
  l.token = new_lease();
  // A task that names its time-to-run (a beanstalk job's TTR) gets it,
  // whatever the consumer asked.
  l.ttr = e.t->ttr.count() > 0 ? e.t->ttr : ttr;
  l.deadline = now + l.ttr;
  l.expiry_abandons = terms.expiry_abandons;
  deadlines_.emplace(l.deadline, e.t->id);
  ++counters_.reserved;
  ++counters_.reserved_total;
  ++e.per_type->reserved;
  ++e.per_type->leased;
  out.push_back({*e.t, l.token, l.deadline});
  arm_sweep_locked(l.deadline);
}

std::optional<leased_task> lease_broker::reserve_id(const std::string& id,
                                                    std::chrono::milliseconds ttr,
                                                    lease_terms terms) {
  std::vector<attempt_completion> stale;  // dropped after the lock, on return
  std::lock_guard lock(mutex_);
  if (closed_) return std::nullopt;
  const auto slot = find_locked(id);
  if (!slot || at(*slot).lease) return std::nullopt;
  const std::uint32_t s = *slot;
  if (!current_locked(s, stale)) {
    shrink_when_idle_locked();
    return std::nullopt;
  }
  // Its ready key stays behind and is dropped lazily (the entry is leased).
  std::vector<leased_task> out;
  lease_locked(s, ttr, terms, clock::now(), out);
  return std::move(out.front());
}

std::optional<task> lease_broker::peek_ready(const std::string& type) {
  // A paused type's ready tasks are shown too, as beanstalkd's peek-ready does.
  std::lock_guard lock(mutex_);
  if (const ready_key* k = best_ready_locked(type)) return *at(k->slot).t;
  ready_.erase(type);  // none left ready: as trim_locked() does
  return std::nullopt;
}

void lease_broker::pause(const std::string& type, std::chrono::milliseconds pause) {
  std::vector<std::pair<reserve_handler, std::vector<leased_task>>> answers;
  std::vector<attempt_completion> stale;  // dropped after the lock, on return
  {
    std::lock_guard lock(mutex_);
    if (pause.count() <= 0) {
      paused_until_.erase(type);
      serve_waiters_locked(answers, stale);
    } else {
      paused_until_[type] = clock::now() + pause;
    }
    arm_pause_end_locked();
  }
  for (auto& [h, out] : answers) answer(std::move(h), std::move(out));
}

std::chrono::milliseconds lease_broker::paused_for(const std::string& type) const {
  std::lock_guard lock(mutex_);
  auto p = paused_until_.find(type);
  if (p == paused_until_.end()) return std::chrono::milliseconds{0};
  const auto left = p->second - clock::now();
  return std::max(std::chrono::milliseconds{0}, std::chrono::ceil<std::chrono::milliseconds>(left));
}

void lease_broker::arm_pause_end_locked() {
  if (paused_until_.empty()) return;
  clock::time_point first = clock::time_point::max();
  for (const auto& kv : paused_until_) first = std::min(first, kv.second);
  // On the strand, like every timer here; a later arm replaces this one.
  boost::asio::post(ex_, [this, first, timer = pause_timer_] {
    timer->expires_at(first);
    timer->async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;
      std::vector<std::pair<reserve_handler, std::vector<leased_task>>> answers;
      std::vector<attempt_completion> stale;  // dropped after the lock, on return
      {
        std::lock_guard lock(mutex_);
        const auto now = clock::now();
        std::erase_if(paused_until_, [now](const auto& kv) { return kv.second <= now; });
        serve_waiters_locked(answers, stale);
        arm_pause_end_locked();
      }
      for (auto& [h, out] : answers) answer(std::move(h), std::move(out));
    });
  });
}

void lease_broker::arm_sweep_locked(clock::time_point when) {
  if (when >= sweep_at_) return;
  sweep_at_ = when;
  boost::asio::post(ex_, [this, when] {
    sweep_timer_.expires_at(when);
    sweep_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) sweep();
    });
  });
}

void lease_broker::sweep() {
  std::vector<std::pair<attempt_completion, std::string>> expired;
  std::vector<attempt_completion> abandoned;  // dropped on return, outside the lock
  {
    std::lock_guard lock(mutex_);
    const auto now = clock::now();
    while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
      const std::string id = deadlines_.begin()->second;
      deadlines_.erase(deadlines_.begin());
      const auto slot = find_locked(id);
      if (!slot || !at(*slot).lease) continue;
      entry e = remove_locked(*slot);
      // Dropped (given back uncounted, ready again at once) when the lease
      // said so: a beanstalk job whose time-to-run ended.
      if (e.lease->expiry_abandons)
        abandoned.push_back(std::move(e.done));
      else
        expired.emplace_back(std::move(e.done),
                             "lease expired after " + std::to_string(e.lease->ttr.count()) + " ms");
      --e.per_type->reserved;
      ++e.per_type->expired;
      --counters_.reserved;
      ++counters_.expired;
    }
    shrink_when_idle_locked();
    sweep_at_ = clock::time_point::max();
    if (!deadlines_.empty()) arm_sweep_locked(deadlines_.begin()->first);
  }
  for (auto& [done, why] : expired) done(std::move(why));
}

void lease_broker::answer(reserve_handler h, std::vector<leased_task> tasks) {
  // Called directly, with no lock of ours held: a handler hands the answer
  // to its connection (which posts it there if it runs elsewhere), so a
  // reserve that finds a task ready is answered where it stands.
  h(std::move(tasks));
}

void lease_broker::give_back(const std::vector<leased_task>& tasks) {
  std::vector<attempt_completion> dropped;
  {
    std::lock_guard lock(mutex_);
    for (const leased_task& lt : tasks) {
      if (auto e = end_lease_locked(lt.t.id, lt.lease)) {
        dropped.push_back(std::move(e->done));
        ++counters_.given_back;
      }
    }
  }
  // Dropped here, outside the lock: each drop ends its attempt uncounted.
}

std::optional<lease_broker::entry> lease_broker::end_lease_locked(const std::string& id,
                                                                  const std::string& lease) {
  const auto slot = find_locked(id);
  if (!slot || !at(*slot).lease || at(*slot).lease->token != lease) return std::nullopt;
  entry e = remove_locked(*slot);
  deadlines_.erase({e.lease->deadline, id});
  --counters_.reserved;
  --e.per_type->reserved;
  shrink_when_idle_locked();
  return e;
}

template <class End>
lease_broker::lease_result lease_broker::end_attempt(const std::string& id,
                                                     const std::string& lease,
                                                     std::uint64_t counters::*count, End&& end) {
  std::optional<entry> e;
  {
    std::lock_guard lock(mutex_);
    e = end_lease_locked(id, lease);
    if (!e) return lease_result::stale;
    if (count) ++(counters_.*count);
  }
  // Outside the lock: the completion may call back into the engine.
  end(e->done);
  return lease_result::ok;
}

lease_broker::lease_result lease_broker::finish(const std::string& id, const std::string& lease,
                                                attempt_completion::stored_handler on_stored) {
  return end_attempt(id, lease, &counters::finished,
                     [&](attempt_completion& done) { done(std::string{}, std::move(on_stored)); });
}

lease_broker::lease_result lease_broker::fail(const std::string& id, const std::string& lease,
                                              std::string error,
                                              attempt_completion::stored_handler on_stored) {
  // An empty reason would read as success to the engine.
  if (error.empty()) error = "failed by the consumer";
  return end_attempt(id, lease, &counters::failed, [&](attempt_completion& done) {
    done(std::move(error), std::move(on_stored));
  });
}

lease_broker::lease_result lease_broker::touch(const std::string& id, const std::string& lease,
                                               std::optional<std::chrono::milliseconds> ttr) {
  std::lock_guard lock(mutex_);
  const auto slot = find_locked(id);
  if (!slot || !at(*slot).lease || at(*slot).lease->token != lease) return lease_result::stale;
  lease_state& l = *at(*slot).lease;
  deadlines_.erase({l.deadline, id});
  if (ttr) l.ttr = *ttr;
  l.deadline = clock::now() + l.ttr;
  deadlines_.emplace(l.deadline, id);
  arm_sweep_locked(l.deadline);
  return lease_result::ok;
}

lease_broker::lease_result lease_broker::release(const std::string& id, const std::string& lease,
                                                 std::chrono::system_clock::time_point due,
                                                 std::optional<std::uint32_t> priority,
                                                 attempt_completion::stored_handler on_stored) {
  return end_attempt(id, lease, nullptr, [&](attempt_completion& done) {
    done.release(due, priority, std::move(on_stored));
  });
}

lease_broker::lease_result lease_broker::bury(const std::string& id, const std::string& lease,
                                              std::string reason,
                                              std::optional<std::uint32_t> priority,
                                              attempt_completion::stored_handler on_stored) {
  if (reason.empty()) reason = "buried by the consumer";
  return end_attempt(id, lease, &counters::failed, [&](attempt_completion& done) {
    done.bury(std::move(reason), priority, std::move(on_stored));
  });
}

std::optional<leased_task> lease_broker::lease_of(const std::string& id) const {
  std::lock_guard lock(mutex_);
  const auto slot = find_locked(id);
  if (!slot || !at(*slot).lease) return std::nullopt;
  const entry& e = at(*slot);
  return leased_task{*e.t, e.lease->token, e.lease->deadline};
}

lease_broker::held lease_broker::state_of(const std::string& id) const {
  std::lock_guard lock(mutex_);
  const auto slot = find_locked(id);
  if (!slot) return held::none;
  return at(*slot).lease ? held::reserved : held::ready;
}

bool lease_broker::release_ready(const std::string& id) {
  attempt_completion dropped;
  {
    std::lock_guard lock(mutex_);
    const auto slot = find_locked(id);
    if (!slot || at(*slot).lease) return false;
    const std::string type = at(*slot).t->type;
    unready_locked(at(*slot));
    dropped = std::move(remove_locked(*slot).done);
    ++counters_.given_back;
    trim_locked(type);
    shrink_when_idle_locked();
  }
  return true;  // `dropped` goes here, outside the lock
}

std::size_t lease_broker::release_stale() {
  std::vector<attempt_completion> stale;  // dropped on return, outside the lock
  {
    std::lock_guard lock(mutex_);
    if (!attempt_check_) return 0;
    std::vector<std::uint32_t> slots;
    for_each_held_locked([&](std::uint32_t slot) {
      if (!at(slot).lease) slots.push_back(slot);
    });
    // Their ready keys stay behind and are dropped lazily.
    for (const std::uint32_t slot : slots) current_locked(slot, stale);
    shrink_when_idle_locked();
  }
  return stale.size();
}

std::size_t lease_broker::release_type(const std::string& type) {
  std::vector<attempt_completion> dropped;
  {
    std::lock_guard lock(mutex_);
    auto q = ready_.find(type);
    if (q == ready_.end()) return 0;
    // In the order a reserve would have taken them, as they are given back.
    std::sort(q->second.begin(), q->second.end());
    for (const ready_key& k : q->second) {
      if (!valid_locked(k)) continue;
      unready_locked(at(k.slot));
      dropped.push_back(std::move(remove_locked(k.slot).done));
      ++counters_.given_back;
    }
    ready_.erase(q);
    shrink_when_idle_locked();
  }
  return dropped.size();  // dropped here, outside the lock
}

void lease_broker::trim_locked(const std::string& type) {
  auto q = ready_.find(type);
  if (q == ready_.end()) return;
  if (best_ready_locked(type) == nullptr) ready_.erase(q);
}

void lease_broker::stop_waiting() {
  std::vector<reserve_handler> answers;
  {
    std::lock_guard lock(mutex_);
    no_wait_ = true;
    for (waiter& w : waiters_) {
      answers.push_back(std::move(w.handler));
      boost::asio::post(ex_, [timer = w.timer] { timer->cancel(); });
    }
    waiters_.clear();
  }
  for (reserve_handler& h : answers) answer(std::move(h), {});
}

void lease_broker::close() {
  std::vector<attempt_completion> dropped;
  std::vector<reserve_handler> answers;
  {
    std::lock_guard lock(mutex_);
    closed_ = true;
    for_each_held_locked([&](std::uint32_t slot) { dropped.push_back(std::move(at(slot).done)); });
    counters_.given_back += held_.size();
    held_.clear();
    // The tasks go with their completions, after the lock: no entry may
    // point at them from now on.
    blocks_.clear();
    free_slots_.clear();
    ready_.clear();
    deadlines_.clear();
    counters_.ready = counters_.reserved = 0;
    for (auto& [type, c] : per_type_) c.ready = c.urgent = c.reserved = 0;
    for (waiter& w : waiters_) {
      answers.push_back(std::move(w.handler));
      boost::asio::post(ex_, [timer = w.timer] { timer->cancel(); });
    }
    waiters_.clear();
  }
  for (reserve_handler& h : answers) answer(std::move(h), {});
}

lease_broker::counters lease_broker::stats() const {
  std::lock_guard lock(mutex_);
  counters c = counters_;
  c.waiting_consumers = waiters_.size();
  return c;
}

std::map<std::string, lease_broker::type_counters, std::less<>> lease_broker::type_stats() const {
  std::lock_guard lock(mutex_);
  return per_type_;
}

}  // namespace delayq::server
