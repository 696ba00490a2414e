// One fixture per backend, so the conformance suite runs the same assertions
// against each. A fixture owns a fresh, private store location and can open
// a second store object on it and reach behind the store to its raw data
// (live tasks and dead letters alike).
#pragma once

#include <SQLiteCpp/Database.h>
#include <SQLiteCpp/Statement.h>

#include "cluster_support.hpp"
#include "delayq/memory_store.hpp"
#include "delayq/postgres_store.hpp"
#include "delayq/redis_store.hpp"
#include "delayq/shard_leases.hpp"
#include "delayq/sqlite_store.hpp"
#include "pg_test_support.hpp"
#include "test_support.hpp"

namespace delayq::test {

struct memory_fixture {
  static constexpr bool persistent = false;  // reopen() is meaningless
  static constexpr bool raw_access = false;  // no bytes to corrupt

  memory_store store_;
  task_store& store() { return store_; }
  std::unique_ptr<task_store> reopen() { return nullptr; }
  void put_raw(const std::string&, const std::string&) {}
  std::optional<std::string> quarantined_raw(const std::string&) { return std::nullopt; }
  bool exists_raw(const std::string&) { return false; }
  void put_raw_dead(const std::string&, const std::string&, std::int64_t) {}
  std::optional<std::string> dead_quarantined_raw(const std::string&) { return std::nullopt; }
  bool exists_raw_dead(const std::string&) { return false; }
};

struct sqlite_fixture {
  static constexpr bool persistent = true;
  static constexpr bool raw_access = true;

  temp_dir dir_;
  std::string path_ = dir_.file("tasks.db");
  std::unique_ptr<sqlite_store> store_ = std::make_unique<sqlite_store>(path_);

  task_store& store() { return *store_; }
  std::unique_ptr<task_store> reopen() { return std::make_unique<sqlite_store>(path_); }

  void put_raw(const std::string& id, const std::string& bytes) {
    SQLite::Database db(path_, SQLite::OPEN_READWRITE);
    SQLite::Statement st(db, "INSERT INTO tasks(id, due_ms, record) VALUES(?1, 0, ?2)");
    st.bind(1, id);
    st.bind(2, bytes.data(), static_cast<int>(bytes.size()));
    st.exec();
  }
  std::optional<std::string> quarantined_raw(const std::string& id) {
    SQLite::Database db(path_, SQLite::OPEN_READONLY);
    SQLite::Statement st(db, "SELECT raw, reason FROM quarantine WHERE id = ?1");
    st.bind(1, id);
    if (!st.executeStep()) return std::nullopt;
    CHECK_FALSE(st.getColumn(1).getString().empty());
    const SQLite::Column raw = st.getColumn(0);
    return std::string(static_cast<const char*>(raw.getBlob()),
                       static_cast<std::size_t>(raw.getBytes()));
  }
  bool exists_raw(const std::string& id) {
    SQLite::Database db(path_, SQLite::OPEN_READONLY);
    SQLite::Statement st(db, "SELECT 1 FROM tasks WHERE id = ?1");
    st.bind(1, id);
    return st.executeStep();
  }

  void put_raw_dead(const std::string& id, const std::string& bytes, std::int64_t died_ms) {
    SQLite::Database db(path_, SQLite::OPEN_READWRITE);
    SQLite::Statement st(db, "INSERT INTO dead_letters(id, died_at_ms, record) VALUES(?1, ?2, ?3)");
    st.bind(1, id);
    st.bind(2, died_ms);
    st.bind(3, bytes.data(), static_cast<int>(bytes.size()));
    st.exec();
  }
  std::optional<std::string> dead_quarantined_raw(const std::string& id) {
    SQLite::Database db(path_, SQLite::OPEN_READONLY);
    SQLite::Statement st(db,
                         "SELECT raw, reason FROM quarantine "
                         "WHERE id = ?1 AND source = 'dead_letters'");
    st.bind(1, id);
    if (!st.executeStep()) return std::nullopt;
    CHECK_FALSE(st.getColumn(1).getString().empty());
    const SQLite::Column raw = st.getColumn(0);
    return std::string(static_cast<const char*>(raw.getBlob()),
                       static_cast<std::size_t>(raw.getBytes()));
  }
  bool exists_raw_dead(const std::string& id) {
    SQLite::Database db(path_, SQLite::OPEN_READONLY);
    SQLite::Statement st(db, "SELECT 1 FROM dead_letters WHERE id = ?1");
    st.bind(1, id);
    return st.executeStep();
  }
};

// Redis, single server (Raw = raw_redis) or a cluster (raw_cluster);
// `Shards` > 0: the sharded layout (redis_options::shards).
template <class Raw, redis_options (*Options)(const std::string&), std::uint32_t Shards = 0>
struct basic_redis_fixture {
  static constexpr bool persistent = true;
  static constexpr bool raw_access = true;
  static constexpr std::uint32_t shards = Shards;

