// Tests of delayq::timer_wheel. Every test drives the wheel by hand with
// advance(): no clock is read and nothing sleeps.
#include "delayq/timer_wheel.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <ostream>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

using delayq::timer_wheel;
using handle = timer_wheel::handle;
constexpr handle npos = timer_wheel::npos;
constexpr std::uint64_t no_tick = timer_wheel::no_tick;

// A task as the tests build it: owns its bytes, and converts to the view the
// wheel copies from.
struct task {
  std::string id;
  std::string payload;
  std::uint32_t attempts = 0;
  operator timer_wheel::item() const { return {id, payload, 0, 0, attempts}; }
  friend bool operator==(const task&, const task&) = default;
};

task make_task(std::string id, std::string payload = {}) {
  return task{std::move(id), std::move(payload)};
}

struct firing {
  std::uint64_t tick;
  std::string id;
  friend bool operator==(const firing&, const firing&) = default;
};

std::ostream& operator<<(std::ostream& os, const firing& f) {
  return os << "{" << f.tick << ", \"" << f.id << "\"}";
}
std::ostream& operator<<(std::ostream& os, const std::vector<firing>& v) {
  os << "[";
  for (const firing& f : v) os << " " << f;
  return os << " ]";
}

// Advances `w` to `to_tick` with a sink that records what fired and erases it.
std::vector<firing> advance_erasing(timer_wheel& w, std::uint64_t to_tick) {
  std::vector<firing> fired;
  const std::size_t n = w.advance(to_tick, [&](handle h) {
    fired.push_back({w.now(), std::string(w.id(h))});
    w.erase(h);
  });
  CHECK(n == fired.size());
  return fired;
}

// ------------------------------------------------------------ reference model
//
// A differential test: every operation goes to the wheel and to a plain model
// (a hash map id -> state plus an ordered set of (due tick, arming order)),
// and the two are compared after each step. The sink also acts at random, as
// the engine's would: it erases, re-arms or keeps the fired node, and inserts,
// erases, arms and disarms other tasks, including ones due at the same tick
// that have not been handed over yet.

enum op_kind : std::size_t {
  op_insert,
  op_insert_detached,
  op_duplicate,
  op_erase_id,
  op_erase_handle,
  op_erase_missing,
  op_reschedule,
  op_reschedule_missing,
  op_arm,
  op_disarm,
  op_advance,
  op_wake,
  op_take_tick,
  op_kinds
};

struct model_entry {
  handle h = npos;
  bool armed = false;
  std::uint64_t due = 0;  // effective due tick while armed
  std::uint64_t seq = 0;  // arming order: ties within one tick
  std::uint32_t tag = 0;
  std::size_t pos = 0;  // index in differential::ids_
};

class differential {
 public:
  // `churn`: also erase, disarm and move armed tasks. Without it no slot bound
  // can go stale, so next_due_tick() must be exact after every operation.
  differential(std::size_t slots, std::uint64_t seed, bool churn, std::size_t cap)
      : w_(slots), rng_(seed), seed_(seed), churn_(churn), cap_(cap) {}

  void run(std::size_t ops) {
    for (op_no_ = 0; op_no_ < ops; ++op_no_) {
      step();
      check_invariants();
      if (op_no_ % 1024 == 0) check_every_entry();
    }
    check_every_entry();
    drain();
  }

  std::array<std::size_t, op_kinds> done{};
  std::size_t fired = 0;
  std::size_t stale_events = 0;    // unlinks of armed nodes that may leave a slot bound low
  std::size_t wakeups = 0;         // advance(next_due_tick())
  std::size_t wasted_wakeups = 0;  // ... that fired nothing
  std::size_t early = 0;           // operations after which next_due_tick() was early
  std::size_t big_jumps = 0;
  std::size_t past_inserts = 0;
  std::size_t same_tick_interference = 0;  // sink touched a node due at the current tick

 private:
  // Each message is unique, so it names the failed check.
  void expect(bool ok, const char* what) {
    if (ok) return;
    FAIL("slots=" << w_.slots() << " seed=" << seed_ << " churn=" << churn_ << " op#" << op_no_
                  << " now=" << w_.now() << ": " << std::string(what));
  }

