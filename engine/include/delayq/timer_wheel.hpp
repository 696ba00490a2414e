// delayq/timer_wheel.hpp - the hashed timing wheel at the heart of delayq.
//
// The scheme
// ----------
// This is scheme 6 of Varghese and Lauck ("Hashed and Hierarchical Timing
// Wheels", 1987): a circular array of `slots` buckets; a task due at tick T
// lives in slot T % slots. Time is an abstract tick counter: the wheel knows
// no clock. Whoever owns it (the engine, a test, a benchmark) calls
// advance(to_tick) and the wheel hands over every task whose due tick is
// <= to_tick.
//
// Costs
// -----
// - insert, erase, reschedule, find by id: O(1). Each costs one hash of the id
//   (a seeded wyhash-style hash; hash() computes it once, and every call has a
//   form that takes it, so a caller can hash, prefetch() the index bucket, and
//   do other work while the bucket loads), one probe of an open-addressing
//   index of 8-byte entries, and a touch of the task's own record. Cancelling
//   does not visit any other task (see "Lazy removal"). erase_many() cancels
//   a batch with those accesses overlapped.
// - advance: O(number of tasks fired + entries in the slots processed), and
//   one pass over the far array when it reaches the far array's edge (see
//   "Far tasks"). Empty slots are skipped with an occupancy bitmap (one bit
//   per slot), so advancing across a quiet hour costs a few dozen word reads,
//   not a visit per tick.
//
// Records
// -------
// A task lives in a 64-byte record, one cache line, that never moves: its
// due tick, the owner's due time stamp and attempt count, a 16-bit kind the
// owner assigns (the engine interns task types, so a record holds a small
// number, not the type's string), a sequence word, an owner word, and the
// id and payload bytes. Those bytes are inline when id + payload fit in 27
// bytes; otherwise a short id (<= 19 bytes) stays inline and the payload goes
// to a heap block, and only a long id moves both to the heap. So looking a
// task up by id reads its index bucket and its record, and nothing else,
// for any id up to 19 bytes. Records come from 2 MiB chunks (32768 records;
// the first chunk is 1024), and large chunks and index tables ask the kernel
// for transparent huge pages: with a million tasks a random access otherwise
// pays a TLB miss on top of the cache miss.
//
// A slot is an array of 16-byte entries {due tick, handle, sequence}: arming
// appends to it, and processing a slot reads it front to back, so the wheel
// walks contiguous memory and touches a record only when its entry is due.
//
// Arrivals
// --------
// With a million tasks, the end of a random slot's array is a cache miss,
// and arming one task at a time pays it in full, in the caller's schedule().
// So arming writes the record and appends its entry to a short arrivals
// array (64 entries) instead; when it is full, or before advance() reads
// any slot, the arrivals move to their slots in one pass that asks for each
// slot's memory a few entries ahead, so the misses overlap. An arrival is an
// ordinary entry: cancelling its task makes it stale where it lies (it is
// counted against its slot at once, and dropped when the arrivals move), and
// next_due_tick() takes the arrivals' earliest due tick into account.
//
// Far tasks
// ---------
// Most delayed tasks are minutes or hours away ("cancel the order in 30
// minutes"), many revolutions of a 4-second wheel, and many are cancelled
// before they come due. Filing such a task in its slot pays the random
// slot's miss and its array's growth in the caller's schedule(), and a
// cancel leaves a stale entry there. So an entry due two revolutions or more
// past the last migration (far_from_) is appended to one far array instead:
// contiguous, with no miss. When the wheel reaches far_from_, it moves the
// far entries due in the next two revolutions to their slots in one pass
// (a sequential read of the far array; the slots' memory asked for ahead, as
// for arrivals), drops the stale ones among them, and moves far_from_ on.
// That pass runs on the owner's clock, not in a caller's schedule(), and
// slot_load() counts the far array for a tick it reaches, so an owner that
// prepares heavy ticks ahead (the engine) runs it before the tick begins.
// A task cancelled while far costs a stale far entry, dropped by that pass
// or by the array's compaction (as for a slot: when an append finds it full
// with at least half of it stale). An empty far array moves far_from_ at
// no cost.
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
// rounds are. (A task two revolutions or more away waits in the far array
// instead, read once per pass: see "Far tasks".)
//
// Long delays and missed ticks
// ----------------------------
// Any delay fits: a due tick is 64 bits, and a task 10,000 revolutions away
// simply waits (in the far array, then its slot). When the owner falls behind (a busy thread, a
// suspended process) it calls advance() with the current tick and the wheel
// processes every missed tick in order, so tasks come out in due order and
// none is skipped; it jumps straight from one due tick to the next rather
// than visiting every tick in between, and moves what the far array holds
// up to the tick it advances to in one pass, not one pass per two
// revolutions crossed. A task armed with a due tick at or
// before now() is due at now() + 1: the next advance hands it over.
//
// next_due_tick() gives the tick the owner should sleep until: never later
// than the earliest due task, and early at most once per task cancelled or
// moved (a stale entry or slot bound; processing the slot makes it exact).
//
// Tick and slots: a deviation from the seed design
// -------------------------------------------------
// The seed notes draw 3600 slots of 1 s: one revolution an hour, a task
// firing up to a second late. The engine's default is 4096 slots of 1 ms
// (engine_options::tick, ::slots): a task fires within a millisecond of its
// due tick plus the timer's wake-up, which is what a Boost.Asio user who
// replaces a steady_timer expects. What keeps the fine tick cheap:
// - the timer wakes only for a tick that has a task due (next_due_tick()),
//   so an idle wheel costs no wake-ups at any resolution;
// - a task hours away waits in the far array, read in one sequential pass
//   each time the wheel reaches its edge (every two revolutions while tasks
//   keep coming due: 8 s at the default; a million far tasks are 16 MB a
//   pass), and then up to two revolutions in its slot; a slot is read only
//   in a revolution where its lower bound says something is due (see
//   "Rounds"), one pass over its entries, so the work per wake-up grows
//   with the tasks held, not with how far away they are;
// - next_due_tick() walks the occupancy bitmap and the slots' bounds from
//   now: at most `slots` bounds (32 KiB at 4096), and as many as the ticks
//   until the next task due when tasks are dense;
// - a power-of-two slot count turns the slot of a tick into a mask.
// A hierarchical wheel (a fine level for the next second above a coarse
// one) would read each task's entry twice instead of once per revolution
// that has something due in its slot; with the bound per slot that reading
// is already rare, and one level keeps arm and cancel at one entry each.
// docs/benchmarks.md has the measured lateness.
//
// Sharing a record with other threads
// -----------------------------------
// The wheel is single-threaded, but a record's memory is stable, so an owner
// may let another thread read a record it promises not to change meanwhile
// (the engine's workers read the task they run), through view(). The owner
// word is never written by the wheel after a record is first constructed
// (it starts at 0 and survives the record's reuse), so the owner may access
// it atomically (std::atomic_ref) from any thread while the record is held,
// and use it to tell a current reference from a stale one.
//
// Memory
// ------
// Per task: the 64-byte record, a 16-byte slot or far entry (slot arrays
// grow by half, the far array by 16 KiB blocks) and an 8-byte index entry at a load factor between
// 3/8 and 3/4, plus a heap block for bytes that do not fit inline. Per
// wheel: the slot arrays themselves (36 bytes a slot: 144 KiB at 4,096),
// made with the first entry that is not far, so an idle wheel, or one
// holding only far tasks, has none. docs/benchmarks.md has the measured
// figures.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace delayq {

