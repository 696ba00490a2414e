// sqlite_store specifics: schema, versions, opening failures, one transaction
// per write() batch, quarantine(), settings, the synchronous level, list().
#include "delayq/sqlite_store.hpp"

#include <SQLiteCpp/Database.h>
#include <SQLiteCpp/Statement.h>

#include <atomic>
#include <condition_variable>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "delayq/open_store.hpp"

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
  // Version 4 replaced the index on due_ms with one in list_due()'s order.
  CHECK(db.execAndGet("SELECT count(*) FROM sqlite_master WHERE name = 'tasks_due_ms'").getInt() ==
        0);
  CHECK(
      db.execAndGet("SELECT count(*) FROM sqlite_master WHERE name = 'tasks_due_ms_id'").getInt() ==
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
  store.dead_letters()->bury(std::vector{d}, ec);
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

TEST_CASE("sqlite: a version 1 database is migrated to the current version and keeps its data") {
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
    // The old rows are in the new (due_ms, id) index.
    due_cursor after;
    std::vector<task> due;
    store.list_due(
        after, 1'600'000'000'000, 10, [&](task&& t) { due.push_back(std::move(t)); }, ec);
    REQUIRE_FALSE(ec);
    REQUIRE(due.size() == 1);
    CHECK(due[0] == old_task);
    const dead_letter d = make_letter("old", "failed after migration", 42);
    store.dead_letters()->bury(std::vector{d}, ec);
    REQUIRE_FALSE(ec);
    CHECK(store.dead_letters()->find_dead("old", ec) == d);
    CHECK(store.dead_letters()->count_dead(ec) == 1);
    CHECK(store.list([](task&&) {}).tasks == 0);
  }

  SQLite::Database db(path, SQLite::OPEN_READONLY);
  CHECK(db.execAndGet("PRAGMA user_version").getInt() == sqlite_store::schema_version);
  CHECK(db.tableExists("dead_letters"));
  CHECK(db.execAndGet("SELECT count(*) FROM sqlite_master WHERE name = 'tasks_due_ms'").getInt() ==
        0);
  CHECK(
      db.execAndGet("SELECT count(*) FROM sqlite_master WHERE name = 'tasks_due_ms_id'").getInt() ==
      1);
  // Quarantine rows from version 1 came from the live tasks.
  CHECK(db.execAndGet("SELECT source FROM quarantine WHERE id = 'q'").getString() == "tasks");
  CHECK(db.execAndGet("SELECT reason FROM quarantine WHERE id = 'q'").getString() == "old reason");

  // Opening again migrates nothing more and keeps the dead letter.
  sqlite_store again(path);
  boost::system::error_code ec;
  CHECK(again.dead_letters()->count_dead(ec) == 1);
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

namespace {

std::map<std::string, task> live_tasks(task_store& store) {
  std::map<std::string, task> out;
  store.list([&](task&& t) { out.emplace(t.id, std::move(t)); });
  return out;
}

// Makes every insert of the id 'poison' into tasks or dead_letters fail, the
// way a constraint, a full disk or an I/O error would fail a statement half
// way through a batch.
void install_poison(const std::string& path) {
  SQLite::Database db(path, SQLite::OPEN_READWRITE);
  db.exec(
      "CREATE TRIGGER poison_task BEFORE INSERT ON tasks WHEN NEW.id = 'poison' "
      "BEGIN SELECT RAISE(ABORT, 'poisoned by the test'); END;"
      "CREATE TRIGGER poison_dead BEFORE INSERT ON dead_letters WHEN NEW.id = 'poison' "
      "BEGIN SELECT RAISE(ABORT, 'poisoned by the test'); END;");
}

void remove_poison(const std::string& path) {
  SQLite::Database db(path, SQLite::OPEN_READWRITE);
  db.exec("DROP TRIGGER poison_task; DROP TRIGGER poison_dead;");
}

}  // namespace

TEST_CASE("sqlite: a write batch that fails part-way leaves nothing of it behind") {
  temp_dir dir;
  const std::string path = dir.file("batch.db");
  sqlite_store store(path);
  const task a = make_task("a"), b = make_task("b"), poison = make_task("poison");
  const task keep1 = make_task("keep-1"), keep2 = make_task("keep-2");
  const dead_letter dead1 = make_letter("dead-1"), dead2 = make_letter("dead-2");
  store.save(std::vector{keep1, keep2});
  store.save(std::vector{dead1.task, dead2.task});
  store.dead_letters()->bury(std::vector{dead1, dead2});
  install_poison(path);

  auto unchanged = [&] {
    const auto live = live_tasks(store);
    CHECK(live.size() == 2);
    CHECK(live.count("keep-1") == 1);
    CHECK(live.count("keep-2") == 1);
    CHECK(store.dead_letters()->count_dead() == 2);
    CHECK(store.dead_letters()->find_dead("dead-1") == dead1);
    CHECK(store.dead_letters()->find_dead("dead-2") == dead2);
    CHECK_FALSE(store.dead_letters()->find_dead("keep-2").has_value());
  };
  boost::system::error_code ec;

  SUBCASE("a mixed write() batch, the failing change in the middle") {
    // Every kind lands before the poisoned save; one more save after it.
    const std::vector<store_change> batch{
        {change_kind::save, &a, {}, {}},
        {change_kind::remove, &keep1, {}, {}},
        {change_kind::bury, &keep2, "died in the batch", from_epoch_ms(5)},
        {change_kind::revive, &dead1.task, {}, {}},
        {change_kind::purge, &dead2.task, {}, {}},
        {change_kind::save, &poison, {}, {}},
        {change_kind::save, &b, {}, {}},
    };
    store.write(batch, ec);
    CHECK(ec == errc::store_error);
    unchanged();

    // The same batch without the trigger is fine: the failure was the poison.
    remove_poison(path);
    store.write(batch, ec);
    REQUIRE_FALSE(ec);
    const auto live = live_tasks(store);
    CHECK(live.size() == 4);  // a, dead-1 (revived), poison, b
    CHECK(live.count("keep-1") == 0);
    CHECK(store.dead_letters()->count_dead() == 1);
    CHECK(store.dead_letters()->find_dead("keep-2").has_value());
  }
  SUBCASE("save() of several tasks") {
    store.save(std::vector{a, poison, b}, ec);
    CHECK(ec == errc::store_error);
    unchanged();
  }
  SUBCASE("bury() of several letters") {
    store.dead_letters()->bury(std::vector{make_letter("keep-1"), make_letter("poison")}, ec);
    CHECK(ec == errc::store_error);
    unchanged();
  }
  SUBCASE("revive() of several tasks") {
    store.dead_letters()->revive(std::vector{dead1.task, poison}, ec);
    CHECK(ec == errc::store_error);
    unchanged();
  }
  // The store stays usable after a rolled-back batch.
  store.save(std::vector{make_task("after")}, ec);
  CHECK_FALSE(ec);
  CHECK(live_tasks(store).count("after") == 1);
}

TEST_CASE("sqlite: quarantine moves a live task aside with its reason") {
  temp_dir dir;
  const std::string path = dir.file("q.db");
  sqlite_store store(path);
  const task a = make_task("a"), b = make_task("b");
  store.save(std::vector{a, b});
  log_capture logs;

  boost::system::error_code ec;
  store.quarantine("a", "id rejected by the engine", ec);
  REQUIRE_FALSE(ec);
  CHECK(logs.contains("'a'"));
  const auto live = live_tasks(store);
  CHECK(live.size() == 1);
  CHECK(live.count("b") == 1);

  // Nothing stored under the id is not an error, and moves nothing.
  store.quarantine("absent", "whatever", ec);
  CHECK_FALSE(ec);

  SQLite::Database db(path, SQLite::OPEN_READONLY);
  CHECK(db.execAndGet("SELECT count(*) FROM quarantine").getInt() == 1);
  SQLite::Statement st(db, "SELECT raw, reason, source FROM quarantine WHERE id = 'a'");
  REQUIRE(st.executeStep());
  const SQLite::Column raw = st.getColumn(0);
  CHECK(std::string(static_cast<const char*>(raw.getBlob()), raw.getBytes()) == encode_task(a));
  CHECK(st.getColumn(1).getString() == "id rejected by the engine");
  CHECK(st.getColumn(2).getString() == "tasks");

  // A reopened store does not see it again.
  sqlite_store again(path);
  CHECK(live_tasks(again).size() == 1);
}

TEST_CASE("sqlite: settings are sorted, upserted, erased, byte-exact and survive a reopen") {
  temp_dir dir;
  const std::string path = dir.file("settings.db");
  const std::string binary("v\0\xff\x01", 4);
  const std::string big(64 * 1024, 'x');
  using settings = std::vector<std::pair<std::string, std::string>>;
  {
    sqlite_store store(path);
    boost::system::error_code ec;
    CHECK(store.settings()->load_settings(ec).empty());
    CHECK_FALSE(ec);
    store.settings()->save_setting("push.b", "1", ec);
    store.settings()->save_setting("push.a", binary, ec);
    store.settings()->save_setting("empty", "", ec);
    store.settings()->save_setting(std::string("k\0\xfe", 3), big, ec);
    store.settings()->save_setting("push.b", "2", ec);  // an upsert
    REQUIRE_FALSE(ec);
    CHECK(store.settings()->erase_setting("empty", ec));
    CHECK_FALSE(store.settings()->erase_setting("never-set", ec));  // not an error
    CHECK_FALSE(ec);
    CHECK_FALSE(store.settings()->erase_setting("empty", ec));  // erased already
    store.settings()->save_setting("later-empty", "", ec);
    CHECK_FALSE(ec);
  }
  sqlite_store store(path);
  boost::system::error_code ec;
  const settings expected{
      {std::string("k\0\xfe", 3), big}, {"later-empty", ""}, {"push.a", binary}, {"push.b", "2"}};
  CHECK(store.settings()->load_settings(ec) == expected);
  CHECK_FALSE(ec);
  // Settings are not tasks.
  CHECK(live_tasks(store).empty());
}

TEST_CASE("sqlite: the synchronous level asked for is the one in effect") {
  temp_dir dir;
  using level = sqlite_options::synchronous_level;
  SUBCASE("the default is FULL") {
    sqlite_store store(dir.file("default.db"));
    CHECK(store.synchronous() == level::full);
  }
  SUBCASE("options") {
    for (level l : {level::off, level::normal, level::full, level::extra}) {
      sqlite_options opts;
      opts.synchronous = l;
      sqlite_store store(dir.file("opts.db"), opts);
      CHECK(store.synchronous() == l);
    }
  }
  SUBCASE("from the URI") {
    const std::map<std::string, level> uris{{"?synchronous=normal", level::normal},
                                            {"?synchronous=full", level::full},
                                            {"?synchronous=off&busy_timeout_ms=10", level::off},
                                            {"", level::full}};
    for (const auto& [query, l] : uris) {
      auto store = open_store("sqlite://" + dir.file("uri.db") + query);
      auto* sqlite = dynamic_cast<sqlite_store*>(store.get());
      REQUIRE(sqlite != nullptr);
      CHECK_MESSAGE(sqlite->synchronous() == l, query);
    }
  }
}

TEST_CASE("sqlite: list streams every task and logs its progress") {
  temp_dir dir;
  sqlite_options opts;
  opts.list_progress_every = 10;
  sqlite_store store(dir.file("list.db"), opts);
  std::vector<task> tasks;
  for (int i = 0; i < 35; ++i) tasks.push_back(make_task("t-" + std::to_string(i)));
  store.save(tasks);

  log_capture logs;
  std::size_t seen = 0;
  const list_summary summary = store.list([&](task&&) { ++seen; });
  CHECK(summary.tasks == 35);
  CHECK(seen == 35);
  CHECK(logs.contains(": list: 10 records read"));
  CHECK(logs.contains(": list: 30 records read"));
  CHECK_FALSE(logs.contains(": list: 40 records read"));
  CHECK(logs.contains(": list: done, 35 tasks"));
}

TEST_CASE("sqlite: list reads one snapshot while the sink writes") {
  temp_dir dir;
  sqlite_options opts;
  opts.synchronous = sqlite_options::synchronous_level::off;  // 3000 commits below
  sqlite_store store(dir.file("snap.db"), opts);
  std::vector<task> tasks;
  for (int i = 0; i < 3000; ++i) tasks.push_back(make_task("s-" + std::to_string(i)));
  store.save(tasks);
  // Each task seen saves a new one: a listing that saw its own writes would
  // see up to 6000; a snapshot sees exactly the 3000 that were there.
  std::size_t seen = 0;
  store.list([&](task&& t) {
    ++seen;
    if (t.id.starts_with("s-")) store.save(std::vector{make_task("new-" + t.id)});
  });
  CHECK(seen == 3000);
  CHECK(live_tasks(store).size() == 6000);
}

TEST_CASE("sqlite: async_write pipelines batches on the store's thread, in order, each atomic") {
  temp_dir dir;
  const std::string path = dir.file("async.db");
  sqlite_store store(path);
  CHECK(store.max_writes_in_flight() == 2);
  install_poison(path);
  const task a = make_task("a"), b = make_task("b"), c = make_task("c"),
             poison = make_task("poison");
  const std::vector<store_change> b1{{change_kind::save, &a, {}, {}}};
  const std::vector<store_change> b2{{change_kind::save, &b, {}, {}},
                                     {change_kind::save, &poison, {}, {}}};
  const std::vector<store_change> b3{{change_kind::remove, &a, {}, {}},
                                     {change_kind::save, &c, {}, {}}};

  std::mutex m;
  std::condition_variable cv;
  std::vector<std::pair<int, boost::system::error_code>> done;
  std::set<std::thread::id> threads;
  auto completion = [&](int n) {
    return [&, n](boost::system::error_code ec) {
      std::lock_guard lock(m);
      done.emplace_back(n, ec);
      threads.insert(std::this_thread::get_id());
      cv.notify_all();
    };
  };
  auto wait_for = [&](std::size_t n) {
    std::unique_lock lock(m);
    return cv.wait_for(lock, std::chrono::seconds(30), [&] { return done.size() >= n; });
  };
  // Two in flight at once (the most max_writes_in_flight() allows), then a
  // third once the first is done.
  store.async_write(b1, completion(1));
  store.async_write(b2, completion(2));
  REQUIRE(wait_for(1));
  store.async_write(b3, completion(3));
  REQUIRE(wait_for(3));

  std::lock_guard lock(m);
  REQUIRE(done.size() == 3);
  CHECK(done[0].first == 1);
  CHECK(done[1].first == 2);
  CHECK(done[2].first == 3);
  CHECK_FALSE(done[0].second);
  CHECK(done[1].second == errc::store_error);  // the poisoned batch, and only it
  CHECK_FALSE(done[2].second);
  CHECK(threads.size() == 1);
  CHECK(threads.count(std::this_thread::get_id()) == 0);
  const auto live = live_tasks(store);
  CHECK(live.size() == 1);
  CHECK(live.count("c") == 1);  // not b: its batch failed as a whole
}

TEST_CASE("sqlite: without the write thread async_write writes on the caller's thread") {
  temp_dir dir;
  sqlite_options opts;
  opts.write_thread = false;
  sqlite_store store(dir.file("inline.db"), opts);
  CHECK(store.max_writes_in_flight() == 1);
  const task a = make_task("a");
  const std::vector<store_change> batch{{change_kind::save, &a, {}, {}}};
  std::thread::id ran_on;
  bool called = false;
  store.async_write(batch, [&](boost::system::error_code ec) {
    CHECK_FALSE(ec);
    ran_on = std::this_thread::get_id();
    called = true;
  });
  CHECK(called);  // before async_write returned
  CHECK(ran_on == std::this_thread::get_id());
  CHECK(live_tasks(store).count("a") == 1);
}

TEST_CASE("sqlite: the destructor writes what async_write queued before it returns") {
  temp_dir dir;
  const std::string path = dir.file("drain.db");
  const task a = make_task("a"), b = make_task("b");
  const std::vector<store_change> b1{{change_kind::save, &a, {}, {}}};
  const std::vector<store_change> b2{{change_kind::save, &b, {}, {}}};
  std::atomic<int> calls{0};
  {
    sqlite_store store(path);
    store.async_write(b1, [&](boost::system::error_code ec) { calls += ec ? 100 : 1; });
    store.async_write(b2, [&](boost::system::error_code ec) { calls += ec ? 100 : 1; });
  }
  CHECK(calls == 2);
  sqlite_store again(path);
  CHECK(live_tasks(again).size() == 2);
}
