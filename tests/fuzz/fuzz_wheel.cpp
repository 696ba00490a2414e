// fuzz_wheel - libFuzzer target for delayq::timer_wheel.
//
// The input is a program (wheel_program.hpp) run on a timer_wheel and, step
// by step, on a plain reference model: held ids with their node, due tick,
// arming order and tag, plus an ordered map (due tick, arming order) -> id of
// the armed ones. After every operation and on every hand-over the two must
// agree:
//   - what fires: each node handed to the sink is the model's earliest armed
//     one by (due tick, arming order), at exactly its due tick (never early),
//     and after advance(to) nothing due at or before `to` is left (never late);
//   - advance() returns the number of sink calls; now() is max(old, to);
//   - size(), armed(), empty(), find() of every id in the id space,
//     is_armed(), due_tick(), tag() and the task held;
//   - a refused duplicate insert leaves the record held under that id alone;
//   - assign() replaces payload, kind, due stamp and attempts, not the id;
//   - next_due_tick(): no_tick exactly when nothing is armed, otherwise after
//     now() and never after the earliest due task; a wake-up at it always
//     makes progress, and wake-ups that fire nothing are at most as many as
//     the unlinks of armed nodes that may have left a slot bound stale.
// The sink acts as the program says: erases, re-arms or keeps the fired node
// and erases, arms, disarms or inserts others, including nodes due at the
// tick being processed that it has not been handed yet.
//
// Any mismatch calls __builtin_trap(), which libFuzzer reports as a crash.
// See tests/fuzz/README.md.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "delayq/timer_wheel.hpp"
#include "wheel_program.hpp"

namespace {

using delayq::timer_wheel;
using handle = timer_wheel::handle;
using namespace delayq::fuzz;

constexpr handle npos = timer_wheel::npos;
constexpr std::uint64_t no_tick = timer_wheel::no_tick;

const char* const op_names[op_count] = {"insert",
                                        "insert_detached",
                                        "insert_detached_arm",
                                        "erase_id",
                                        "erase_handle",
                                        "reschedule",
                                        "arm",
                                        "disarm",
                                        "assign",
                                        "set_tag",
                                        "advance",
                                        "advance_one",
                                        "wake",
                                        "advance_revolution",
                                        "reserve",
                                        "advance_again",
                                        "erase_many"};

// The ids the program may name: empty, with a NUL byte, too long for the
// small-string buffer, plain.
const std::array<std::string, id_count>& ids() {
  static const std::array<std::string, id_count> all = [] {
    std::array<std::string, id_count> a;
    for (unsigned k = 0; k < id_count; ++k) {
      if (k == 0) continue;  // ""
      switch (k % 4) {
        case 1: a[k] = std::string("n\0", 2) + std::to_string(k); break;
        case 2: a[k] = std::to_string(k) + std::string(40, 'L'); break;
        default: a[k] = "t" + std::to_string(k);
      }
    }
    return a;
  }();
  return all;
}

// The fields a record holds, owned by the model.
struct held_value {
  std::string id;
  std::string payload;
  std::uint16_t kind = 0;
  std::int64_t due_ms = 0;
  std::uint32_t attempts = 0;

  timer_wheel::item item() const { return {id, payload, kind, due_ms, attempts}; }
  bool operator==(const held_value&) const = default;
};

struct entry {
  handle h = npos;
  bool armed = false;
  std::uint64_t due = 0;  // effective due tick while armed
  std::uint64_t seq = 0;  // arming order: ties within one tick
  std::uint32_t tag = 0;
  held_value value;  // what the wheel should hold
};

class runner {
 public:
  runner(const std::uint8_t* data, std::size_t size)
      : in_(data), size_(size), w_(wheel_slot_counts[first_byte(data, size) % 8]) {
    pos_ = size_ > 0 ? 1 : 0;
  }

  void run() {
    while (pos_ < size_) {
      const std::uint8_t op = byte() % op_count;
      op_ = op;
      step(op);
      check_all();
      ++op_no_;
    }
    drain();
  }

 private:
  static std::uint8_t first_byte(const std::uint8_t* data, std::size_t size) {
    return size > 0 ? data[0] : 0;
  }

