// persistence/sqlite/sqlite_schedules.hpp - the schedules role of the
// SQLite store. Internal.
#pragma once

#include <utility>

#include "delayq/schedule_store.hpp"
#include "sqlite_backend.hpp"

namespace delayq::detail::sqlite {

/// Recurring schedules (schedule_store), in the table `schedules` (schema
/// version 6): id, revision, definition and state. write_schedules() is one
/// IMMEDIATE transaction, each change an INSERT, UPDATE or DELETE
/// conditioned on the revision. A file keeps one key space:
/// insert_absent() is the default's errc::unsupported.
///
/// Thread safety: every member may be called from any thread; calls are
/// serialized by the backend's mutex.
class schedules_role final : public schedule_store {
 public:
  explicit schedules_role(backend& b) : b_(b) {}

  void write_schedules(std::span<const schedule_write> changes,
                       boost::system::error_code& ec) override;
  std::vector<std::optional<schedule_record>> find_schedules(
      std::span<const std::string> ids, boost::system::error_code& ec) override;
  std::vector<schedule_record> list_schedules(std::string_view after, std::size_t limit,
                                              boost::system::error_code& ec) override;
  std::size_t count_schedules(boost::system::error_code& ec) override;

 private:
  backend& b_;
};

}  // namespace delayq::detail::sqlite