/// A hashed timing wheel of tasks, driven by advance(). See the essay above.
///
/// Thread safety: none, except through view() as described above. A plain
/// single-threaded data structure; the engine only touches it under its own
/// lock.
class timer_wheel {
 public:
  /// Identifies a record held by the wheel; stable until it is erased.
  using handle = std::uint32_t;
  static constexpr handle npos = std::numeric_limits<handle>::max();
  static constexpr std::uint64_t no_tick = std::numeric_limits<std::uint64_t>::max();

  /// What a record holds: the fields of a task, with its type reduced to a
  /// number the owner chooses (`kind`).
  struct item {
    std::string_view id;       ///< 1 to 65535 bytes; unique among held records.
    std::string_view payload;  ///< Any bytes, up to 4 GiB - 1.
    std::uint16_t kind = 0;
    std::int64_t due_ms = 0;  ///< The owner's time stamp; the wheel only keeps it.
    std::uint32_t attempts = 0;
  };

  /// A record as another thread may read it (see the essay): valid while
  /// the record is held and the owner does not change it.
  class record_view;

  /// A wheel of `slots` buckets, at tick 0. Throws std::invalid_argument
  /// when slots is 0.
  explicit timer_wheel(std::size_t slots = 4096);
  /// Same, hashing ids as `same_hash` does (hash() gives the same value on
  /// both): an owner of several wheels hashes an id once, to pick the wheel
  /// and to find the id in it.
  timer_wheel(std::size_t slots, const timer_wheel& same_hash);
  ~timer_wheel();
  timer_wheel(const timer_wheel&) = delete;
  timer_wheel& operator=(const timer_wheel&) = delete;

