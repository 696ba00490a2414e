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
// - insert, erase, reschedule, find by id: O(1). Each costs one hash of the id
//   (a seeded wyhash-style hash, computed once per operation), one probe of an
//   open-addressing index of 8-byte entries, and a touch of the task's own
//   record. Cancelling does not visit any other task (see "Lazy removal").
//   erase_many() cancels a batch with those accesses overlapped.
// - advance: O(number of tasks fired + entries in the slots processed).
//   Empty slots are skipped with an occupancy bitmap (one bit per slot), so
//   advancing across a quiet hour costs a few dozen word reads, not 3600
//   visits.
//
// Layout
// ------
// A task lives in a 128-byte record (the `task` plus due tick, owner tag and
// a sequence word: two cache lines, never moved, so handles and references
// stay valid). A slot is not a linked list of records but an array of
// 16-byte entries {due tick, handle, sequence}: arming appends to it, and
// processing a slot reads it front to back, so the wheel walks contiguous
// memory and touches a record only when its entry is due. Records come from
// 2 MiB chunks (16384 records; the first chunk is 1024), and large chunks and
// index tables ask the kernel for transparent huge pages: with a million
// tasks a random access otherwise pays a TLB miss on top of the cache miss
// (docs/benchmarks.md measured 160 ns against 240-350 ns here).
//
// Lazy removal
// ------------
// An entry is valid while the record's sequence word equals the one the entry
// was written with (and the record is still due at that tick). Cancelling,
// disarming or re-arming a task changes its record's sequence, which makes
// its old entry stale in place: no list to unlink, no neighbour to touch.
// Each slot counts its stale entries. A stale entry is dropped when its slot
// is processed, or when an append finds its slot's array full with at least
// half of it stale (the slot is compacted; otherwise the array grows), so
// stale entries cost amortised O(1) work and at most as much memory as the
// live ones in the same slot.
//
// Rounds
// ------
// Each entry carries its absolute due tick; its round (cycle) count is
// derived, (due - now) / slots, never stored, so it cannot go stale and a
// rebuilt wheel needs no bookkeeping of positions. Slots also keep a lower
// bound of the earliest due tick in them. A slot whose bound lies beyond the
// tick being processed is passed over without reading its array, so a task
// with a long delay is not touched once per revolution the way counted-down
// rounds are.
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
// than the earliest due task, and early at most once per task cancelled or
// moved (a stale entry or slot bound; processing the slot makes it exact).
//
// Memory
// ------
// Per task: the 128-byte record (16 bytes beyond the `task`), a 16-byte slot
// entry (arrays grow by doubling) and an 8-byte index entry at a load factor
// between 3/8 and 3/4. See docs/benchmarks.md for the measured figures.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>
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

  /// Forgets the tasks with the ids id_at(0) .. id_at(n - 1) (each convertible
  /// to std::string_view; ids not held are skipped) and returns how many were
  /// held. The same as calling erase(id) n times, but faster when the wheel is
  /// much larger than the cache: it hashes ids a few ahead and asks for their
  /// index buckets and records early, so the memory accesses of several
  /// erasures overlap instead of following one another.
  template <class IdAt>
  std::size_t erase_many(std::size_t n, IdAt&& id_at) noexcept;

  /// The task in node `h`. Do not change its id.
  task& value(handle h) noexcept { return rec(h).value; }
  const task& value(handle h) const noexcept { return rec(h).value; }
  /// The due tick node `h` was last armed with (meaningful while armed).
  std::uint64_t due_tick(handle h) const noexcept { return rec(h).due; }
  /// A word the owner may use freely (the engine keeps a task's state there).
  std::uint32_t& tag(handle h) noexcept { return rec(h).tag; }
  std::uint32_t tag(handle h) const noexcept { return rec(h).tag; }

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
  // A record's sequence word: a generation count above two state bits. The
  // state says where the record is; the generation changes whenever an entry
  // written for it must stop counting (see "Lazy removal" above).
  enum state : std::uint32_t { free_state = 0, detached = 1, armed_state = 2, pending = 3 };
  static constexpr std::uint32_t state_mask = 3;
  static constexpr std::uint32_t generation_step = 4;

  struct alignas(64) record {
    task value;             // first: find() compares the id on the first cache line
    std::uint64_t due = 0;  // while armed: the tick; while free: the next free record
    std::uint32_t tag = 0;  // the owner's word
    std::uint32_t seq = 0;  // generation << 2 | state
  };
  static_assert(sizeof(record) == 128, "a record is two cache lines");

  struct entry {  // one arming of a record, in the array of its slot
    std::uint64_t due;
    handle h;
    std::uint32_t seq;
  };
  struct index_entry {
    handle node = npos;  // npos marks an empty bucket
    std::uint32_t hash = 0;
  };

  // Memory from operator new, or for 2 MiB and more, 2 MiB-aligned memory the
  // kernel is asked to back with huge pages. Holds `bytes`, uninitialised.
  class block {
   public:
    block() = default;
    explicit block(std::size_t bytes);
    block(block&& o) noexcept : p_(std::exchange(o.p_, nullptr)), bytes_(o.bytes_) {}
    block& operator=(block&& o) noexcept;
    ~block();
    void* get() const noexcept { return p_; }
    std::size_t bytes() const noexcept { return bytes_; }

   private:
    void* p_ = nullptr;
    std::size_t bytes_ = 0;
  };

  static constexpr std::size_t no_slot = std::numeric_limits<std::size_t>::max();
  static constexpr std::uint32_t first_chunk = 1024;  // records in chunk 0
  static constexpr unsigned chunk_bits = 14;          // 16384 records = 2 MiB after it
  static constexpr std::uint32_t chunk_size = std::uint32_t{1} << chunk_bits;

  record& rec(handle h) noexcept { return *record_ptr(h); }
  const record& rec(handle h) const noexcept { return *record_ptr(h); }
  record* record_ptr(handle h) const noexcept {
    if (h < first_chunk) return static_cast<record*>(chunks_[0].get()) + h;
    const std::uint32_t k = h - first_chunk;
    return static_cast<record*>(chunks_[1 + (k >> chunk_bits)].get()) + (k & (chunk_size - 1));
  }
  std::size_t capacity() const noexcept;

  handle allocate_record();
  void free_record(handle h) noexcept;
  void add_chunk();
  void push_entry(handle h, std::uint64_t due);
  void compact_slot(std::size_t s);
  // Counts the entry of armed record `r` as stale in its slot (before `r`
  // changes: the slot is its due tick's).
  void went_stale(const record& r) noexcept;

  std::uint32_t hash_id(std::string_view id) const noexcept;
  std::size_t index_find(std::string_view id, std::uint32_t hash) const noexcept;
  void index_insert(handle h, std::uint32_t hash);
  void index_erase_at(std::size_t i) noexcept;
  // Where record h's entry is in the index (it must be held).
  std::size_t index_position(handle h) const noexcept;
  void index_grow();
  index_entry* index() const noexcept { return static_cast<index_entry*>(index_.get()); }
  // Forgets held record h whose index entry is at index_pos.
  void erase_found(handle h, std::size_t index_pos) noexcept;

  // Moves the valid entries of slot `s` due at or before `tick` into `out`
  // (their records become pending), drops stale ones, and makes the slot's
  // lower bound exact again.
  void collect_due(std::size_t s, std::uint64_t tick, std::vector<handle>& out);
  // Starts loading the index buckets the sink's erase() will touch.
  void prefetch_index(const std::vector<handle>& batch) const noexcept;

  std::size_t slot_count_;
  std::uint64_t now_ = 0;
  std::size_t size_ = 0;
  std::size_t armed_ = 0;
  std::uint64_t seed_;

  std::vector<std::vector<entry>> slots_;
  std::vector<std::uint64_t> slot_min_;  // lower bound of the earliest due tick per slot
  std::vector<std::uint32_t> stale_;     // stale entries per slot: when compacting pays
  std::vector<std::uint64_t> occupied_;  // one bit per slot with entries (valid or stale)

  std::vector<block> chunks_;
  handle free_head_ = npos;  // free records are chained through record::due
  std::uint32_t fresh_ = 0;  // records ever handed out; later ones are unconstructed

  block index_;
  std::size_t index_size_ = 0;
  std::size_t index_mask_ = 0;

  std::vector<handle> scratch_;     // reused by advance()
  std::vector<entry> due_scratch_;  // reused by collect_due()
};

