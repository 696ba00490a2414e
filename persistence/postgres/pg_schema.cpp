// persistence/postgres/pg_schema.cpp - see pg_schema.hpp.
#include "pg_schema.hpp"

#include <algorithm>
#include <charconv>

#include "delayq/shard_leases.hpp"

namespace delayq::detail::pg {
namespace {

// The fence of a sharded write, in the same statement as the write it
// guards: the lease rows of the shards the batch's fenced changes name are
// locked FOR SHARE, held to COMMIT, and a shard whose lease no longer
// carries the writer's token is `refused`. A lease acquire (an UPDATE of
// that row) waits for the write to commit, and a write that started after
// an acquire committed sees the new token: writes under a token always
// land before the next token is granted, or not at all (Kleppmann's
// fencing token, with the lock making check and write one atomic step).
// $A: the shards, $B: the writer's tokens.
std::string fence_cte(const std::string& leases, int a, int b) {
  const std::string pa = "$" + std::to_string(a), pb = "$" + std::to_string(b);
  return "WITH f AS (SELECT * FROM unnest(" + pa + "::int4[], " + pb +
         "::int8[]) AS f(shard, token)), "
         "ok AS (SELECT l.shard FROM " +
         leases +
         " l JOIN f ON l.shard = f.shard AND l.token = f.token "
         "ORDER BY l.shard FOR SHARE OF l), "
         "refused AS (SELECT shard FROM f EXCEPT SELECT shard FROM ok) ";
}

bool tail_byte(unsigned char c) { return (c & 0xC0) == 0x80; }

}  // namespace

schema_sql::schema_sql(const std::string& name) : schema(name), q(quote_ident(name)) {
  channel = "delayq:" + name;
  meta = q + ".meta";
  tasks = q + ".tasks";
  tasks0 = q + ".tasks_0";
  tasks1 = q + ".tasks_1";
  dead = q + ".dead_letters";
  quarantine = q + ".quarantine";
  settings = q + ".settings";
  sequences = q + ".sequences";
  leases = q + ".leases";
  members = q + ".members";
  schedules = q + ".schedules";

  const std::string gen = "(SELECT value::int2 FROM " + meta + " WHERE key = 'gen')";
  const std::string not_refused = " NOT IN (SELECT shard FROM refused)";

  delete_live = "DELETE FROM " + tasks + " WHERE id = ANY($1::bytea[])";
  delete_live_fenced = fence_cte(leases, 2, 3) + "DELETE FROM " + tasks +
                       " WHERE id = ANY($1::bytea[]) AND shard" + not_refused;
  for (int g = 0; g < 2; ++g) {
    const std::string part = g == 0 ? tasks0 : tasks1;
    delete_gen[g] = "DELETE FROM " + part + " WHERE id = ANY($1::bytea[])";
    delete_gen_fenced[g] = fence_cte(leases, 2, 3) + "DELETE FROM " + part +
                           " WHERE id = ANY($1::bytea[]) AND shard" + not_refused;
    // Straight into the partition: its unique index on id is the upsert's
    // arbiter (the partitioned table has no index unique on id alone).
    const std::string head =
        "INSERT INTO " + part + " (gen, shard, id, due_ms, record) SELECT " + std::to_string(g) +
        ", u.shard, u.id, u.due_ms, u.record FROM unnest($1::int4[], "
        "$2::bytea[], $3::int8[], $4::bytea[]) AS u(shard, id, due_ms, record)";
    const std::string tail =
        " ON CONFLICT (id) DO UPDATE SET shard = EXCLUDED.shard, due_ms = EXCLUDED.due_ms, "
        "record = EXCLUDED.record";
    upsert_gen[g] = head + tail;
    upsert_gen_fenced[g] = fence_cte(leases, 5, 6) + head + " WHERE u.shard" + not_refused + tail;
  }

  delete_dead = "DELETE FROM " + dead + " WHERE id = ANY($1::bytea[])";
  delete_dead_fenced = fence_cte(leases, 3, 4) + "DELETE FROM " + dead +
                       " d USING unnest($1::bytea[], $2::int4[]) AS u(id, shard) "
                       "WHERE d.id = u.id AND u.shard" +
                       not_refused;
  const std::string upsert_tail =
      " ON CONFLICT (id) DO UPDATE SET died_at_ms = EXCLUDED.died_at_ms, record = EXCLUDED.record";
  upsert_dead = "INSERT INTO " + dead +
                " (id, died_at_ms, record) SELECT * FROM unnest($1::bytea[], $2::int8[], "
                "$3::bytea[])" +
                upsert_tail;
  upsert_dead_fenced = fence_cte(leases, 5, 6) + "INSERT INTO " + dead +
                       " (id, died_at_ms, record) SELECT u.id, u.died, u.record FROM "
                       "unnest($1::bytea[], $2::int8[], $3::bytea[], $4::int4[]) AS "
                       "u(id, died, record, shard) WHERE u.shard" +
                       not_refused + upsert_tail;
  notify_fenced = fence_cte(leases, 4, 5) +
                  "SELECT pg_notify($1, n.payload) FROM unnest($2::int4[], $3::text[]) AS "
                  "n(shard, payload) WHERE n.shard" +
                  not_refused;
  refused = fence_cte(leases, 1, 2) + "SELECT shard FROM refused";

  list = "COPY (SELECT id, record FROM " + tasks + ") TO STDOUT (FORMAT binary)";
  // The row comparison seeks in the (shard, due_ms, id) index of each
  // partition, which a Merge Append joins in order: O(log N + limit).
  const std::string page_body =
      "SELECT due_ms, id, record FROM " + tasks +
      " WHERE shard = %s AND (due_ms, id) > ($2, $3) AND due_ms <= $4 ORDER BY due_ms, id LIMIT $5";
  due_page = page_body;
  due_page.replace(due_page.find("%s"), 2, "$1");
  std::string inner = page_body;
  inner.replace(inner.find("%s"), 2, "s.shard");
  // A cluster's layout: a page of each shard, merged (shards x limit rows).
  due_page_all =
      "SELECT t.due_ms, t.id, t.record FROM generate_series(0, $1 - 1) AS s(shard) "
      "CROSS JOIN LATERAL (" +
      inner + ") t ORDER BY t.due_ms, t.id LIMIT $5";
  find = "SELECT id, record FROM " + tasks + " WHERE id = ANY($1::bytea[])";
  quarantine_live = "WITH moved AS (DELETE FROM " + tasks +
                    " WHERE id = $1 AND ($4::bytea IS NULL OR record = $4) RETURNING id, record) "
                    "INSERT INTO " +
                    quarantine +
                    " (id, source, raw, reason, quarantined_at_ms) "
                    "SELECT id, 'tasks', record, $2, $3 FROM moved";
  dead_page = "SELECT id, record FROM " + dead + " ORDER BY died_at_ms, id OFFSET $1 LIMIT $2";
  dead_find = "SELECT record FROM " + dead + " WHERE id = $1";
  dead_count = "SELECT count(*) FROM " + dead;
  quarantine_dead = "WITH moved AS (DELETE FROM " + dead +
                    " WHERE id = $1 AND ($4::bytea IS NULL OR record = $4) RETURNING id, record) "
                    "INSERT INTO " +
                    quarantine +
                    " (id, source, raw, reason, quarantined_at_ms) "
                    "SELECT id, 'dead_letters', record, $2, $3 FROM moved";

  settings_all = "SELECT key, value FROM " + settings + " ORDER BY key";
  settings_upsert = "INSERT INTO " + settings +
                    " (key, value) VALUES ($1, $2) "
                    "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value";
  settings_erase = "DELETE FROM " + settings + " WHERE key = $1 RETURNING 1";
  // `next` is the next number to hand out; the WHERE keeps it within
  // bigint (no row comes back past 2^63 - 1).
  sequence_take = "INSERT INTO " + sequences +
                  " AS s (name, next) VALUES ($1, 1 + $2) "
                  "ON CONFLICT (name) DO UPDATE SET next = s.next + $2 "
                  "WHERE s.next <= 9223372036854775807 - $2 RETURNING next - $2";
  sequence_raise = "INSERT INTO " + sequences +
                   " AS s (name, next) VALUES ($1, GREATEST($2, 1)) "
                   "ON CONFLICT (name) DO UPDATE SET next = GREATEST(s.next, EXCLUDED.next)";

  // A compare-and-set on the revision. Two writers expecting the same one:
  // the second waits on the row lock, then finds the revision moved on (READ
  // COMMITTED re-checks the WHERE on the row the first committed) and
  // changes nothing. The EXISTS sees the statement's snapshot, from before
  // the change: it answers true only for a row that was already as this
  // change leaves it, that is this change's own run, sent again.
  schedule_create = "WITH c AS (INSERT INTO " + schedules +
                    " (id, definition, state, revision) VALUES ($1, $2, $3, 1) "
                    "ON CONFLICT (id) DO NOTHING RETURNING 1) "
                    "SELECT EXISTS (SELECT 1 FROM c) OR EXISTS (SELECT 1 FROM " +
                    schedules +
                    " WHERE id = $1 AND revision = 1 AND definition = $2 AND state = $3)";
  schedule_replace = "WITH c AS (UPDATE " + schedules +
                     " SET definition = $2, state = $3, revision = revision + 1 "
                     "WHERE id = $1 AND revision = $4 RETURNING 1) "
                     "SELECT EXISTS (SELECT 1 FROM c) OR EXISTS (SELECT 1 FROM " +
                     schedules +
                     " WHERE id = $1 AND revision = $4 + 1 AND definition = $2 AND state = $3)";
  schedule_state = "WITH c AS (UPDATE " + schedules +
                   " SET state = $2, revision = revision + 1 "
                   "WHERE id = $1 AND revision = $3 AND $3 > 0 RETURNING 1) "
                   "SELECT EXISTS (SELECT 1 FROM c) OR EXISTS (SELECT 1 FROM " +
                   schedules + " WHERE id = $1 AND $3 > 0 AND revision = $3 + 1 AND state = $2)";
  schedule_erase =
      "DELETE FROM " + schedules + " WHERE id = $1 AND revision = $2 AND $2 > 0 RETURNING 1";
  schedule_find =
      "SELECT id, definition, state, revision FROM " + schedules + " WHERE id = ANY($1::bytea[])";
  schedule_page = "SELECT id, definition, state, revision FROM " + schedules +
                  " WHERE id > $1 ORDER BY id LIMIT $2";
  schedule_count = "SELECT count(*) FROM " + schedules;
  for (int g = 0; g < 2; ++g) {
    // Into the partition new rows go to, unless either generation holds the
    // id (the unique index is per partition; NOT EXISTS looks at both).
    // Notices go out at COMMIT, for the rows inserted only.
    insert_absent_gen[g] =
        "WITH u AS (SELECT * FROM unnest($1::int4[], $2::bytea[], $3::int8[], $4::bytea[], "
        "$5::text[]) AS u(shard, id, due_ms, record, line)), "
        "ins AS (INSERT INTO " +
        std::string(g == 0 ? tasks0 : tasks1) + " (gen, shard, id, due_ms, record) SELECT " +
        std::to_string(g) + ", u.shard, u.id, u.due_ms, u.record FROM u WHERE NOT EXISTS " +
        "(SELECT 1 FROM " + tasks +
        " t WHERE t.id = u.id) ON CONFLICT (id) DO NOTHING RETURNING id), "
        // A SELECT in WITH runs only when read: the second count reads it.
        "n AS (SELECT pg_notify($6, u.line) AS sent FROM u JOIN ins ON ins.id = u.id "
        "WHERE $6 <> '') "
        "SELECT (SELECT count(*) FROM ins), (SELECT count(sent) FROM n)";
  }

  meta_all = "SELECT key, value FROM " + meta;
  counts = "SELECT (SELECT count(*) FROM " + tasks + "), (SELECT count(*) FROM " + dead + ")";
}

bool valid_schema_name(std::string_view name) noexcept {
  if (name.empty() || name.size() > 48) return false;
  if (name[0] >= '0' && name[0] <= '9') return false;
  if (name.size() >= 3 && (name.substr(0, 3) == "pg_" || name.substr(0, 3) == "PG_")) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

std::string to_text(std::string_view b) {
  std::string out;
  out.reserve(b.size());
  static constexpr char hex[] = "0123456789abcdef";
  std::size_t i = 0;
  while (i < b.size()) {
    const auto c = static_cast<unsigned char>(b[i]);
    std::size_t n = 0;
    if (c >= 0x20 && c < 0x7f)
      n = 1;
    else if (c >= 0xC2 && c <= 0xDF)
      n = 2;
    else if (c >= 0xE0 && c <= 0xEF)
      n = 3;
    else if (c >= 0xF0 && c <= 0xF4)
      n = 4;
    bool ok = n > 0 && i + n <= b.size();
    for (std::size_t k = 1; ok && k < n; ++k) ok = tail_byte(static_cast<unsigned char>(b[i + k]));
    if (ok && n == 3) {  // no overlongs, no surrogates
      const auto c1 = static_cast<unsigned char>(b[i + 1]);
      ok = !(c == 0xE0 && c1 < 0xA0) && !(c == 0xED && c1 >= 0xA0);
    }
    if (ok && n == 4) {
      const auto c1 = static_cast<unsigned char>(b[i + 1]);
      ok = !(c == 0xF0 && c1 < 0x90) && !(c == 0xF4 && c1 >= 0x90);
    }
    if (ok) {
      out.append(b.substr(i, n));
      i += n;
    } else {
      out += "\\x";
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
      ++i;
    }
  }
  return out;
}

// ---- creating and checking ---------------------------------------------------

namespace {

std::uint32_t parse_count(const std::string& v, const std::string& what) {
  std::uint32_t n = 0;
  const auto [end, e] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (e != std::errc{} || end != v.data() + v.size() || n > 16384)
    throw pg_failure{errc::store_error, what + " '" + to_text(v) + "' is not a shard count"};
  return n;
}

}  // namespace

postgres_layout_state read_layout(connection& c, const schema_sql& sql) {
  statement exists{{}, "SELECT to_regclass($1) IS NOT NULL", {}};
  const std::string meta_name = sql.q + ".meta";
  exists.args.text(meta_name);
  auto r = c.exchange(std::span{&exists, 1}, false);
  postgres_layout_state out;
  if (PQgetlength(r[0].get(), 0, 0) != 1 || PQgetvalue(r[0].get(), 0, 0)[0] == 0) return out;
  out.created = true;
  std::vector<statement> reads(2);
  reads[0].sql = sql.meta_all;
  reads[1].sql = sql.counts;
  auto got = c.exchange(reads, false);
  std::string layout, shards;
  for (int i = 0; i < PQntuples(got[0].get()); ++i) {
    const std::string key(get_bytes(got[0].get(), i, 0));
    const std::string value(get_bytes(got[0].get(), i, 1));
    if (key == "layout") layout = value;
    if (key == "shards") shards = value;
  }
  if (layout != std::to_string(postgres_schema_version))
    throw pg_failure{errc::store_error, "schema " + sql.schema + ": layout version '" +
                                            to_text(layout) + "' in " + sql.meta + " is not " +
                                            std::to_string(postgres_schema_version) +
                                            ", the one this build uses"};
  out.shards = parse_count(shards, "the shard count in " + sql.meta);
  out.tasks = static_cast<std::size_t>(get_int8(got[1].get(), 0, 0));
  out.dead_letters = static_cast<std::size_t>(get_int8(got[1].get(), 0, 1));
  return out;
}

int read_gen(connection& c, const schema_sql& sql) {
  const std::string q = "SELECT value FROM " + sql.meta + " WHERE key = 'gen'";
  statement s{{}, q, {}};
  const auto r = c.exchange(std::span{&s, 1}, false);
  if (PQntuples(r[0].get()) != 1) throw pg_failure{errc::store_error, sql.meta + " has no 'gen'"};
  const std::string_view v = get_bytes(r[0].get(), 0, 0);
  if (v != "0" && v != "1")
    throw pg_failure{errc::store_error, "generation '" + to_text(v) + "' in " + sql.meta};
  return v == "1" ? 1 : 0;
}

postgres_layout_state ensure_schema(connection& c, const schema_sql& sql, std::uint32_t shards) {
  postgres_layout_state state = read_layout(c, sql);
  if (state.created) return state;
  // Two processes opening a fresh schema at once: the advisory lock (held
  // to the end of this transaction) makes the second wait and find the
  // tables there (IF NOT EXISTS).
  const std::string& t = sql.tasks;
  const std::vector<std::string> ddl{
      "SELECT pg_advisory_xact_lock(hashtext($1))",
      "CREATE SCHEMA IF NOT EXISTS " + sql.q,
      "CREATE TABLE IF NOT EXISTS " + sql.meta + " (key text PRIMARY KEY, value text NOT NULL)",
      // The live tasks, in two generations (pg_rotation.hpp). Ids are unique
      // across both: a write deletes an id from both before it inserts it.
      "CREATE TABLE IF NOT EXISTS " + t +
          " (gen int2 NOT NULL, shard int4 NOT NULL, id bytea NOT NULL, "
          "due_ms int8 NOT NULL, record bytea NOT NULL) PARTITION BY LIST (gen)",
      "CREATE TABLE IF NOT EXISTS " + sql.tasks0 + " PARTITION OF " + t +
          " FOR VALUES IN (0) WITH (autovacuum_vacuum_scale_factor = 0.02, "
          "autovacuum_vacuum_insert_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0)",
      "CREATE TABLE IF NOT EXISTS " + sql.tasks1 + " PARTITION OF " + t +
          " FOR VALUES IN (1) WITH (autovacuum_vacuum_scale_factor = 0.02, "
          "autovacuum_vacuum_insert_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0)",
      "CREATE UNIQUE INDEX IF NOT EXISTS tasks_0_id ON " + sql.tasks0 + " (id)",
      "CREATE UNIQUE INDEX IF NOT EXISTS tasks_1_id ON " + sql.tasks1 + " (id)",
      "CREATE INDEX IF NOT EXISTS tasks_due ON " + t + " (shard, due_ms, id)",
      "CREATE TABLE IF NOT EXISTS " + sql.dead +
          " (id bytea PRIMARY KEY, died_at_ms int8 NOT NULL, record bytea NOT NULL)",
      "CREATE INDEX IF NOT EXISTS dead_letters_died_at ON " + sql.dead + " (died_at_ms, id)",
      "CREATE TABLE IF NOT EXISTS " + sql.quarantine +
          " (id bytea NOT NULL, source text NOT NULL, raw bytea, reason text NOT NULL, "
          "quarantined_at_ms int8 NOT NULL)",
      "CREATE INDEX IF NOT EXISTS quarantine_id ON " + sql.quarantine + " (id)",
      "CREATE TABLE IF NOT EXISTS " + sql.settings +
          " (key bytea PRIMARY KEY, value bytea NOT NULL)",
      "CREATE TABLE IF NOT EXISTS " + sql.sequences +
          " (name bytea PRIMARY KEY, next int8 NOT NULL)",
      // Renewed every lease/3 for every shard: updates that change no indexed
      // column stay in their page (HOT) with room left by the fillfactor.
      "CREATE TABLE IF NOT EXISTS " + sql.leases +
          " (shard int4 PRIMARY KEY, owner text, incarnation text, "
          "expires_ms int8 NOT NULL DEFAULT 0, token int8 NOT NULL DEFAULT 0) "
          "WITH (fillfactor = 50)",
      // A schedule's state is rewritten at every occurrence it makes a task:
      // room in each page keeps those updates HOT (no index entry).
      "CREATE TABLE IF NOT EXISTS " + sql.schedules +
          " (id bytea PRIMARY KEY, definition bytea NOT NULL, state bytea NOT NULL, "
          "revision int8 NOT NULL) WITH (fillfactor = 70)",
      "CREATE TABLE IF NOT EXISTS " + sql.members +
          " (name text PRIMARY KEY, expires_ms int8 NOT NULL) WITH (fillfactor = 50)",
      "INSERT INTO " + sql.meta +
          " (key, value) VALUES ('layout', $1), ('shards', $2), ('gen', '0') "
          "ON CONFLICT (key) DO NOTHING",
  };
  std::vector<statement> stmts(ddl.size());
  for (std::size_t i = 0; i < ddl.size(); ++i) stmts[i].sql = ddl[i];
  const std::string lock_key = "delayq:" + sql.schema;
  const std::string version = std::to_string(postgres_schema_version);
  const std::string count = std::to_string(shards);
  stmts.front().args.text(lock_key);
  stmts.back().args.text(version).text(count);
  c.exchange(stmts, true);
  return read_layout(c, sql);
}

postgres_layout_state claim_shards(connection& c, const schema_sql& sql, std::uint32_t shards,
                                   bool only_if_empty) {
  ensure_schema(c, sql, 0);
  // One transaction: the meta row locked, the counts read, the count written
  // only over 0 (and over an empty schema when asked). A write of a server
  // without --cluster that lands meanwhile either comes before (counted) or
  // after (it then finds the count recorded: its store refuses to open).
  const std::string update =
      "UPDATE " + sql.meta +
      " SET value = $1 WHERE key = 'shards' AND value = '0' AND (NOT $2 OR " +
      "(NOT EXISTS (SELECT 1 FROM " + sql.tasks + ") AND NOT EXISTS (SELECT 1 FROM " + sql.dead +
      ")))";
  const std::string lock = "SELECT value FROM " + sql.meta + " WHERE key = 'shards' FOR UPDATE";
  std::vector<statement> stmts(3);
  stmts[0].sql = lock;
  stmts[1].sql = update;
  const std::string count = std::to_string(shards);
  stmts[1].args.text(count);
  stmts[1].args.boolean(only_if_empty);
  stmts[2].sql = sql.counts;
  c.exchange(stmts, true);
  return read_layout(c, sql);
}

std::size_t migrate_shards(connection& c, const schema_sql& sql, std::uint32_t shards) {
  ensure_schema(c, sql, 0);
  // An explicit transaction across several exchanges (a Sync ends only an
  // implicit one); any failure drops the connection, which rolls it back.
  try {
    const std::string lock_meta =
        "SELECT value FROM " + sql.meta + " WHERE key = 'shards' FOR UPDATE";
    const std::string lock_tasks = "LOCK TABLE " + sql.tasks + " IN EXCLUSIVE MODE";
    const std::string ids = "SELECT id FROM " + sql.tasks;
    std::vector<statement> first(4);
    first[0].sql = "BEGIN";
    first[1].sql = lock_meta;
    first[2].sql = lock_tasks;
    first[3].sql = ids;
    auto got = c.exchange(first, true);
    const std::string recorded(get_bytes(got[1].get(), 0, 0));
    const std::uint32_t now = parse_count(recorded, "the shard count in " + sql.meta);
    if (now != 0) {
      statement end{{}, "ROLLBACK", {}};
      c.exchange(std::span{&end, 1}, true);
      if (now == shards) return 0;
      throw pg_failure{errc::shard_mismatch, "schema " + sql.schema + " is sharded with " +
                                                 std::to_string(now) + " shards already, not " +
                                                 std::to_string(shards)};
    }
    const PGresult* r = got[3].get();
    const int n = PQntuples(r);
    const std::string update = "UPDATE " + sql.tasks +
                               " t SET shard = u.shard FROM unnest($1::bytea[], $2::int4[]) AS "
                               "u(id, shard) WHERE t.id = u.id";
    constexpr int chunk = 10'000;
    for (int at = 0; at < n; at += chunk) {
      std::vector<std::string_view> chunk_ids;
      std::vector<std::int32_t> chunk_shards;
      for (int i = at; i < std::min(n, at + chunk); ++i) {
        chunk_ids.push_back(get_bytes(r, i, 0));
        chunk_shards.push_back(static_cast<std::int32_t>(shard_of(chunk_ids.back(), shards)));
      }
      statement u{{}, update, {}};
      u.args.bytea_array(chunk_ids).int4_array(chunk_shards);
      c.exchange(std::span{&u, 1}, true);
    }
    const std::string record = "UPDATE " + sql.meta + " SET value = $1 WHERE key = 'shards'";
    const std::string count = std::to_string(shards);
    std::vector<statement> last(2);
    last[0].sql = record;
    last[0].args.text(count);
    last[1].sql = "COMMIT";
    c.exchange(last, true);
    return static_cast<std::size_t>(n);
  } catch (...) {
    c.close();
    throw;
  }
}

}  // namespace delayq::detail::pg