  /// The last tick advanced to.
  std::uint64_t now() const noexcept { return now_; }
  /// The number of slots.
  std::size_t slots() const noexcept { return slot_count_; }
  /// Records held: armed, detached, and unindexed ones.
  std::size_t size() const noexcept { return size_; }
  /// Records armed in a slot (waiting for their tick).
  std::size_t armed() const noexcept { return armed_; }
  bool empty() const noexcept { return size_ == 0; }

  /// Preallocates room for `n` records and index entries.
  void reserve(std::size_t n);

  /// The wheel's hash of `id`: compute it once and pass it to the calls that
  /// take one. Seeded per wheel.
  std::uint32_t hash(std::string_view id) const noexcept;
  /// Starts loading the index bucket of `hash`, so that a later call with it
  /// does not wait for memory. The one member that may be called from any
  /// thread at any time, even while another changes the wheel: it only asks
  /// the processor to load memory (a bucket of the current or the previous
  /// index table), so a caller can issue it before it takes its own lock.
  void prefetch(std::uint32_t hash) const noexcept;

  /// Starts loading the index bucket of held record `h` (its record is
  /// read for the id's hash), so that a later erase(h) or unindex(h) does
  /// not wait for memory: settling a batch of finished tasks asks for all
  /// their buckets first.
  void prefetch_index_of(handle h) const noexcept {
    __builtin_prefetch(index() + (hash(id_of(rec(h))) & index_mask_));
  }

  /// The record holding the task with this id, or npos.
  handle find(std::string_view id) const noexcept { return find(id, hash(id)); }
  handle find(std::string_view id, std::uint32_t hash) const noexcept;

  /// Adds a record due at `due_tick` (a tick <= now() means now() + 1).
  /// Returns npos when a record with that id is held already. Throws
  /// std::length_error past 2^32 - 2 records or for an id over 65535 bytes,
  /// std::bad_alloc.
  handle insert(const item& it, std::uint64_t due_tick) {
    return insert(it, hash(it.id), due_tick);
  }
  handle insert(const item& it, std::uint32_t hash, std::uint64_t due_tick);
  /// Adds a record without arming it: it is held and found by id, but in no
  /// slot until arm() is called. Returns npos when the id is held already.
  handle insert_detached(const item& it) { return insert_detached(it, hash(it.id)); }
  handle insert_detached(const item& it, std::uint32_t hash);
  /// insert_detached() of an id the caller has just looked up (find() gave
  /// npos, and nothing was inserted since): it skips the second lookup,
  /// which misses the cache again in a batch. An id that is held breaks
  /// the index: find() may then return either record.
  handle insert_absent(const item& it, std::uint32_t hash);