  std::uint64_t uniform(std::uint64_t lo, std::uint64_t hi) {
    return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng_);
  }
  bool chance(unsigned percent) { return uniform(0, 99) < percent; }

  static std::string payload_for(const std::string& id) { return "payload of " + id; }

  std::uint64_t effective(std::uint64_t due) const { return due <= w_.now() ? w_.now() + 1 : due; }

  std::uint64_t random_due() {
    const std::uint64_t now = w_.now();
    const std::uint64_t s = w_.slots();
    switch (uniform(0, 9)) {
      case 0: return uniform(0, now);  // in the past or now: due at now() + 1
      case 1:
      case 2: return now + uniform(1, 3);         // crowded ticks: order within a tick matters
      case 3: return now + uniform(1, 1000 * s);  // up to a thousand revolutions away
      case 4: return now + s * uniform(1, 12);    // the slot of now(), later revolutions
      default: return now + uniform(0, 2 * s);
    }
  }

  std::string new_id() {
    if (!recycled_.empty() && chance(25)) {
      const std::size_t i = uniform(0, recycled_.size() - 1);
      std::string id = std::move(recycled_[i]);
      recycled_[i] = std::move(recycled_.back());
      recycled_.pop_back();
      return id;
    }
    const std::uint64_t n = next_id_++;
    switch (n % 8) {
      case 0: return n == 0 ? std::string{} : std::string("nul\0", 4) + std::to_string(n);
      case 1: return std::to_string(n) + std::string(40, 'L');  // heap-allocated id
      default: return "t" + std::to_string(n);
    }
  }

  // Sets `id` to a random held id (detached if asked); false when none found.
  bool pick(std::string& id, bool detached_only) {
    if (ids_.empty()) return false;
    for (int tries = 0; tries < 8; ++tries) {
      const std::string& candidate = ids_[uniform(0, ids_.size() - 1)];
      if (detached_only && model_.at(candidate).armed) continue;
      id = candidate;
      return true;
    }
    return false;
  }
  // In churn mode any entry; otherwise only one whose change cannot leave a
  // slot bound stale.
  bool pick_touchable(std::string& id) { return pick(id, !churn_); }

  // ---------------------------------------------------------------- model ops

  model_entry& model_add(const std::string& id, handle h, std::uint32_t tag) {
    model_entry e;
    e.h = h;
    e.tag = tag;
    e.pos = ids_.size();
    ids_.push_back(id);
    return model_.emplace(id, e).first->second;
  }
  void model_arm(model_entry& e, std::uint64_t due) {
    if (e.armed) armed_.erase({e.due, e.seq});
    e.armed = true;
    e.due = effective(due);
    e.seq = next_seq_++;
    armed_.insert({e.due, e.seq});
  }
  void model_disarm(model_entry& e) {
    if (!e.armed) return;
    armed_.erase({e.due, e.seq});
    e.armed = false;
  }
  void model_remove(std::string id) {
    auto it = model_.find(id);
    model_disarm(it->second);
    const std::size_t pos = it->second.pos;
    model_.erase(it);
    if (pos + 1 != ids_.size()) {
      ids_[pos] = std::move(ids_.back());
      model_.at(ids_[pos]).pos = pos;
    }
    ids_.pop_back();
    recycled_.push_back(std::move(id));
  }
  // Whether changing entry `e` may leave its slot's bound below the truth.
  // A node due at the tick being processed is already out of its slot.
  bool makes_stale(const model_entry& e) const {
    return e.armed && !(in_advance_ && e.due == w_.now());
  }

  // ---------------------------------------------------------------- operations

  void do_insert(bool detached) {
    const std::string id = new_id();
    const std::uint64_t due = random_due();
    const auto tag = static_cast<std::uint32_t>(uniform(0, 0xffffffff));
    const handle h = detached ? w_.insert_detached(make_task(id, payload_for(id)))
                              : w_.insert(make_task(id, payload_for(id)), due);
    expect(h != npos, "insert of a new id returned npos");
    w_.tag(h) = tag;
    model_entry& e = model_add(id, h, tag);
    expect(w_.find(id) == h, "find() does not return the inserted node");
    expect(w_.is_armed(h) == !detached, "is_armed() wrong after insert");
    if (detached) return;
    if (due <= w_.now()) {
      ++past_inserts;
      expect(w_.due_tick(h) == w_.now() + 1, "a due tick in the past is not now() + 1");
    }
    model_arm(e, due);
    expect(w_.due_tick(h) == e.due, "due_tick() wrong after insert");
  }

  void do_duplicate() {
    std::string id;
    if (!pick(id, false)) return;
    const model_entry& e = model_.at(id);
    task t = make_task(id, "a different payload");
    t.attempts = 7;
    const task copy = t;
    const handle h = chance(50) ? w_.insert(t, random_due()) : w_.insert_detached(t);
    expect(h == npos, "insert of a held id did not return npos");
    expect(w_.find(id) == e.h, "a refused insert changed find()");
    expect(std::string(w_.payload(e.h)) == payload_for(id),
           "a refused insert changed the held task");
    expect(w_.is_armed(e.h) == e.armed, "a refused insert changed is_armed()");
    if (e.armed) expect(w_.due_tick(e.h) == e.due, "a refused insert changed due_tick()");
  }

  void do_erase(bool by_handle) {
    std::string id;
    if (!pick_touchable(id)) return;
    const model_entry& e = model_.at(id);
    if (makes_stale(e)) ++stale_events;
    if (by_handle) {
      w_.erase(e.h);
    } else {
      expect(w_.erase(id), "erase(id) of a held id returned false");
    }
    model_remove(id);
    expect(w_.find(id) == npos, "find() still sees an erased id");
  }

  std::string missing_id() {
    if (!recycled_.empty() && chance(50)) return recycled_[uniform(0, recycled_.size() - 1)];
    return "never-inserted-" + std::to_string(uniform(0, 1000000));
  }

  void do_erase_missing() {
    const std::string id = missing_id();
    expect(!w_.erase(id), "erase(id) of an id not held returned true");
    expect(w_.find(id) == npos, "find() sees an id never held");
  }

  void do_reschedule_missing() {
    const std::string id = missing_id();
    expect(!w_.reschedule(id, random_due()), "reschedule() of an id not held returned true");
  }

  void do_arm(bool by_id) {
    std::string id;
    if (!pick_touchable(id)) return;
    model_entry& e = model_.at(id);
    if (makes_stale(e)) ++stale_events;
    const std::uint64_t due = random_due();
    if (by_id) {
      expect(w_.reschedule(id, due), "reschedule() of a held id returned false");
    } else {
      w_.arm(e.h, due);
    }
    model_arm(e, due);
    expect(w_.is_armed(e.h), "not armed after arm()/reschedule()");
    expect(w_.due_tick(e.h) == e.due, "due_tick() wrong after arm()/reschedule()");
  }

  void do_disarm() {
    std::string id;
    if (!pick_touchable(id)) return;
    model_entry& e = model_.at(id);
    if (makes_stale(e)) ++stale_events;
    w_.disarm(e.h);
    model_disarm(e);
    expect(!w_.is_armed(e.h), "still armed after disarm()");
    expect(w_.find(id) == e.h, "disarm() changed find()");
  }

  void on_fire(handle h, std::uint64_t from, std::uint64_t to) {
    const std::uint64_t t = w_.now();
    expect(t > from && t <= to, "sink called outside (old now, to_tick]");
    expect(t >= last_fire_tick_, "tasks handed over out of due-tick order");
    last_fire_tick_ = t;
    const std::string id = std::string(w_.id(h));
    const auto it = model_.find(id);
    expect(it != model_.end(), "sink got a node whose id is not held (erased meanwhile?)");
    model_entry& e = it->second;
    expect(e.h == h, "sink got a handle that is not the id's node");
    expect(e.armed, "sink got a node that is not armed (fired twice, or disarmed?)");
    expect(w_.due_tick(h) <= t, "sink got a node before its due tick");
    expect(e.due == t, "sink got a node at a tick other than its due tick");
    expect(*armed_.begin() == std::make_pair(e.due, e.seq),
           "not the earliest task by (due tick, arming order)");
    expect(!w_.is_armed(h), "sink got a node that is still armed");
    expect(w_.find(id) == h, "find() wrong inside the sink");
    model_disarm(e);
    ++fired;
    if (draining_) {
      w_.erase(h);
      model_remove(id);
      return;
    }

    const auto r = uniform(0, 99);
    if (r < 45) {
      w_.erase(h);
      model_remove(id);
    } else if (r < 65) {
      const std::uint64_t due = random_due();
      w_.arm(h, due);
      model_arm(e, due);
      expect(w_.due_tick(h) == e.due, "due_tick() wrong after the sink re-armed");
    }  // else: keep it detached

    if (chance(10) && model_.size() < cap_) do_insert(chance(20));
    if (!churn_) return;
    // Touch other nodes; one due now may not have been handed over yet.
    std::string other;
    const int what = static_cast<int>(uniform(0, 99));
    if (what >= 15 || !pick(other, false)) return;
    model_entry& o = model_.at(other);
    if (o.armed && o.due == t) ++same_tick_interference;
    if (makes_stale(o)) ++stale_events;
    if (what < 7) {
      w_.erase(o.h);
      model_remove(other);
    } else if (what < 12) {
      const std::uint64_t due = random_due();
      w_.arm(o.h, due);
      model_arm(o, due);
    } else {
      w_.disarm(o.h);
      model_disarm(o);
    }
  }

  void do_advance(std::uint64_t to, bool wake) {
    const std::uint64_t from = w_.now();
    std::size_t delivered = 0;
    last_fire_tick_ = 0;
    in_advance_ = true;
    const std::size_t n = w_.advance(to, [&](handle h) {
      ++delivered;
      on_fire(h, from, to);
    });
    in_advance_ = false;
    expect(n == delivered, "advance() returned a count other than the sink calls");
    expect(w_.now() == std::max(from, to), "now() is not the tick advanced to");
    expect(armed_.empty() || armed_.begin()->first > w_.now(),
           "a task due at or before to_tick was not handed over");
    if (wake) {
      ++wakeups;
      if (delivered == 0) ++wasted_wakeups;
    }
  }

  // The next due tick's tasks handed over ahead of it (an owner preparing a
  // heavy tick): every task due then, in arming order, and no other, with
  // slot_load() counting at least them; now() does not move.
  void do_take_tick() {
    const std::uint64_t tick = w_.next_due_tick();
    if (tick == no_tick) return;
    std::size_t due_here = 0;
    for (auto it = armed_.begin(); it != armed_.end() && it->first == tick; ++it) ++due_here;
    expect(w_.slot_load(tick) >= due_here, "slot_load() below the tasks due at the next due tick");
    const std::uint64_t now = w_.now();
    std::size_t handed = 0;
    const std::size_t n = w_.take_tick(tick, [&](handle h) {
      const std::string id(w_.id(h));
      const auto it = model_.find(id);
      expect(it != model_.end(), "take_tick() handed a node whose id is not held");
      model_entry& e = it->second;
      expect(e.armed && e.due == tick, "take_tick() handed a node not due at its tick");
      expect(*armed_.begin() == std::make_pair(e.due, e.seq), "take_tick() out of arming order");
      expect(!w_.is_armed(h), "take_tick() handed a node that is still armed");
      model_disarm(e);
      ++handed;
      if (chance(50)) {
        w_.erase(h);
        model_remove(id);
      }
    });
    expect(n == handed, "take_tick() returned a count other than the sink calls");
    expect(handed == due_here, "take_tick() did not hand over every task due at its tick");
    expect(w_.now() == now, "take_tick() moved now()");
  }

  void step() {
    // Weights per operation; inserts stop at the population cap.
    const bool room = model_.size() < cap_;
    const std::array<unsigned, op_kinds> weight{
        room ? 20u : 0u, room ? 5u : 0u, 3, 8, 8, 1, 8, 1, 7, 4, 25, 8, 4};
    const unsigned total = std::accumulate(weight.begin(), weight.end(), 0u);
    auto r = static_cast<unsigned>(uniform(0, total - 1));
    std::size_t k = 0;
    while (r >= weight[k]) r -= weight[k++];
    ++done[k];
    const std::uint64_t now = w_.now();
    const std::uint64_t s = w_.slots();
    switch (k) {
      case op_insert: do_insert(false); break;
      case op_insert_detached: do_insert(true); break;
      case op_duplicate: do_duplicate(); break;
      case op_erase_id: do_erase(false); break;
      case op_erase_handle: do_erase(true); break;
      case op_erase_missing: do_erase_missing(); break;
      case op_reschedule: do_arm(true); break;
      case op_reschedule_missing: do_reschedule_missing(); break;
      case op_arm: do_arm(false); break;
      case op_disarm: do_disarm(); break;
      case op_advance: {
        std::uint64_t to = now;
        switch (uniform(0, 9)) {
          case 0: break;                                                          // zero step
          case 1: to = now - std::min<std::uint64_t>(now, uniform(1, 5)); break;  // backwards
          case 2: to = now + 1; break;
          case 3:
          case 4:
          case 5: to = now + uniform(1, s); break;
          case 6:
          case 7: to = now + uniform(1, 3 * s); break;
          case 8: to = now + uniform(1, 40); break;
          default: ++big_jumps; to = now + uniform(s, 2000 * s);  // many revolutions at once
        }
        do_advance(to, false);
        break;
      }
      case op_take_tick: do_take_tick(); break;
      case op_wake: {
        const std::uint64_t next = w_.next_due_tick();
        do_advance(next == no_tick ? now : next, next != no_tick);
        if (next != no_tick) {
          expect(w_.next_due_tick() > next, "a wake-up at next_due_tick() made no progress");
        }
        break;
      }
      default: break;
    }
  }

  // ---------------------------------------------------------------- checks

  void check_invariants() {
    expect(w_.size() == model_.size(), "size() disagrees with the model");
    expect(w_.armed() == armed_.size(), "armed() disagrees with the model");
    expect(w_.empty() == model_.empty(), "empty() disagrees with the model");
    const std::uint64_t next = w_.next_due_tick();
    if (armed_.empty()) {
      expect(next == no_tick, "next_due_tick() is not no_tick with nothing armed");
      return;
    }
    const std::uint64_t earliest = armed_.begin()->first;
    expect(next != no_tick, "next_due_tick() is no_tick with tasks armed");
    expect(next <= earliest, "next_due_tick() is later than the earliest due task");
    expect(next > w_.now(), "next_due_tick() is not in the future");
    if (next < earliest) {
      ++early;
      expect(churn_, "next_due_tick() early although no task was ever cancelled or moved");
    }
    expect(wasted_wakeups <= stale_events, "more wasted wake-ups than stale slot bounds");
  }

  void check_every_entry() {
    for (const std::string& id : ids_) {
      const model_entry& e = model_.at(id);
      expect(w_.find(id) == e.h, "find() disagrees with the model");
      expect(std::string(w_.id(e.h)) == id, "value().id disagrees with the model");
      expect(std::string(w_.payload(e.h)) == payload_for(id), "value().payload was changed");
      expect(w_.tag(e.h) == e.tag, "tag() was changed");
      expect(w_.is_armed(e.h) == e.armed, "is_armed() disagrees with the model");
      if (e.armed) expect(w_.due_tick(e.h) == e.due, "due_tick() disagrees with the model");
    }
  }

  // Fires everything still armed, then erases what is left by id.
  void drain() {
    draining_ = true;
    if (!armed_.empty()) do_advance(armed_.rbegin()->first, false);
    expect(w_.armed() == 0 && armed_.empty(), "armed tasks left after advancing past the last");
    expect(w_.next_due_tick() == no_tick, "next_due_tick() is not no_tick after draining");
    while (!ids_.empty()) {
      const std::string id = ids_.back();
      expect(w_.erase(id), "erase(id) of a detached task returned false");
      model_remove(id);
    }
    expect(w_.empty() && w_.size() == 0, "the wheel is not empty after erasing every id");
  }

  timer_wheel w_;
  std::mt19937_64 rng_;
  std::uint64_t seed_;
  bool churn_;
  std::size_t cap_;
  std::uint64_t op_no_ = 0;
  std::unordered_map<std::string, model_entry> model_;
  std::vector<std::string> ids_;
  std::set<std::pair<std::uint64_t, std::uint64_t>> armed_;  // (due, seq)
  std::vector<std::string> recycled_;                        // erased ids, for reuse
  std::uint64_t next_seq_ = 0;
  std::uint64_t next_id_ = 0;
  std::uint64_t last_fire_tick_ = 0;
  bool in_advance_ = false;
  bool draining_ = false;
};

}  // namespace

