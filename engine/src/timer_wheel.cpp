#include "delayq/timer_wheel.hpp"

#include <algorithm>
#include <bit>
#include <functional>
#include <stdexcept>

namespace delayq {

timer_wheel::timer_wheel(std::size_t slots)
    : slot_count_(slots),
      slot_lists_(slots),
      slot_min_(slots, no_tick),
      occupied_((slots + 63) / 64, 0) {
  if (slots == 0) throw std::invalid_argument("delayq::timer_wheel: slots must be > 0");
  index_.resize(16);
  index_mask_ = index_.size() - 1;
}

timer_wheel::~timer_wheel() = default;

void timer_wheel::reserve(std::size_t n) {
  while (chunks_.size() * chunk_size < n) add_chunk();
  // Keep the load factor at or below 3/4 with n entries.
  while (n * 4 > index_.size() * 3) index_grow();
}

// ---------------------------------------------------------------- node pool

void timer_wheel::add_chunk() {
  if (chunks_.size() >= (std::size_t{npos} >> chunk_bits))
    throw std::length_error("delayq::timer_wheel: too many tasks");
  chunks_.push_back(std::make_unique<node[]>(chunk_size));
}

timer_wheel::handle timer_wheel::allocate_node() {
  if (free_head_ != npos) {
    handle h = free_head_;
    free_head_ = node_at(h).next;
    node_at(h).next = npos;
    return h;
  }
  // Fresh nodes are handed out in order, so chunks added by reserve() are used.
  if (fresh_ == chunks_.size() * chunk_size) add_chunk();
  return fresh_++;
}

void timer_wheel::free_node(handle h) noexcept {
  node& n = node_at(h);
  // Release the task's heap buffers now rather than when the node is reused:
  // a 1 MiB payload should not outlive its task. Assigning task{} would not:
  // a std::string assigned a short string keeps its buffer.
  std::destroy_at(&n.value);
  std::construct_at(&n.value);
  n.tag = 0;
  n.linked = false;
  n.pending = false;
  n.prev = npos;
  n.next = free_head_;
  free_head_ = h;
}

// ---------------------------------------------------------------- slot lists

void timer_wheel::link(handle h, std::uint64_t due) noexcept {
  if (due <= now_) due = now_ + 1;
  // no_tick means "nothing armed" to next_due_tick(); the tick before it is
  // already half a million years away at 1 ms per tick.
  if (due == no_tick) due = no_tick - 1;
  node& n = node_at(h);
  n.due = due;
  const auto s = static_cast<std::size_t>(due % slot_count_);
  slot_list& list = slot_lists_[s];
  n.prev = list.tail;
  n.next = npos;
  if (list.tail != npos)
    node_at(list.tail).next = h;
  else
    list.head = h;
  list.tail = h;
  n.linked = true;
  slot_min_[s] = std::min(slot_min_[s], due);
  occupied_[s / 64] |= std::uint64_t{1} << (s % 64);
  ++armed_;
}

void timer_wheel::unlink(handle h) noexcept {
  node& n = node_at(h);
  const auto s = static_cast<std::size_t>(n.due % slot_count_);
  slot_list& list = slot_lists_[s];
  if (n.prev != npos)
    node_at(n.prev).next = n.next;
  else
    list.head = n.next;
  if (n.next != npos)
    node_at(n.next).prev = n.prev;
  else
    list.tail = n.prev;
  n.prev = n.next = npos;
  n.linked = false;
  --armed_;
  if (list.head == npos) {
    occupied_[s / 64] &= ~(std::uint64_t{1} << (s % 64));
    slot_min_[s] = no_tick;
  }
  // Otherwise slot_min_ may now be low; it stays a valid lower bound and is
  // made exact when the slot is next processed.
}

void timer_wheel::collect_due(std::size_t s, std::uint64_t tick, std::vector<handle>& out) {
  std::uint64_t remaining_min = no_tick;
  for (handle h = slot_lists_[s].head; h != npos;) {
    node& n = node_at(h);
    const handle next = n.next;
    if (n.due <= tick) {
      unlink(h);
      n.pending = true;
      out.push_back(h);
    } else {
      remaining_min = std::min(remaining_min, n.due);
    }
    h = next;
  }
  if (slot_lists_[s].head != npos) slot_min_[s] = remaining_min;
}

std::uint64_t timer_wheel::next_due_tick() const noexcept {
  if (armed_ == 0) return no_tick;
  const std::size_t start = static_cast<std::size_t>((now_ + 1) % slot_count_);
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
  if (auto t = scan(start, slot_count_, now_ + 1); t != no_tick) return t;
  if (auto t = scan(0, start, now_ + 1 + (slot_count_ - start)); t != no_tick) return t;
  return best;
}

// ---------------------------------------------------------------- public ops

timer_wheel::handle timer_wheel::insert(task&& t, std::uint64_t due_tick) {
  handle h = insert_detached(std::move(t));
  if (h != npos) link(h, due_tick);
  return h;
}

timer_wheel::handle timer_wheel::insert_detached(task&& t) {
  const std::uint32_t hash = hash_id(t.id);
  if (index_find_slot(t.id, hash) != no_slot) return npos;
  if ((size_ + 1) * 4 > index_.size() * 3) index_grow();
  handle h = allocate_node();
  node_at(h).value = std::move(t);
  index_insert(h, hash);
  ++size_;
  return h;
}

void timer_wheel::arm(handle h, std::uint64_t due_tick) noexcept {
  node_at(h).pending = false;
  if (node_at(h).linked) unlink(h);
  link(h, due_tick);
}

void timer_wheel::disarm(handle h) noexcept {
  node_at(h).pending = false;
  if (node_at(h).linked) unlink(h);
}

bool timer_wheel::is_armed(handle h) const noexcept { return node_at(h).linked; }

void timer_wheel::erase(handle h) noexcept {
  if (node_at(h).linked) unlink(h);
  index_erase(node_at(h).value.id);
  free_node(h);
  --size_;
}

task timer_wheel::extract(handle h) noexcept {
  if (node_at(h).linked) unlink(h);
  index_erase(node_at(h).value.id);  // before the move: the index reads the id
  task out = std::move(node_at(h).value);
  free_node(h);
  --size_;
  return out;
}

bool timer_wheel::erase(std::string_view id) noexcept {
  const handle h = find(id);
  if (h == npos) return false;
  erase(h);
  return true;
}

bool timer_wheel::reschedule(std::string_view id, std::uint64_t due_tick) noexcept {
  const handle h = find(id);
  if (h == npos) return false;
  arm(h, due_tick);
  return true;
}

timer_wheel::handle timer_wheel::find(std::string_view id) const noexcept {
  const std::size_t i = index_find_slot(id, hash_id(id));
  return i == no_slot ? npos : index_[i].node;
}

std::size_t timer_wheel::memory_bytes() const noexcept {
  return chunks_.size() * chunk_size * sizeof(node) + chunks_.capacity() * sizeof(void*) +
         index_.capacity() * sizeof(index_entry) + slot_lists_.capacity() * sizeof(slot_list) +
         slot_min_.capacity() * sizeof(std::uint64_t) +
         occupied_.capacity() * sizeof(std::uint64_t) + scratch_.capacity() * sizeof(handle);
}

// ---------------------------------------------------------------- id index
//
// Open addressing with linear probing and backward-shift deletion (no
// tombstones, so lookups stay short however many cancels happen). An entry is
// the node handle plus 32 bits of the id's hash: the hash both places the
// entry and filters out almost every non-matching probe before a string
// compare, and growing the table never rehashes a string.

std::uint32_t timer_wheel::hash_id(std::string_view id) noexcept {
  std::uint64_t h = std::hash<std::string_view>{}(id);
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;  // murmur3 finaliser: spreads low bits
  h ^= h >> 33;
  return static_cast<std::uint32_t>(h);
}

std::size_t timer_wheel::index_find_slot(std::string_view id, std::uint32_t hash) const noexcept {
  for (std::size_t i = hash & index_mask_;; i = (i + 1) & index_mask_) {
    const index_entry& e = index_[i];
    if (e.node == npos) return no_slot;
    if (e.hash == hash && node_at(e.node).value.id == id) return i;
  }
}

void timer_wheel::index_insert(handle h, std::uint32_t hash) {
  std::size_t i = hash & index_mask_;
  while (index_[i].node != npos) i = (i + 1) & index_mask_;
  index_[i] = index_entry{h, hash};
}

void timer_wheel::index_erase(std::string_view id) noexcept {
  std::size_t i = index_find_slot(id, hash_id(id));
  if (i == no_slot) return;
  // Backward-shift: pull later entries of the same probe run into the hole.
  for (std::size_t j = (i + 1) & index_mask_; index_[j].node != npos; j = (j + 1) & index_mask_) {
    const std::size_t home = index_[j].hash & index_mask_;
    // Entry j may move to i only if its home is not in the cyclic range (i, j].
    const bool home_in_range = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
    if (!home_in_range) {
      index_[i] = index_[j];
      i = j;
    }
  }
  index_[i] = index_entry{};
}

void timer_wheel::index_grow() {
  std::vector<index_entry> old(index_.size() * 2);
  old.swap(index_);
  index_mask_ = index_.size() - 1;
  for (const index_entry& e : old)
    if (e.node != npos) index_insert(e.node, e.hash);
}

}  // namespace delayq