  std::uint8_t byte() { return pos_ < size_ ? in_[pos_++] : 0; }
  unsigned id_byte() { return byte() % id_count; }

  [[noreturn]] void fail(const char* what) const {
    std::fprintf(stderr,
                 "fuzz_wheel: %s\n  slots=%zu op#%zu (%s) now=%llu size=%zu armed=%zu "
                 "model: held=%zu armed=%zu\n",
                 what, w_.slots(), op_no_, op_ < op_count ? op_names[op_] : "drain",
                 static_cast<unsigned long long>(w_.now()), w_.size(), w_.armed(), held_count(),
                 armed_.size());
    __builtin_trap();
  }
  void expect(bool ok, const char* what) const {
    if (!ok) fail(what);
  }

  // ------------------------------------------------------------ operands
  //
  // Ticks stay far below no_tick: a step moves at most 65 * 97 * 3600 ticks
  // and a due tick lies at most 2^39 ahead, so 4096 bytes of program cannot
  // come near 2^64 (where the wheel clamps a due tick to no_tick - 1, which
  // the model does not imitate).

  std::uint64_t due_tick(std::uint8_t d) const {
    const std::uint64_t now = w_.now();
    const std::uint64_t s = w_.slots();
    const unsigned v = d & 31u;
    switch (static_cast<due_mode>(d >> 5)) {
      case due_past: return now - std::min<std::uint64_t>(now, v);
      case due_crowded: return now + 1 + v % 4;
      case due_near: return now + 1 + v;
      case due_revolution: {  // 4 ticks either side of now's slot, 1-4 revolutions on
        const std::uint64_t t = now + s * (1 + v / 8) + v % 8;
        return t >= 4 ? t - 4 : 0;
      }
      case due_far: return now + std::uint64_t{v + 1} * 1000 * s;
      case due_absolute: return v;
      case due_slot_end: return now + s - v % s;
      case due_long: return now + (std::uint64_t{1} << (v + 8));
    }
    return now;
  }

  std::uint64_t step_to(std::uint8_t a) const {
    const std::uint64_t now = w_.now();
    const std::uint64_t s = w_.slots();
    const unsigned v = a & 63u;
    switch (static_cast<step_mode>(a >> 6)) {
      case step_ticks: return now + v;
      case step_revolutions: {
        const std::uint64_t t = now + v * s + v % 3;
        return t == 0 ? 0 : t - 1;
      }
      case step_many: return now + std::uint64_t{v + 1} * 97 * s + v;
      case step_backwards: return now - std::min<std::uint64_t>(now, v);
    }
    return now;
  }

  std::uint64_t effective(std::uint64_t due) const { return due <= w_.now() ? w_.now() + 1 : due; }

  // Payloads vary in length so records use every layout: inline id and
  // payload, inline id with the payload on the heap, and (the long ids)
  // both on the heap.
  held_value make_value(unsigned id) {
    held_value v;
    v.id = ids()[id];
    const std::uint64_t n = tasks_made_++;
    v.payload = "p" + std::to_string(n);
    if (n % 16 == 0) v.payload.append(300, '\xff');  // a heap block to free
    if (n % 5 == 0) v.payload.clear();
    v.kind = static_cast<std::uint16_t>(n * 7);
    v.due_ms = static_cast<std::int64_t>(n * 1000003) - 500;
    v.attempts = static_cast<std::uint32_t>(n);
    return v;
  }

  // What the wheel holds in record `h`.
  held_value read(handle h) const {
    return {std::string(w_.id(h)), std::string(w_.payload(h)), w_.kind(h), w_.due_ms(h),
            w_.attempts(h)};
  }

  // ------------------------------------------------------------ the model

  std::size_t held_count() const {
    return static_cast<std::size_t>(
        std::count_if(held_.begin(), held_.end(), [](const auto& e) { return e.has_value(); }));
  }