  /// Puts record `h` in the slot of `due_tick`, moving it if it was armed.
  void arm(handle h, std::uint64_t due_tick) noexcept;
  /// Takes record `h` out of its slot but keeps holding it.
  void disarm(handle h) noexcept;
  /// Whether record `h` is in a slot.
  bool is_armed(handle h) const noexcept;
  /// Makes find() forget record `h` (its id may be inserted again) while the
  /// record itself stays held, detached, until erase(h). For a record some
  /// other thread may still look at.
  void unindex(handle h) noexcept;
  /// Makes unindexed record `h` findable by its id again. Returns false
  /// (changing nothing) when another record holds that id now. Throws
  /// std::bad_alloc.
  bool reindex(handle h);
  /// Whether find() can reach record `h`.
  bool is_indexed(handle h) const noexcept;
  /// Forgets record `h` entirely; the handle becomes invalid.
  void erase(handle h) noexcept;
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

  /// Forgets the records h_at(0) .. h_at(n - 1) (each held), like erase(h)
  /// n times with their memory accesses overlapped.
  template <class HandleAt>
  void erase_handles(std::size_t n, HandleAt&& h_at) noexcept;

  // ---- the record's fields ------------------------------------------------
  std::string_view id(handle h) const noexcept;
  std::string_view payload(handle h) const noexcept;
  std::uint16_t kind(handle h) const noexcept { return rec(h).kind; }
  std::int64_t due_ms(handle h) const noexcept { return rec(h).due_ms; }
  void set_due_ms(handle h, std::int64_t ms) noexcept { rec(h).due_ms = ms; }
  std::uint32_t attempts(handle h) const noexcept { return rec(h).attempts; }
  void set_attempts(handle h, std::uint32_t n) noexcept { rec(h).attempts = n; }
  /// Replaces payload, kind, due time stamp and attempts of record `h` (the
  /// id stays). Throws std::bad_alloc (the record is then unchanged).
  void assign(handle h, const item& it);
  /// The due tick record `h` was last armed with (meaningful while armed).
  std::uint64_t due_tick(handle h) const noexcept { return rec(h).due; }
  /// The owner's word of record `h` (see the essay).
  std::uint32_t& tag(handle h) noexcept { return rec(h).tag; }
  std::uint32_t tag(handle h) const noexcept { return rec(h).tag; }
  /// A view of record `h` for another thread (see the essay).
  record_view view(handle h) const noexcept;

  /// Calls `fn(handle)` for every held record, in no particular order. `fn`
  /// must not change the wheel.
  template <class Fn>
  void for_each(Fn&& fn) const;

  /// A tick at or before the earliest armed record's due tick (no_tick when
  /// nothing is armed). Sleeping until it never misses a task.
  std::uint64_t next_due_tick() const noexcept;

  /// Advances to `to_tick`, handing every armed record whose due tick is
  /// <= to_tick to `sink(handle)`, in due-tick order (insertion order within
  /// one tick). Each record is disarmed but still held when the sink gets it:
  /// the sink may erase() it, arm() it again, or keep it detached. The sink
  /// may insert, arm and erase other records, but must not call advance().
  /// The records due at one tick leave their slot together: one that the sink
  /// erases, arms or disarms before its turn is not handed over.
  /// Returns the number of records handed over.
  template <class Sink>
  std::size_t advance(std::uint64_t to_tick, Sink&& sink);

  /// Entries in the slot of `tick`, the arrivals, and the far array when
  /// `tick` reaches its edge (reaching it moves them): at least the records
  /// due at that tick, more when later revolutions' or stale entries are
  /// counted too. A cheap bound, to tell a heavy tick ahead of time.
  std::size_t slot_load(std::uint64_t tick) const noexcept {
    return (slots_.empty() ? 0 : slots_[slot_of(tick)].size()) + arrivals_.size() +
           (tick >= far_from_ ? far_.size() : 0);  // reaching it migrates them
  }

  /// Hands the records due at `tick` to `sink(handle)` as advance(tick)
  /// would, ahead of time: `tick` must be next_due_tick(), and now() does
  /// not move, so a record armed for `tick` afterwards still waits for
  /// advance() to reach it. For an owner that prepares a heavy tick before
  /// it begins. Returns the number of records handed over.
  template <class Sink>
  std::size_t take_tick(std::uint64_t tick, Sink&& sink);

