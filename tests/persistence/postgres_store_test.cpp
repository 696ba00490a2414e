// The PostgreSQL store's own promises, against the server of
// scripts/with-postgres.sh: its URIs, one transaction per batch, the
// acknowledgement after COMMIT, the pipeline's order, the due index (by
// EXPLAIN), the fence in the same statement as the write, the notices, the
// layout checks, and a connection the server closed. The conformance suites
// run on it too (store_fixtures.hpp, postgres_fixture).
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "delayq/open_store.hpp"
#include "delayq/postgres_store.hpp"
#include "delayq/record_codec.hpp"
#include "delayq/shard_store.hpp"
#include "freezing_proxy.hpp"
#include "pg_test_support.hpp"
#include "test_support.hpp"

namespace delayq::test {
namespace {

using namespace std::chrono_literals;

// A fresh schema and a store on it; the schema is dropped at the end.
struct pg_schema {
  explicit pg_schema(std::uint32_t shards = 0, const std::string& tag = "pgt")
      : name(unique_schema(tag)), shards(shards) {}
  ~pg_schema() {
    store.reset();
    raw.drop_schema(name);
  }
  // `io`: the store's writes driven there (task_store::drive_writes_on()).
  task_store& open(boost::asio::any_io_executor io = {}, const std::string& extra = "") {
    store = open_postgres_store(postgres_test_options(name, shards, extra));
    if (io) store->drive_writes_on(io);
    return *store;
  }
  std::string table(const char* t) const { return "\"" + name + "\"." + t; }
  long long count(const char* t) { return raw.count("SELECT count(*) FROM " + table(t)); }

  std::string name;
  std::uint32_t shards;
  raw_postgres raw;
  std::unique_ptr<task_store> store;
};

std::vector<std::string> ids_in(task_store& store) {
  std::vector<std::string> ids;
  store.list([&](task&& t) { ids.push_back(t.id); });
  std::sort(ids.begin(), ids.end());
  return ids;
}

// The first ids "STEM-0", "STEM-1", ... that fall in shard `s` of `n`.
std::vector<std::string> ids_in_shard(std::uint32_t s, std::uint32_t n, std::size_t count,
                                      const std::string& stem = "id") {
  std::vector<std::string> out;
  for (int i = 0; out.size() < count; ++i) {
    std::string id = stem + "-" + std::to_string(i);
    if (shard_of(id, n) == s) out.push_back(std::move(id));
  }
  return out;
}

// Polls a condition only the database can tell (a lock another session
// waits on): up to `bound` (20 s unless told), as the failure bound.
template <class Condition>
bool polled(Condition&& done, std::chrono::seconds bound = 20s) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(10ms);  // another session's state: nothing to wait on
  }
  return false;
}

}  // namespace

TEST_CASE("postgres: postgres:// and postgresql:// URIs") {
  SUBCASE("every part") {
    const auto o = postgres_options::parse(
        "postgres://app%40x:p%3Ass@db.example:6543/my%20db?schema=billing&shards=64&"
        "connect_timeout_ms=100&command_timeout_ms=200&pool=8&sslmode=require");
    CHECK(o.connection.user == "app@x");
    CHECK(o.connection.password == "p:ss");
    CHECK(o.connection.host == "db.example");
    CHECK(o.connection.port == 6543);
    CHECK(o.connection.database == "my db");
    CHECK(o.layout.schema == "billing");
    CHECK(o.layout.shards == 64);
    CHECK(o.connection.connect_timeout == 100ms);
    CHECK(o.connection.command_timeout == 200ms);
    CHECK(o.connection.pool == 8);
    CHECK(o.connection.sslmode == "require");
    // describe() never shows the password.
    CHECK(o.describe() == "postgres://app%40x@db.example:6543/my%20db?schema=billing&shards=64");
  }
  SUBCASE("defaults, postgresql://, IPv6") {
    const auto o = postgres_options::parse("postgresql://[::1]");
    CHECK(o.connection.host == "::1");
    CHECK(o.connection.port == 5432);
    CHECK(o.connection.user.empty());
    CHECK(o.connection.database.empty());
    CHECK(o.layout.schema == "delayq");
    CHECK(o.layout.shards == 0);
    CHECK(o.connection.pool == 4);
    CHECK(o.describe() == "postgres://[::1]:5432/");
    CHECK(postgres_options::parse("postgres://u@h/d").connection.user == "u");
  }
  SUBCASE("bad ones are invalid_store_uri, and never echo a password") {
    for (const char* uri : {"postgres://",
                            "postgres://h?schema=",
                            "postgres://h?schema=pg_catalog",
                            "postgres://h?schema=1abc",
                            "postgres://h?schema=a-b",
                            "postgres://h?shards=0",
                            "postgres://h?shards=16385",
                            "postgres://h?pool=0",
                            "postgres://h?pool=65",
                            "postgres://h?sslmode=maybe",
                            "postgres://h?nope=1",
                            "postgres://h?schema",
                            "postgres://h:0",
                            "postgres://h:",
                            "postgres://[::1",
                            "postgres://h1,h2/db",
                            "postgres://:secretpw@h",
                            "postgres://h/a/b",
                            "postgres://u:x%zz@h",
                            "mysql://h"}) {
      CAPTURE(uri);
      boost::system::error_code ec;
      std::string why;
      postgres_options::parse(uri, ec, &why);
      CHECK(ec == errc::invalid_store_uri);
      CHECK(why.starts_with("invalid PostgreSQL URI: "));
      CHECK(why.find("secretpw") == std::string::npos);
    }
  }
}