  void model_arm(unsigned id, std::uint64_t due) {
    entry& e = *held_[id];
    if (e.armed) armed_.erase({e.due, e.seq});
    e.armed = true;
    e.due = effective(due);
    e.seq = next_seq_++;
    armed_.emplace(std::make_pair(e.due, e.seq), id);
  }
  void model_disarm(unsigned id) {
    entry& e = *held_[id];
    if (!e.armed) return;
    armed_.erase({e.due, e.seq});
    e.armed = false;
  }
  void model_remove(unsigned id) {
    model_disarm(id);
    freed_tags_[held_[id]->h] = held_[id]->tag;
    held_[id].reset();
  }

  // Whether unlinking entry `id` may leave its slot's bound below the truth.
  // A node due at the tick being processed is already out of its slot.
  void note_unlink(unsigned id) {
    const entry& e = *held_[id];
    if (e.armed && !(in_advance_ && e.due == w_.now())) ++stale_events_;
  }

  // ------------------------------------------------------------ operations

  void do_insert(unsigned id, std::optional<std::uint8_t> due_b, bool arm_after) {
    const std::uint64_t due = due_b ? due_tick(*due_b) : 0;
    const held_value v = make_value(id);
    if (held_[id]) {
      const handle h =
          (due_b && !arm_after) ? w_.insert(v.item(), due) : w_.insert_detached(v.item());
      expect(h == npos, "insert of a held id did not return npos");
      // The record held under the id stays as it was: check_all() reads it.
      return;
    }
    entry e;
    e.value = v;
    const bool detached = !due_b || arm_after;
    const handle h = detached ? w_.insert_detached(v.item()) : w_.insert(v.item(), due);
    expect(h != npos, "insert of a new id returned npos");
    e.h = h;
    held_[id] = std::move(e);
    expect(w_.find(ids()[id]) == h, "find() does not return the inserted node");
    // The owner word starts at 0 and survives a record's reuse.
    const auto freed = freed_tags_.find(h);
    expect(w_.tag(h) == (freed == freed_tags_.end() ? 0 : freed->second),
           "a new record's tag is neither 0 nor what its last holder left");
    held_[id]->tag = w_.tag(h);
    if (!due_b) {
      expect(!w_.is_armed(h), "insert_detached() armed the node");
      return;
    }
    if (arm_after) {
      expect(!w_.is_armed(h), "insert_detached() armed the node");
      w_.arm(h, due);
    }
    model_arm(id, due);
    expect(w_.is_armed(h), "not armed after insert()/arm()");
    expect(w_.due_tick(h) == held_[id]->due, "due_tick() wrong after insert()/arm()");
  }

  void do_arm(unsigned id, std::uint8_t due_b, bool by_id) {
    const std::uint64_t due = due_tick(due_b);
    if (!held_[id]) {
      if (by_id)
        expect(!w_.reschedule(ids()[id], due), "reschedule() of an id not held returned true");
      return;
    }
    note_unlink(id);
    const handle h = held_[id]->h;
    if (by_id) {
      expect(w_.reschedule(ids()[id], due), "reschedule() of a held id returned false");
    } else {
      w_.arm(h, due);
    }
    model_arm(id, due);
    expect(w_.is_armed(h), "not armed after arm()/reschedule()");
    expect(w_.due_tick(h) == held_[id]->due, "due_tick() wrong after arm()/reschedule()");
  }

  void do_disarm(unsigned id) {
    if (!held_[id]) return;
    note_unlink(id);
    const handle h = held_[id]->h;
    w_.disarm(h);
    model_disarm(id);
    expect(!w_.is_armed(h), "still armed after disarm()");
  }

  void do_erase(unsigned id, bool by_handle) {
    if (!held_[id]) {
      if (!by_handle) expect(!w_.erase(ids()[id]), "erase(id) of an id not held returned true");
      return;
    }
    note_unlink(id);
    if (by_handle) {
      w_.erase(held_[id]->h);
    } else {
      expect(w_.erase(ids()[id]), "erase(id) of a held id returned false");
    }
    model_remove(id);
    expect(w_.find(ids()[id]) == npos, "find() still sees an erased id");
  }