// ---------------------------------------------------------------- construction

TEST_CASE("wheel: zero slots is rejected") {
  CHECK_THROWS_AS(timer_wheel(0), std::invalid_argument);
  CHECK_NOTHROW(timer_wheel(1));
}

TEST_CASE("wheel: a new wheel is empty at tick 0") {
  const timer_wheel w(7);
  CHECK(w.slots() == 7);
  CHECK(w.now() == 0);
  CHECK(w.empty());
  CHECK(w.size() == 0);
  CHECK(w.armed() == 0);
  CHECK(w.next_due_tick() == no_tick);
  CHECK(w.find("x") == npos);
  CHECK(w.find("") == npos);
}

// ---------------------------------------------------------------- firing

TEST_CASE("wheel: a task fires at its due tick, not before") {
  timer_wheel w(16);
  const handle h = w.insert(make_task("a"), 5);
  REQUIRE(h != npos);
  CHECK(w.due_tick(h) == 5);
  CHECK(w.next_due_tick() == 5);
  CHECK(advance_erasing(w, 4).empty());
  CHECK(w.now() == 4);
  CHECK(w.is_armed(h));
  CHECK(advance_erasing(w, 5) == std::vector<firing>{{5, "a"}});
  CHECK(w.empty());
  CHECK(w.next_due_tick() == no_tick);
}

TEST_CASE("wheel: a due tick at or before now() means now() + 1") {
  timer_wheel w(8);
  CHECK(advance_erasing(w, 100).empty());
  const handle past = w.insert(make_task("past"), 3);
  const handle zero = w.insert(make_task("zero"), 0);
  const handle now = w.insert(make_task("now"), 100);
  const handle detached = w.insert_detached(make_task("detached"));
  w.arm(detached, 50);
  CHECK(w.due_tick(past) == 101);
  CHECK(w.due_tick(zero) == 101);
  CHECK(w.due_tick(now) == 101);
  CHECK(w.due_tick(detached) == 101);
  CHECK(w.reschedule("zero", 99));
  CHECK(w.due_tick(zero) == 101);
  CHECK(w.next_due_tick() == 101);
  CHECK(advance_erasing(w, 100).empty());  // to_tick == now(): nothing happens
  CHECK(advance_erasing(w, 101) ==
        std::vector<firing>{{101, "past"}, {101, "now"}, {101, "detached"}, {101, "zero"}});
}

TEST_CASE("wheel: advancing to now() or backwards changes nothing") {
  timer_wheel w(8);
  w.insert(make_task("a"), 20);
  CHECK(advance_erasing(w, 10).empty());
  SUBCASE("to now()") { CHECK(advance_erasing(w, 10).empty()); }
  SUBCASE("backwards") { CHECK(advance_erasing(w, 3).empty()); }
  CHECK(w.now() == 10);
  CHECK(w.armed() == 1);
  CHECK(w.next_due_tick() == 20);
}

