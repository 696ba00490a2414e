// sqlite_store specifics: schema, versions, opening failures.
#include "delayq/sqlite_store.hpp"

#include <SQLiteCpp/Database.h>

#include <fstream>

#include "test_support.hpp"

using namespace delayq;
using namespace delayq::test;

TEST_CASE("sqlite: a new file gets the v1 schema in WAL mode") {
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
