#include "delayq/timer_wheel.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cassert>
#include <chrono>
#include <cstring>
#include <new>
#include <random>
#include <stdexcept>

namespace delayq {

namespace {

constexpr std::size_t huge_page = std::size_t{2} << 20;

// GCC and Clang have a 128-bit integer on every 64-bit target we build for;
// __extension__ tells -Wpedantic we know it is not ISO C++.
__extension__ using u128 = unsigned __int128;

std::uint64_t load64(const char* p) noexcept {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
std::uint64_t load32(const char* p) noexcept {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

std::uint64_t mum(std::uint64_t a, std::uint64_t b) noexcept {
  const u128 r = static_cast<u128>(a) * b;
  return static_cast<std::uint64_t>(r) ^ static_cast<std::uint64_t>(r >> 64);
}

// wyhash (Wang Yi, public domain, final version 4), written out for the
// wheel: ids are short (a generated id is 15 bytes), and std::hash's
// _Hash_bytes was 17-23% of every operation in the profile. Seeded per wheel
// so that ids chosen by an outsider cannot be aimed at one probe run.
constexpr std::uint64_t wyp0 = 0xa0761d6478bd642fULL;
constexpr std::uint64_t wyp1 = 0xe7037ed1a0b428dbULL;

// `seed` is already mixed (new_seed()), as wyhash does on every call.
std::uint64_t hash_bytes(const char* p, std::size_t n, std::uint64_t seed) noexcept {
  std::uint64_t a = 0;
  std::uint64_t b = 0;
  if (n <= 16) {
    if (n >= 4) {
      const std::size_t q = (n >> 3) << 2;
      a = (load32(p) << 32) | load32(p + q);
      b = (load32(p + n - 4) << 32) | load32(p + n - 4 - q);
    } else if (n > 0) {
      a = (std::uint64_t{static_cast<unsigned char>(p[0])} << 16) |
          (std::uint64_t{static_cast<unsigned char>(p[n >> 1])} << 8) |
          static_cast<unsigned char>(p[n - 1]);
    }
  } else {
    std::size_t left = n;
    while (left > 16) {
      seed = mum(load64(p) ^ wyp1, load64(p + 8) ^ seed);
      p += 16;
      left -= 16;
    }
    a = load64(p + left - 16);
    b = load64(p + left - 8);
  }
  a ^= wyp1;
  b ^= seed;
  const u128 r = static_cast<u128>(a) * b;
  return mum(static_cast<std::uint64_t>(r) ^ wyp0 ^ n, static_cast<std::uint64_t>(r >> 64) ^ wyp1);
}

// Equality of a held id and a looked-up one without a call to memcmp for the
// short ids that are the rule (the libc call was 6% of a cancel).
bool same_id(std::string_view held, std::string_view id) noexcept {
  const std::size_t n = id.size();
  if (held.size() != n) return false;
  const char* a = held.data();
  const char* b = id.data();
  if (n >= 8) {
    if (n > 16) return std::memcmp(a, b, n) == 0;
    return load64(a) == load64(b) && load64(a + n - 8) == load64(b + n - 8);
  }
  if (n >= 4) return load32(a) == load32(b) && load32(a + n - 4) == load32(b + n - 4);
  for (std::size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return false;
  return true;
}

std::uint64_t new_seed() {
  // One draw from the OS per process; later wheels mix in a counter.
  static const std::uint64_t base = [] {
    std::random_device rd;
    return (std::uint64_t{rd()} << 32) ^ rd();
  }();
  static std::atomic<std::uint64_t> counter{0};
  const std::uint64_t seed =
      mum(base ^ wyp0, counter.fetch_add(1, std::memory_order_relaxed) + wyp1);
  return seed ^ mum(seed ^ wyp0, wyp1);
}

}  // namespace

// ---------------------------------------------------------------- block

timer_wheel::block::block(std::size_t bytes) : bytes_(bytes) {
  if (bytes >= huge_page) {
    bytes_ = (bytes + huge_page - 1) / huge_page * huge_page;
    p_ = ::operator new (bytes_, std::align_val_t{huge_page});
    // Advice only: where the kernel has no huge page to give (or THP is off)
    // the memory is backed by 4 KiB pages, which is merely slower.
    ::madvise(p_, bytes_, MADV_HUGEPAGE);
  } else {
    bytes_ = std::max<std::size_t>((bytes + 63) / 64 * 64, 64);
    p_ = ::operator new (bytes_, std::align_val_t{64});
  }
}

timer_wheel::block& timer_wheel::block::operator=(block&& o) noexcept {
  if (this != &o) {
    block old(std::move(*this));
    p_ = std::exchange(o.p_, nullptr);
    bytes_ = o.bytes_;
  }
  return *this;
}

timer_wheel::block::~block() {
  if (p_ == nullptr) return;
  ::operator delete (p_, bytes_ >= huge_page ? std::align_val_t{huge_page} : std::align_val_t{64});
}

// ---------------------------------------------------------------- lifetime

timer_wheel::timer_wheel(std::size_t slots, const timer_wheel& same_hash) : timer_wheel(slots) {
  seed_ = same_hash.seed_;
}

timer_wheel::timer_wheel(std::size_t slots)
    : slot_count_(slots),
      slot_mask_(slots > 1 && std::has_single_bit(slots) ? slots - 1 : 0),
      seed_(new_seed()) {
  if (slots == 0) throw std::invalid_argument("delayq::timer_wheel: slots must be > 0");
  // The slot arrays come with the first entry due within two revolutions
  // (allocate_slots()): an engine of 32 tables made 32 wheels, and their
  // 144 KB each at 4,096 slots were most of an idle engine's memory.
  occupied_.assign((slots + 63) / 64, 0);
  index_ = block(16 * sizeof(index_entry));
  index_size_ = 16;
  index_mask_ = 15;
  std::uninitialized_fill_n(index(), index_size_, index_entry{});
  prefetch_table_.store(index(), std::memory_order_relaxed);
  prefetch_mask_.store(index_mask_, std::memory_order_relaxed);
  far_from_ = far_edge(0);
}

timer_wheel::~timer_wheel() {
  for (handle h = 0; h < fresh_; ++h) {
    record& r = rec(h);
    if ((r.seq & state_mask) != free_state) release_bytes(r);
  }
  // Records are trivially destructible: the chunks just go.
}

void timer_wheel::reserve(std::size_t n) {
  while (capacity() < n) add_chunk();
  // Keep the load factor at or below 3/4 with n entries.
  while (n * 4 > index_size_ * 3) index_grow();
}

// ---------------------------------------------------------------- records

std::size_t timer_wheel::capacity() const noexcept {
  return chunks_.empty() ? 0 : first_chunk + (chunks_.size() - 1) * std::size_t{chunk_size};
}

void timer_wheel::add_chunk() {
  const std::size_t records = chunks_.empty() ? first_chunk : chunk_size;
  if (capacity() + records >= npos) throw std::length_error("delayq::timer_wheel: too many tasks");
  chunks_.emplace_back(records * sizeof(record));
}

timer_wheel::handle timer_wheel::allocate_record() {
  if (free_head_ != npos) {
    // Last freed, first reused: its line is likely still in cache.
    const handle h = free_head_;
    free_head_ = static_cast<handle>(rec(h).due);
    return h;
  }
  // Fresh records are handed out in order, so chunks added by reserve() are used.
  if (fresh_ == capacity()) add_chunk();
  std::construct_at(record_ptr(fresh_));
  // The next fresh record's line, asked for now: writing a record is a
  // line fill the hardware's prefetcher does not foresee (with several
  // tables each one's records are a stream among many), and it was the
  // largest stall of a schedule at 1e6 tasks (docs/benchmarks.md).
  if (fresh_ + 1 < capacity()) __builtin_prefetch(record_ptr(fresh_ + 1), 1);
  return fresh_++;
}

void timer_wheel::free_record(handle h) noexcept {
  record& r = rec(h);
  // Heap bytes go now rather than when the record is reused: a 1 MiB payload
  // should not outlive its task. The owner's word stays (see the header).
  release_bytes(r);
  r.id_len = 0;
  r.payload_len = 0;
  r.flags = 0;
  r.seq = (r.seq | state_mask) + 1;  // a new generation, state free: any entry is stale
  r.due = free_head_;
  free_head_ = h;
}

void timer_wheel::store_bytes(record& r, std::string_view id, std::string_view payload) {
  if (id.size() > std::numeric_limits<std::uint16_t>::max() ||
      payload.size() > std::numeric_limits<std::uint32_t>::max())
    throw std::length_error("delayq::timer_wheel: id or payload too long");
  const std::size_t n = id.size() + payload.size();
  if (n <= data_bytes) {
    if (!id.empty()) std::memcpy(r.data, id.data(), id.size());
    if (!payload.empty()) std::memcpy(r.data + id.size(), payload.data(), payload.size());
  } else if (id.size() <= pointer_at) {
    char* p = new char[payload.size()];
    std::memcpy(p, payload.data(), payload.size());
    std::memcpy(r.data, id.data(), id.size());
    std::memcpy(r.data + pointer_at, &p, sizeof p);
    heap_bytes_ += payload.size();
  } else {
    char* p = new char[n];
    std::memcpy(p, id.data(), id.size());
    if (!payload.empty()) std::memcpy(p + id.size(), payload.data(), payload.size());
    std::memcpy(r.data + pointer_at, &p, sizeof p);
    heap_bytes_ += n;
  }
  r.id_len = static_cast<std::uint16_t>(id.size());
  r.payload_len = static_cast<std::uint32_t>(payload.size());
}

void timer_wheel::release_bytes(record& r) noexcept {
  const std::size_t n = r.id_len + std::size_t{r.payload_len};
  if (n <= data_bytes) return;
  char* p;
  std::memcpy(&p, r.data + pointer_at, sizeof p);
  delete[] p;
  heap_bytes_ -= r.id_len <= pointer_at ? r.payload_len : n;
}

void timer_wheel::assign(handle h, const item& it) {
  record& r = rec(h);
  if (payload_of(r) != it.payload) {
    // Copy the id out first: it may live in the block being replaced.
    std::string id(id_of(r));
    record fresh;  // built aside, so a bad_alloc leaves `r` as it was
    store_bytes(fresh, id, it.payload);
    release_bytes(r);
    std::memcpy(r.data, fresh.data, data_bytes);
    r.id_len = fresh.id_len;
    r.payload_len = fresh.payload_len;
  }
  r.kind = it.kind;
  r.due_ms = it.due_ms;
  r.attempts = it.attempts;
}

// ---------------------------------------------------------------- slots

// Arrivals moved to their slots at once (the essay's "Arrivals"): enough for
// eight prefetches ahead to overlap, few enough that the caller who drains
// them holds the engine's lock for a few microseconds only. 32, 64, 128 and
// 256 measured the same within the noise (delayq-bench-engine --scenarios
// threads, one after another on 2026-11-29).
constexpr std::size_t arrivals_batch = 64;

void timer_wheel::allocate_slots() {
  // All three or none: made aside, then moved in (moves do not throw), so
  // a bad_alloc leaves the wheel as it was.
  std::vector<std::vector<entry>> slots(slot_count_);
  std::vector<std::uint64_t> slot_min(slot_count_, no_tick);
  std::vector<std::uint32_t> stale(slot_count_, 0);
  slots_ = std::move(slots);
  slot_min_ = std::move(slot_min);
  stale_ = std::move(stale);
}

void timer_wheel::push_entry(handle h, std::uint64_t due) {
  record& r = rec(h);
  r.due = due;
  r.seq = ((r.seq | state_mask) + 1) | armed_state;  // a new generation: older entries are stale
  if (due >= far_from_) return push_far(entry{due, h, r.seq});
  // An entry in a slot or an arrival may go stale (went_stale()) or be
  // placed: the slot arrays exist from here on.
  if (slots_.empty()) allocate_slots();
  if (arrivals_.capacity() == 0) arrivals_.reserve(arrivals_batch);
  arrivals_.push_back(entry{due, h, r.seq});
  arrivals_min_ = std::min(arrivals_min_, due);
  if (arrivals_.size() >= arrivals_batch) drain_arrivals();
}

void timer_wheel::drain_arrivals() {
  place_all(arrivals_.data(), arrivals_.size(), false);
  arrivals_.clear();
  arrivals_min_ = no_tick;
}

void timer_wheel::place_all(const entry* a, std::size_t n, bool from_far) {
  // Two dependent loads per entry: the slot's vector object, then the end of
  // its array. The first (and the record, to tell a stale entry) is asked
  // for 2 * ahead entries early, the second `ahead` entries early (by then
  // the vector object has arrived), so the misses of several entries are in
  // flight at once.
  constexpr std::size_t ahead = 8;
  for (std::size_t i = 0; i < std::min(2 * ahead, n); ++i) {
    __builtin_prefetch(&slots_[slot_of(a[i].due)]);
    __builtin_prefetch(record_ptr(a[i].h));
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (i + 2 * ahead < n) {
      __builtin_prefetch(&slots_[slot_of(a[i + 2 * ahead].due)]);
      __builtin_prefetch(record_ptr(a[i + 2 * ahead].h));
    }
    if (i + ahead < n) {
      const std::vector<entry>& v = slots_[slot_of(a[i + ahead].due)];
      __builtin_prefetch(v.data() + v.size(), 1);
    }
    // An entry cancelled or moved since it was armed was counted stale
    // where it lay then (went_stale); it is dropped here instead of placed,
    // so the count stays true for the compaction.
    const record& r = rec(a[i].h);
    if (r.seq != a[i].seq || r.due != a[i].due) {
      if (from_far) {
        if (far_stale_ > 0) --far_stale_;
      } else if (const std::size_t s = slot_of(a[i].due); stale_[s] > 0) {
        --stale_[s];
      }
      continue;
    }
    place_entry(a[i]);
  }
}

// ---------------------------------------------------------------- far tasks

void timer_wheel::push_far(const entry& e) {
  if (far_.size() == far_.capacity() && !far_.empty() && far_stale_ >= far_.size() / 2)
    compact_far();  // as a slot's array: at most two record reads per append, amortised
  far_.push_back(e);
  far_min_ = std::min(far_min_, e.due);
}

void timer_wheel::compact_far() {
  const auto [keep, least] = keep_live(far_);
  far_.truncate(keep);
  far_min_ = least;
  far_stale_ = 0;
}

void timer_wheel::migrate(std::uint64_t tick) {
  // One sequential pass: what is due before the new edge moves out (its
  // records are read only as it is placed), the rest closes ranks in order.
  const std::uint64_t until = far_edge(tick);
  // Before anything moves: a bad_alloc here leaves the far array whole.
  if (slots_.empty() && far_min_ < until) allocate_slots();
  far_moving_.clear();
  std::size_t keep = 0;
  std::uint64_t least = no_tick;
  for (std::size_t i = 0, n = far_.size(); i < n; ++i) {
    const entry e = far_[i];
    if (e.due < until) {
      far_moving_.push_back(e);
    } else {
      far_[keep++] = e;
      least = std::min(least, e.due);
    }
  }
  far_.truncate(keep);  // and the blocks it no longer needs go
  far_min_ = least;
  far_from_ = until;
  place_all(far_moving_.data(), far_moving_.size(), true);
  if (far_.empty()) far_stale_ = 0;
  if (far_moving_.capacity() > 1024) std::vector<entry>().swap(far_moving_);
  far_moving_.clear();
}

void timer_wheel::place_entry(const entry& e) {
  const std::size_t s = slot_of(e.due);
  std::vector<entry>& v = slots_[s];
  if (v.size() == v.capacity()) {
    if (v.empty()) {
      v.reserve(4);  // not 1, 2, 4: three allocations for a slot's first entries
    } else if (stale_[s] >= v.size() / 2) {
      // At least half the array is stale: compacting it costs a record read
      // per entry and frees at least half of them, so at most two reads per
      // append, amortised. With fewer stale entries the array grows instead
      // (no reads at all), by half rather than doubling: with thousands of
      // slot arrays the slack is per-task memory.
      compact_slot(s);
    } else {
      v.reserve(v.capacity() + v.capacity() / 2);
    }
  }
  v.push_back(e);
  slot_min_[s] = std::min(slot_min_[s], e.due);
  occupied_[s / 64] |= std::uint64_t{1} << (s % 64);
}

void timer_wheel::went_stale(const record& r) noexcept {
  if (r.due >= far_from_)
    ++far_stale_;
  else
    ++stale_[slot_of(r.due)];
}

// The live entries of `v` (a slot's array or the far array) moved to its
// front in their order, the stale ones dropped: how many are kept, and the
// earliest due tick among them.
template <class Entries>
std::pair<std::size_t, std::uint64_t> timer_wheel::keep_live(Entries& v) const noexcept {
  constexpr std::size_t ahead = 8;  // records are scattered: ask for them early
  const std::size_t n = v.size();
  for (std::size_t i = 0; i < std::min(ahead, n); ++i) __builtin_prefetch(record_ptr(v[i].h));
  std::size_t keep = 0;
  std::uint64_t least = no_tick;
  for (std::size_t i = 0; i < n; ++i) {
    if (i + ahead < n) __builtin_prefetch(record_ptr(v[i + ahead].h));
    const entry e = v[i];
    const record& r = rec(e.h);
    if (r.seq == e.seq && r.due == e.due) {
      v[keep++] = e;
      least = std::min(least, e.due);
    }
  }
  return {keep, least};
}

void timer_wheel::compact_slot(std::size_t s) {
  std::vector<entry>& v = slots_[s];
  const auto [keep, least] = keep_live(v);
  v.resize(keep);
  slot_min_[s] = least;
  stale_[s] = 0;
  if (keep == 0) occupied_[s / 64] &= ~(std::uint64_t{1} << (s % 64));
}

void timer_wheel::collect_due(std::size_t s, std::uint64_t tick, std::vector<handle>& out) {
  std::vector<entry>& v = slots_[s];
  due_scratch_.clear();
  std::size_t keep = 0;
  std::uint64_t least = no_tick;
  // One pass over the array: entries due now are set aside (and their records
  // requested from memory, all at once), the rest close ranks in order.
  for (std::size_t i = 0, n = v.size(); i < n; ++i) {
    const entry e = v[i];
    if (e.due <= tick) {
      __builtin_prefetch(record_ptr(e.h));
      due_scratch_.push_back(e);
    } else {
      v[keep++] = e;
      least = std::min(least, e.due);
    }
  }
  v.resize(keep);
  for (const entry& e : due_scratch_) {
    record& r = rec(e.h);
    if (r.seq != e.seq || r.due != e.due) {  // stale: cancelled or moved since
      if (stale_[s] > 0) --stale_[s];
      continue;
    }
    r.seq = (r.seq & ~state_mask) | pending;
    --armed_;
    out.push_back(e.h);
  }
  if (keep == 0) {
    occupied_[s / 64] &= ~(std::uint64_t{1} << (s % 64));
    slot_min_[s] = no_tick;
  } else {
    slot_min_[s] = least;
  }
  // Give back what a burst left behind, keeping room to double.
  if (v.capacity() > 64 && v.capacity() > 4 * keep) {
    std::vector<entry> smaller;
    smaller.reserve(std::max<std::size_t>(2 * keep, 4));
    smaller.assign(v.begin(), v.end());
    v.swap(smaller);
  }
}

std::size_t timer_wheel::take_due_by(std::int64_t due_ms, std::vector<handle>& out) {
  if (!arrivals_.empty()) drain_arrivals();
  if (armed_ == 0) return 0;
  const std::uint64_t tick = now_ + 1;
  if (tick >= far_from_ && far_min_ <= tick) migrate(tick);
  const std::size_t s = slot_of(tick);
  if (slots_.empty() || slot_min_[s] > tick) return 0;  // nothing of this tick in its slot
  std::vector<entry>& v = slots_[s];
  std::size_t keep = 0, taken = 0;
  std::uint64_t least = no_tick;
  for (std::size_t i = 0, n = v.size(); i < n; ++i) {
    const entry e = v[i];
    record& r = rec(e.h);
    if (e.due == tick && r.seq == e.seq && r.due == e.due && r.due_ms <= due_ms) {
      // As advance() leaves a record it hands over: disarmed, still held.
      r.seq = (r.seq & ~state_mask) | detached;
      --armed_;
      out.push_back(e.h);
      ++taken;
      continue;
    }
    v[keep++] = e;
    least = std::min(least, e.due);
  }
  v.resize(keep);
  if (keep == 0) {
    occupied_[s / 64] &= ~(std::uint64_t{1} << (s % 64));
    slot_min_[s] = no_tick;
  } else {
    slot_min_[s] = least;
  }
  return taken;
}

std::uint64_t timer_wheel::next_due_tick() const noexcept {
  if (armed_ == 0) return no_tick;
  const std::size_t start = slot_of(now_ + 1);
  std::uint64_t best = no_tick;
  // Scans slots [from, to) in order; slot `from` is at tick `base`. The first
  // slot whose bound says "due in this revolution" is the answer: every slot
  // after it in circular order comes later in time.
  auto scan = [&](std::size_t from, std::size_t to, std::uint64_t base) -> std::uint64_t {
    for (std::size_t w = from / 64; w * 64 < to; ++w) {
      std::uint64_t bits = occupied_[w];
      if (w == from / 64) bits &= ~std::uint64_t{0} << (from % 64);
      const std::size_t room = to - w * 64;
      if (room < 64) bits &= (std::uint64_t{1} << room) - 1;
      while (bits != 0) {
        const std::size_t s = w * 64 + static_cast<std::size_t>(std::countr_zero(bits));
        bits &= bits - 1;
        const std::uint64_t tick = base + (s - from);
        if (slot_min_[s] <= tick) return tick;
        best = std::min(best, slot_min_[s]);
      }
    }
    return no_tick;
  };
  // Defensive: advance() leaves far_min_ after now() (it migrates any far
  // bound it reaches, or clears the array when nothing is armed), but a
  // bound from before now() must still name a tick to come.
  const std::uint64_t others =
      std::min(arrivals_min_, far_min_ == no_tick ? no_tick : std::max(far_min_, now_ + 1));
  if (auto t = scan(start, slot_count_, now_ + 1); t != no_tick) return std::min(t, others);
  if (auto t = scan(0, start, now_ + 1 + (slot_count_ - start)); t != no_tick)
    return std::min(t, others);
  return std::min(best, others);
}

// ---------------------------------------------------------------- public ops

timer_wheel::handle timer_wheel::insert(const item& it, std::uint32_t hash,
                                        std::uint64_t due_tick) {
  const handle h = insert_detached(it, hash);
  if (h != npos) arm(h, due_tick);
  return h;
}

timer_wheel::handle timer_wheel::insert_detached(const item& it, std::uint32_t hash) {
  if (index_find(it.id, hash) != no_slot) return npos;
  return insert_absent(it, hash);
}

timer_wheel::handle timer_wheel::insert_absent(const item& it, std::uint32_t hash) {
  assert(index_find(it.id, hash) == no_slot);  // the caller's promise
  if ((size_ + 1) * 4 > index_size_ * 3) index_grow();
  const handle h = allocate_record();
  record& r = rec(h);
  try {
    store_bytes(r, it.id, it.payload);
  } catch (...) {
    r.seq = (r.seq | state_mask) + 1;  // still free
    r.due = free_head_;
    free_head_ = h;
    throw;
  }
  r.kind = it.kind;
  r.due_ms = it.due_ms;
  r.attempts = it.attempts;
  r.flags = indexed_flag;
  r.seq = (r.seq & ~state_mask) | detached;
  index_insert(h, hash);
  ++size_;
  return h;
}

void timer_wheel::arm(handle h, std::uint64_t due_tick) noexcept {
  if (is_armed(h))
    went_stale(rec(h));
  else
    ++armed_;
  if (due_tick <= now_) due_tick = now_ + 1;
  // no_tick means "nothing armed" to next_due_tick(); the tick before it is
  // already half a million years away at 1 ms per tick.
  if (due_tick == no_tick) due_tick = no_tick - 1;
  // noexcept although push_entry may allocate: a slot array that cannot grow
  // is out of memory, and std::terminate is the honest answer there.
  push_entry(h, due_tick);
}

void timer_wheel::disarm(handle h) noexcept {
  record& r = rec(h);
  switch (r.seq & state_mask) {
    case armed_state:
      --armed_;
      went_stale(r);
      r.seq = ((r.seq | state_mask) + 1) | detached;  // its entry goes stale
      break;
    case pending: r.seq = (r.seq & ~state_mask) | detached; break;
    default: break;
  }
}

bool timer_wheel::is_armed(handle h) const noexcept {
  return (rec(h).seq & state_mask) == armed_state;
}

void timer_wheel::unindex(handle h) noexcept {
  record& r = rec(h);
  if (!(r.flags & indexed_flag)) return;
  disarm(h);
  index_erase_at(index_position(h));
  r.flags &= static_cast<std::uint8_t>(~indexed_flag);
}

bool timer_wheel::reindex(handle h) {
  record& r = rec(h);
  if (r.flags & indexed_flag) return true;
  const std::string_view key = id_of(r);
  const std::uint32_t hh = hash(key);
  if (index_find(key, hh) != no_slot) return false;
  if ((size_ + 1) * 4 > index_size_ * 3) index_grow();
  index_insert(h, hh);
  r.flags |= indexed_flag;
  return true;
}

bool timer_wheel::is_indexed(handle h) const noexcept { return rec(h).flags & indexed_flag; }

void timer_wheel::erase(handle h) noexcept {
  erase_found(h, (rec(h).flags & indexed_flag) ? index_position(h) : no_slot);
}

void timer_wheel::erase_found(handle h, std::size_t index_pos) noexcept {
  if (is_armed(h)) {
    --armed_;
    went_stale(rec(h));
  }
  if (index_pos != no_slot) index_erase_at(index_pos);
  free_record(h);
  --size_;
}

bool timer_wheel::erase(std::string_view id) noexcept {
  const std::size_t i = index_find(id, hash(id));
  if (i == no_slot) return false;
  erase_found(index()[i].node, i);
  return true;
}

bool timer_wheel::reschedule(std::string_view id, std::uint64_t due_tick) noexcept {
  const handle h = find(id);
  if (h == npos) return false;
  arm(h, due_tick);
  return true;
}

timer_wheel::handle timer_wheel::find(std::string_view id, std::uint32_t hash) const noexcept {
  const std::size_t i = index_find(id, hash);
  return i == no_slot ? npos : index()[i].node;
}

std::size_t timer_wheel::memory_bytes() const noexcept {
  std::size_t bytes =
      chunks_.capacity() * sizeof(block) + index_.bytes() +
      slots_.capacity() * sizeof(std::vector<entry>) +
      slot_min_.capacity() * sizeof(std::uint64_t) + stale_.capacity() * sizeof(std::uint32_t) +
      occupied_.capacity() * sizeof(std::uint64_t) + arrivals_.capacity() * sizeof(entry) +
      (far_.capacity() + far_moving_.capacity()) * sizeof(entry) +
      far_.blocks() * sizeof(std::unique_ptr<entry[]>) + scratch_.capacity() * sizeof(handle) +
      due_scratch_.capacity() * sizeof(entry) + heap_bytes_;
  for (const block& b : chunks_) bytes += b.bytes();
  for (const std::vector<entry>& v : slots_) bytes += v.capacity() * sizeof(entry);
  return bytes;
}

// ---------------------------------------------------------------- id index
//
// Open addressing with linear probing and backward-shift deletion (no
// tombstones, so lookups stay short however many cancels happen). An entry is
// the record's handle plus 32 bits of the id's hash: the hash both places the
// entry and filters out almost every non-matching probe before a string
// compare, and growing the table never rehashes a string.

std::uint32_t timer_wheel::hash(std::string_view id) const noexcept {
  return static_cast<std::uint32_t>(hash_bytes(id.data(), id.size(), seed_));
}

void timer_wheel::prefetch(std::uint32_t hash) const noexcept {
  const index_entry* table = prefetch_table_.load(std::memory_order_relaxed);
  __builtin_prefetch(table + (hash & prefetch_mask_.load(std::memory_order_relaxed)));
}

std::size_t timer_wheel::index_find(std::string_view id, std::uint32_t hash) const noexcept {
  const index_entry* table = index();
  for (std::size_t i = hash & index_mask_;; i = (i + 1) & index_mask_) {
    const index_entry& e = table[i];
    if (e.node == npos) return no_slot;
    if (e.hash == hash && same_id(id_of(rec(e.node)), id)) return i;
  }
}

void timer_wheel::index_insert(handle h, std::uint32_t hash) {
  index_entry* table = index();
  std::size_t i = hash & index_mask_;
  while (table[i].node != npos) i = (i + 1) & index_mask_;
  table[i] = index_entry{h, hash};
}

std::size_t timer_wheel::index_position(handle h) const noexcept {
  // The record is at hand, so its entry is found by handle: no string compare.
  const index_entry* table = index();
  std::size_t i = hash(id_of(rec(h))) & index_mask_;
  while (table[i].node != h) i = (i + 1) & index_mask_;
  return i;
}

void timer_wheel::index_erase_at(std::size_t i) noexcept {
  index_entry* table = index();
  // Backward-shift: pull later entries of the same probe run into the hole.
  for (std::size_t j = (i + 1) & index_mask_; table[j].node != npos; j = (j + 1) & index_mask_) {
    const std::size_t home = table[j].hash & index_mask_;
    // Entry j may move to i only if its home is not in the cyclic range (i, j].
    const bool home_in_range = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
    if (!home_in_range) {
      table[i] = table[j];
      i = j;
    }
  }
  table[i] = index_entry{};
}

void timer_wheel::index_grow() {
  const std::size_t old_size = index_size_;
  block old(index_size_ * 2 * sizeof(index_entry));
  std::uninitialized_fill_n(static_cast<index_entry*>(old.get()), index_size_ * 2, index_entry{});
  std::swap(old, index_);
  index_size_ *= 2;
  index_mask_ = index_size_ - 1;
  // Mask first: a reader pairing the old table with the new mask could
  // prefetch past the old table's end (harmless, but pointless).
  prefetch_table_.store(index(), std::memory_order_relaxed);
  prefetch_mask_.store(index_mask_, std::memory_order_relaxed);
  const auto* entries = static_cast<const index_entry*>(old.get());
  for (std::size_t k = 0; k < old_size; ++k)
    if (entries[k].node != npos) index_insert(entries[k].node, entries[k].hash);
}

}  // namespace delayq