TEST_CASE("wheel: tasks due at one tick fire in arming order") {
  timer_wheel w(4);
  w.insert(make_task("a"), 9);
  w.insert(make_task("b"), 9);
  w.insert(make_task("early"), 5);  // same slot, earlier revolution
  w.insert(make_task("c"), 9);
  w.insert(make_task("late"), 13);  // same slot, later revolution
  SUBCASE("as inserted") {
    CHECK(advance_erasing(w, 20) ==
          std::vector<firing>{{5, "early"}, {9, "a"}, {9, "b"}, {9, "c"}, {13, "late"}});
  }
  SUBCASE("a rescheduled task goes last") {
    CHECK(w.reschedule("a", 9));
    CHECK(advance_erasing(w, 20) ==
          std::vector<firing>{{5, "early"}, {9, "b"}, {9, "c"}, {9, "a"}, {13, "late"}});
  }
}

TEST_CASE("wheel: cancel before expiry") {
  timer_wheel w(16);
  const handle a = w.insert(make_task("a"), 7);
  w.insert(make_task("b"), 7);
  std::vector<firing> expected{{7, "b"}};
  SUBCASE("erase by id") {
    CHECK(w.erase("a"));
    CHECK_FALSE(w.erase("a"));
    CHECK(w.size() == 1);
  }
  SUBCASE("erase by handle") {
    w.erase(a);
    CHECK(w.size() == 1);
  }
  SUBCASE("disarm keeps the task") {
    w.disarm(a);
    CHECK_FALSE(w.is_armed(a));
    CHECK(w.find("a") == a);
    CHECK(w.size() == 2);
  }
  SUBCASE("reschedule later") {
    CHECK(w.reschedule("a", 30));
    expected.push_back({30, "a"});
  }
  CHECK(w.armed() == expected.size());
  CHECK(advance_erasing(w, 40) == expected);
}

TEST_CASE("wheel: duplicate id is refused and the task left untouched") {
  timer_wheel w(16);
  const handle h = w.insert(make_task("a", "first"), 5);
  task again = make_task("a", "second");
  const task copy = again;
  SUBCASE("insert") { CHECK(w.insert(std::move(again), 9) == npos); }
  SUBCASE("insert_detached") { CHECK(w.insert_detached(std::move(again)) == npos); }
  CHECK(again == copy);
  CHECK(w.size() == 1);
  CHECK(w.find("a") == h);
  CHECK(std::string(w.payload(h)) == "first");
  CHECK(w.due_tick(h) == 5);
}

// ---------------------------------------------------------------- rounds and slots

TEST_CASE("wheel: slot wrap-around") {
  timer_wheel w(7);
  CHECK(advance_erasing(w, 5).empty());
  // Slots 6, 0, 1, ... : the scan for the next due task wraps past the end.
  for (std::uint64_t due : {16, 6, 7, 8, 12, 13}) w.insert(make_task(std::to_string(due)), due);
  CHECK(w.next_due_tick() == 6);
  CHECK(advance_erasing(w, 12) == std::vector<firing>{{6, "6"}, {7, "7"}, {8, "8"}, {12, "12"}});
  CHECK(w.next_due_tick() == 13);
  CHECK(advance_erasing(w, 20) == std::vector<firing>{{13, "13"}, {16, "16"}});
}

TEST_CASE("wheel: a task ten revolutions away fires at its tick only") {
  timer_wheel w(8);
  const std::uint64_t far = 10 * 8 + 3;  // slot 3, passed 10 times before it is due
  w.insert(make_task("far"), far);
  std::vector<firing> expected;
  SUBCASE("alone in its slot") {}
  SUBCASE("its slot has work due at every earlier pass") {
    for (std::uint64_t due = 3; due < far; due += 8) {
      w.insert(make_task(std::to_string(due)), due);
      expected.push_back({due, std::to_string(due)});
    }
    CHECK(expected.size() == 10);
  }
  expected.push_back({far, "far"});
  std::vector<firing> fired;
  for (std::uint64_t t = 1; t <= far + 20; ++t) {  // one tick at a time
    for (const firing& f : advance_erasing(w, t)) fired.push_back(f);
    if (t < far) CHECK(w.find("far") != npos);
  }
  CHECK(fired == expected);
  CHECK(w.empty());
}

TEST_CASE("wheel: slot arrays come with the first task that is not far") {
  timer_wheel w(1024);
  const std::size_t idle = w.memory_bytes();
  CHECK(idle < 1024 * sizeof(std::uint64_t));  // no per-slot arrays
  // Far tasks (two revolutions or more ahead) wait in the far array only.
  w.insert(make_task("far"), 5000);
  const std::size_t far_only = w.memory_bytes();  // its record's chunk and the far block
  CHECK(w.slot_load(1) == 0);
  std::vector<handle> out;
  CHECK(w.take_due_by(std::numeric_limits<std::int64_t>::max(), out) == 0);
  CHECK(w.next_due_tick() >= 5000);
  // Reaching it moves it into a slot, and it fires at its tick.
  CHECK(advance_erasing(w, 4999).empty());
  CHECK(advance_erasing(w, 5000) == std::vector<firing>{{5000, "far"}});
  CHECK(w.memory_bytes() >= far_only + 1024 * sizeof(std::uint64_t));  // they came then
  // A near task brings them at once: two wheels alike but for one near
  // task, which makes the difference.
  timer_wheel far_one(1024), near_too(1024);
  far_one.insert(make_task("far"), 5000);
  near_too.insert(make_task("far"), 5000);
  near_too.insert(make_task("near"), 3);
  CHECK(near_too.memory_bytes() >= far_one.memory_bytes() + 1024 * sizeof(std::uint64_t));
  CHECK(advance_erasing(near_too, 3) == std::vector<firing>{{3, "near"}});
}

TEST_CASE("wheel: single-slot wheel") {
  timer_wheel w(1);
  const std::vector<std::uint64_t> dues{9, 3, 3, 1000000, 4, 2, 50};
  for (std::size_t i = 0; i < dues.size(); ++i) w.insert(make_task(std::to_string(i)), dues[i]);
  CHECK(w.next_due_tick() <= 2);
  CHECK(advance_erasing(w, 9) ==
        std::vector<firing>{{2, "5"}, {3, "1"}, {3, "2"}, {4, "4"}, {9, "0"}});
  CHECK(w.next_due_tick() == 50);
  const handle h = w.insert(make_task("past"), 1);
  CHECK(w.due_tick(h) == 10);
  CHECK(advance_erasing(w, 2000000) ==
        std::vector<firing>{{10, "past"}, {50, "6"}, {1000000, "3"}});
  CHECK(w.empty());
}

TEST_CASE("wheel: advance across a billion missed ticks") {
  SUBCASE("5k tasks spread over a billion ticks fire in due order") {
    timer_wheel w(3600);
    std::mt19937_64 rng(42);
    std::vector<std::pair<std::uint64_t, std::string>> expected;
    for (int i = 0; i < 5000; ++i) {
      const std::uint64_t due = std::uniform_int_distribution<std::uint64_t>(1, 1000000000)(rng);
      expected.emplace_back(due, std::to_string(i));
      w.insert(make_task(std::to_string(i)), due);
    }
    std::stable_sort(expected.begin(), expected.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    const std::vector<firing> fired = advance_erasing(w, 1000000000);
    CHECK(w.now() == 1000000000);
    CHECK(w.empty());
    REQUIRE(fired.size() == expected.size());
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < fired.size(); ++i)
      wrong += fired[i].tick != expected[i].first || fired[i].id != expected[i].second;
    CHECK(wrong == 0);
  }
  SUBCASE("a sparse wheel jumps from one due tick to the next") {
    timer_wheel sparse(8);
    sparse.insert(make_task("c"), 1000000000000000);
    sparse.insert(make_task("a"), 1000000007);
    sparse.insert(make_task("b"), 500000000003);
    CHECK(sparse.next_due_tick() == 1000000007);
    CHECK(advance_erasing(sparse, 2000000000000000) ==
          std::vector<firing>{{1000000007, "a"}, {500000000003, "b"}, {1000000000000000, "c"}});
    CHECK(sparse.now() == 2000000000000000);
  }
}

// ---------------------------------------------------------------- next_due_tick

