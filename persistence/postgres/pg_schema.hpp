// persistence/postgres/pg_schema.hpp - the tables of the PostgreSQL store,
// the SQL of every statement the roles run, creating the schema, and the
// layout checks (version, shard count). Internal.
//
// Layout (docs/persistence.md, "PostgreSQL"), in schema S:
//   S.meta          key text -> value text: `layout` (the schema version),
//                   `shards` (0, or a cluster's count), `gen` (where new
//                   live tasks go: pg_rotation.hpp)
//   S.tasks         the live tasks, partitioned by `gen` into S.tasks_0 and
//                   S.tasks_1: (gen, shard, id bytea, due_ms, record bytea),
//                   unique id per partition, index (shard, due_ms, id)
//   S.dead_letters  (id bytea primary key, died_at_ms, record), index
//                   (died_at_ms, id)
//   S.quarantine    (id, source 'tasks'|'dead_letters', raw, reason,
//                   quarantined_at_ms)
//   S.settings      (key bytea primary key, value bytea)
//   S.sequences     (name bytea primary key, next bigint)
//   S.leases        (shard primary key, owner, incarnation, expires_ms,
//                   token): a cluster's shard leases
//   S.members       (name primary key, expires_ms): a cluster's heartbeats
//   S.schedules     (id bytea primary key, definition, state, revision):
//                   recurring schedules (pg_schedules.hpp)
// Ids, keys and records are bytea: any bytes, ordered bytewise, as the
// engine orders ids.
#pragma once

#include <utility>

#include <cstdint>
#include <string>

#include "delayq/postgres_store.hpp"
#include "pg_connection.hpp"

namespace delayq::detail::pg {

/// The SQL of every statement, with the schema's name in it. Each has a
/// prepared-statement name (`n_...`), the same on every connection.
struct schema_sql {
  explicit schema_sql(const std::string& schema);

  std::string schema;   // as given
  std::string q;        // quoted, for SQL text
  std::string channel;  // the LISTEN/NOTIFY channel: "delayq:" + schema

  // tables, qualified and quoted
  std::string meta, tasks, tasks0, tasks1, dead, quarantine, settings, sequences, leases, members,
      schedules;

  // ---- writes (pg_batch.cpp): one transaction per batch -----------------
  // From both generations: $1 ids. Fenced: + $2 fence shards, $3 tokens.
  std::string delete_live, delete_live_fenced;
  // From generation g only (the one new rows do not go to): the same.
  std::string delete_gen[2], delete_gen_fenced[2];
  // Into generation g, an upsert on its unique id: $1 shards, $2 ids,
  // $3 due_ms, $4 records. Fenced: + $5, $6.
  std::string upsert_gen[2], upsert_gen_fenced[2];
  // $1 ids (+ $2 their shards, $3 and $4 the fence, sharded).
  std::string delete_dead, delete_dead_fenced;
  // $1 ids, $2 died_at_ms, $3 records (+ $4 shards, $5 and $6 the fence).
  std::string upsert_dead, upsert_dead_fenced;
  // $1 channel, $2 shards, $3 payloads, $4 and $5 the fence: NOTIFY per
  // shard part that is not refused.
  std::string notify_fenced;
  // $1 fence shards, $2 fence tokens: the shards refused.
  std::string refused;

  // ---- reads ---------------------------------------------------------------
  std::string list;             // COPY of (id, record)
  std::string due_page;         // $1 shard, $2 due_ms, $3 id, $4 until_ms, $5 limit
  std::string due_page_all;     // $1 shards, $2-$5 as due_page
  std::string find;             // $1 ids
  std::string quarantine_live;  // $1 id, $2 reason, $3 now_ms, $4 raw (null: whatever is there)
  std::string dead_page;        // $1 offset, $2 limit
  std::string dead_find;        // $1 id
  std::string dead_count;
  std::string quarantine_dead;  // $1 id, $2 reason, $3 now_ms, $4 raw

  // ---- settings and sequences -----------------------------------------------
  std::string settings_all, settings_upsert, settings_erase;
  std::string sequence_take, sequence_raise;

  // ---- schedules (pg_schedules.cpp) -----------------------------------------
  // Each answers one row, one boolean: whether the change applied, or finds
  // the row as this very change would have left it (its own earlier run).
  // $1 id, $2 definition, $3 state: a put over nothing stored.
  std::string schedule_create;
  // $1 id, $2 definition, $3 state, $4 expected: a put over revision $4.
  std::string schedule_replace;
  // $1 id, $2 state, $3 expected.
  std::string schedule_state;
  // $1 id, $2 expected: RETURNING 1 when it applied.
  std::string schedule_erase;
  std::string schedule_find;  // $1 ids
  std::string schedule_page;  // $1 after id, $2 limit
  std::string schedule_count;
  // Into generation g: $1 shards, $2 ids, $3 due_ms, $4 records, $5 notice
  // lines, $6 the channel ('' for none): each task whose id no generation
  // holds, with its notice.
  std::string insert_absent_gen[2];

  // ---- layout ----------------------------------------------------------------
  std::string meta_all;
  std::string counts;  // live tasks, dead letters
};

/// Whether `name` is a schema name the store accepts (postgres_layout).
bool valid_schema_name(std::string_view name) noexcept;

/// The schema's state, read on `c` (nothing created). Throws pg_failure
/// (errc::store_error for a newer schema version than this build's).
postgres_layout_state read_layout(connection& c, const schema_sql& sql);

/// The generation new live rows go to, as the schema's meta records it.
/// Throws pg_failure.
int read_gen(connection& c, const schema_sql& sql);

/// Creates the schema and its tables when they do not exist (under an
/// advisory lock: two processes creating it at once create it once), with
/// `shards` recorded; then reads it. Throws pg_failure.
postgres_layout_state ensure_schema(connection& c, const schema_sql& sql, std::uint32_t shards);

/// Records `shards` over a schema that records 0 (and, `only_if_empty`,
/// holds no record), in one transaction; returns the state it left.
postgres_layout_state claim_shards(connection& c, const schema_sql& sql, std::uint32_t shards,
                                   bool only_if_empty);

/// Moves a schema from the unsharded layout (0 shards) to `shards`, in one
/// transaction: the live tasks table locked against writes, every task given
/// its shard_of(id, shards), the count recorded. Returns how many tasks it
/// gave a shard (0 when the schema records `shards` already). Throws
/// pg_failure: errc::shard_mismatch when it records another count.
std::size_t migrate_shards(connection& c, const schema_sql& sql, std::uint32_t shards);

/// Turns bytes into valid UTF-8 text (each byte of an invalid sequence as
/// \xHH), for text columns and NOTIFY payloads.
std::string to_text(std::string_view bytes);

}  // namespace delayq::detail::pg