TEST_CASE("postgres: a batch that fails part-way leaves nothing of it behind") {
  pg_schema s;
  task_store& store = s.open();
  store.save(std::vector{make_task("kept"), make_task("removed-if-ok")});
  dead_letter old = make_letter("was-dead");
  store.dead_letters()->bury(std::vector{old});
  // A trigger that fails the INSERT of one id, in the middle of a batch.
  s.raw.run("CREATE FUNCTION \"" + s.name +
            "\".boom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "IF NEW.id = '\\x626f6f6d'::bytea THEN RAISE EXCEPTION 'boom'; END IF; "
            "RETURN NEW; END $$");
  s.raw.run("CREATE TRIGGER boom BEFORE INSERT ON " + s.table("tasks_0") +
            " FOR EACH ROW EXECUTE FUNCTION \"" + s.name + "\".boom()");
  const task a = make_task("a"), boom = make_task("boom"), gone = make_task("removed-if-ok"),
             was_dead = make_task("was-dead"), buried = make_task("kept");
  const std::vector<store_change> batch{
      {change_kind::save, &a},          {change_kind::remove, &gone},
      {change_kind::revive, &was_dead}, {change_kind::bury, &buried, "died", from_epoch_ms(5)},
      {change_kind::save, &boom},
  };
  boost::system::error_code ec;
  store.write(batch, ec);
  CHECK(ec == errc::store_error);
  // Nothing of it: the removed task is there, the dead letter still dead.
  CHECK(ids_in(store) == std::vector<std::string>{"kept", "removed-if-ok"});
  CHECK(store.dead_letters()->count_dead() == 1);
  CHECK(store.dead_letters()->find_dead("was-dead") == old);
  // The same through the pipeline: the batch fails alone, the ones before
  // and after it land.
  std::promise<boost::system::error_code> first, second, third;
  const std::vector<store_change> before{{change_kind::save, &a}};
  const std::vector<store_change> after{{change_kind::remove, &gone}};
  store.async_write(before, [&](boost::system::error_code e) { first.set_value(e); });
  store.async_write(batch, [&](boost::system::error_code e) { second.set_value(e); });
  store.async_write(after, [&](boost::system::error_code e) { third.set_value(e); });
  CHECK_FALSE(first.get_future().get());
  CHECK(second.get_future().get() == errc::store_error);
  CHECK_FALSE(third.get_future().get());
  CHECK(ids_in(store) == std::vector<std::string>{"a", "kept"});
  CHECK(store.dead_letters()->count_dead() == 1);
}

