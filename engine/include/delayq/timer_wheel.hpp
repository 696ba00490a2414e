// delayq/timer_wheel.hpp - the hashed timing wheel at the heart of delayq.
//
// The scheme
// ----------
// This is scheme 6 of Varghese and Lauck ("Hashed and Hierarchical Timing
// Wheels", 1987): a circular array of `slots` buckets, each an unsorted,
// intrusive, doubly-linked list of task nodes. A task due at tick T lives in
// slot T % slots. Time is an abstract tick counter: the wheel knows no clock.
// Whoever owns it (the engine, a test, a benchmark) calls advance(to_tick)
// and the wheel hands over every task whose due tick is <= to_tick.
//
// Costs
// -----
// - insert, erase, reschedule, find by id: O(1). Nodes come from a pool of
//   fixed-size chunks (no allocation per task beyond the task's own strings)
//   and are found by id through an open-addressing hash index of 8-byte
//   entries.
// - advance: O(number of tasks fired + number of occupied slots passed).
//   Empty slots are skipped with an occupancy bitmap (one bit per slot), so
//   advancing across a quiet hour costs a few dozen word reads, not 3600
//   visits.
//
// Rounds
// ------
// Each node stores its absolute due tick; its round (cycle) count is derived,
// (due - now) / slots, never stored, so it cannot go stale and a rebuilt
// wheel needs no bookkeeping of positions. Slots also keep a lower bound of
// the earliest due tick in them. A slot whose bound lies beyond the tick
// being processed is passed over without walking its list, so a task with a
// long delay is not touched once per revolution the way counted-down rounds
// are; it is looked at only when its slot also holds work due now.
//
// Long delays and missed ticks
// ----------------------------
// Any delay fits: a due tick is 64 bits, and a task 10,000 revolutions away
// simply waits in its slot. When the owner falls behind (a busy thread, a
// suspended process) it calls advance() with the current tick and the wheel
// processes every missed tick in order, so tasks come out in due order and
// none is skipped; it jumps straight from one due tick to the next rather
// than visiting every tick in between. A task inserted with a due tick at or
// before now() is due at now() + 1: the next advance hands it over.
//
// next_due_tick() gives the tick the owner should sleep until: never later
// than the earliest due task, at most a bounded number of wasted wake-ups
// early (a slot bound goes stale when its earliest task is erased; it is
// made exact again the next time that slot is processed).
//
// Memory
// ------
// Per task: one node (the `task` itself plus 24 bytes of links, due tick and
// owner tag) and one 8-byte index entry at a load factor between 3/8 and
// 3/4. See docs/design.md for the measured figures.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "delayq/task.hpp"

namespace delayq {

/// A hashed timing wheel of tasks, driven by advance(). See the essay above.
///
/// Thread safety: none. A plain single-threaded data structure; the engine
/// only touches it under its own lock.
class timer_wheel {
 public:
  /// Identifies a node held by the wheel; stable until the node is erased.
  using handle = std::uint32_t;
  static constexpr handle npos = std::numeric_limits<handle>::max();
  static constexpr std::uint64_t no_tick = std::numeric_limits<std::uint64_t>::max();

  /// A wheel of `slots` buckets, at tick 0. Throws std::invalid_argument
  /// when slots is 0.
  explicit timer_wheel(std::size_t slots = 3600);
  ~timer_wheel();
  timer_wheel(const timer_wheel&) = delete;
  timer_wheel& operator=(const timer_wheel&) = delete;

  /// The last tick advanced to.
  std::uint64_t now() const noexcept { return now_; }
  /// The number of slots.
  std::size_t slots() const noexcept { return slot_count_; }
  /// Nodes held: armed ones plus detached ones.
  std::size_t size() const noexcept { return size_; }
  /// Nodes armed in a slot (waiting for their tick).
  std::size_t armed() const noexcept { return armed_; }
  bool empty() const noexcept { return size_ == 0; }

  /// Preallocates room for `n` nodes and index entries.
  void reserve(std::size_t n);

  /// The node holding the task with this id, or npos.
  handle find(std::string_view id) const noexcept;

  /// Adds `t` due at `due_tick` (a tick <= now() means now() + 1). Returns
  /// npos, and leaves `t` untouched, when a task with that id is held already.
  handle insert(task&& t, std::uint64_t due_tick);
  /// Adds `t` without arming it: it is held and found by id, but in no slot
  /// until arm() is called. Returns npos when the id is held already.
  handle insert_detached(task&& t);

  /// Puts node `h` in the slot of `due_tick`, moving it if it was armed.
  void arm(handle h, std::uint64_t due_tick) noexcept;
  /// Takes node `h` out of its slot but keeps holding it.
  void disarm(handle h) noexcept;
  /// Whether node `h` is in a slot.
  bool is_armed(handle h) const noexcept;
  /// Forgets node `h` entirely; the handle becomes invalid.
  void erase(handle h) noexcept;
  /// Moves the task out of node `h` and forgets the node.
  task extract(handle h) noexcept;
  /// Forgets the task with this id. Returns false when it is not held.
  bool erase(std::string_view id) noexcept;
  /// Moves the task with this id to `due_tick`. False when it is not held.
  bool reschedule(std::string_view id, std::uint64_t due_tick) noexcept;