  /// Takes out of the tick under way (now() + 1) the armed records whose
  /// due time in milliseconds (due_ms()) is at most `due_ms`, disarmed and
  /// held as advance() hands them over, appending them to `out`; the rest of
  /// that tick stays armed, and now() does not move. For an owner whose
  /// clock is finer than a tick: a task filed at the next boundary may be
  /// due by its own milliseconds already. Returns how many were taken.
  std::size_t take_due_by(std::int64_t due_ms, std::vector<handle>& out);

  /// Bytes the wheel holds for its own structures (record chunks, index,
  /// slot arrays) and for the heap blocks of ids and payloads too long to
  /// be inline (their bytes, counted separately by heap_bytes()).
  std::size_t memory_bytes() const noexcept;
  /// Bytes of ids and payloads held in heap blocks.
  std::size_t heap_bytes() const noexcept { return heap_bytes_; }

 private:
  // A record's sequence word: a generation count above two state bits. The
  // state says where the record is; the generation changes whenever an entry
  // written for it must stop counting (see "Lazy removal" above).
  enum state : std::uint32_t { free_state = 0, detached = 1, armed_state = 2, pending = 3 };
  static constexpr std::uint32_t state_mask = 3;
  static constexpr std::uint32_t generation_step = 4;

  struct alignas(64) record {
    std::uint64_t due = 0;  // while armed: the tick; while free: the next free record
    std::int64_t due_ms = 0;
    std::uint32_t seq = 0;  // generation << 2 | state
    std::uint32_t tag = 0;  // the owner's word; the wheel leaves it alone after construction
    std::uint32_t attempts = 0;
    std::uint32_t payload_len = 0;
    std::uint16_t id_len = 0;
    std::uint16_t kind = 0;
    std::uint8_t flags = 0;  // indexed_flag
    char data[27];
    // The layout of data (sizes from the lengths):
    //   id + payload <= 27 bytes:   [id][payload]
    //   id <= 19 bytes:             [id] ... [payload pointer at data + 19]
    //   else:                       ... [pointer to id then payload at data + 19]
  };
  static_assert(sizeof(record) == 64, "a record is one cache line");
  static constexpr std::uint8_t indexed_flag = 1;
  static constexpr std::size_t data_bytes = sizeof(record::data);
  static constexpr std::size_t pointer_at = data_bytes - sizeof(char*);

  struct entry {  // one arming of a record, in the array of its slot
    std::uint64_t due;
    handle h;
    std::uint32_t seq;
  };
  // The far array: entries in blocks of 1,024 (16 KiB) that never move, so
  // that growing it copies nothing and its memory is what it holds, not up
  // to twice that as a doubling vector's (a million far tasks take 16 MB).
  class entry_blocks {
   public:
    std::size_t size() const noexcept { return size_; }
    bool empty() const noexcept { return size_ == 0; }
    std::size_t capacity() const noexcept { return blocks_.size() * per_block; }
    std::size_t blocks() const noexcept { return blocks_.size(); }
    entry& operator[](std::size_t i) noexcept { return blocks_[i >> bits][i & (per_block - 1)]; }
    void push_back(const entry& e) {
      if (size_ == capacity()) blocks_.push_back(std::unique_ptr<entry[]>(new entry[per_block]));
      entry* p = &(*this)[size_];
      *p = e;
      // Each fourth entry, the line holding the entry four ahead is asked
      // for (blocks are 16-byte aligned, so not always the next line): the
      // array is one stream among every table's, which the hardware's
      // prefetcher does not follow, and its line fills stalled a schedule
      // at 1e6 tasks.
      if ((size_ & 3) == 0 && (size_ & (per_block - 1)) + 4 < per_block)
        __builtin_prefetch(p + 4, 1);
      ++size_;
    }
    // Keeps the first n entries, and the blocks they need plus one spare.
    void truncate(std::size_t n) noexcept {
      size_ = n;
      const std::size_t keep = (n + per_block - 1) / per_block + 1;
      if (blocks_.size() > keep) blocks_.resize(keep);
    }

