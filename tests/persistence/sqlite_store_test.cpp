// sqlite_store specifics: schema, versions, opening failures.
#include "delayq/sqlite_store.hpp"

#include <SQLiteCpp/Database.h>
#include <SQLiteCpp/Statement.h>

#include <fstream>

#include "delayq/record_codec.hpp"
#include "test_support.hpp"

using namespace delayq;
using namespace delayq::test;

TEST_CASE("sqlite: a new file gets the current schema in WAL mode") {
  temp_dir dir;
  const std::string path = dir.file("s.db");
  sqlite_store store(path);
  CHECK(store.describe() == "sqlite:" + path);
  store.save(std::vector{make_task("a", "x", 1234)});

  SQLite::Database db(path, SQLite::OPEN_READONLY);
  CHECK(db.execAndGet("PRAGMA user_version").getInt() == sqlite_store::schema_version);
  CHECK(db.execAndGet("PRAGMA journal_mode").getString() == "wal");
  CHECK(db.execAndGet("SELECT due_ms FROM tasks WHERE id = 'a'").getInt64() == 1234);
  CHECK(db.execAndGet("SELECT count(*) FROM sqlite_master WHERE name = 'tasks_due_ms'").getInt() ==
        1);
  CHECK(db.tableExists("quarantine"));
  CHECK(db.tableExists("dead_letters"));
  CHECK(db.execAndGet("SELECT count(*) FROM sqlite_master WHERE name = 'dead_letters_died_at'")
            .getInt() == 1);
}

TEST_CASE("sqlite: a dead letter is a row of dead_letters with its died_at") {
  temp_dir dir;
  const std::string path = dir.file("d.db");
  sqlite_store store(path);
  store.save(std::vector{make_task("t")});
  const dead_letter d = make_letter("t", "why", 1'700'000'000'777);
  boost::system::error_code ec;
  store.bury(std::vector{d}, ec);
  REQUIRE_FALSE(ec);

  SQLite::Database db(path, SQLite::OPEN_READONLY);
  CHECK(db.execAndGet("SELECT count(*) FROM tasks").getInt() == 0);
  CHECK(db.execAndGet("SELECT died_at_ms FROM dead_letters WHERE id = 't'").getInt64() ==
        1'700'000'000'777);
  const SQLite::Column rec = db.execAndGet("SELECT record FROM dead_letters WHERE id = 't'");
  CHECK(std::string(static_cast<const char*>(rec.getBlob()), rec.getBytes()) ==
        encode_dead_letter(d));
}

// The schema exactly as version 1 shipped it.
constexpr const char* v1_ddl =
    "CREATE TABLE tasks ("
    "  id TEXT PRIMARY KEY NOT NULL,"
    "  due_ms INTEGER NOT NULL,"
    "  record BLOB NOT NULL);"
    "CREATE INDEX tasks_due_ms ON tasks(due_ms);"
    "CREATE TABLE quarantine ("
    "  id TEXT NOT NULL,"
    "  raw BLOB,"
    "  reason TEXT NOT NULL,"
    "  quarantined_at INTEGER NOT NULL);"
    "CREATE INDEX quarantine_id ON quarantine(id);"
    "PRAGMA user_version = 1;";