namespace {

// `io`: the writes driven on an io_context of the test's, whose thread then
// calls every completion.
void check_async_write_order(io_runner* io) {
  pg_schema s;
  task_store& store = s.open(io ? io->io.get_executor() : boost::asio::any_io_executor{});
  CHECK(store.max_writes_in_flight() == 16);
  // Each COMMIT takes 10 ms more (a deferred trigger runs at COMMIT, after
  // the statements answered): a completion called before its COMMIT would
  // find its batch invisible to another session.
  s.raw.run("CREATE FUNCTION \"" + s.name +
            "\".slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "PERFORM pg_sleep(0.01); RETURN NULL; END $$");
  s.raw.run("CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON " + s.table("tasks_0") +
            " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION \"" + s.name +
            "\".slow_commit()");
  constexpr int batches = 60;
  std::vector<std::vector<task>> tasks(batches);
  std::vector<std::vector<store_change>> changes(batches);
  for (int b = 0; b < batches; ++b) {
    for (int i = 0; i < 2; ++i) tasks[b].push_back(make_task("t" + std::to_string(b * 2 + i)));
    for (const task& t : tasks[b]) changes[b].push_back({change_kind::save, &t});
  }
  // Every completion checks, on a connection of its own, that its batch is
  // committed (visible to another session) when it is called.
  raw_postgres other;
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<int> order;
  std::vector<long long> seen(batches, -1);
  std::set<std::thread::id> threads;
  for (int b = 0; b < batches; ++b)
    store.async_write(changes[b], [&, b](boost::system::error_code e) {
      const long long visible =
          other.count("SELECT count(*) FROM " + s.table("tasks") + " WHERE id = '\\x" +
                      bytea_hex(tasks[b].back().id).substr(2) + "'::bytea");
      std::lock_guard lock(mutex);
      CHECK_FALSE(e);
      order.push_back(b);
      seen[b] = visible;
      threads.insert(std::this_thread::get_id());
      cv.notify_all();
    });
  std::unique_lock lock(mutex);
  REQUIRE(cv.wait_for(lock, 60s, [&] { return order.size() == batches; }));
  for (int b = 0; b < batches; ++b) {
    CHECK(order[b] == b);
    CHECK(seen[b] == 1);
  }
  CHECK(s.count("tasks") == batches * 2);
  CHECK(threads.size() == 1);
  if (io) CHECK(*threads.begin() == io->thread.get_id());
  CHECK_FALSE(threads.contains(std::this_thread::get_id()));
}

}  // namespace

TEST_CASE("postgres: async_write answers in order, once each, after COMMIT") {
  check_async_write_order(nullptr);
}

TEST_CASE("postgres: drive_writes_on: the io_context's thread sends, reads and completes") {
  io_runner io;
  check_async_write_order(&io);
}

TEST_CASE("postgres: drive_writes_on: a store whose io_context stopped still closes") {
  // A write outstanding on an io_context that no longer runs can never
  // complete: the store's destructor waits 2 x command_timeout + 1 s for it,
  // then drops it without calling its completion (the engine that waited
  // for it is being destroyed), instead of hanging.
  pg_schema s;
  auto io = std::make_unique<io_runner>();
  task_store& store = s.open(io->io.get_executor(), "command_timeout_ms=300");
  const task first = make_task("before-the-stop");
  const std::vector<store_change> one{{change_kind::save, &first}};
  std::promise<boost::system::error_code> landed;
  store.async_write(one, [&](boost::system::error_code e) { landed.set_value(e); });
  CHECK_FALSE(landed.get_future().get());
  io->io.stop();
  io->thread.join();
  const task second = make_task("after-the-stop");
  const std::vector<store_change> two{{change_kind::save, &second}};
  std::atomic<bool> called{false};
  store.async_write(two, [&](boost::system::error_code) { called = true; });
  s.store.reset();  // returns (after its patience): the test does not hang
  CHECK_FALSE(called.load());
  io->work.reset();
  io->io.restart();
  io->thread =
      std::thread([r = io.get()] { r->io.run(); });  // what was queued runs: it must do nothing
  io.reset();
  CHECK_FALSE(called.load());
}

TEST_CASE("postgres: the rotation's drain skips the rows a writer holds, never waits for them") {
  // The drain moved rows with a plain UPDATE, which waited for any row a
  // writer had locked while holding the rows it had moved: with the writer's
  // DELETE of many ids waiting for one of those, a deadlock that PostgreSQL
  // broke only after deadlock_timeout (1 s), every write queued behind it
  // (a 1 s stall in the lateness benchmark). Here another session holds one
  // row of the old generation: the drain must move every other row while it
  // does, then the held one at a later check once it is let go.
  pg_schema s;
  // A long transaction keeps VACUUM from removing the dead rows before the
  // rotation sees them (the case rotation exists for).
  raw_postgres snapshot;
  snapshot.run("BEGIN ISOLATION LEVEL REPEATABLE READ");
  snapshot.run("SELECT 1");
  task_store& store = s.open();
  // 3,000 dead rows beside 2,000 live ones: past both rotate_at (50% of
  // the live) and min_dead (2,000), so the generation flips.
  std::vector<task> keep, gone;
  for (int i = 0; i < 2000; ++i) keep.push_back(make_task("keep-" + std::to_string(i)));
  for (int i = 0; i < 3000; ++i) gone.push_back(make_task("gone-" + std::to_string(i)));
  std::vector<store_change> saves, removes;
  for (const task& t : keep) saves.push_back({change_kind::save, &t});
  for (const task& t : gone) {
    saves.push_back({change_kind::save, &t});
    removes.push_back({change_kind::remove, &t});
  }
  boost::system::error_code ec;
  store.write(saves, ec);
  REQUIRE_FALSE(ec);
  store.write(removes, ec);
  REQUIRE_FALSE(ec);
  REQUIRE(s.count("tasks_0") == 2000);
  // Another session holds the first live row from before the flip (which
  // touches no task row) until after the drain.
  raw_postgres writer;
  writer.run("BEGIN");
  const auto held = writer.column("SELECT convert_from(id, 'UTF8') FROM " + s.table("tasks_0") +
                                  " ORDER BY id LIMIT 1 FOR UPDATE");
  REQUIRE(held.size() == 1);
  // The flip: new rows go to generation 1 (up to a minute: PostgreSQL may
  // hold the dead-row statistics back for seconds); the drain follows 2 s
  // later.
  REQUIRE(polled(
      [&] {
        return s.raw.text("SELECT value FROM " + s.table("meta") + " WHERE key = 'gen'") == "1";
      },
      60s));
  // Every other row moves while the held one stays (a drain that waited for
  // it would move none of its batch until its command timeout gave up, and
  // this would time out).
  CHECK(polled([&] { return s.count("tasks_0") == 1 && s.count("tasks_1") == 1999; }));
  CHECK(s.raw.column("SELECT convert_from(id, 'UTF8') FROM " + s.table("tasks_0")) == held);
  writer.run("COMMIT");
  // Let go, the last row moves too and generation 0 is truncated (its file
  // empty): nothing was lost on the way.
  CHECK(polled([&] {
    return s.count("tasks_1") == 2000 &&
           s.raw.count("SELECT pg_relation_size('" + s.table("tasks_0") + "')") == 0;
  }));
  snapshot.run("COMMIT");
  std::vector<std::string> want;
  for (const task& t : keep) want.push_back(t.id);
  std::sort(want.begin(), want.end());
  CHECK(ids_in(store) == want);
}

TEST_CASE("postgres: the horizon reads by the due index, never a full scan (EXPLAIN)") {
  for (const std::uint32_t shards : {0u, 8u}) {
    CAPTURE(shards);
    pg_schema s(shards);
    task_store& store = s.open();
    std::vector<task> batch;
    for (int i = 0; i < 20'000; ++i)
      batch.push_back(make_task("due-" + std::to_string(i), "p", 1'000'000 + i % 5000));
    store.save(batch);
    s.raw.run("ANALYZE " + s.table("tasks"));
    // The statements list_due() and list_due_shard() run, as they run them:
    // a page of 1000 after a cursor in the middle, up to a far watermark.
    const std::string page = "SELECT due_ms, id, record FROM " + s.table("tasks") +
                             " WHERE shard = %s AND (due_ms, id) > (1002000, '\\x00'::bytea) "
                             "AND due_ms <= 9000000000000 ORDER BY due_ms, id LIMIT 1000";
    std::vector<std::string> queries;
    std::string one = page;
    one.replace(one.find("%s"), 2, shards == 0 ? "0" : "3");
    queries.push_back(one);
    if (shards != 0) {
      std::string inner = page;
      inner.replace(inner.find("%s"), 2, "s.shard");
      queries.push_back(
          "SELECT t.due_ms, t.id, t.record FROM generate_series(0, 7) AS s(shard) CROSS JOIN "
          "LATERAL (" +
          inner + ") t ORDER BY t.due_ms, t.id LIMIT 1000");
    }
    for (const std::string& q : queries) {
      CAPTURE(q);
      std::string plan;
      for (const std::string& line : s.raw.column("EXPLAIN " + q)) plan += line + "\n";
      CAPTURE(plan);
      // The rows are found by the (shard, due_ms, id) index of the partition
      // that holds them, from the cursor on: never a scan of the partition.
      // (With many rows past the cursor the planner reads the index in order
      // and stops at the limit; with a few, as in a shard here, it may fetch
      // them by the index and sort them.) The empty partition's plan does
      // not matter: it holds nothing to read.
      CHECK((plan.find("Index Scan using tasks_0_shard_due_ms_id_idx") != std::string::npos ||
             plan.find("Bitmap Index Scan on tasks_0_shard_due_ms_id_idx") != std::string::npos));
      CHECK(plan.find("Seq Scan on tasks_0") == std::string::npos);
      if (shards == 0) CHECK(plan.find("Merge Append") != std::string::npos);
    }
    // And the pages come back right, past the index's first page.
    due_cursor after{1'002'000, std::string(1, '\0')};
    std::size_t n = 0;
    boost::system::error_code ec;
    store.list_due(
        after, 9'000'000'000'000, 1000, [&](task&&) { ++n; }, ec);
    CHECK_FALSE(ec);
    CHECK(n == 1000);
  }
}

TEST_CASE("postgres: a fenced write lands with the lease's token and is refused with another") {
  constexpr std::uint32_t shards = 4;
  pg_schema s(shards);
  task_store& store = s.open();
  REQUIRE(store.sharded() != nullptr);
  boost::system::error_code lec;
  auto leases = store.sharded()->make_shard_leases({shards, 5s, "a"}, lec);
  REQUIRE(leases);
  const lease_round r = leases->renew();
  REQUIRE(r.held.size() == shards);
  const std::uint64_t token = r.held[0].token;
  CHECK(token >= 1);
  const auto mine = ids_in_shard(0, shards, 2, "f");
  const auto other = ids_in_shard(1, shards, 1, "o");
  const task t0 = make_task(mine[0]), t1 = make_task(mine[1]), u = make_task(other[0]);

  // The right token lands.
  std::vector<store_change> ok{{change_kind::save, &t0, {}, {}, token}};
  store.write(ok);
  CHECK(ids_in(store) == std::vector<std::string>{mine[0]});

  // Another instance takes shard 0 (its lease made to lapse): a new token.
  s.raw.run("UPDATE " + s.table("leases") + " SET owner = 'b', token = token + 1 WHERE shard = 0");
  // Shard 0's part is refused whole (the unfenced change in it too), shard
  // 1's part lands, and the write says which were refused.
  std::vector<store_change> stale{{change_kind::remove, &t0, {}, {}, token},
                                  {change_kind::save, &t1},
                                  {change_kind::save, &u, {}, {}, r.held[1].token}};
  boost::system::error_code ec;
  store.write(stale, ec);
  CHECK(ec == errc::lease_lost);
  CHECK(stale[0].refused);
  CHECK(stale[1].refused);
  CHECK_FALSE(stale[2].refused);
  CHECK(ids_in(store) == std::vector<std::string>{mine[0], other[0]});

  // The pipeline says the same.
  std::promise<boost::system::error_code> done;
  std::vector<store_change> again{{change_kind::remove, &t0, {}, {}, token}};
  store.async_write(again, [&](boost::system::error_code e) { done.set_value(e); });
  CHECK(done.get_future().get() == errc::lease_lost);
  CHECK(again[0].refused);
  CHECK(ids_in(store) == std::vector<std::string>{mine[0], other[0]});
}

TEST_CASE("postgres: the fence and the write are one step: a grant waits for the write") {
  constexpr std::uint32_t shards = 2;
  pg_schema s(shards);
  task_store& store = s.open();
  boost::system::error_code ec;
  auto leases = store.sharded()->make_shard_leases({shards, 5s, "a"}, ec);
  REQUIRE(leases);
  const lease_round r = leases->renew();
  REQUIRE(r.held.size() == shards);
  const std::uint64_t token = r.held[0].token;
  const auto id = ids_in_shard(0, shards, 1, "g")[0];
  const task t = make_task(id);

  // Another instance's grant of shard 0, in a transaction that has not
  // committed yet: it holds the lease row.
  raw_postgres thief;
  thief.run("BEGIN");
  thief.run("UPDATE " + s.table("leases") + " SET owner = 'b', token = token + 1 WHERE shard = 0");
  // The fenced write checks the lease in its statement: it waits for the
  // grant, and once the grant commits it is refused, having written nothing.
  auto write = std::async(std::launch::async, [&] {
    std::vector<store_change> c{{change_kind::save, &t, {}, {}, token}};
    boost::system::error_code e;
    store.write(c, e);
    return e;
  });
  // Wait until the write waits on the row lock (pg_locks says so).
  REQUIRE(polled([&] {
    return s.raw.count(
               "SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = "
               "'transactionid'") >= 1;
  }));
  thief.run("COMMIT");
  CHECK(write.get() == errc::lease_lost);
  CHECK(ids_in(store).empty());
}

TEST_CASE("postgres: listen() gets a notice per task saved by another instance and per setting") {
  constexpr std::uint32_t shards = 8;
  pg_schema s(shards);
  task_store& store = s.open();
  boost::system::error_code ec;
  auto listener = store.sharded()->listen(ec);
  REQUIRE_FALSE(ec);
  REQUIRE(listener);
  // Ids with odd bytes come through whole.
  const std::string odd = std::string("odd \n%\xff\x01", 7) + "\xc3\xbc";
  const std::vector<task> saved{make_task("n1", "p", 1000), make_task(odd, "p", -5)};
  store.save(saved);
  // A fenced save comes from the shard's owner: it needs no notice.
  auto leases = store.sharded()->make_shard_leases({shards, 5s, "a"}, ec);
  const lease_round r = leases->renew();
  const task fenced = make_task(ids_in_shard(r.held[0].shard, shards, 1, "fenced")[0]);
  std::vector<store_change> c{{change_kind::save, &fenced, {}, {}, r.held[0].token}};
  store.write(c);
  store.settings()->save_setting("push:x", "v", ec);
  REQUIRE_FALSE(ec);
  CHECK(store.settings()->erase_setting("push:x", ec));

  std::map<std::string, task_notice> tasks;
  std::vector<std::string> settings;
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while ((tasks.size() < 2 || settings.size() < 2) && std::chrono::steady_clock::now() < deadline)
    for (task_notice& n : listener->wait(1000ms, ec)) {
      REQUIRE_FALSE(ec);
      if (n.kind == notice_kind::setting)
        settings.push_back(n.id);
      else
        tasks[n.id] = n;
    }
  REQUIRE(tasks.size() == 2);
  CHECK(tasks.at("n1").shard == shard_of("n1", shards));
  CHECK(tasks.at("n1").due_ms == 1000);
  CHECK(tasks.at(odd).due_ms == -5);
  CHECK(tasks.at(odd).shard == shard_of(odd, shards));
  CHECK(settings == std::vector<std::string>{"push:x", "push:x"});
  // Nothing more: the fenced save sent none.
  CHECK(listener->wait(300ms, ec).empty());
  CHECK_FALSE(ec);

  SUBCASE("close() from another thread wakes a wait()") {
    auto waiting = std::async(std::launch::async, [&] {
      boost::system::error_code e;
      listener->wait(60s, e);
      return e;
    });
    listener->close();
    CHECK(waiting.get() == errc::not_running);
  }
  SUBCASE("a connection the server ends makes wait() say so, and the next one listens again") {
    CHECK(s.raw.count("SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM "
                      "pg_stat_activity WHERE application_name = 'delayq:" +
                      s.name + ":listen') x") == 1);
    boost::system::error_code lost;
    for (int i = 0; i < 20 && !lost; ++i) listener->wait(500ms, lost);
    CHECK(lost == errc::store_unavailable);
    // The next wait dials and LISTENs; a save after it is heard.
    CHECK(listener->wait(10ms, ec).empty());
    REQUIRE_FALSE(ec);
    store.save(std::vector{make_task("after")});
    std::vector<task_notice> got;
    for (int i = 0; i < 20 && got.empty(); ++i) got = listener->wait(500ms, ec);
    REQUIRE(got.size() == 1);
    CHECK(got[0].id == "after");
  }
}

TEST_CASE("postgres: the lease table: one instance takes every shard, a second its share") {
  constexpr std::uint32_t shards = 16;
  pg_schema s(shards);
  task_store& store = s.open();
  boost::system::error_code ec;
  auto a = store.sharded()->make_shard_leases({shards, 3s, "a"}, ec);
  auto b = store.sharded()->make_shard_leases({shards, 3s, "b"}, ec);
  lease_round ra = a->renew();
  CHECK(ra.held.size() == shards);
  CHECK(ra.gained.size() == shards);
  // b joins: it takes nothing held, a gives away b's share at its next
  // round, b takes it at its next.
  lease_round rb = b->renew();
  CHECK(rb.held.empty());
  ra = a->renew();
  rb = b->renew();
  std::set<std::uint32_t> held;
  for (const auto& l : ra.held) held.insert(l.shard);
  for (const auto& l : rb.held) CHECK(held.insert(l.shard).second);  // never both
  CHECK(held.size() == shards);
  CHECK_FALSE(rb.held.empty());
  // A shard's token only grows: b's are past a's.
  for (const auto& l : rb.held) CHECK(l.token >= 2);
  // a leaves: b takes the rest at once.
  a->release_all();
  rb = b->renew();
  CHECK(rb.held.size() == shards);
  CHECK(rb.members == std::vector<std::string>{"b"});
}

TEST_CASE("postgres: a schema of another version or shard count is refused") {
  pg_schema s;
  s.open();
  s.store.reset();
  boost::system::error_code ec;
  std::string why;
  SUBCASE("another shard count") {
    auto o = postgres_test_options(s.name, 8);
    CHECK(open_postgres_store(o, ec, &why) == nullptr);
    CHECK(ec == errc::shard_mismatch);
    CHECK(why.find("records 0 shards, not the 8") != std::string::npos);
    // open_store() says what to do about it.
    CHECK(open_store(postgres_uri_for(s.name, "shards=8"), ec, &why) == nullptr);
    CHECK(ec == errc::shard_mismatch);
  }
  SUBCASE("a newer version") {
    s.raw.run("UPDATE " + s.table("meta") + " SET value = '99' WHERE key = 'layout'");
    CHECK(open_postgres_store(postgres_test_options(s.name), ec, &why) == nullptr);
    CHECK(ec == errc::store_error);
    CHECK(why.find("layout version '99'") != std::string::npos);
  }
}

TEST_CASE("postgres: two processes creating one schema at once create it once") {
  const std::string name = unique_schema("race");
  raw_postgres raw;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&] {
      boost::system::error_code ec;
      std::string why;
      auto store = open_postgres_store(postgres_test_options(name), ec, &why);
      if (ec) {
        ++failures;
        MESSAGE(why);
      }
    });
  for (auto& t : threads) t.join();
  CHECK(failures == 0);
  CHECK(raw.count("SELECT count(*) FROM \"" + name + "\".meta WHERE key = 'layout'") == 1);
  raw.drop_schema(name);
}

