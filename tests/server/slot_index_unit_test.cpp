// slot_index (pull/slot_index.hpp): the lease broker's id -> slot table.
// Ids whose hashes share a home bucket are where backward-shift deletion
// can lose an entry; a small table and many ids make such runs certain.

#include <doctest/doctest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "pull/slot_index.hpp"

using delayq::server::slot_index;

TEST_CASE("slot_index: finds every id held, through inserts and erases in any order") {
  slot_index index;
  std::vector<std::string> ids;  // by slot
  const auto id_of = [&](std::uint32_t slot) { return std::string_view(ids.at(slot)); };
  std::map<std::string, std::uint32_t> held;  // the model
  std::mt19937 rng(7);
  for (int round = 0; round < 20'000; ++round) {
    const bool add = held.empty() || rng() % 3 != 0;
    if (add) {
      std::string id = "job-" + std::to_string(rng() % 5'000);
      if (held.count(id) != 0) continue;
      const auto slot = static_cast<std::uint32_t>(ids.size());
      ids.push_back(id);
      index.insert(id, slot);
      held[id] = slot;
    } else {
      auto it = held.begin();
      std::advance(it, static_cast<long>(rng() % held.size()));
      index.erase(it->first, id_of);
      held.erase(it);
    }
    if (round % 97 == 0) {
      REQUIRE(index.size() == held.size());
      for (const auto& [id, slot] : held) {
        const auto found = index.find(id, id_of);
        REQUIRE(found.has_value());
        CHECK(*found == slot);
      }
    }
  }
  // Ids never held, and ids erased, are not found.
  CHECK_FALSE(index.find("job-none", id_of).has_value());
  for (const auto& [id, slot] : held) index.erase(id, id_of);
  CHECK(index.size() == 0);
  for (int k = 0; k < 5'000; ++k)
    CHECK_FALSE(index.find("job-" + std::to_string(k), id_of).has_value());
  // Cleared, it starts again empty.
  index.insert("again", 0);
  ids.at(0) = "again";
  CHECK(index.find("again", id_of) == std::optional<std::uint32_t>(0));
  index.clear();
  CHECK_FALSE(index.find("again", id_of).has_value());
}