TEST_CASE("sqlite: a version 1 database is migrated to version 2 and keeps its data") {
  temp_dir dir;
  const std::string path = dir.file("v1.db");
  const task old_task = make_task("old", "from v1", 1'600'000'000'000, 2);
  {
    SQLite::Database db(path, SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE);
    db.exec(v1_ddl);
    SQLite::Statement st(db, "INSERT INTO tasks(id, due_ms, record) VALUES(?1, ?2, ?3)");
    const std::string rec = encode_task(old_task);
    st.bind(1, old_task.id);
    st.bind(2, static_cast<std::int64_t>(to_epoch_ms(old_task.due)));
    st.bind(3, rec.data(), static_cast<int>(rec.size()));
    st.exec();
    db.exec("INSERT INTO quarantine VALUES('q', x'00', 'old reason', 1)");
  }

  {
    sqlite_store store(path);
    std::vector<task> listed;
    store.list([&](task&& t) { listed.push_back(std::move(t)); });
    REQUIRE(listed.size() == 1);
    CHECK(listed[0] == old_task);

    boost::system::error_code ec;
    const dead_letter d = make_letter("old", "failed after migration", 42);
    store.bury(std::vector{d}, ec);
    REQUIRE_FALSE(ec);
    CHECK(store.find_dead("old", ec) == d);
    CHECK(store.count_dead(ec) == 1);
    CHECK(store.list([](task&&) {}).tasks == 0);
  }

  SQLite::Database db(path, SQLite::OPEN_READONLY);
  CHECK(db.execAndGet("PRAGMA user_version").getInt() == 2);
  CHECK(db.tableExists("dead_letters"));
  // Quarantine rows from version 1 came from the live tasks.
  CHECK(db.execAndGet("SELECT source FROM quarantine WHERE id = 'q'").getString() == "tasks");
  CHECK(db.execAndGet("SELECT reason FROM quarantine WHERE id = 'q'").getString() == "old reason");

  // Opening again migrates nothing more and keeps the dead letter.
  sqlite_store again(path);
  boost::system::error_code ec;
  CHECK(again.count_dead(ec) == 1);
  CHECK_FALSE(ec);
}

TEST_CASE("sqlite: every synchronous level opens and works") {
  temp_dir dir;
  using level = sqlite_options::synchronous_level;
  for (level l : {level::off, level::normal, level::full, level::extra}) {
    sqlite_options opts;
    opts.synchronous = l;
    sqlite_store store(dir.file("sync.db"), opts);
    store.save(std::vector{make_task("t" + std::to_string(static_cast<int>(l)))});
  }
  sqlite_store store(dir.file("sync.db"));
  CHECK(store.list([](task&&) {}).tasks == 4);
}

TEST_CASE("sqlite: a schema newer than this build is refused") {
  temp_dir dir;
  const std::string path = dir.file("future.db");
  { sqlite_store store(path); }
  {
    SQLite::Database db(path, SQLite::OPEN_READWRITE);
    db.exec("PRAGMA user_version = 99");
  }
  boost::system::error_code ec;
  std::string message;
  CHECK(sqlite_store::open(path, {}, ec, &message) == nullptr);
  CHECK(ec == errc::store_error);
  CHECK(message.find("99") != std::string::npos);
  CHECK_THROWS_AS(sqlite_store{path}, boost::system::system_error);
}

TEST_CASE("sqlite: a file that is not a database is a store_error") {
  temp_dir dir;
  const std::string path = dir.file("text.db");
  std::ofstream(path) << std::string(4096, 'x');
  boost::system::error_code ec;
  CHECK(sqlite_store::open(path, {}, ec) == nullptr);
  CHECK(ec == errc::store_error);
}

TEST_CASE("sqlite: a path that cannot be opened is store_unavailable") {
  temp_dir dir;
  boost::system::error_code ec;
  CHECK(sqlite_store::open(dir.file("no/such/dir/x.db"), {}, ec) == nullptr);
  CHECK(ec == errc::store_unavailable);
}

TEST_CASE("sqlite: a write lock held by another connection is store_unavailable") {
  temp_dir dir;
  const std::string path = dir.file("locked.db");
  sqlite_options opts;
  opts.busy_timeout = std::chrono::milliseconds{0};
  sqlite_store store(path, opts);
  SQLite::Database other(path, SQLite::OPEN_READWRITE);
  other.exec("BEGIN IMMEDIATE");
  boost::system::error_code ec;
  store.save(std::vector{make_task("x")}, ec);
  CHECK(ec == errc::store_unavailable);
  other.exec("ROLLBACK");
  store.save(std::vector{make_task("x")}, ec);
  CHECK_FALSE(ec);
}