TEST_CASE("postgres: --cluster's layout checks and migrate_to_shards") {
  pg_schema s;
  task_store& plain = s.open();
  plain.save(std::vector{make_task("m1"), make_task("m2"), make_task("m3")});
  plain.dead_letters()->bury(std::vector{make_letter("d1")});
  s.store.reset();
  const std::string uri = postgres_uri_for(s.name);
  boost::system::error_code ec;
  std::string why;
  // A cluster refuses the unsharded task set and names the command.
  CHECK(open_store(uri, store_requirements{true, 8}, ec, &why) == nullptr);
  CHECK(ec == errc::shard_mismatch);
  CHECK(why.find("holds an unsharded task set (3 tasks and 1 dead letter") != std::string::npos);
  CHECK(why.find("delayqctl migrate-shards --store 'postgres://") != std::string::npos);
  // The move: one transaction.
  const shard_migration m = migrate_to_shards(uri, 8);
  CHECK(m.shards == 8);
  CHECK(m.tasks == 3);
  auto sharded = open_store(uri, store_requirements{true, 8});
  REQUIRE(sharded->sharded() != nullptr);
  CHECK(sharded->sharded()->shards() == 8);
  CHECK(ids_in(*sharded) == std::vector<std::string>{"m1", "m2", "m3"});
  // Each task is found in its shard.
  for (const char* id : {"m1", "m2", "m3"}) {
    due_cursor after;
    std::vector<std::string> got;
    sharded->sharded()->list_due_shard(
        shard_of(id, 8), after, INT64_MAX, 100, [&](task&& t) { got.push_back(t.id); }, ec);
    CHECK(std::find(got.begin(), got.end(), id) != got.end());
  }
  CHECK(sharded->dead_letters()->count_dead() == 1);
  // Again: nothing to move. Another count: refused.
  CHECK(migrate_to_shards(uri, 8).tasks == 0);
  migrate_to_shards(uri, 16, ec, &why);
  CHECK(ec == errc::shard_mismatch);
  // Without --cluster the sharded set is refused, with what to start.
  sharded.reset();
  CHECK(open_store(uri, ec, &why) == nullptr);
  CHECK(ec == errc::shard_mismatch);
  CHECK(why.find("holds a sharded task set (8 shards") != std::string::npos);
  // The count given twice, differently.
  CHECK(required_shards(uri + "&shards=4", {true, 8}, ec, &why) == 0);
  CHECK(ec == errc::invalid_cluster_options);
  CHECK(required_shards(uri + "&shards=4", {true, 0}, ec) == 4);
  CHECK(required_shards(uri, {true, 0}, ec) == default_cluster_shards);
  CHECK(required_shards("sqlite:x.db", {true, 0}, ec, &why) == 0);
  CHECK(ec == errc::invalid_cluster_options);
  CHECK(why.find("postgres://") != std::string::npos);
}