  // erase_many() must do what erase(id) does for each id in turn.
  void do_erase_many(const std::vector<unsigned>& batch) {
    std::size_t expected = 0;
    for (unsigned id : batch) {
      if (!held_[id]) continue;
      note_unlink(id);
      model_remove(id);
      ++expected;
    }
    const std::size_t erased = w_.erase_many(
        batch.size(), [&](std::size_t i) -> const std::string& { return ids()[batch[i]]; });
    expect(erased == expected, "erase_many() erased another number of ids than erase() would");
    for (unsigned id : batch) expect(w_.find(ids()[id]) == npos, "find() still sees an erased id");
  }

  // assign() replaces everything but the id and leaves the record where it
  // is: same handle, same arming, same tag.
  void do_assign(unsigned id) {
    if (!held_[id]) return;
    held_value v = make_value(id);
    w_.assign(held_[id]->h, v.item());
    held_[id]->value = std::move(v);
    expect(read(held_[id]->h) == held_[id]->value, "assign() did not replace the fields");
  }

  void on_fire(handle h, std::uint64_t from, std::uint64_t to) {
    const std::uint64_t t = w_.now();
    expect(t > from && t <= to, "sink called outside (old now, to_tick]");
    expect(!armed_.empty(), "sink called with nothing armed in the model");
    const auto [key, id] = *armed_.begin();
    expect(held_[id] && held_[id]->h == h,
           "not the earliest task by (due tick, arming order) handed over");
    expect(key.first == t, "a task handed over at a tick other than its due tick");
    expect(w_.id(h) == ids()[id], "the sink's node holds another id");
    expect(w_.due_tick(h) == t, "due_tick() of a handed-over node is not now()");
    expect(!w_.is_armed(h), "sink got a node that is still armed");
    expect(w_.find(ids()[id]) == h, "find() wrong inside the sink");
    model_disarm(id);

    const std::uint8_t s = byte();
    switch (static_cast<sink_action>(s & 3)) {
      case sink_erase:
      case sink_erase_too:
        w_.erase(h);
        model_remove(id);
        break;
      case sink_rearm: {
        const std::uint64_t due = due_tick(byte());
        w_.arm(h, due);
        model_arm(id, due);
        expect(w_.due_tick(h) == held_[id]->due, "due_tick() wrong after the sink re-armed");
        break;
      }
      case sink_keep: break;
    }
    switch ((s >> 2) & 7) {
      case touch_erase: do_erase(id_byte(), true); break;
      case touch_arm: {
        const unsigned other = id_byte();
        do_arm(other, byte(), false);
        break;
      }
      case touch_disarm: do_disarm(id_byte()); break;
      case touch_insert: {
        const unsigned other = id_byte();
        do_insert(other, byte(), false);
        break;
      }
      default: break;
    }
  }

  // Returns the number of nodes handed over.
  std::size_t do_advance(std::uint64_t to) {
    const std::uint64_t from = w_.now();
    std::size_t delivered = 0;
    in_advance_ = true;
    const std::size_t n = w_.advance(to, [&](handle h) {
      ++delivered;
      on_fire(h, from, to);
    });
    in_advance_ = false;
    expect(n == delivered, "advance() returned a count other than the sink calls");
    expect(w_.now() == std::max(from, to), "now() is not the tick advanced to");
    expect(armed_.empty() || armed_.begin()->first.first > w_.now(),
           "a task due at or before to_tick was not handed over");
    return delivered;
  }

  void do_wake() {
    const std::uint64_t next = w_.next_due_tick();
    if (next == no_tick) return;  // check_all() compares with the model
    const std::size_t delivered = do_advance(next);
    if (delivered == 0) ++wasted_wakeups_;
    expect(w_.next_due_tick() > next, "a wake-up at next_due_tick() made no progress");
    expect(wasted_wakeups_ <= stale_events_,
           "more wake-ups that fired nothing than slot bounds that may be stale");
  }

