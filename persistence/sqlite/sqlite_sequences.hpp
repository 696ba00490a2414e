// persistence/sqlite/sqlite_sequences.hpp - the sequence role of the SQLite
// store. Internal.
#pragma once

#include <utility>

#include "delayq/sequence_store.hpp"
#include "sqlite_backend.hpp"

namespace delayq::detail::sqlite {

/// Named sequences (sequence_store), in the table `sequences` (schema
/// version 5), one row per name holding the next number to hand out.
/// allocate() and raise_to() are each one statement, so one transaction
/// under the file's write lock: atomic against every connection, in this
/// process or another. A sequence ends at 2^63 - 1 (SQLite's integers are
/// signed): errc::invalid_options past it.
///
/// Thread safety: every member may be called from any thread; calls are
/// serialized by the backend's mutex.
class sequences_role final : public sequence_store {
 public:
  explicit sequences_role(backend& b) : b_(b) {}

  std::uint64_t allocate(std::string_view name, std::uint64_t count,
                         boost::system::error_code& ec) override;
  void raise_to(std::string_view name, std::uint64_t next, boost::system::error_code& ec) override;

 private:
  backend& b_;
};

}  // namespace delayq::detail::sqlite