TEST_CASE("postgres: connections the server ended are replaced, a call goes through") {
  pg_schema s;
  task_store& store = s.open();
  store.save(std::vector{make_task("before")});
  CHECK(ids_in(store).size() == 1);
  std::promise<boost::system::error_code> done;
  const task w = make_task("piped");
  std::vector<store_change> c{{change_kind::save, &w}};
  store.async_write(c, [&](boost::system::error_code e) { done.set_value(e); });
  REQUIRE_FALSE(done.get_future().get());
  // Every connection of the store, idle in its pool or the pipeline's.
  const long long ended = s.raw.count(
      "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
      "application_name LIKE 'delayq:" +
      s.name + "%') x");
  CHECK(ended >= 2);
  // A read, a blocking write and a pipelined one each go through on a new
  // connection, none reported as lost.
  CHECK(ids_in(store).size() == 2);
  boost::system::error_code ec;
  store.save(std::vector{make_task("after")}, ec);
  CHECK_FALSE(ec);
  std::promise<boost::system::error_code> again;
  const task w2 = make_task("piped-2");
  std::vector<store_change> c2{{change_kind::save, &w2}};
  store.async_write(c2, [&](boost::system::error_code e) { again.set_value(e); });
  CHECK_FALSE(again.get_future().get());
  CHECK(store.dead_letters()->count_dead(ec) == 0);
  CHECK_FALSE(ec);
  CHECK(ids_in(store) == std::vector<std::string>{"after", "before", "piped", "piped-2"});
}