template <class IdAt>
std::size_t timer_wheel::erase_many(std::size_t n, IdAt&& id_at) noexcept {
  // Four stages in flight: the id object of id i + 24 is requested (when the
  // caller hands out references: its string may be anywhere in its memory
  // too); the bucket of id i + 16 is requested; the record that bucket names
  // for id i + 8 is requested (a guess: a probe may need a later bucket, and
  // an erasure between may move the entry; a wrong guess costs only a wasted
  // prefetch); and id i is erased with all of it in cache.
  constexpr std::size_t ahead = 16;
  constexpr std::size_t id_ahead = ahead + 8;
  std::uint32_t hashes[ahead];
  const auto request_id = [&](std::size_t k) {
    if constexpr (std::is_lvalue_reference_v<decltype(id_at(k))>)
      __builtin_prefetch(std::addressof(id_at(k)));
  };
  const auto request_bucket = [&](std::size_t k) {
    const std::uint32_t h = hash_id(std::string_view(id_at(k)));
    hashes[k % ahead] = h;
    __builtin_prefetch(index() + (h & index_mask_));
  };
  for (std::size_t k = ahead; k < id_ahead && k < n; ++k) request_id(k);
  for (std::size_t k = 0; k < ahead && k < n; ++k) request_bucket(k);
  std::size_t erased = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t hash = hashes[i % ahead];
    if (i + id_ahead < n) request_id(i + id_ahead);
    if (i + ahead < n) request_bucket(i + ahead);
    if (i + ahead / 2 < n) {
      const index_entry& guess = index()[hashes[(i + ahead / 2) % ahead] & index_mask_];
      if (guess.node != npos) {
        const char* r = reinterpret_cast<const char*>(record_ptr(guess.node));
        __builtin_prefetch(r);
        __builtin_prefetch(r + 64);
      }
    }
    const std::size_t pos = index_find(std::string_view(id_at(i)), hash);
    if (pos == no_slot) continue;
    erase_found(index()[pos].node, pos);
    ++erased;
  }
  return erased;
}

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
    prefetch_index(batch);
    for (handle h : batch) {
      record& r = rec(h);
      if ((r.seq & state_mask) != pending)
        continue;  // erased, armed or disarmed by the sink meanwhile
      r.seq = (r.seq & ~state_mask) | detached;
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