  void step(std::uint8_t op) {
    switch (static_cast<wheel_op>(op)) {
      case op_insert: {
        const unsigned id = id_byte();
        do_insert(id, byte(), false);
        break;
      }
      case op_insert_detached: do_insert(id_byte(), std::nullopt, false); break;
      case op_insert_detached_arm: {
        const unsigned id = id_byte();
        do_insert(id, byte(), true);
        break;
      }
      case op_erase_id: do_erase(id_byte(), false); break;
      case op_erase_handle: do_erase(id_byte(), true); break;
      case op_reschedule: {
        const unsigned id = id_byte();
        do_arm(id, byte(), true);
        break;
      }
      case op_arm: {
        const unsigned id = id_byte();
        do_arm(id, byte(), false);
        break;
      }
      case op_disarm: do_disarm(id_byte()); break;
      case op_assign: do_assign(id_byte()); break;
      case op_set_tag: {
        const unsigned id = id_byte();
        const std::uint32_t tag = byte() * 0x01010101u;
        if (!held_[id]) break;
        w_.tag(held_[id]->h) = tag;
        held_[id]->tag = tag;
        break;
      }
      case op_advance:
      case op_advance_again: do_advance(step_to(byte())); break;
      case op_advance_one: do_advance(w_.now() + 1); break;
      case op_wake: do_wake(); break;
      case op_advance_revolution: do_advance(w_.now() + w_.slots()); break;
      case op_reserve: w_.reserve(std::size_t{byte()} * 16); break;
      case op_erase_many: {
        std::vector<unsigned> batch(byte() % 8 + 1);
        for (unsigned& id : batch) id = id_byte();
        do_erase_many(batch);
        break;
      }
      case op_count: break;
    }
  }

  // ------------------------------------------------------------ checks

  void check_all() {
    const std::size_t held = held_count();
    expect(w_.size() == held, "size() disagrees with the model");
    expect(w_.armed() == armed_.size(), "armed() disagrees with the model");
    expect(w_.empty() == (held == 0), "empty() disagrees with the model");
    for (unsigned id = 0; id < id_count; ++id) {
      const handle h = w_.find(ids()[id]);
      if (!held_[id]) {
        expect(h == npos, "find() sees an id that is not held");
        continue;
      }
      const entry& e = *held_[id];
      expect(h == e.h, "find() disagrees with the model");
      expect(read(h) == e.value, "the record held was changed");
      expect(w_.tag(h) == e.tag, "tag() was changed");
      expect(w_.is_armed(h) == e.armed, "is_armed() disagrees with the model");
      if (e.armed) expect(w_.due_tick(h) == e.due, "due_tick() disagrees with the model");
    }
    const std::uint64_t next = w_.next_due_tick();
    if (armed_.empty()) {
      expect(next == no_tick, "next_due_tick() is not no_tick with nothing armed");
      return;
    }
    expect(next != no_tick, "next_due_tick() is no_tick with tasks armed");
    expect(next > w_.now(), "next_due_tick() is not after now()");
    expect(next <= armed_.begin()->first.first,
           "next_due_tick() is later than the earliest due task");
  }

  // Fires everything still armed (the sink reads 0 bytes: erase), then
  // erases what is left by id.
  void drain() {
    op_ = op_count;
    if (!armed_.empty()) do_advance(armed_.rbegin()->first.first);
    expect(w_.armed() == 0 && armed_.empty(), "armed tasks left after advancing past the last");
    expect(w_.next_due_tick() == no_tick, "next_due_tick() is not no_tick after draining");
    for (unsigned id = 0; id < id_count; ++id) {
      if (!held_[id]) continue;
      expect(w_.erase(ids()[id]), "erase(id) of a detached task returned false");
      model_remove(id);
    }
    expect(w_.empty() && w_.size() == 0, "the wheel is not empty after erasing every id");
  }

  const std::uint8_t* in_;
  std::size_t size_;
  std::size_t pos_ = 0;
  timer_wheel w_;
  std::array<std::optional<entry>, id_count> held_;
  std::map<std::pair<std::uint64_t, std::uint64_t>, unsigned> armed_;  // (due, seq) -> id
  std::map<handle, std::uint32_t> freed_tags_;  // handle -> the tag its last holder left
  std::uint64_t next_seq_ = 0;
  std::uint64_t tasks_made_ = 0;
  std::size_t op_no_ = 0;
  std::uint8_t op_ = op_count;
  bool in_advance_ = false;
  std::size_t stale_events_ = 0;
  std::size_t wasted_wakeups_ = 0;
};

}  // namespace

// NOLINTNEXTLINE(readability-identifier-naming): the name libFuzzer calls
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  runner(data, size).run();
  return 0;
}
