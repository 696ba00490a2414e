// schedule_keeper: claims and makes the occurrences of the schedules this
// engine owns (schedule_keeper.hpp has the protocol; docs/schedules.md the
// argument that it makes at most one task per occurrence).
#include "detail/schedules/schedule_keeper.hpp"

#include <algorithm>
#include <random>

#include "delayq/engine.hpp"
#include "delayq/log.hpp"
#include "detail/validation.hpp"

namespace delayq::detail::schedules {
namespace {

constexpr std::size_t batch_limit = 1024;        // claims per round of the thread
constexpr std::size_t make_chunk = 1000;         // tasks per schedule_many()
constexpr std::int64_t retry_ms = 1000;          // a failed write or make, again after
constexpr std::size_t most_iterations = 100000;  // occurrences looked at per claim

bool store_level(const boost::system::error_code& ec) {
  return ec == errc::store_unavailable || ec == errc::store_error || ec == errc::outcome_unknown ||
         ec == errc::busy || ec == errc::not_running || ec == errc::lease_lost ||
         ec == errc::queue_full || ec == errc::unsupported;
}

std::string occurrence_of(std::string_view id, std::int64_t ms) {
  std::string out(id);
  out += '@';
  out += std::to_string(ms);
  return out;
}

}  // namespace

schedule_keeper::schedule_keeper(delayq::engine& eng, task_store& store, keeper_options options)
    : eng_(eng),
      store_(store),
      schedules_(store.schedules()),
      opt_(std::move(options)),
      claimant_(std::random_device{}() | (std::uint64_t{std::random_device{}()} << 32) | 1) {}

schedule_keeper::~schedule_keeper() { stop(); }

bool schedule_keeper::owns(std::string_view id) const {
  return opt_.instance.empty() || eng_.owner_of(id) == opt_.instance;
}

void schedule_keeper::start(boost::system::error_code& ec) {
  ec = {};
  if (schedules_ == nullptr) return;
  {
    std::lock_guard lock(mutex_);
    if (running_ || thread_.joinable()) return;
  }
  if (!opt_.instance.empty()) {
    const engine_stats s = eng_.stats();
    seen_gained_ = s.shards_gained;
    seen_lost_ = s.shards_lost;
  }
  load_owned(ec);
  if (ec) return;
  std::lock_guard lock(mutex_);
  running_ = true;
  stopping_ = false;
  thread_ = std::thread([this] { run(); });
}

void schedule_keeper::stop() {
  {
    std::lock_guard lock(mutex_);
    if (!thread_.joinable()) return;
    running_ = false;
    stopping_ = true;
  }
  cv_.notify_all();
  idle_cv_.notify_all();
  thread_.join();
  // A call may be claiming still (upsert's first claim works on its entry
  // outside the lock): the entries go once none is.
  std::unique_lock lock(mutex_);
  idle_cv_.wait(lock, [&] { return busy_.empty(); });
  timeline_.clear();
  entries_.clear();
}

// ---- entries --------------------------------------------------------------

std::unique_ptr<schedule_keeper::entry> schedule_keeper::entry_of(const schedule_record& r) const {
  auto s = decode_definition(r.id, r.definition);
  auto st = decode_state(r.state);
  schedule_problem p;
  std::optional<timing> t;
  if (s) t = timing::compile(*s, p);
  if (!s || !st || !t) {
    log(log_level::error, "delayq: schedule '" + r.id + "' in " + store_.describe() +
                              " cannot be read (" +
                              (!s || !st ? std::string("undecodable, or written by a newer version")
                                         : p.field + ": " + p.reason) +
                              "): skipped, left as it is");
    return nullptr;
  }
  auto e = std::make_unique<entry>();
  e->when = *t;
  e->type = std::move(s->type);
  e->payload = std::move(s->payload);
  e->priority = s->priority;
  e->ttr_ms = static_cast<std::uint32_t>(s->ttr.count());
  e->conflict = s->conflict;
  e->missed = s->missed;
  e->revision = r.revision;
  e->st = *st;
  // Whoever wrote the last claim may have died before making its tasks.
  e->doubt_check = st->doubt_ms < st->cursor_ms;
  return e;
}

void schedule_keeper::load_owned(boost::system::error_code& ec) {
  ec = {};
  const std::int64_t now = now_ms();
  bool first = false;
  {
    std::lock_guard lock(mutex_);
    for (auto& [id, e] : entries_) e.seen = false;
    first = entries_.empty();
  }
  if (first) {
    // Outside the lock, as every store call here: add_stats() takes it on
    // an I/O thread of the server (GET /v1/stats), which must never wait
    // for a round trip to a slow store (issue 33: a Redis link slowed to
    // 100-300 ms a chunk held one instance's HTTP for 6 s this way).
    const std::size_t n = schedules_->count_schedules(ec);
    if (ec) return;
    std::lock_guard lock(mutex_);
    entries_.reserve(n);
  }
  // In no set order, each record read once (a sharded store's shards one
  // after the other, not merged into id order as list_schedules() would).
  schedules_->scan_schedules(
      1000,
      [&](std::vector<schedule_record>& page) {
        std::lock_guard lock(mutex_);
        for (const schedule_record& r : page) {
          if (!owns(r.id)) continue;
          auto it = entries_.find(r.id);
          if (it != entries_.end() &&
              (busy_.count(r.id) != 0 || it->second.revision == r.revision)) {
            it->second.seen = true;
            continue;
          }
          auto e = entry_of(r);
          if (!e) continue;
          if (it != entries_.end()) {
            disarm_locked(it->second);
            it->second = std::move(*e);
          } else {
            it = entries_.emplace(r.id, std::move(*e)).first;
          }
          it->second.id = &it->first;
          it->second.seen = true;
          arm_locked(it->second, now);
        }
      },
      ec);
  if (ec) return;
  // What is no longer stored, or no longer ours, goes (unless busy: whoever
  // holds it sees at its next claim).
  std::lock_guard lock(mutex_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (!it->second.seen && busy_.count(it->first) == 0) {
      disarm_locked(it->second);
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
}

void schedule_keeper::disarm_locked(entry& e) {
  if (e.wake >= 0) timeline_.erase({e.wake, &e});
  e.wake = -1;
}

void schedule_keeper::arm_locked(entry& e, std::int64_t now) {
  disarm_locked(e);
  std::int64_t wake = now;
  if (e.pending) {
    wake = now + retry_ms;
  } else if (!e.doubt_check) {
    auto t = e.when.next_after(e.st.cursor_ms - 1);
    if (!t) return;  // no occurrence left: the schedule has ended
    // Missed occurrences are decided at once; the others a lookahead ahead.
    if (*t >= now - missed_grace_ms) wake = std::max(now, *t - opt_.lookahead.count());
  }
  e.wake = wake;
  const bool first = timeline_.empty() || wake < timeline_.begin()->first;
  timeline_.insert({wake, &e});
  if (first) cv_.notify_all();
}

void schedule_keeper::acquire(const std::string& id) {
  std::unique_lock lock(mutex_);
  idle_cv_.wait(lock, [&] { return busy_.count(id) == 0; });
  busy_.insert(id);
}

void schedule_keeper::release(const std::string& id) {
  {
    std::lock_guard lock(mutex_);
    busy_.erase(id);
    // The thread drops a busy entry it finds due, for its holder to arm
    // again: here, now that it is free.
    if (auto it = entries_.find(id); it != entries_.end() && it->second.wake < 0)
      arm_locked(it->second, now_ms());
  }
  idle_cv_.notify_all();
}

// ---- the thread -----------------------------------------------------------

void schedule_keeper::run() {
  std::unique_lock lock(mutex_);
  auto polled = std::chrono::steady_clock::now();
  while (!stopping_) {
    // Clusters: shards changed hands since the last look, so schedules did.
    if (!opt_.instance.empty() &&
        std::chrono::steady_clock::now() - polled >= std::chrono::seconds(1)) {
      polled = std::chrono::steady_clock::now();
      lock.unlock();
      const engine_stats s = eng_.stats();
      if (s.shards_gained != seen_gained_ || s.shards_lost != seen_lost_) {
        boost::system::error_code ec;
        load_owned(ec);
        if (!ec) {
          seen_gained_ = s.shards_gained;
          seen_lost_ = s.shards_lost;
        }
      }
      lock.lock();
      continue;
    }
    const std::int64_t now = now_ms();
    std::vector<claim> claims;
    std::vector<std::string> taken;
    while (!timeline_.empty() && timeline_.begin()->first <= now && claims.size() < batch_limit) {
      entry* e = timeline_.begin()->second;
      timeline_.erase(timeline_.begin());
      e->wake = -1;
      const std::string& id = *e->id;
      if (busy_.count(id) != 0) continue;  // release() arms it again
      if (!owns(id)) {
        const std::string gone = id;  // the key itself: copied before the erase
        entries_.erase(gone);
        continue;
      }
      busy_.insert(id);
      taken.push_back(id);
      claims.push_back(plan(*e, now));
    }
    if (claims.empty()) {
      auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      if (!timeline_.empty())
        until = std::min(until, std::chrono::steady_clock::now() +
                                    std::chrono::milliseconds(timeline_.begin()->first - now));
      cv_.wait_until(lock, until);
      continue;
    }
    lock.unlock();
    carry_out(claims);
    lock.lock();
    for (const std::string& id : taken) busy_.erase(id);
    idle_cv_.notify_all();
  }
}

schedule_keeper::claim schedule_keeper::plan(entry& e, std::int64_t now) const {
  claim c;
  c.e = &e;
  c.id = *e.id;
  c.expected = e.revision;
  c.next = e.st;
  if (e.pending) {
    // A make that failed: its occurrences are claimed already (and in doubt
    // in the store), so they are made, late if need be, before anything new.
    c.write = false;
    c.make = *e.pending;
    return c;
  }
  const std::int64_t lookahead = opt_.lookahead.count();
  const std::int64_t horizon = now + lookahead + lookahead / 2;
  const std::int64_t cut = now - missed_grace_ms;
  const timing& w = e.when;
  std::size_t looked = 0;
  // A claim in doubt: its occurrences still in the future are made again
  // (on_conflict::keep: made already, they stay one task); the past ones
  // may have run, and count as done. In a cluster, so do those due within
  // remake_margin_ms: their make could land after they ran elsewhere.
  const std::int64_t remake_after = opt_.instance.empty() ? now : now + remake_margin_ms;
  if (e.doubt_check)
    for (auto t = w.next_after(std::max(e.st.doubt_ms - 1, remake_after));
         t && *t < e.st.cursor_ms && ++looked < most_iterations; t = w.next_after(*t))
      c.make.push_back(*t);
  std::int64_t cursor = e.st.cursor_ms;
  auto first = w.next_after(cursor - 1);
  if (first && *first < cut) {
    // Missed: their time passed before any instance claimed them. Counted
    // (up to 100,000), then decided by the schedule's policy.
    std::size_t total = 0;
    for (auto t = first; t && *t < cut && total < most_iterations; t = w.next_after(*t)) {
      if (e.missed == missed_runs::all && c.make.size() < max_missed) c.make.push_back(*t);
      ++total;
    }
    std::size_t made = 0;
    switch (e.missed) {
      case missed_runs::skip: break;
      case missed_runs::all: made = std::min(total, max_missed); break;
      case missed_runs::once: {
        // The latest before the cut: look back a minute, then 8 times as far
        // each round, rather than walk a long outage from its start.
        std::optional<std::int64_t> latest;
        for (std::int64_t window = 60000;; window *= 8) {
          const std::int64_t lo = std::max(cursor, cut - window);
          std::size_t n = 0;
          for (auto t = w.next_after(lo - 1); t && *t < cut && n < most_iterations;
               t = w.next_after(*t), ++n)
            latest = *t;
          if (latest || lo == cursor) break;
        }
        if (latest) {
          c.make.push_back(*latest);
          made = 1;
        }
        break;
      }
    }
    c.missed = total - made;
    cursor = cut;
  }
  for (auto t = w.next_after(cursor - 1); t && *t <= horizon && ++looked < most_iterations;
       t = w.next_after(*t)) {
    c.make.push_back(*t);
    cursor = *t + 1;
  }
  c.next.cursor_ms = cursor;
  // The new claim is in doubt until the next one; a doubt not yet resolved
  // stays in doubt with it.
  c.next.doubt_ms = e.doubt_check ? std::min(e.st.doubt_ms, e.st.cursor_ms) : e.st.cursor_ms;
  c.next.claimant = claimant_;
  c.write = cursor != e.st.cursor_ms;
  return c;
}

void schedule_keeper::carry_out(std::vector<claim>& claims) {
  // 1. The claims: one compare-and-set each, in one call.
  std::vector<std::string> states;
  std::vector<schedule_write> writes;
  std::vector<std::size_t> of;  // claim index of each write
  states.reserve(claims.size());
  for (std::size_t i = 0; i < claims.size(); ++i) {
    if (!claims[i].write) continue;
    states.push_back(encode_state(claims[i].next));
    of.push_back(i);
  }
  for (std::size_t k = 0; k < of.size(); ++k) {
    schedule_write w;
    w.what = schedule_write::kind::state;
    w.id = claims[of[k]].id;
    w.state = states[k];
    w.expected = claims[of[k]].expected;
    writes.push_back(w);
  }
  boost::system::error_code ec;
  if (!writes.empty()) schedules_->write_schedules(writes, ec);
  // 0: no write needed; 1: claimed; 2: lost to another writer or unknown.
  std::vector<int> outcome(claims.size(), 0);
  for (std::size_t k = 0; k < of.size(); ++k) outcome[of[k]] = ec ? 2 : (writes[k].applied ? 1 : 2);
  if (ec)
    log(log_level::warning, "delayq: schedules: " + std::to_string(writes.size()) +
                                " claims not written (" + ec.message() + "); trying again in 1 s");

  // 2. The tasks of what was claimed.
  std::vector<std::pair<entry*, std::int64_t>> todo;
  for (std::size_t i = 0; i < claims.size(); ++i)
    if (outcome[i] != 2)
      for (std::int64_t t : claims[i].make) todo.emplace_back(claims[i].e, t);
  auto failed = make_tasks(todo);

  // 3. Schedules someone else wrote meanwhile (or whose write's outcome is
  // unknown) are read again: a claim of ours that did land is then in
  // doubt, and resolved as such.
  std::vector<std::string> reread;
  for (std::size_t i = 0; i < claims.size(); ++i)
    if (outcome[i] == 2) reread.push_back(claims[i].id);
  boost::system::error_code rec;
  std::vector<std::optional<schedule_record>> found;
  if (!reread.empty()) found = schedules_->find_schedules(reread, rec);

  // 4. The entries, and when each wakes next.
  const std::int64_t now = now_ms();
  std::lock_guard lock(mutex_);
  std::size_t k = 0;
  for (std::size_t i = 0; i < claims.size(); ++i) {
    claim& c = claims[i];
    entry& e = *c.e;
    if (outcome[i] == 2) {
      const std::size_t at = k++;
      auto it = entries_.find(c.id);
      if (rec) {
        e.doubt_check = true;  // whatever landed is resolved once it can be read
        disarm_locked(e);
        e.wake = now + retry_ms;
        timeline_.insert({e.wake, &e});
        continue;
      }
      auto fresh = found[at] ? entry_of(*found[at]) : nullptr;
      disarm_locked(e);
      if (!fresh) {
        entries_.erase(it);  // erased by its owner, or unreadable now
        continue;
      }
      // Our own claim, landed though its answer was lost: claimed, and its
      // tasks are to be made (in doubt). Another keeper's claim (a lost
      // compare-and-set): that keeper is alive and makes its own tasks.
      const auto now_st = decode_state(found[at]->state);
      const bool ours = c.write && now_st && *now_st == c.next;
      fresh->doubt_check = ours;
      fresh->id = &it->first;
      it->second = std::move(*fresh);
      arm_locked(it->second, now);
      continue;
    }
    if (outcome[i] == 1) {
      e.revision = c.expected + 1;
      e.st = c.next;
    }
    std::vector<std::int64_t> still;
    for (const auto& [fe, t] : failed)
      if (fe == &e) still.push_back(t);
    made_ += c.make.size() - still.size();
    missed_ += c.missed;
    e.pending =
        still.empty() ? nullptr : std::make_unique<std::vector<std::int64_t>>(std::move(still));
    if (!e.pending) e.doubt_check = false;
    arm_locked(e, now);
  }
}

std::vector<std::pair<schedule_keeper::entry*, std::int64_t>> schedule_keeper::make_tasks(
    const std::vector<std::pair<entry*, std::int64_t>>& todo) {
  std::vector<std::pair<entry*, std::int64_t>> failed;
  if (todo.empty()) return failed;
  struct item {
    entry* e;
    std::int64_t at;
    task_spec spec;
  };
  std::vector<item> mine, foreign;
  for (const auto& [e, t] : todo) {
    item it{e, t, {}};
    it.spec.type = e->type;
    it.spec.payload = e->payload;
    it.spec.due = from_epoch_ms(t);
    it.spec.options.id = occurrence_of(*e->id, t);
    it.spec.options.conflict = e->conflict;
    it.spec.options.priority = e->priority;
    it.spec.options.ttr = std::chrono::milliseconds{e->ttr_ms};
    // Clusters: an occurrence whose shard another instance holds is stored
    // for it, and its owner holds it from the store's notice.
    if (!opt_.instance.empty() && !owns(it.spec.options.id))
      foreign.push_back(std::move(it));
    else
      mine.push_back(std::move(it));
  }
  auto lose = [&](const item& it, const boost::system::error_code& ec) {
    log(log_level::error, "delayq: schedule '" + *it.e->id + "': the occurrence " +
                              it.spec.options.id + " cannot be made a task (" + ec.message() +
                              "): skipped");
    std::lock_guard lock(mutex_);
    ++lost_;
  };
  for (std::size_t from = 0; from < mine.size(); from += make_chunk) {
    std::vector<item*> chunk;
    for (std::size_t k = from; k < std::min(mine.size(), from + make_chunk); ++k)
      chunk.push_back(&mine[k]);
    while (!chunk.empty()) {
      std::vector<task_spec> specs;
      specs.reserve(chunk.size());
      for (item* it : chunk) specs.push_back(it->spec);
      boost::system::error_code ec;
      std::size_t bad = 0;
      eng_.schedule_many(std::move(specs), ec, bad);
      if (!ec) break;
      if (store_level(ec) || bad >= chunk.size()) {
        for (item* it : chunk) failed.emplace_back(it->e, it->at);
        break;
      }
      // One task's own trouble: settle it, and send the rest again.
      item* it = chunk[bad];
      if (ec == errc::duplicate_id) {
        // conflict reject, and it is pending: it exists, which is all we want
      } else if (ec == errc::not_owner) {
        foreign.push_back(*it);
      } else if (ec == errc::type_full) {
        failed.emplace_back(it->e, it->at);
      } else {
        lose(*it, ec);
      }
      chunk.erase(chunk.begin() + static_cast<std::ptrdiff_t>(bad));
    }
  }
  if (!foreign.empty()) {
    std::vector<task> tasks;
    tasks.reserve(foreign.size());
    for (const item& it : foreign) {
      task t;
      t.id = it.spec.options.id;
      t.type = it.spec.type;
      t.payload = it.spec.payload;
      t.due = it.spec.due;
      t.priority = it.spec.options.priority;
      t.ttr = it.spec.options.ttr;
      tasks.push_back(std::move(t));
    }
    boost::system::error_code ec;
    schedules_->insert_absent(tasks, ec);
    if (ec == errc::unsupported) {
      for (const item& it : foreign) lose(it, ec);
    } else if (ec) {
      for (const item& it : foreign) failed.emplace_back(it.e, it.at);
    }
  }
  return failed;
}

// ---- calls ----------------------------------------------------------------

std::int64_t schedule_keeper::cancel_made(const schedule& old, const schedule_state& st,
                                          std::int64_t now) {
  schedule_problem p;
  auto w = timing::compile(old, p);
  if (!w) return -1;
  std::int64_t remaining = -1;
  std::size_t n = 0;
  // From `now` itself: the new definition makes its occurrences from now
  // on, so one at this very millisecond must be settled here too. Not from
  // doubt_ms: every claim up to the cursor made tasks, and with a lookahead
  // longer than the period the last claim began after `now`, with earlier
  // claims' occurrences still ahead (a peer's clock ahead of ours does the
  // same). Left alone, those ran with the old definition, or, if one had
  // run already, the new one made its id again and it ran twice.
  for (auto t = w->next_after(now - 1); t && *t < st.cursor_ms && ++n < most_iterations;
       t = w->next_after(*t)) {
    boost::system::error_code ec;
    const bool cancelled = eng_.cancel(occurrence_of(old.id, *t), ec);
    // Not cancelled: its attempt has started (it runs now, or ran already,
    // early by a reschedule or as it fell due since `now`), it is not ours
    // to cancel (another instance's shard), or the store did not say. It
    // may run, or has: an occurrence the old definition claimed and did not
    // make counts so too (the id is made once).
    if (ec || !cancelled) remaining = *t;
  }
  return remaining;
}

bool schedule_keeper::ready(boost::system::error_code& ec) const {
  ec = {};
  if (schedules_ == nullptr) {
    ec = errc::unsupported;
    return false;
  }
  std::lock_guard lock(mutex_);
  if (!running_) ec = errc::not_running;
  return !ec;
}

bool schedule_keeper::upsert(const schedule& s, boost::system::error_code& ec) {
  if (!ready(ec)) return false;
  if (check_schedule(s)) {
    ec = errc::invalid_schedule;
    return false;
  }
  if (s.payload.size() > opt_.max_payload) {
    ec = errc::payload_too_large;
    return false;
  }
  if (opt_.type_known && !opt_.type_known(s.type)) {
    ec = errc::unknown_type;
    return false;
  }
  if (!owns(s.id)) {
    ec = errc::not_owner;
    return false;
  }
  schedule_problem p;
  const timing when = *timing::compile(s, p);
  const std::string definition = encode_definition(s);
  acquire(s.id);
  struct releaser {
    schedule_keeper* k;
    const std::string& id;
    ~releaser() { k->release(id); }
  } rel{this, s.id};
  for (int attempt = 0; attempt < 3; ++attempt) {
    const std::string ids[] = {s.id};
    auto found = schedules_->find_schedules(ids, ec);
    if (ec) return false;
    const auto& old = found[0];
    const std::int64_t now = now_ms();
    schedule_state st;
    st.updated_ms = now;
    st.claimant = claimant_;
    st.cursor_ms = std::max(now, when.start_ms);
    if (old) {
      auto old_def = decode_definition(s.id, old->definition);
      auto old_st = decode_state(old->state);
      if (old->definition == definition && old_st) {
        // Unchanged: nothing to write, nothing to cancel. Make sure we hold it.
        std::lock_guard lock(mutex_);
        if (entries_.find(s.id) == entries_.end()) {
          if (auto e = entry_of(*old)) {
            auto it = entries_.emplace(s.id, std::move(*e)).first;
            it->second.id = &it->first;
            arm_locked(it->second, now);
          }
        }
        return false;
      }
      // The new definition applies from now: the tasks the old one made for
      // later occurrences are cancelled; those that could not be may run,
      // so the new definition starts after them (an id is made once).
      if (old_def && old_st) {
        const std::int64_t remaining = cancel_made(*old_def, *old_st, now);
        if (remaining >= 0) st.cursor_ms = std::max(st.cursor_ms, remaining + 1);
      }
    }
    st.doubt_ms = st.cursor_ms;
    const std::string state = encode_state(st);
    schedule_write w;
    w.what = schedule_write::kind::put;
    w.id = s.id;
    w.definition = definition;
    w.state = state;
    w.expected = old ? old->revision : 0;
    schedules_->write_schedules(std::span<const schedule_write>(&w, 1), ec);
    if (ec) return false;
    if (!w.applied) continue;  // changed meanwhile: read it again
    schedule_record rec{s.id, definition, state, w.expected + 1};
    std::vector<claim> first;
    {
      std::lock_guard lock(mutex_);
      auto e = entry_of(rec);
      auto it = entries_.find(s.id);
      if (it != entries_.end()) {
        disarm_locked(it->second);
        it->second = std::move(*e);
      } else {
        it = entries_.emplace(s.id, std::move(*e)).first;
      }
      it->second.id = &it->first;
      first.push_back(plan(it->second, now_ms()));
    }
    // The first claim, before the answer: its occurrences are due within
    // the lookahead, so a keeper that died before its thread got to them
    // would leave them unclaimed until a successor took the shard over, and
    // one more than a second past then is missed (docs/schedules.md, "Missed
    // runs"). Claimed and made here, they are tasks once this returns, or in
    // doubt in the store, for the successor to make again. carry_out() arms
    // the entry for its next claim.
    carry_out(first);
    return !old;
  }
  ec = errc::busy;
  return false;
}

bool schedule_keeper::remove(std::string_view id, boost::system::error_code& ec) {
  if (!ready(ec)) return false;
  if (!owns(id)) {
    ec = errc::not_owner;
    return false;
  }
  const std::string key(id);
  acquire(key);
  struct releaser {
    schedule_keeper* k;
    const std::string& id;
    ~releaser() { k->release(id); }
  } rel{this, key};
  for (int attempt = 0; attempt < 3; ++attempt) {
    const std::string ids[] = {key};
    auto found = schedules_->find_schedules(ids, ec);
    if (ec) return false;
    if (!found[0]) {
      std::lock_guard lock(mutex_);
      if (auto it = entries_.find(key); it != entries_.end()) {
        disarm_locked(it->second);
        entries_.erase(it);
      }
      return false;
    }
    schedule_write w;
    w.what = schedule_write::kind::erase;
    w.id = key;
    w.expected = found[0]->revision;
    schedules_->write_schedules(std::span<const schedule_write>(&w, 1), ec);
    if (ec) return false;
    if (!w.applied) continue;
    {
      std::lock_guard lock(mutex_);
      if (auto it = entries_.find(key); it != entries_.end()) {
        disarm_locked(it->second);
        entries_.erase(it);
      }
    }
    // Gone from the store first, so no keeper makes another occurrence;
    // then the tasks made ahead are cancelled where they can be.
    auto def = decode_definition(key, found[0]->definition);
    auto st = decode_state(found[0]->state);
    if (def && st) cancel_made(*def, *st, now_ms());
    return true;
  }
  ec = errc::busy;
  return false;
}

std::optional<schedule> schedule_keeper::find(std::string_view id,
                                              boost::system::error_code& ec) const {
  if (!ready(ec)) return std::nullopt;
  const std::string ids[] = {std::string(id)};
  auto found = schedules_->find_schedules(ids, ec);
  if (ec || !found[0]) return std::nullopt;
  auto s = decode_definition(id, found[0]->definition);
  if (!s) ec = errc::corrupt_record;
  return s;
}

std::vector<schedule> schedule_keeper::list(std::size_t offset, std::size_t limit,
                                            boost::system::error_code& ec) const {
  std::vector<schedule> out;
  if (!ready(ec)) return out;
  std::string after;
  std::size_t skip = offset;
  while (out.size() < limit) {
    const std::size_t want = std::min<std::size_t>(1000, skip + limit - out.size());
    auto page = schedules_->list_schedules(after, want, ec);
    if (ec) return {};
    for (const schedule_record& r : page) {
      if (skip > 0) {
        --skip;
        continue;
      }
      if (out.size() == limit) break;
      if (auto s = decode_definition(r.id, r.definition)) out.push_back(std::move(*s));
    }
    if (page.size() < want) break;
    after = page.back().id;
  }
  return out;
}

std::size_t schedule_keeper::count(boost::system::error_code& ec) const {
  if (!ready(ec)) return 0;
  return schedules_->count_schedules(ec);
}

std::vector<schedule_keeper::time_point> schedule_keeper::next(
    std::string_view id, std::size_t n, boost::system::error_code& ec) const {
  auto s = find(id, ec);
  if (ec) return {};
  if (!s) {
    ec = errc::not_found;
    return {};
  }
  return schedule_occurrences(*s, std::chrono::system_clock::now(), n, ec);
}

void schedule_keeper::add_stats(engine_stats& s) const {
  std::lock_guard lock(mutex_);
  s.schedules = entries_.size();
  s.occurrences_made = made_;
  s.occurrences_missed = missed_;
  s.occurrences_lost = lost_;
}

}  // namespace delayq::detail::schedules