  static redis_options options(const std::string& prefix) {
    redis_options o = Options(prefix);
    o.shards = Shards;
    return o;
  }

  std::string prefix_ = unique_prefix("conf");
  Raw raw_;
  std::unique_ptr<redis_store> store_ = std::make_unique<redis_store>(options(prefix_));

  ~basic_redis_fixture() {
    raw_.drop_prefix(prefix_);
    for (std::uint32_t s = 0; s < Shards; ++s) {
      raw_.drop_prefix(prefix_ + ":" + std::to_string(s));
      raw_.run({"DEL", "{" + prefix_ + ":" + std::to_string(s) + "}:lease"});
    }
  }
  task_store& store() { return *store_; }
  std::unique_ptr<task_store> reopen() { return std::make_unique<redis_store>(options(prefix_)); }
  /// The key `name` that holds `id` (sharded: that id's shard's key).
  std::string key(const char* name, const std::string& id = "") const {
    if constexpr (Shards == 0) {
      (void)id;
      return "{" + prefix_ + "}:" + name;
    } else {
      return "{" + prefix_ + ":" + std::to_string(shard_of(id, Shards)) + "}:" + name;
    }
  }

  void put_raw(const std::string& id, const std::string& bytes) {
    raw_.run({"HSET", key("tasks", id), id, bytes});
    raw_.run({"ZADD", key("due", id), "0", id});
  }
  std::optional<std::string> quarantined_raw(const std::string& id) {
    CHECK(raw_.get({"HGET", key("quarantine:reason", id), id}).has_value());
    return raw_.get({"HGET", key("quarantine", id), id});
  }
  bool exists_raw(const std::string& id) {
    return raw_.integer({"HEXISTS", key("tasks", id), id}) == 1 ||
           raw_.get({"ZSCORE", key("due", id), id}).has_value();
  }

  void put_raw_dead(const std::string& id, const std::string& bytes, std::int64_t died_ms) {
    raw_.run({"HSET", key("dead", id), id, bytes});
    raw_.run({"ZADD", key("dead:by_time", id), std::to_string(died_ms), id});
  }
  std::optional<std::string> dead_quarantined_raw(const std::string& id) {
    CHECK(raw_.get({"HGET", key("dead:quarantine:reason", id), id}).has_value());
    return raw_.get({"HGET", key("dead:quarantine", id), id});
  }
  bool exists_raw_dead(const std::string& id) {
    return raw_.integer({"HEXISTS", key("dead", id), id}) == 1 ||
           raw_.get({"ZSCORE", key("dead:by_time", id), id}).has_value();
  }
};

using redis_fixture = basic_redis_fixture<raw_redis, redis_test_options>;
// Used when DELAYQ_TEST_REDIS_CLUSTER is set: its test cases are left out of
// the ordinary ctest run and run by one ctest entry under
// scripts/with-redis-cluster.sh (tests/persistence/CMakeLists.txt).
using redis_cluster_fixture = basic_redis_fixture<raw_cluster, redis_cluster_test_options>;
// The sharded layout, 8 shards.
using redis_sharded_fixture = basic_redis_fixture<raw_redis, redis_test_options, 8>;
using redis_cluster_sharded_fixture =
    basic_redis_fixture<raw_cluster, redis_cluster_test_options, 8>;

// PostgreSQL in a fresh schema of the test server (scripts/with-postgres.sh);
// `Shards` > 0: a cluster's layout.
template <std::uint32_t Shards = 0>
struct basic_postgres_fixture {
  static constexpr bool persistent = true;
  static constexpr bool raw_access = true;
  static constexpr std::uint32_t shards = Shards;