   private:
    static constexpr unsigned bits = 10;
    static constexpr std::size_t per_block = std::size_t{1} << bits;
    std::vector<std::unique_ptr<entry[]>> blocks_;
    std::size_t size_ = 0;
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
  static constexpr unsigned chunk_bits = 15;          // 32768 records = 2 MiB after it
  static constexpr std::uint32_t chunk_size = std::uint32_t{1} << chunk_bits;

  record& rec(handle h) noexcept { return *record_ptr(h); }
  const record& rec(handle h) const noexcept { return *record_ptr(h); }
  record* record_ptr(handle h) const noexcept {
    if (h < first_chunk) return static_cast<record*>(chunks_[0].get()) + h;
    const std::uint32_t k = h - first_chunk;
    return static_cast<record*>(chunks_[1 + (k >> chunk_bits)].get()) + (k & (chunk_size - 1));
  }
  std::size_t capacity() const noexcept;

  static std::string_view id_of(const record& r) noexcept;
  static std::string_view payload_of(const record& r) noexcept;
  // Stores id and payload bytes into `r` (whose old heap block, if any, the
  // caller has released). Throws std::bad_alloc before changing anything.
  void store_bytes(record& r, std::string_view id, std::string_view payload);
  // Releases r's heap block, if any.
  void release_bytes(record& r) noexcept;

  handle allocate_record();
  void free_record(handle h) noexcept;
  void add_chunk();
  void push_entry(handle h, std::uint64_t due);
  void compact_slot(std::size_t s);
  // Counts the entry of armed record `r` as stale where it lies, its slot
  // or the far array (before `r` changes: the place is its due tick's).
  void went_stale(const record& r) noexcept;

  std::size_t index_find(std::string_view id, std::uint32_t hash) const noexcept;
  void index_insert(handle h, std::uint32_t hash);
  void index_erase_at(std::size_t i) noexcept;
  // Where indexed record h's entry is in the index.
  std::size_t index_position(handle h) const noexcept;
  void index_grow();
  index_entry* index() const noexcept { return static_cast<index_entry*>(index_.get()); }
  // Forgets held record h; index_pos is its index entry, or no_slot when it
  // is not indexed.
  void erase_found(handle h, std::size_t index_pos) noexcept;

  // Moves the valid entries of slot `s` due at or before `tick` into `out`
  // (their records become pending), drops stale ones, and makes the slot's
  // lower bound exact again.
  void collect_due(std::size_t s, std::uint64_t tick, std::vector<handle>& out);

  // Appends an entry to its slot's array (compacting or growing it).
  void place_entry(const entry& e);
  // Moves every arrival to its slot, with the memory of the slots a few
  // entries ahead requested early (see "Arrivals" in the essay).
  void drain_arrivals();
  // Places entries a[0] .. a[n - 1] in their slots that way, dropping the
  // stale ones (counted against the far array when `from_far`, else
  // against their slots).
  void place_all(const entry* a, std::size_t n, bool from_far);

  // The far array (the essay's "Far tasks"). far_edge(t): the first tick
  // past t that migrating at t leaves in it.
  std::uint64_t far_edge(std::uint64_t t) const noexcept {
    const std::uint64_t span = far_revolutions * static_cast<std::uint64_t>(slot_count_);
    return t >= no_tick - span ? no_tick : t + span;
  }
  void push_far(const entry& e);
  void compact_far();
  template <class Entries>
  std::pair<std::size_t, std::uint64_t> keep_live(Entries& v) const noexcept;
  // Moves the far entries due before far_edge(tick) to their slots, so that
  // every entry due by `tick` is in a slot.
  void migrate(std::uint64_t tick);

  // The slot of `tick`. A power-of-two slot count (the engine's default)
  // takes a mask instead of a 64-bit division, which the paths that arm and
  // cancel a task each pay once.
  std::size_t slot_of(std::uint64_t tick) const noexcept {
    return static_cast<std::size_t>(slot_mask_ != 0 ? tick & slot_mask_ : tick % slot_count_);
  }

