// persistence/postgres/pg_batch.hpp - a write() batch as the statements of
// one transaction. Internal.
//
// A batch is reduced to what it leaves behind, per area: for each id its
// last change to the live tasks (save and revive upsert, remove and bury
// delete) and its last change to the dead letters (bury upserts, revive and
// purge delete); the same batch applied change by change leaves the same
// rows, since an area's state after a batch depends only on the id's last
// change to it. That makes every statement set-based (one array parameter
// per column, whatever the batch's size), and the batch idempotent: running
// it twice leaves what running it once does. The transaction:
//
//   DELETE FROM tasks WHERE id = ANY(the ids the batch removes)
//   DELETE FROM tasks_OTHER WHERE id = ANY(the ids it upserts)
//   INSERT INTO tasks_GEN SELECT ... FROM unnest(the upserts)
//     ON CONFLICT (id) DO UPDATE
//   DELETE FROM dead_letters WHERE id = ANY(the dead letters deleted)
//   INSERT INTO dead_letters ... ON CONFLICT (id) DO UPDATE (the burials)
//   [sharded] SELECT pg_notify(...) per shard part (the notices)
//   [fenced]  SELECT the shards refused
//
// A live task's row sits in one of two generations (pg_rotation.hpp); new
// rows go to generation GEN, so an upsert is an INSERT ... ON CONFLICT into
// GEN's partition (its unique index on id the arbiter) and a DELETE of the
// id from the other one, where it may still be. Only the statements the
// batch needs are sent.
//
// Fencing (a sharded layout, store_change::fence): every statement carries
// the fence check of pg_schema.cpp (fence_cte), so each shard part whose
// fenced changes name a token its lease no longer carries is left out by
// every statement, in the same statement as the write; the last statement
// names the refused shards, and the batch then reports errc::lease_lost and
// marks their changes `refused`. Unfenced changes never read a lease.
#pragma once

#include <utility>

#include <boost/system/error_code.hpp>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "delayq/task_store.hpp"
#include "pg_connection.hpp"
#include "pg_schema.hpp"

namespace delayq::detail::pg {

/// One batch, encoded: the statements and the bytes they point at.
struct write_batch {
  std::vector<statement> stmts;
  /// The last statement answers the refused shards.
  bool fenced = false;
  /// The shard of each change (sharded layout), for marking the refused.
  std::vector<std::uint32_t> change_shards;

  // What the statements' parameters point at.
  std::vector<std::string> records;
  std::vector<std::string> payloads;
  std::vector<std::string_view> live_delete, live_ids, live_records, dead_delete, dead_ids,
      dead_records, payload_views;
  std::vector<std::int32_t> live_shards, dead_delete_shards, dead_shards, fence_shards,
      payload_shards;
  std::vector<std::int64_t> live_due, dead_died, fence_tokens;
};

/// Encodes `changes` for a store of `shards` shards (0: unsharded), new rows
/// going to generation `gen` (0 or 1). Throws
/// pg_failure (errc::store_error for a change without a task).
write_batch make_batch(const schema_sql& sql, std::uint32_t shards, int gen,
                       std::span<const store_change> changes);

/// The batch's outcome from its results: errc::lease_lost with the refused
/// changes marked, or success.
void settle_batch(const write_batch& b, std::span<const store_change> changes,
                  const std::vector<result_ptr>& results, boost::system::error_code& ec);

/// The payload of a notice of a saved task: "t SHARD DUE_MS ID", the id
/// percent-encoded (bytes outside '!'..'~', and '%'); of a changed setting:
/// "s KEY", the same way. Notices are joined with '\n' into payloads below
/// the server's 8000 bytes.
std::string task_notice_line(std::uint32_t shard, std::int64_t due_ms, std::string_view id);
std::string setting_notice_line(std::string_view key);
/// Percent-encoding of bytes outside '!'..'~' and of '%', and its inverse
/// (false when the text is not such an encoding).
std::string percent_encode(std::string_view bytes);
bool percent_decode(std::string_view text, std::string& out);

/// The most bytes of one NOTIFY payload the store sends.
inline constexpr std::size_t max_notice_payload = 7900;

}  // namespace delayq::detail::pg
