// persistence/redis/redis_dead_letters.hpp - the dead-letter role of the
// Redis store. Internal.
#pragma once

#include "../roles/change_batches.hpp"
#include "delayq/dead_letter_store.hpp"
#include "redis_backend.hpp"

namespace delayq::detail::redis {

/// Dead letters live in `{PREFIX}:dead` (id -> record) and
/// `{PREFIX}:dead:by_time` (id scored by died_at ms), per key space. bury,
/// revive and purge are each one call of the write script (the backend's
/// write()); list_dead reads a page of ids with ZRANGE and their records
/// with HMGET (merged across the shards, sharded), and quarantines an
/// undecodable record to `{PREFIX}:dead:quarantine` (find_dead too).
///
/// Thread safety: every member may be called from any thread; calls are
/// serialized by the backend's mutex.
class dead_letters_role final : public roles::dead_letter_writes<backend> {
 public:
  using dead_letter_store::count_dead;
  using dead_letter_store::find_dead;
  using dead_letter_store::list_dead;
  using dead_letter_writes::dead_letter_writes;

  std::vector<dead_letter> list_dead(std::size_t offset, std::size_t limit,
                                     boost::system::error_code& ec) override;
  std::optional<dead_letter> find_dead(std::string_view id, boost::system::error_code& ec) override;
  std::size_t count_dead(boost::system::error_code& ec) override;
};

}  // namespace delayq::detail::redis