  std::size_t slot_count_;
  std::uint64_t slot_mask_;  // slot_count_ - 1 for a power of two above 1, else 0
  std::uint64_t now_ = 0;
  std::size_t size_ = 0;
  std::size_t armed_ = 0;
  std::size_t heap_bytes_ = 0;
  std::uint64_t seed_;

  // The slot arrays, empty until the first entry that is not far
  // (allocate_slots()); every slot is empty and unoccupied until then.
  void allocate_slots();
  std::vector<std::vector<entry>> slots_;
  std::vector<std::uint64_t> slot_min_;  // lower bound of the earliest due tick per slot
  std::vector<std::uint32_t> stale_;     // stale entries per slot: when compacting pays
  std::vector<std::uint64_t> occupied_;  // one bit per slot with entries (valid or stale)
  // Entries armed since the last drain, in arming order, not yet in their
  // slots; arrivals_min_ is a lower bound of their due ticks.
  std::vector<entry> arrivals_;
  std::uint64_t arrivals_min_ = no_tick;
  // Entries due at or after far_from_, in arming order (the essay's "Far
  // tasks"); far_min_ is a lower bound of their due ticks, far_stale_ how
  // many are stale. Every entry due before far_from_ is in a slot or an
  // arrival.
  static constexpr std::uint64_t far_revolutions = 2;
  entry_blocks far_;
  std::vector<entry> far_moving_;  // reused by migrate()
  std::uint64_t far_from_ = 0;     // far_edge(0) once constructed
  std::uint64_t far_min_ = no_tick;
  std::size_t far_stale_ = 0;

  std::vector<block> chunks_;
  handle free_head_ = npos;  // free records are chained through record::due
  std::uint32_t fresh_ = 0;  // records ever handed out; later ones are unconstructed

  block index_;
  std::size_t index_size_ = 0;
  std::size_t index_mask_ = 0;
  // The index's address and mask again, for prefetch() from other threads.
  // A stale pair names a table that may have been freed: prefetching it is
  // harmless (prefetches never fault), only useless.
  std::atomic<const index_entry*> prefetch_table_{nullptr};
  std::atomic<std::size_t> prefetch_mask_{0};

  std::vector<handle> scratch_;     // reused by advance()
  std::vector<entry> due_scratch_;  // reused by collect_due()
};

class timer_wheel::record_view {
 public:
  record_view() = default;
  std::string_view id() const noexcept { return id_of(*r_); }
  std::string_view payload() const noexcept { return payload_of(*r_); }
  std::uint16_t kind() const noexcept { return r_->kind; }
  std::int64_t due_ms() const noexcept { return r_->due_ms; }
  std::uint32_t attempts() const noexcept { return r_->attempts; }
  /// The owner word's address, for std::atomic_ref.
  std::uint32_t* tag() const noexcept { return &r_->tag; }
  explicit operator bool() const noexcept { return r_ != nullptr; }

 private:
  friend class timer_wheel;
  explicit record_view(record* r) noexcept : r_(r) {}
  record* r_ = nullptr;
};

inline timer_wheel::record_view timer_wheel::view(handle h) const noexcept {
  return record_view(record_ptr(h));
}

inline std::string_view timer_wheel::id_of(const record& r) noexcept {
  if (r.id_len + std::size_t{r.payload_len} <= data_bytes || r.id_len <= pointer_at)
    return {r.data, r.id_len};
  const char* p;
  std::memcpy(&p, r.data + pointer_at, sizeof p);
  return {p, r.id_len};
}

inline std::string_view timer_wheel::payload_of(const record& r) noexcept {
  if (r.id_len + std::size_t{r.payload_len} <= data_bytes)
    return {r.data + r.id_len, r.payload_len};
  const char* p;
  std::memcpy(&p, r.data + pointer_at, sizeof p);
  return r.id_len <= pointer_at ? std::string_view{p, r.payload_len}
                                : std::string_view{p + r.id_len, r.payload_len};
}

inline std::string_view timer_wheel::id(handle h) const noexcept { return id_of(rec(h)); }
inline std::string_view timer_wheel::payload(handle h) const noexcept { return payload_of(rec(h)); }

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
    const std::uint32_t h = hash(std::string_view(id_at(k)));
    hashes[k % ahead] = h;
    prefetch(h);
  };
  for (std::size_t k = ahead; k < id_ahead && k < n; ++k) request_id(k);
  for (std::size_t k = 0; k < ahead && k < n; ++k) request_bucket(k);
  std::size_t erased = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t h = hashes[i % ahead];
    if (i + id_ahead < n) request_id(i + id_ahead);
    if (i + ahead < n) request_bucket(i + ahead);
    if (i + ahead / 2 < n) {
      const index_entry& guess = index()[hashes[(i + ahead / 2) % ahead] & index_mask_];
      if (guess.node != npos) __builtin_prefetch(record_ptr(guess.node));
    }
    const std::size_t pos = index_find(std::string_view(id_at(i)), h);
    if (pos == no_slot) continue;
    erase_found(index()[pos].node, pos);
    ++erased;
  }
  return erased;
}