TEST_CASE("wheel: next_due_tick is a lower bound made exact by processing the slot") {
  timer_wheel w(8);
  const handle soon = w.insert(make_task("soon"), 5);
  w.insert(make_task("far"), 5 + 8 * 3);  // same slot, three revolutions later
  w.insert(make_task("other"), 40);
  CHECK(w.next_due_tick() == 5);
  SUBCASE("after an erase") { w.erase(soon); }
  SUBCASE("after a disarm") { w.disarm(soon); }
  SUBCASE("after a reschedule") { CHECK(w.reschedule("soon", 100)); }
  // The slot's bound may have gone stale: early, never late.
  const std::uint64_t bound = w.next_due_tick();
  CHECK(bound >= 5);
  CHECK(bound <= 29);
  // Waking at the bound processes the slot, which makes its bound exact.
  CHECK(advance_erasing(w, bound).empty());
  CHECK(w.next_due_tick() == 29);
  CHECK(advance_erasing(w, w.next_due_tick()) == std::vector<firing>{{29, "far"}});
  CHECK(w.next_due_tick() == 40);
}

TEST_CASE("wheel: next_due_tick finds the earliest across the wrap of the slot array") {
  timer_wheel w(100);  // two bitmap words, the second partly used
  CHECK(advance_erasing(w, 90).empty());
  w.insert(make_task("next revolution"), 105);    // slot 5, scanned after slots 91..99
  w.insert(make_task("late in the array"), 195);  // slot 95
  CHECK(w.next_due_tick() == 105);
  w.insert(make_task("end of array"), 99);
  CHECK(w.next_due_tick() == 99);
  CHECK(advance_erasing(w, 200) == std::vector<firing>{{99, "end of array"},
                                                       {105, "next revolution"},
                                                       {195, "late in the array"}});
}

// ---------------------------------------------------------------- the sink

TEST_CASE("wheel: sink contract") {
  timer_wheel w(8);
  std::vector<firing> fired;
  auto record = [&](handle h) { fired.push_back({w.now(), std::string(w.id(h))}); };

  SUBCASE("the sink erases the node") {
    w.insert(make_task("a"), 3);
    w.insert(make_task("b"), 3);
    CHECK(w.advance(5, [&](handle h) {
      record(h);
      w.erase(h);
    }) == 2);
    CHECK(fired == std::vector<firing>{{3, "a"}, {3, "b"}});
    CHECK(w.empty());
    CHECK(w.find("a") == npos);
  }

  SUBCASE("the sink re-arms the node later, within this advance") {
    w.insert(make_task("a"), 1);
    CHECK(w.advance(100, [&](handle h) {
      record(h);
      if (fired.size() < 4) {
        w.arm(h, w.now() + 5);
      } else {
        w.erase(h);
      }
    }) == 4);
    CHECK(fired == std::vector<firing>{{1, "a"}, {6, "a"}, {11, "a"}, {16, "a"}});
    CHECK(w.empty());
  }

  SUBCASE("the sink re-arms the node at or before now(): next tick") {
    w.insert(make_task("a"), 2);
    w.advance(5, [&](handle h) {
      record(h);
      if (fired.size() == 1) w.arm(h, w.now());
      if (fired.size() == 2) w.arm(h, 0);
    });
    CHECK(fired == std::vector<firing>{{2, "a"}, {3, "a"}, {4, "a"}});
    CHECK(w.armed() == 0);
    CHECK(w.size() == 1);
  }

  SUBCASE("the sink re-arms the node beyond to_tick") {
    const handle a = w.insert(make_task("a"), 4);
    w.advance(10, [&](handle h) {
      record(h);
      w.arm(h, 1000);
    });
    CHECK(fired == std::vector<firing>{{4, "a"}});
    CHECK(w.is_armed(a));
    CHECK(w.due_tick(a) == 1000);
    CHECK(w.next_due_tick() <= 1000);
    CHECK(advance_erasing(w, 999).empty());
    CHECK(advance_erasing(w, 1000) == std::vector<firing>{{1000, "a"}});
  }

  SUBCASE("the sink keeps the node detached") {
    const handle a = w.insert(make_task("a", "data"), 2);
    w.insert(make_task("b"), 9);
    CHECK(w.advance(5, record) == 1);
    CHECK(w.find("a") == a);
    CHECK(w.size() == 2);
    CHECK(w.armed() == 1);
    CHECK_FALSE(w.is_armed(a));
    CHECK(std::string(w.payload(a)) == "data");
    CHECK(w.next_due_tick() == 9);
    w.arm(a, 7);
    CHECK(advance_erasing(w, 10) == std::vector<firing>{{7, "a"}, {9, "b"}});
  }

  SUBCASE("the sink inserts tasks") {
    w.insert(make_task("a"), 3);
    CHECK(w.advance(10, [&](handle h) {
      record(h);
      w.erase(h);
      if (fired.size() == 1) {
        CHECK(w.insert(make_task("due now"), w.now()) != npos);
        CHECK(w.insert(make_task("past"), 1) != npos);
        CHECK(w.insert(make_task("soon"), w.now() + 2) != npos);
        CHECK(w.insert(make_task("at to_tick"), 10) != npos);
        CHECK(w.insert(make_task("after to_tick"), 15) != npos);
      }
    }) == 5);
    CHECK(fired == std::vector<firing>{
                       {3, "a"}, {4, "due now"}, {4, "past"}, {5, "soon"}, {10, "at to_tick"}});
    CHECK(w.armed() == 1);
    CHECK(advance_erasing(w, 15) == std::vector<firing>{{15, "after to_tick"}});
  }

  // Several nodes due at one tick leave their slot together; the sink may
  // change one of them before its turn comes.
  SUBCASE("the sink erases a task due at the same tick before its turn") {
    w.insert(make_task("a"), 4);
    w.insert(make_task("b"), 4);
    w.insert(make_task("c"), 4);
    const std::size_t n = w.advance(10, [&](handle h) {
      record(h);
      if (std::string(w.id(h)) == "a") CHECK(w.erase("b"));
      if (w.find(std::string(w.id(h))) == h) w.erase(h);
    });
    CHECK(fired == std::vector<firing>{{4, "a"}, {4, "c"}});
    CHECK(n == 2);
    CHECK(w.empty());
  }

  SUBCASE("the sink erases a same-tick task and its node is reused") {
    w.insert(make_task("a"), 4);
    w.insert(make_task("b"), 4);
    w.advance(10, [&](handle h) {
      CHECK(w.due_tick(h) <= w.now());
      CHECK_FALSE(w.is_armed(h));
      record(h);
      if (std::string(w.id(h)) == "a") {
        CHECK(w.erase("b"));
        CHECK(w.insert(make_task("d"), 6) != npos);
      }
      if (w.find(std::string(w.id(h))) == h) w.erase(h);
    });
    CHECK(fired == std::vector<firing>{{4, "a"}, {6, "d"}});
    CHECK(w.empty());
  }

  SUBCASE("the sink arms a same-tick task later before its turn") {
    w.insert(make_task("a"), 4);
    const handle b = w.insert(make_task("b"), 4);
    w.advance(10, [&](handle h) {
      record(h);
      if (std::string(w.id(h)) == "a") {
        w.arm(b, 20);
        w.erase(h);
      }
    });
    CHECK(fired == std::vector<firing>{{4, "a"}});
    CHECK(w.is_armed(b));
    CHECK(w.due_tick(b) == 20);
    CHECK(advance_erasing(w, 30) == std::vector<firing>{{20, "b"}});
  }

  SUBCASE("the sink disarms a same-tick task before its turn") {
    w.insert(make_task("a"), 4);
    const handle b = w.insert(make_task("b"), 4);
    w.advance(10, [&](handle h) {
      record(h);
      if (std::string(w.id(h)) == "a") {
        w.disarm(b);
        w.erase(h);
      }
    });
    CHECK(fired == std::vector<firing>{{4, "a"}});
    CHECK(w.size() == 1);
    CHECK(w.find("b") == b);
    CHECK_FALSE(w.is_armed(b));
    CHECK(advance_erasing(w, 100).empty());
  }
}