TEST_CASE(
    "postgres: a write given up on is withdrawn: what the server had not received never runs") {
  // As for Redis (redis_write_test.cpp): the proxy takes almost nothing from
  // the store's connection while frozen, so the batch waits in the store's
  // own send queue when command_timeout ends the call, as behind a link
  // that went down. Closed gently, it would be sent on once the proxy
  // reads again, and committed after the store answered outcome_unknown;
  // closed with a reset, the kernel drops it. The proxy holds new
  // connections too, the store's cancel request among them, as a paused
  // server would: PQcancel waits for the server, so the call must not.
  pg_schema s;
  const postgres_options direct = postgres_test_options(s.name);
  freezing_proxy proxy(direct.connection.port, 1);
  postgres_options o = direct;
  o.connection.host = "127.0.0.1";
  o.connection.port = proxy.port();
  o.connection.command_timeout = 300ms;
  s.store = open_postgres_store(o);
  task_store& store = *s.store;
  store.save(std::vector{make_task("before")});
  const task warm = make_task("warm");
  std::vector<store_change> warm_change{{change_kind::save, &warm}};
  std::promise<boost::system::error_code> warmed;
  store.async_write(warm_change, [&](boost::system::error_code e) { warmed.set_value(e); });
  REQUIRE_FALSE(warmed.get_future().get());  // the pipeline's connection is open
  const std::string sessions =
      "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'delayq:" + s.name + "%'";
  const long long open = s.raw.count(sessions);

  proxy.freeze();
  task late = make_task("late");
  late.payload = std::string(12 * 1024, 'x');  // within the store's first send buffer
  std::future<boost::system::error_code> outcome;
  SUBCASE("save") {
    outcome = std::async(std::launch::async, [&] {
      boost::system::error_code ec;
      store.save(std::vector{late}, ec);
      return ec;
    });
  }
  SUBCASE("async_write") {
    auto done = std::make_shared<std::promise<boost::system::error_code>>();
    outcome = done->get_future();
    std::vector<store_change> c{{change_kind::save, &late}};
    store.async_write(c, [done](boost::system::error_code e) { done->set_value(e); });
  }
  const bool answered = outcome.wait_for(20s) == std::future_status::ready;
  if (!answered) proxy.thaw();  // lets a call held by its cancel request end
  REQUIRE(answered);
  REQUIRE(outcome.get() == errc::outcome_unknown);  // all of it had left the store
  proxy.thaw();
  // The proxy forwards all it gets, then ends the pair on the reset; the
  // server's session ends once it has read (and run) whatever came.
  REQUIRE(polled([&] { return proxy.ended() >= 1 && s.raw.count(sessions) < open; }));
  CHECK(s.count("tasks") == 2);
  CHECK(ids_in(store) == std::vector<std::string>{"before", "warm"});
}

