// persistence/sqlite/sqlite_dead_letters.hpp - the dead-letter role of the
// SQLite store. Internal.
#pragma once

#include <utility>

#include "../roles/change_batches.hpp"
#include "delayq/dead_letter_store.hpp"
#include "sqlite_backend.hpp"

namespace delayq::detail::sqlite {

/// The dead letters (dead_letter_store), in the table `dead_letters`
/// (schema version 2). bury(), revive() and purge() are one-kind batches of
/// the backend's write (one transaction each, with the live-task side).
/// list_dead() reads one page ordered by (died_at_ms, id) and, like
/// find_dead(), moves an undecodable record to `quarantine` (source
/// 'dead_letters'), reading the page again so it never comes back short.
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

}  // namespace delayq::detail::sqlite