// ---------------------------------------------------------------- differential

TEST_CASE("wheel: randomized differential test against a reference model") {
  std::size_t slots = 0;
  std::size_t ops = 0;
  std::size_t cap = 0;
  SUBCASE("1 slot") {
    slots = 1;
    ops = 15000;
    cap = 300;
  }
  SUBCASE("7 slots") {
    slots = 7;
    ops = 20000;
    cap = 1000;
  }
  SUBCASE("64 slots") {
    slots = 64;
    ops = 25000;
    cap = 2000;
  }
  SUBCASE("3600 slots") {
    slots = 3600;
    ops = 25000;
    cap = 2000;
  }
  REQUIRE(slots != 0);
  for (std::uint64_t seed : {1, 2, 3}) {
    CAPTURE(seed);
    differential d(slots, seed * 7919 + slots, /*churn=*/true, cap);
    d.run(ops);
    for (std::size_t k = 0; k < op_kinds; ++k) CHECK(d.done[k] > 0);
    CHECK(d.fired > ops / 10);
    CHECK(d.big_jumps > 0);
    CHECK(d.past_inserts > 0);
    CHECK(d.same_tick_interference > 0);
    CHECK(d.wakeups > 0);
    // Early wake-ups come only from stale slot bounds, one per cancellation at most.
    CHECK(d.wasted_wakeups <= d.stale_events);
  }
}

TEST_CASE("wheel: next_due_tick is exact while nothing armed is cancelled or moved") {
  for (std::size_t slots : {1, 7, 64, 3600}) {
    CAPTURE(slots);
    differential d(slots, 99 + slots, /*churn=*/false, 1000);
    d.run(8000);
    CHECK(d.early == 0);
    CHECK(d.wasted_wakeups == 0);
    CHECK(d.fired > 500);
  }
}

// ---------------------------------------------------------------- the id index

TEST_CASE("wheel: id index under heavy churn") {
  std::mt19937_64 rng(7);
  SUBCASE("100k ids inserted, erased in random order, inserted again") {
    timer_wheel w(64);
    constexpr std::size_t n = 100000;
    std::vector<std::string> ids;
    for (std::size_t i = 0; i < n; ++i) ids.push_back("task-" + std::to_string(i * 2654435761u));
    std::vector<handle> handles(n, npos);
    auto insert_all = [&](std::vector<std::size_t> order) {
      std::shuffle(order.begin(), order.end(), rng);
      for (std::size_t i : order) handles[i] = w.insert(make_task(ids[i]), i % 500);
    };
    std::vector<std::size_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    insert_all(order);
    CHECK(w.size() == n);
    CHECK(std::count(handles.begin(), handles.end(), npos) == 0);
    // Up to 63 arrivals wait for their slots (the essay's "Arrivals"); an
    // advance to now places them, so both measures see settled slots.
    const auto settle = [&] { w.advance(w.now(), [](handle) {}); };
    settle();
    const std::size_t full_memory = w.memory_bytes();

    std::vector<bool> held(n, true);
    auto sweep = [&] {
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < n; ++i) wrong += w.find(ids[i]) != (held[i] ? handles[i] : npos);
      return wrong;
    };
    std::shuffle(order.begin(), order.end(), rng);
    std::size_t wrong = 0;
    for (std::size_t k = 0; k < n; ++k) {
      const std::size_t i = order[k];
      if (k % 2 == 0) {
        wrong += !w.erase(ids[i]);
      } else {
        w.erase(handles[i]);
      }
      held[i] = false;
      wrong += w.find(ids[i]) != npos;
      // A survivor, likely in the probe run the erase shifted.
      const std::size_t j = order[std::min(n - 1, k + 1 + rng() % 16)];
      wrong += w.find(ids[j]) != (held[j] ? handles[j] : npos);
      if (k == n / 2) wrong += sweep();
    }
    CHECK(wrong == 0);
    CHECK(w.empty());
    CHECK(w.armed() == 0);
    CHECK(w.next_due_tick() == no_tick);

    insert_all(order);
    std::fill(held.begin(), held.end(), true);
    CHECK(w.size() == n);
    CHECK(sweep() == 0);
    // Nodes and index entries were reused, not allocated again.
    settle();
    CHECK(w.memory_bytes() == full_memory);
  }

  SUBCASE("a small id space toggled at random") {
    for (std::size_t space : {5, 12, 40, 300}) {
      CAPTURE(space);
      timer_wheel w(16);
      std::vector<handle> handles(space, npos);
      std::size_t wrong = 0;
      for (int k = 0; k < 15000; ++k) {
        const std::size_t i = rng() % space;
        const std::string id = "k" + std::to_string(i);
        if (handles[i] == npos) {
          handles[i] = w.insert_detached(make_task(id));
          wrong += handles[i] == npos;
        } else {
          wrong += !w.erase(id);
          handles[i] = npos;
        }
        const std::size_t j = rng() % space;
        wrong += w.find("k" + std::to_string(j)) != handles[j];
        wrong += w.find(id) != handles[i];
      }
      for (std::size_t i = 0; i < space; ++i)
        wrong += w.find("k" + std::to_string(i)) != handles[i];
      CHECK(wrong == 0);
      CHECK(w.size() ==
            space - static_cast<std::size_t>(std::count(handles.begin(), handles.end(), npos)));
    }
  }
}

TEST_CASE("wheel: an id longer than 65535 bytes is refused with length_error") {
  timer_wheel w(4);
  CHECK_THROWS_AS(w.insert(make_task(std::string(65536, 'x')), 1), std::length_error);
  CHECK(w.empty());
  CHECK(w.insert(make_task(std::string(65535, 'x')), 1) != npos);
}

TEST_CASE("wheel: ids with odd bytes") {
  using namespace std::string_literals;
  const std::vector<std::string> ids{""s,
                                     "\0"s,
                                     "\0\0"s,
                                     "a"s,
                                     "a\0b"s,
                                     "a\0c"s,
                                     "a\0"s,
                                     "\xff\xfe\x80"s,
                                     std::string(65534, 'x'),
                                     std::string(65534, 'x') + "y"};
  timer_wheel w(16);
  std::vector<handle> handles;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    handles.push_back(w.insert(make_task(ids[i], ids[i]), i + 1));
    REQUIRE(handles.back() != npos);
  }
  CHECK(w.size() == ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    CAPTURE(i);
    CHECK(w.find(ids[i]) == handles[i]);
    CHECK(std::string(w.id(handles[i])) == ids[i]);
    CHECK(w.insert(make_task(ids[i]), 50) == npos);
  }
  CHECK(w.find("a\0d"s) == npos);
  CHECK(w.find(std::string(99999, 'x')) == npos);
  CHECK(w.find("\0\0\0"s) == npos);

  CHECK(w.erase("a\0b"s));
  CHECK(w.find("a\0b"s) == npos);
  CHECK(w.find("a") == handles[3]);
  CHECK(w.find("a\0c"s) == handles[5]);
  CHECK(w.find("a\0"s) == handles[6]);
  CHECK(w.erase(""));
  CHECK(w.find("") == npos);
  CHECK(w.find("\0"s) == handles[1]);

  std::size_t wrong = 0;
  const std::vector<firing> fired = advance_erasing(w, 100);
  CHECK(fired.size() == ids.size() - 2);
  for (const firing& f : fired) wrong += f.id != ids.at(f.tick - 1);
  CHECK(wrong == 0);
  CHECK(w.empty());
}

// ---------------------------------------------------------------- memory and owner data

TEST_CASE("wheel: erase releases the task's memory") {
  timer_wheel w(16);
  task big = make_task("big");
  big.payload.assign(std::size_t{1} << 20, 'p');
  const handle h = w.insert(big, 5);
  REQUIRE(w.payload(h).size() == std::size_t{1} << 20);
  CHECK(w.heap_bytes() == std::size_t{1} << 20);
  SUBCASE("erase by handle") { w.erase(h); }
  SUBCASE("erase by id") { CHECK(w.erase("big")); }
  SUBCASE("erase in the sink") { CHECK(advance_erasing(w, 5).size() == 1); }
  CHECK(w.heap_bytes() == 0);
  const handle reused = w.insert(make_task("small", "x"), 20);
  REQUIRE_MESSAGE(reused == h, "the record pool hands out the freed record first");
  CHECK(w.payload(reused) == "x");
  CHECK(w.heap_bytes() == 0);  // a short id and payload live in the record
}

