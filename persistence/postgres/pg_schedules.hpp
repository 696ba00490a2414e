// persistence/postgres/pg_schedules.hpp - the schedules role of the
// PostgreSQL store. Internal.
#pragma once

#include <utility>

#include "delayq/schedule_store.hpp"
#include "pg_backend.hpp"

namespace delayq::detail::pg {

/// Recurring schedules (schedule_store), in the table schedules: id,
/// definition and state as bytea (any bytes round-trip), and the revision.
/// One table for every layout: a schedule's shard is shard_of(id), which the
/// engine computes; no write of a schedule is fenced (each is a
/// compare-and-set on its revision, which is what keeps two keepers from
/// making one occurrence twice). write_schedules() is one statement per
/// change, all in one exchange: one round trip, one transaction.
/// insert_absent() inserts into the live tasks' current generation, NOTIFYing
/// (in a cluster's layout) each task it stored, as a saved task is announced.
///
/// Thread safety: every member may be called from any thread.
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
  void insert_absent(std::span<const task> tasks, boost::system::error_code& ec) override;

 private:
  backend& b_;
};

}  // namespace delayq::detail::pg