  /// The task in node `h`. Do not change its id.
  task& value(handle h) noexcept { return node_at(h).value; }
  const task& value(handle h) const noexcept { return node_at(h).value; }
  /// The due tick of node `h` (meaningful while armed).
  std::uint64_t due_tick(handle h) const noexcept { return node_at(h).due; }
  /// A word the owner may use freely (the engine keeps a task's state there).
  std::uint32_t& tag(handle h) noexcept { return node_at(h).tag; }
  std::uint32_t tag(handle h) const noexcept { return node_at(h).tag; }

  /// A tick at or before the earliest armed task's due tick (no_tick when
  /// nothing is armed). Sleeping until it never misses a task.
  std::uint64_t next_due_tick() const noexcept;

  /// Advances to `to_tick`, handing every armed node whose due tick is
  /// <= to_tick to `sink(handle)`, in due-tick order (insertion order within
  /// one tick). Each node is disarmed but still held when the sink gets it:
  /// the sink must erase() it, arm() it again, or keep it detached. The sink
  /// may insert, arm and erase other nodes, but must not call advance(). The
  /// nodes due at one tick leave their slot together: one that the sink
  /// erases, arms or disarms before its turn is not handed over.
  /// Returns the number of nodes handed over.
  template <class Sink>
  std::size_t advance(std::uint64_t to_tick, Sink&& sink);

  /// Bytes the wheel holds for its own structures (pool chunks, index, slot
  /// arrays), not counting heap buffers owned by the tasks' strings.
  std::size_t memory_bytes() const noexcept;

 private:
  struct node {
    handle prev = npos;  // slot list links; npos/npos while detached
    handle next = npos;
    std::uint64_t due = 0;
    std::uint32_t tag = 0;
    bool linked = false;
    bool pending = false;  // taken out of its slot by advance(), not yet handed over
    task value;
  };
  struct slot_list {
    handle head = npos;
    handle tail = npos;
  };
  struct index_entry {
    handle node = npos;  // npos marks an empty bucket
    std::uint32_t hash = 0;
  };

  static constexpr std::size_t no_slot = std::numeric_limits<std::size_t>::max();
  static constexpr unsigned chunk_bits = 12;  // 4096 nodes per chunk
  static constexpr std::size_t chunk_size = std::size_t{1} << chunk_bits;

  node& node_at(handle h) noexcept { return chunks_[h >> chunk_bits][h & (chunk_size - 1)]; }
  const node& node_at(handle h) const noexcept {
    return chunks_[h >> chunk_bits][h & (chunk_size - 1)];
  }

  handle allocate_node();
  void free_node(handle h) noexcept;
  void link(handle h, std::uint64_t due) noexcept;
  void unlink(handle h) noexcept;
  void add_chunk();

  static std::uint32_t hash_id(std::string_view id) noexcept;
  std::size_t index_find_slot(std::string_view id, std::uint32_t hash) const noexcept;
  void index_insert(handle h, std::uint32_t hash);
  void index_erase(std::string_view id) noexcept;
  void index_grow();

  // Takes the nodes of slot `s` due at or before `tick` out of the slot into
  // `out`, and makes the slot's lower bound exact again.
  void collect_due(std::size_t s, std::uint64_t tick, std::vector<handle>& out);

  std::size_t slot_count_;
  std::uint64_t now_ = 0;
  std::size_t size_ = 0;
  std::size_t armed_ = 0;

  std::vector<slot_list> slot_lists_;
  std::vector<std::uint64_t> slot_min_;  // lower bound of the earliest due tick per slot
  std::vector<std::uint64_t> occupied_;  // one bit per non-empty slot

  std::vector<std::unique_ptr<node[]>> chunks_;
  handle free_head_ = npos;  // free nodes are chained through node::next
  std::uint32_t fresh_ = 0;  // nodes ever handed out; later ones are unused

  std::vector<index_entry> index_;
  std::size_t index_mask_ = 0;

  std::vector<handle> scratch_;  // reused by advance()
};

template <class Sink>
std::size_t timer_wheel::advance(std::uint64_t to_tick, Sink&& sink) {
  std::size_t fired = 0;
  std::vector<handle> batch;
  batch.swap(scratch_);
  while (true) {
    const std::uint64_t tick = next_due_tick();
    if (tick == no_tick || tick > to_tick) break;
    now_ = tick;
    batch.clear();
    collect_due(static_cast<std::size_t>(tick % slot_count_), tick, batch);
    for (handle h : batch) {
      node& n = node_at(h);
      if (!n.pending) continue;  // erased, armed or disarmed by the sink meanwhile
      n.pending = false;
      ++fired;
      sink(h);
    }
  }
  if (to_tick > now_) now_ = to_tick;
  batch.clear();
  scratch_.swap(batch);
  return fired;
}

}  // namespace delayq