TEST_CASE("wheel: reserve preallocates nodes and index entries") {
  timer_wheel w(3600);
  const std::size_t base = w.memory_bytes();
  // No per-slot arrays yet: they come with the first entry that is not far
  // (an engine makes 32 wheels, most of them idle at first).
  CHECK(base < 3600 * sizeof(std::uint64_t));
  w.reserve(10000);
  const std::size_t reserved = w.memory_bytes();
  CHECK(reserved >= base + 10000 * (64 + 8));  // a record and an index entry each
  // Holding tasks takes nothing beyond the reservation...
  std::vector<handle> handles;
  for (int i = 0; i < 10000; ++i)
    handles.push_back(w.insert_detached(make_task(std::to_string(i))));
  CHECK(w.memory_bytes() == reserved);
  std::size_t wrong = 0;
  for (int i = 0; i < 10000; ++i) {
    wrong += handles[i] == npos || w.find(std::to_string(i)) != handles[i] ||
             std::string(w.id(handles[i])) != std::to_string(i);
  }
  CHECK(wrong == 0);
  w.reserve(100);
  CHECK(w.memory_bytes() == reserved);
  // ...arming them fills the slots' entry arrays, which grow by doubling: at
  // most two 16-byte entries per task, and a first array of up to 16 per slot.
  for (int i = 0; i < 10000; ++i) w.arm(handles[i], i);
  CHECK(w.memory_bytes() >= reserved + 3600 * sizeof(std::uint64_t));  // the per-slot bounds now
  CHECK(w.memory_bytes() <= reserved + 10000 * 2 * 16 + 3600 * 16 * 16);
  const std::size_t armed = w.memory_bytes();
  CHECK(w.insert(make_task("one more"), 1) != npos);
  CHECK(w.memory_bytes() <= armed + 16 * 16);
}

TEST_CASE("wheel: the tag belongs to the owner and starts at 0") {
  timer_wheel w(4);
  const handle a = w.insert(make_task("a"), 3);
  CHECK(w.tag(a) == 0);
  w.tag(a) = 0xdeadbeef;
  w.arm(a, 9);
  w.disarm(a);
  CHECK(w.tag(a) == 0xdeadbeef);
  w.erase(a);
  // The owner's word survives the record's reuse: the wheel never writes it
  // after construction, so another thread may keep using it atomically.
  const handle b = w.insert_detached(make_task("b"));
  REQUIRE(b == a);
  CHECK(w.tag(b) == 0xdeadbeef);
}

TEST_CASE("wheel: ids and payloads of every size round-trip, inline or on the heap") {
  timer_wheel w(8);
  // Inline both; a short id inline beside a heap payload; a long id moving
  // both to the heap; the edges of each.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"a", ""},
      {"order-123456", "p"},
      {std::string(19, 'a'), std::string(8, 'p')},
      {std::string(19, 'b'), std::string(9, 'p')},
      {std::string(20, 'c'), ""},
      {std::string(20, 'd'), std::string(7, 'p')},
      {std::string(20, 'e'), std::string(8, 'p')},
      {std::string(256, 'i'), std::string(1 << 16, '\0')},
      {"short", std::string(1 << 16, 'x')},
  };
  std::vector<handle> hs;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    hs.push_back(
        w.insert(timer_wheel::item{cases[i].first, cases[i].second, static_cast<std::uint16_t>(i),
                                   -5 - std::int64_t(i), static_cast<std::uint32_t>(i * 3)},
                 4));
    REQUIRE(hs.back() != npos);
  }
  for (std::size_t i = 0; i < cases.size(); ++i) {
    CHECK(w.find(cases[i].first) == hs[i]);
    CHECK(w.id(hs[i]) == cases[i].first);
    CHECK(w.payload(hs[i]) == cases[i].second);
    CHECK(w.kind(hs[i]) == i);
    CHECK(w.due_ms(hs[i]) == -5 - std::int64_t(i));
    CHECK(w.attempts(hs[i]) == i * 3);
    const auto v = w.view(hs[i]);
    CHECK(v.id() == cases[i].first);
    CHECK(v.payload() == cases[i].second);
  }
  for (handle h : hs) w.erase(h);
  CHECK(w.heap_bytes() == 0);
}

TEST_CASE("wheel: assign replaces the content, keeps the id, and fails cleanly") {
  timer_wheel w(8);
  const handle h = w.insert(make_task("order-1", "small"), 3);
  w.assign(h, timer_wheel::item{{}, std::string(100, 'b'), 7, 42, 2});
  CHECK(w.id(h) == "order-1");
  CHECK(w.payload(h) == std::string(100, 'b'));
  CHECK(w.kind(h) == 7);
  CHECK(w.due_ms(h) == 42);
  CHECK(w.attempts(h) == 2);
  CHECK(w.heap_bytes() == 100);
  w.assign(h, timer_wheel::item{{}, "tiny", 1, 1, 0});
  CHECK(w.payload(h) == "tiny");
  CHECK(w.heap_bytes() == 0);
  CHECK(w.find("order-1") == h);
  CHECK(w.is_armed(h));  // assign leaves the slot alone
}

TEST_CASE("wheel: unindex frees the id while the record stays and reindex gives it back") {
  timer_wheel w(8);
  const handle old = w.insert(make_task("x", "old"), 5);
  w.unindex(old);
  CHECK_FALSE(w.is_indexed(old));
  CHECK_FALSE(w.is_armed(old));  // an unindexed record is detached
  CHECK(w.find("x") == npos);
  CHECK(w.size() == 1);
  CHECK(w.payload(old) == "old");  // still readable
  SUBCASE("the id can be taken by a new record") {
    const handle fresh = w.insert(make_task("x", "new"), 5);
    REQUIRE(fresh != npos);
    CHECK(fresh != old);
    CHECK(w.find("x") == fresh);
    CHECK_FALSE(w.reindex(old));  // held by the new one
    w.erase(old);
    CHECK(w.find("x") == fresh);
    CHECK(w.size() == 1);
  }
  SUBCASE("reindex makes it findable again") {
    CHECK(w.reindex(old));
    CHECK(w.find("x") == old);
    CHECK(w.erase("x"));
    CHECK(w.empty());
  }
  SUBCASE("advance never hands it over") {
    CHECK(advance_erasing(w, 100).empty());
    w.erase(old);
    CHECK(w.empty());
  }
}

TEST_CASE("wheel: cancelled and moved tasks leave no lasting trace in the slots") {
  // Cancelling only marks a slot entry stale (see the header's "Lazy
  // removal"); this shows the stale entries are reclaimed without the clock
  // moving, so schedule/cancel churn cannot grow the wheel without bound.
  timer_wheel w(64);
  for (int i = 0; i < 100; ++i) w.insert(make_task("live" + std::to_string(i)), 1000 + i);
  const std::size_t settled = [&] {
    for (int round = 0; round < 2000; ++round) {
      const std::string id = "churn" + std::to_string(round % 7);
      w.insert(make_task(id), 500 + round % 64);
      CHECK(w.reschedule(id, 700 + (round * 13) % 64));
      CHECK(w.erase(id));
    }
    return w.memory_bytes();
  }();
  for (int round = 0; round < 200000; ++round) {
    const std::string id = "churn" + std::to_string(round % 7);
    w.insert(make_task(id), 500 + round % 64);
    w.reschedule(id, 700 + (round * 13) % 64);
    w.erase(id);
  }
  // 600,000 stale entries were made; the slots hold at most a few per live task.
  CHECK(w.memory_bytes() <= settled + 64 * 64 * 16);
  CHECK(w.size() == 100);
  CHECK(w.armed() == 100);
  // The stale entries never fire, and the live ones fire once each, in order.
  const auto fired = advance_erasing(w, 2000);
  REQUIRE(fired.size() == 100);
  for (int i = 0; i < 100; ++i) {
    CHECK(fired[i].id == "live" + std::to_string(i));
    CHECK(fired[i].tick == std::uint64_t(1000 + i));
  }
  CHECK(w.next_due_tick() == no_tick);
}