  std::string schema_ = unique_schema("conf");
  raw_postgres pg_;
  std::unique_ptr<task_store> store_ = open_postgres_store(postgres_test_options(schema_, Shards));

  ~basic_postgres_fixture() {
    store_.reset();
    pg_.drop_schema(schema_);
  }
  task_store& store() { return *store_; }
  std::unique_ptr<task_store> reopen() {
    return open_postgres_store(postgres_test_options(schema_, Shards));
  }
  std::string table(const char* name) const { return "\"" + schema_ + "\"." + name; }
  std::string shard(const std::string& id) const {
    return std::to_string(Shards == 0 ? 0 : shard_of(id, Shards));
  }

  void put_raw(const std::string& id, const std::string& bytes) {
    pg_.run("INSERT INTO " + table("tasks") +
                " (gen, shard, id, due_ms, record) VALUES (0, $1::int4, $2::bytea, 0, $3::bytea)",
            {shard(id), bytea_hex(id), bytea_hex(bytes)});
  }
  std::optional<std::string> quarantined_raw(const std::string& id) {
    auto r = pg_.run("SELECT raw, reason FROM " + table("quarantine") +
                         " WHERE id = $1::bytea AND source = 'tasks'",
                     {bytea_hex(id)});
    if (PQntuples(r.get()) == 0) return std::nullopt;
    CHECK(PQgetlength(r.get(), 0, 1) > 0);
    return bytes_of(r.get(), 0, 0);
  }
  bool exists_raw(const std::string& id) {
    auto r = pg_.run("SELECT 1 FROM " + table("tasks") + " WHERE id = $1::bytea", {bytea_hex(id)});
    return PQntuples(r.get()) > 0;
  }
  void put_raw_dead(const std::string& id, const std::string& bytes, std::int64_t died_ms) {
    pg_.run("INSERT INTO " + table("dead_letters") +
                " (id, died_at_ms, record) VALUES ($1::bytea, $2::int8, $3::bytea)",
            {bytea_hex(id), std::to_string(died_ms), bytea_hex(bytes)});
  }
  std::optional<std::string> dead_quarantined_raw(const std::string& id) {
    auto r = pg_.run("SELECT raw, reason FROM " + table("quarantine") +
                         " WHERE id = $1::bytea AND source = 'dead_letters'",
                     {bytea_hex(id)});
    if (PQntuples(r.get()) == 0) return std::nullopt;
    CHECK(PQgetlength(r.get(), 0, 1) > 0);
    return bytes_of(r.get(), 0, 0);
  }
  bool exists_raw_dead(const std::string& id) {
    auto r = pg_.run("SELECT 1 FROM " + table("dead_letters") + " WHERE id = $1::bytea",
                     {bytea_hex(id)});
    return PQntuples(r.get()) > 0;
  }
};

using postgres_fixture = basic_postgres_fixture<0>;
using postgres_sharded_fixture = basic_postgres_fixture<8>;

}  // namespace delayq::test

TYPE_TO_STRING_AS("postgres", delayq::test::postgres_fixture);
TYPE_TO_STRING_AS("postgres-sharded", delayq::test::postgres_sharded_fixture);
TYPE_TO_STRING_AS("memory", delayq::test::memory_fixture);
TYPE_TO_STRING_AS("sqlite", delayq::test::sqlite_fixture);
TYPE_TO_STRING_AS("redis", delayq::test::redis_fixture);
TYPE_TO_STRING_AS("redis-cluster", delayq::test::redis_cluster_fixture);
TYPE_TO_STRING_AS("redis-sharded", delayq::test::redis_sharded_fixture);
TYPE_TO_STRING_AS("redis-cluster-sharded", delayq::test::redis_cluster_sharded_fixture);