template <class HandleAt>
void timer_wheel::erase_handles(std::size_t n, HandleAt&& h_at) noexcept {
  // Records i + 16 are requested, the index buckets of records i + 8 (their
  // ids are in cache by then) too, and record i is erased.
  constexpr std::size_t ahead = 16;
  for (std::size_t k = 0; k < ahead && k < n; ++k) __builtin_prefetch(record_ptr(h_at(k)));
  for (std::size_t i = 0; i < n; ++i) {
    if (i + ahead < n) __builtin_prefetch(record_ptr(h_at(i + ahead)));
    if (i + ahead / 2 < n) {
      const record& r = rec(h_at(i + ahead / 2));
      if (r.flags & indexed_flag) prefetch(hash(id_of(r)));
    }
    const handle h = h_at(i);
    erase_found(h, (rec(h).flags & indexed_flag) ? index_position(h) : no_slot);
  }
}

template <class Fn>
void timer_wheel::for_each(Fn&& fn) const {
  for (handle h = 0; h < fresh_; ++h)
    if ((rec(h).seq & state_mask) != free_state) fn(h);
}

template <class Sink>
std::size_t timer_wheel::take_tick(std::uint64_t tick, Sink&& sink) {
  if (!arrivals_.empty()) drain_arrivals();
  if (tick <= now_ || tick == no_tick || next_due_tick() != tick) return 0;
  if (tick >= far_from_) migrate(tick);
  std::vector<handle> batch;
  batch.swap(scratch_);
  batch.clear();
  collect_due(slot_of(tick), tick, batch);
  std::size_t fired = 0;
  for (handle h : batch) {
    record& r = rec(h);
    if ((r.seq & state_mask) != pending) continue;  // erased, armed or disarmed by the sink
    r.seq = (r.seq & ~state_mask) | detached;
    ++fired;
    sink(h);
  }
  batch.clear();
  scratch_.swap(batch);
  return fired;
}

template <class Sink>
std::size_t timer_wheel::advance(std::uint64_t to_tick, Sink&& sink) {
  std::size_t fired = 0;
  std::vector<handle> batch;
  batch.swap(scratch_);
  while (true) {
    if (!arrivals_.empty()) drain_arrivals();  // the sink may have armed some
    const std::uint64_t tick = next_due_tick();
    if (tick == no_tick || tick > to_tick) break;
    if (tick >= far_from_) {
      // Far entries due by then go to their slots first: all those due by
      // to_tick in one pass, however many revolutions that crosses.
      migrate(std::max(tick, to_tick));
      continue;
    }
    now_ = tick;
    batch.clear();
    collect_due(slot_of(tick), tick, batch);
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
  if (armed_ == 0 && !far_.empty()) {  // nothing armed: what is left there is stale
    far_.truncate(0);
    far_min_ = no_tick;
    far_stale_ = 0;
  }
  if (far_.empty()) far_from_ = std::max(far_from_, far_edge(now_));  // nothing to move
  batch.clear();
  scratch_.swap(batch);
  return fired;
}

}  // namespace delayq
