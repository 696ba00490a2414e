// persistence/postgres/pg_sequences.hpp - the sequence role of the
// PostgreSQL store. Internal.
#pragma once

#include <utility>

#include "delayq/sequence_store.hpp"
#include "pg_backend.hpp"

namespace delayq::detail::pg {

/// Named sequences (sequence_store), one row per name in the table
/// sequences holding the next number to hand out. allocate() and raise_to()
/// are one statement each (an INSERT ... ON CONFLICT DO UPDATE, which locks
/// the row): atomic against every connection of every process. A sequence
/// ends at 2^63 - 1 (bigint): errc::invalid_options past it.
///
/// Thread safety: every member may be called from any thread.
class sequences_role final : public sequence_store {
 public:
  explicit sequences_role(backend& b) : b_(b) {}

  std::uint64_t allocate(std::string_view name, std::uint64_t count,
                         boost::system::error_code& ec) override;
  void raise_to(std::string_view name, std::uint64_t next, boost::system::error_code& ec) override;

 private:
  backend& b_;
};

}  // namespace delayq::detail::pg
