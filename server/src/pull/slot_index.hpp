// pull/slot_index.hpp - task ids to the slots of the lease broker that hold
// them.
//
// The broker holds one entry per job waiting for a consumer, so what finds
// an entry by id is paid per job of a backlog. A node map of ids costs
// about 60 bytes a job (a node, its key, the bucket); this table costs 8 to
// 16: open addressing with linear probing over a power-of-two array of
// {slot, 32 bits of the id's hash}, at most half full, with backward-shift
// deletion (no tombstones). The id itself is not kept here: the entry in
// the slot holds it, and a probe reads it (through `id_of`) only on a match
// of the 32 bits.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace delayq::server {

/// Thread safety: none; the broker calls it under its lock.
class slot_index {
 public:
  /// The slot holding `id`, if any. `id_of(slot)` gives the id a slot holds.
  template <class IdOf>
  std::optional<std::uint32_t> find(std::string_view id, IdOf&& id_of) const {
    if (size_ == 0) return std::nullopt;
    const std::uint32_t h = hash(id);
    for (std::size_t i = h & mask(); buckets_[i].used(); i = (i + 1) & mask()) {
      const bucket& b = buckets_[i];
      if (b.hash == h && id_of(b.slot()) == id) return b.slot();
    }
    return std::nullopt;
  }

  /// Adds `id`, which is not here yet, held in `slot`.
  void insert(std::string_view id, std::uint32_t slot) {
    if ((size_ + 1) * 2 > buckets_.size()) grow();
    place(bucket{slot + 1, hash(id)});
    ++size_;
  }

  /// Removes `id` when it is here.
  template <class IdOf>
  void erase(std::string_view id, IdOf&& id_of) {
    if (size_ == 0) return;
    const std::uint32_t h = hash(id);
    std::size_t i = h & mask();
    for (;; i = (i + 1) & mask()) {
      const bucket& b = buckets_[i];
      if (!b.used()) return;
      if (b.hash == h && id_of(b.slot()) == id) break;
    }
    // Backward shift: a later bucket of the run moves into the hole unless
    // its home lies cyclically after the hole (it would then be unreachable).
    buckets_[i] = bucket{};
    for (std::size_t j = (i + 1) & mask(); buckets_[j].used(); j = (j + 1) & mask()) {
      const std::size_t home = buckets_[j].hash & mask();
      const bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
      if (stays) continue;
      buckets_[i] = buckets_[j];
      buckets_[j] = bucket{};
      i = j;
    }
    --size_;
  }

  std::size_t size() const noexcept { return size_; }
  /// Buckets in the table (0 before the first insert).
  std::size_t capacity() const noexcept { return buckets_.size(); }
  /// Forgets every id and frees the table.
  void clear() {
    std::vector<bucket>().swap(buckets_);
    size_ = 0;
  }

 private:
  struct bucket {
    std::uint32_t slot_plus_one = 0;  // 0: empty
    std::uint32_t hash = 0;           // 32 bits of the id's hash
    bool used() const noexcept { return slot_plus_one != 0; }
    std::uint32_t slot() const noexcept { return slot_plus_one - 1; }
  };
  static_assert(sizeof(bucket) == 8);

  static std::uint32_t hash(std::string_view id) {
    const std::size_t h = std::hash<std::string_view>{}(id);
    return static_cast<std::uint32_t>(h ^ (h >> 32));
  }
  std::size_t mask() const noexcept { return buckets_.size() - 1; }
  void place(bucket b) {
    std::size_t i = b.hash & mask();
    while (buckets_[i].used()) i = (i + 1) & mask();
    buckets_[i] = b;
  }
  void grow() {
    std::vector<bucket> old(std::max<std::size_t>(64, buckets_.size() * 2));
    old.swap(buckets_);
    for (const bucket& b : old)
      if (b.used()) place(b);
  }

  std::vector<bucket> buckets_;  // a power of two long, at most half used
  std::size_t size_ = 0;
};

}  // namespace delayq::server