TEST_CASE("wheel: a task moved many times fires once, at its last due tick") {
  timer_wheel w(16);
  const handle h = w.insert(make_task("mover"), 3);
  for (std::uint64_t k = 0; k < 1000; ++k) w.arm(h, 3 + (k * 7) % 200);
  const std::uint64_t last = 3 + (999 * 7) % 200;
  w.disarm(h);
  w.arm(h, last);
  const auto fired = advance_erasing(w, 1000);
  REQUIRE(fired.size() == 1);
  CHECK(fired[0].tick == last);
  CHECK(w.empty());
}

TEST_CASE("wheel: erase_many equals erase one id at a time") {
  // Ids held and not, repeated, in a random order; the result must be that
  // of calling erase(id) for each in turn, whatever the prefetching guessed.
  std::mt19937_64 rng(11);
  timer_wheel a(64);
  timer_wheel b(64);
  for (int i = 0; i < 3000; ++i) {
    const std::string id = "t" + std::to_string(i);
    a.insert(make_task(id), 1 + rng() % 500);
    b.insert(make_task(id), a.due_tick(a.find(id)));
  }
  std::vector<std::string> victims;
  for (int k = 0; k < 2500; ++k) victims.push_back("t" + std::to_string(rng() % 4000));
  std::size_t one_by_one = 0;
  for (const std::string& id : victims) one_by_one += a.erase(id);
  const std::size_t many =
      b.erase_many(victims.size(), [&](std::size_t i) -> const std::string& { return victims[i]; });
  CHECK(many == one_by_one);
  CHECK(b.size() == a.size());
  CHECK(b.armed() == a.armed());
  std::size_t wrong = 0;
  for (int i = 0; i < 4000; ++i) {
    const std::string id = "t" + std::to_string(i);
    wrong += (a.find(id) == npos) != (b.find(id) == npos);
  }
  CHECK(wrong == 0);
  CHECK(advance_erasing(a, 1000) == advance_erasing(b, 1000));
  // By value works too, and an empty batch erases nothing.
  CHECK(b.erase_many(0, [](std::size_t) { return std::string_view("x"); }) == 0);
}

TEST_CASE("wheel: take_due_by takes the tick under way's records due by a time, no others") {
  // A 10 ms tick: tick 1 holds due times 1-10 ms (filed at its boundary).
  timer_wheel w(16);
  const auto at = [&](const std::string& id, std::int64_t due_ms, std::uint64_t tick) {
    return w.insert({id, "", 0, due_ms, 0}, tick);
  };
  const handle a = at("a", 3, 1), b = at("b", 7, 1), c = at("c", 10, 1);
  const handle later = at("later", 12, 2);
  const handle gone = at("gone", 2, 1);
  w.erase(gone);  // its stale entry stays in the slot: never taken
  std::vector<handle> out;
  CHECK(w.take_due_by(6, out) == 1);
  CHECK(out == std::vector<handle>{a});
  CHECK(!w.is_armed(a));
  CHECK(w.find("a") == a);  // still held, as advance() leaves what it hands over
  CHECK(w.now() == 0);      // the tick did not move
  out.clear();
  CHECK(w.take_due_by(6, out) == 0);
  CHECK(w.take_due_by(9, out) == 1);
  CHECK(out == std::vector<handle>{b});
  // The rest of tick 1 fires at its boundary as ever; tick 2 is untouched.
  CHECK(w.is_armed(c));
  CHECK(w.is_armed(later));
  CHECK(advance_erasing(w, 1) == std::vector<firing>{{1, "c"}});
  CHECK(w.is_armed(later));
  out.clear();
  CHECK(w.take_due_by(100, out) == 1);  // now tick 2 is the one under way
  CHECK(out == std::vector<handle>{later});
  CHECK(w.next_due_tick() == no_tick);
}

TEST_CASE("wheel: take_tick hands over the next due tick's records ahead of it, now() unmoved") {
  timer_wheel w(8);
  w.insert(make_task("a"), 5);
  const handle b = w.insert(make_task("b"), 5);
  w.insert(make_task("c"), 5);
  w.insert(make_task("next-revolution"), 13);  // the same slot, later
  w.insert(make_task("later"), 6);
  w.erase(b);  // its stale entry stays in the slot: never handed over
  CHECK(w.slot_load(5) >= 3);
  std::vector<std::string> taken;
  const auto take = [&](std::uint64_t tick) {
    return w.take_tick(tick, [&](handle h) {
      CHECK_FALSE(w.is_armed(h));  // disarmed, still held, as advance() hands it over
      taken.emplace_back(w.id(h));
      w.erase(h);
    });
  };
  SUBCASE("only the next due tick") {
    CHECK(take(6) == 0);  // not the next due tick: nothing moves
    CHECK(take(4) == 0);
    CHECK(taken.empty());
    CHECK(w.next_due_tick() == 5);
  }
  SUBCASE("in arming order, and the wheel goes on from there") {
    CHECK(take(5) == 2);
    CHECK(taken == std::vector<std::string>{"a", "c"});
    CHECK(w.now() == 0);
    CHECK(w.next_due_tick() == 6);
    // A record armed for the taken tick afterwards waits for advance() to
    // reach it, with the ticks after it.
    w.insert(make_task("armed-after"), 5);
    CHECK(w.next_due_tick() == 5);
    CHECK(advance_erasing(w, 20) ==
          std::vector<firing>{{5, "armed-after"}, {6, "later"}, {13, "next-revolution"}});
  }
}

TEST_CASE(
    "wheel: tasks revolutions away wait in the far array, counted for their tick, and fire in "
    "order") {
  // The essay's "Far tasks": an entry two revolutions or more ahead waits in
  // one far array until the wheel reaches it. slot_load() must count it for
  // a tick it reaches (the engine prepares a heavy tick by that count), and
  // take_tick() and advance() must move it to its slot first.
  timer_wheel w(8);
  for (int i = 0; i < 300; ++i) w.insert(make_task("far" + std::to_string(i)), 1000);
  w.insert(make_task("near"), 3);
  const handle cancelled = w.insert(make_task("cancelled"), 1001);
  const handle moved = w.insert(make_task("moved"), 2000);
  w.insert(make_task("last"), 5000);
  w.erase(cancelled);
  w.arm(moved, 4);  // from the far array to the slots
  CHECK(w.next_due_tick() == 3);
  CHECK(w.slot_load(1000) >= 300);
  CHECK(advance_erasing(w, 10) == std::vector<firing>{{3, "near"}, {4, "moved"}});
  CHECK(w.next_due_tick() == 1000);
  SUBCASE("taken ahead of its tick") {
    std::vector<std::string> taken;
    CHECK(w.take_tick(1000, [&](handle h) {
      taken.emplace_back(w.id(h));
      w.erase(h);
    }) == 300);
    REQUIRE(taken.size() == 300);
    CHECK(taken.front() == "far0");  // in arming order
    CHECK(taken.back() == "far299");
  }
  SUBCASE("by advance") {
    const auto fired = advance_erasing(w, 1000);
    REQUIRE(fired.size() == 300);
    CHECK(fired.front() == firing{1000, "far0"});
    CHECK(fired.back() == firing{1000, "far299"});
  }
  // The cancelled task was dropped on the way; the moved one's old entry
  // (at 2000) may still bound the next tick early, never late.
  CHECK(w.next_due_tick() > 1000);
  CHECK(w.next_due_tick() <= 5000);
  CHECK(advance_erasing(w, 6000) == std::vector<firing>{{5000, "last"}});
  CHECK(w.empty());
  CHECK(w.next_due_tick() == timer_wheel::no_tick);
}
