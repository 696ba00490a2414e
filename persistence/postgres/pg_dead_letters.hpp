// persistence/postgres/pg_dead_letters.hpp - the dead-letter role of the
// PostgreSQL store. Internal.
#pragma once

#include <utility>

#include "../roles/change_batches.hpp"
#include "delayq/dead_letter_store.hpp"
#include "pg_backend.hpp"

namespace delayq::detail::pg {

/// The dead letters (dead_letter_store), in the table dead_letters. bury(),
/// revive() and purge() are one-kind batches of the backend's write (one
/// transaction each, with the live-task side). list_dead() reads a page by
/// (died_at_ms, id) on its index; an undecodable letter (or a live record,
/// version 1, found there) is moved to the quarantine table (source
/// 'dead_letters') and the page read again, so it never comes back short.
///
/// Thread safety: every member may be called from any thread.
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

 private:
  void quarantine_row(connection& c, std::string_view id, std::string_view raw,
                      std::string_view reason);
};

}  // namespace delayq::detail::pg