TEST_CASE("postgres: a server that stays paused holds at most 4 cancel requests") {
  // Each write given up on sends its cancel request on a thread of its own,
  // which waits until the server closes the request's dial. A proxy that
  // holds every connection stands for a paused server: the first 4 timeouts
  // each leave a thread waiting, the 5th sends none and says so, and every
  // call still answers at its command_timeout.
  pg_schema s;
  const postgres_options direct = postgres_test_options(s.name);
  freezing_proxy proxy(direct.connection.port);
  postgres_options o = direct;
  o.connection.host = "127.0.0.1";
  o.connection.port = proxy.port();
  o.connection.command_timeout = 200ms;
  // No rotation: its thread's query would time out behind the frozen proxy
  // too, and take a cancel slot of its own.
  o.rotate = false;
  s.store = open_postgres_store(o);
  // Five stores, each with its connection open (a dial through the frozen
  // proxy would fail, and a failed dial cancels nothing).
  std::vector<std::unique_ptr<task_store>> stores;
  for (int i = 0; i < 5; ++i) {
    stores.push_back(open_postgres_store(o));
    stores.back()->save(std::vector{make_task("before-" + std::to_string(i))});
  }
  proxy.freeze();
  log_capture logs;
  for (int i = 0; i < 5; ++i) {
    auto outcome = std::async(std::launch::async, [&] {
      boost::system::error_code ec;
      stores[static_cast<std::size_t>(i)]->save(std::vector{make_task("t" + std::to_string(i))},
                                                ec);
      return ec;
    });
    const bool answered = outcome.wait_for(20s) == std::future_status::ready;
    if (!answered) proxy.thaw();
    REQUIRE(answered);
    CHECK(outcome.get() == errc::outcome_unknown);
    // The first four each sent theirs (a thread now waits on each); the
    // fifth finds the cap reached.
    CHECK(logs.contains("no cancel request sent for a connection given up on") == (i == 4));
  }
  proxy.thaw();  // the cancel requests reach the server, which ends their dials
  stores.clear();
}

TEST_CASE("postgres: an unreachable server is store_unavailable, and open_store says where") {
  boost::system::error_code ec;
  std::string why;
  // A port nothing listens on (the test server's, plus one: a guess that
  // holds on a loopback where each test server takes a free port).
  auto o = postgres_options::parse("postgres://u:secretpw@127.0.0.1:1/db?connect_timeout_ms=500");
  CHECK(open_postgres_store(o, ec, &why) == nullptr);
  CHECK(ec == errc::store_unavailable);
  CHECK(open_store("postgres://u:secretpw@127.0.0.1:1/db?connect_timeout_ms=500", ec, &why) ==
        nullptr);
  CHECK(ec == errc::store_unavailable);
  CHECK(why.find("PostgreSQL at 127.0.0.1:1 is unreachable") != std::string::npos);
  CHECK(why.find("secretpw") == std::string::npos);
  // A wrong password is someone's to fix: store_error.
  auto bad = postgres_options::parse(postgres_test_uri());
  bad.connection.password = "wrong-password";
  CHECK(open_postgres_store(bad, ec, &why) == nullptr);
  CHECK(ec == errc::store_error);
}

}  // namespace delayq::test
