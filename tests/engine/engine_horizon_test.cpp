// The horizon (engine_options::horizon): tasks due later than it stay in the
// store only, calls that name them still tell the truth, and the pager reads
// them in before they are due. On a real SQLite file and a real Redis.

#include <doctest/doctest.h>

#include <atomic>
#include <boost/asio/use_future.hpp>
#include <delayq/delayq.hpp>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "engine_test_support.hpp"

using namespace delayq_test;

namespace {

// One store URI per subcase: an SQLite file in `dir`, or a fresh Redis prefix.
std::string horizon_store(const temp_dir& dir, bool redis, const std::string& name) {
  return redis ? fresh_redis_uri("horizon-" + name) : "sqlite:" + dir.file(name + ".db");
}

delayq::engine_options horizon_options(std::chrono::milliseconds horizon) {
  auto o = fast_options();
  o.horizon = horizon;
  return o;
}

delayq::task stored_task(std::string id, clock_type::time_point due) {
  return delayq::task{std::move(id), "t", "p", std::chrono::floor<std::chrono::milliseconds>(due),
                      0};
}

}  // namespace

TEST_CASE("horizon: a far task is stored, not held, and every call still finds it") {
  temp_dir dir;
  bool redis = false;
  SUBCASE("sqlite") {}
  SUBCASE("redis") { redis = true; }
  const std::string uri = horizon_store(dir, redis, "far");
  recorder ran;
  delayq::executor_factory f;
  f.add("t", std::ref(ran));
  io_thread io;
  delayq::engine eng(io.io, f, delayq::open_store(uri), horizon_options(std::chrono::minutes{1}));
  eng.start();
  const auto far = clock_type::now() + std::chrono::hours{2};

  delayq::schedule_options o;
  o.id = "far-1";
  CHECK(eng.schedule_at("t", "one", far, o) == "far-1");
  CHECK(eng.pending() == 0);  // written to the store, no wheel record
  auto store = delayq::open_store(uri);
  CHECK(stored(*store).count("far-1") == 1);

  // find/status read it from the store.
  auto st = eng.status("far-1");
  REQUIRE(st);
  CHECK(st->state == delayq::task_state::delayed);
  CHECK(st->task.payload == "one");

  // upcoming() goes on past the held tasks into the store.
  auto up = eng.upcoming(10);
  REQUIRE(up.size() == 1);
  CHECK(up[0].id == "far-1");

  // A second schedule of the id sees it: reject, keep, replace.
  boost::system::error_code ec;
  eng.schedule_at("t", "two", far, o, ec);
  CHECK(ec == delayq::errc::duplicate_id);
  CHECK(eng.pending() == 0);  // looked up, then let go again
  o.conflict = delayq::on_conflict::keep;
  CHECK(eng.schedule_at("t", "two", far, o) == "far-1");
  CHECK(stored(*store).at("far-1").payload == "one");
  CHECK(eng.pending() == 0);
  o.conflict = delayq::on_conflict::replace;
  CHECK(eng.schedule_at("t", "three", far, o) == "far-1");
  CHECK(stored(*store).at("far-1").payload == "three");
  CHECK(eng.pending() == 0);

  // cancel() of a far task is true once, and it is gone from the store.
  CHECK(eng.cancel("far-1"));
  CHECK_FALSE(eng.cancel("far-1"));
  CHECK(stored(*store).count("far-1") == 0);
  CHECK_FALSE(eng.status("far-1"));

  // reschedule() brings a far task near: it runs.
  o = {};
  o.id = "far-2";
  eng.schedule_at("t", "", far, o);
  CHECK(eng.reschedule("far-2", clock_type::now() + 20ms));
  REQUIRE(ran.wait_for_count(1));
  CHECK(ran.ids() == std::vector<std::string>{"far-2"});
  REQUIRE(eventually([&] { return stored(*store).count("far-2") == 0; }));
  CHECK_FALSE(eng.reschedule("far-2", far));  // ran: nothing to move

  // A count-triggered far task counts its signals and runs at the last.
  o.id = "far-3";
  o.trigger_count = 2;
  eng.schedule_at("t", "", far, o);
  CHECK(eng.pending() == 0);
  auto s1 = eng.signal("far-3");
  CHECK(s1.signals == 1);
  CHECK_FALSE(s1.triggered);
  CHECK(stored(*store).at("far-3").signals == 1);
  CHECK(eng.signal("far-3").triggered);
  REQUIRE(ran.wait_for_count(2));
  CHECK(ran.ids().back() == "far-3");
  CHECK(eng.stop());
}

TEST_CASE("horizon: requeue() of a dead letter sees a live far task with its id") {
  temp_dir dir;
  bool redis = false;
  SUBCASE("sqlite") {}
  SUBCASE("redis") { redis = true; }
  const std::string uri = horizon_store(dir, redis, "requeue");
  delayq::executor_factory f;
  f.add("t", [](const delayq::task&) { throw std::runtime_error("no"); });
  auto o = horizon_options(std::chrono::minutes{1});
  o.retry.max_attempts = 1;
  io_thread io;
  delayq::engine eng(io.io, f, delayq::open_store(uri), o);
  eng.start();
  delayq::schedule_options so;
  so.id = "d";
  eng.schedule_at("t", "dead", clock_type::now(), so);
  REQUIRE(eventually([&] { return eng.stats().dead == 1; }));
  // A live task of the same id, due past the horizon, in the store only.
  eng.schedule_at("t", "live", clock_type::now() + std::chrono::hours{2}, so);
  CHECK(eng.pending() == 0);
  boost::system::error_code ec;
  CHECK_FALSE(eng.requeue("d", clock_type::now(), ec));
  CHECK(ec == delayq::errc::duplicate_id);
  auto store = delayq::open_store(uri);
  CHECK(stored(*store).at("d").payload == "live");  // not overwritten
  CHECK(eng.stop());
}

TEST_CASE("horizon: a call after an async schedule of an unheld id waits for it") {
  // The schedule looks its id up on the pager's thread first; a cancel made
  // after async_schedule() returned must still see the task it schedules.
  temp_dir dir;
  bool redis = false;
  SUBCASE("sqlite") {}
  SUBCASE("redis") { redis = true; }
  const std::string uri = horizon_store(dir, redis, "async");
  delayq::executor_factory f;
  f.add("t", [](const delayq::task&) {});
  io_thread io;
  delayq::engine eng(io.io, f, delayq::open_store(uri), horizon_options(std::chrono::minutes{1}));
  eng.start();
  for (int i = 0; i < 20; ++i) {
    const std::string id = "a-" + std::to_string(i);
    delayq::schedule_options o;
    o.id = id;
    auto done = eng.async_schedule(
        "t", "",
        i % 2 ? std::chrono::milliseconds{std::chrono::hours{2}} : std::chrono::milliseconds{30000},
        o, boost::asio::use_future);
    CHECK_MESSAGE(eng.cancel(id), id);
    CHECK(done.get() == id);
  }
  auto store = delayq::open_store(uri);
  CHECK(stored(*store).empty());
  CHECK(eng.stop());
}

TEST_CASE("horizon: start() loads only the tasks due within it") {
  temp_dir dir;
  bool redis = false;
  SUBCASE("sqlite") {}
  SUBCASE("redis") { redis = true; }
  const std::string uri = horizon_store(dir, redis, "start");
  {
    auto store = delayq::open_store(uri);
    std::vector<delayq::task> tasks;
    tasks.push_back(stored_task("near", clock_type::now()));
    for (int i = 0; i < 50; ++i)
      tasks.push_back(
          stored_task("far-" + std::to_string(i), clock_type::now() + std::chrono::hours{1 + i}));
    store->save(tasks);
  }
  recorder ran;
  delayq::executor_factory f;
  f.add("t", std::ref(ran));
  io_thread io;
  delayq::engine eng(io.io, f, delayq::open_store(uri), horizon_options(std::chrono::minutes{1}));
  eng.start();
  CHECK(eng.stats().loaded == 1);
  REQUIRE(ran.wait_for_count(1));
  CHECK(ran.ids() == std::vector<std::string>{"near"});
  // The others are there for every call.
  CHECK(eng.upcoming(100).size() == 50);
  CHECK(eng.cancel("far-7"));
  CHECK(eng.upcoming(100).size() == 49);
  CHECK(eng.stop());
}

TEST_CASE("horizon: the pager reads stored tasks in before they are due, each once") {
  temp_dir dir;
  bool redis = false;
  SUBCASE("sqlite") {}
  SUBCASE("redis") { redis = true; }
  const std::string uri = horizon_store(dir, redis, "pager");
  constexpr int n = 300;
  const auto base = clock_type::now() + 1500ms;
  {
    // Written behind the engine's back, spread over 1.5 s from base: past
    // the horizon at start, so each is read in by the pager (or, on a machine
    // that stalls for seconds, by start(): loaded + paged counts both).
    auto store = delayq::open_store(uri);
    std::vector<delayq::task> tasks;
    for (int i = 0; i < n; ++i)
      tasks.push_back(
          stored_task("p-" + std::to_string(i), base + std::chrono::milliseconds{5 * i}));
    store->save(tasks);
  }
  recorder ran;
  delayq::executor_factory f;
  f.add("t", std::ref(ran));
  io_thread io;
  delayq::engine eng(io.io, f, delayq::open_store(uri), horizon_options(200ms));
  eng.start();
  REQUIRE(ran.wait_for_count(n));
  REQUIRE(eventually([&] { return eng.stats().succeeded == n; }));
  const auto st = eng.stats();
  CHECK(st.loaded + st.paged == n);
  std::map<std::string, int> times;
  for (const auto& r : ran.snapshot()) {
    ++times[r.t.id];
    CHECK(r.at >= r.t.due);  // never early
  }
  CHECK(times.size() == n);
  for (const auto& [id, k] : times) CHECK_MESSAGE(k == 1, id);
  CHECK(eng.stop());
}

TEST_CASE("horizon: cancel() racing the pager is truthful, and nothing runs twice") {
  temp_dir dir;
  bool redis = false;
  SUBCASE("sqlite") {}
  SUBCASE("redis") { redis = true; }
  const std::string uri = horizon_store(dir, redis, "race");
  recorder ran;
  delayq::executor_factory f;
  f.add("t", std::ref(ran));
  io_thread io;
  delayq::engine eng(io.io, f, delayq::open_store(uri), horizon_options(100ms));
  eng.start();
  // Tasks due over the next second, scheduled by one thread while another
  // cancels every second one: many cancels meet the pager reading their page.
  constexpr int n = 400;
  const auto base = clock_type::now() + 300ms;
  std::vector<std::atomic<int>> cancelled(n);  // 0 unknown, 1 true, 2 false
  std::atomic<int> scheduled{0};
  std::thread canceller([&] {
    for (int i = 0; i < n; i += 2) {
      while (scheduled.load() <= i) std::this_thread::yield();
      cancelled[i] = eng.cancel("r-" + std::to_string(i)) ? 1 : 2;
    }
  });
  for (int i = 0; i < n; ++i) {
    delayq::schedule_options o;
    o.id = "r-" + std::to_string(i);
    eng.schedule_at("t", "", base + std::chrono::milliseconds{(i * 7) % 1000}, o);
    scheduled = i + 1;
  }
  canceller.join();
  // Then a last task due after all of them: once it ran, all others were due.
  delayq::schedule_options last;
  last.id = "last";
  eng.schedule_at("t", "", base + 1100ms, last);
  std::size_t expected = 1;
  for (int i = 0; i < n; ++i)
    if (i % 2 == 1 || cancelled[i] == 2) ++expected;
  REQUIRE(ran.wait_for_count(expected));
  REQUIRE(eventually([&] {
    for (const auto& id : ran.ids())
      if (id == "last") return true;
    return false;
  }));
  CHECK(eng.stop());
  std::map<std::string, int> times;
  for (const auto& id : ran.ids()) ++times[id];
  for (int i = 0; i < n; ++i) {
    const std::string id = "r-" + std::to_string(i);
    if (i % 2 == 0 && cancelled[i] == 1)
      CHECK_MESSAGE(times.count(id) == 0, id << " ran after cancel() returned true");
    else
      CHECK_MESSAGE(times[id] == 1, id);
  }
  CHECK(times.size() == expected);
}

TEST_CASE("horizon: a type with a capacity is held whole, so its count stays exact") {
  temp_dir dir;
  bool redis = false;
  SUBCASE("sqlite") {}
  SUBCASE("redis") { redis = true; }
  const std::string uri = horizon_store(dir, redis, "capacity");
  delayq::executor_factory f;
  f.add("c", [](const delayq::task&) {});
  f.add("t", [](const delayq::task&) {});
  auto o = horizon_options(std::chrono::minutes{1});
  o.type_capacity["c"] = 1;
  const auto far = clock_type::now() + std::chrono::hours{5};
  {
    io_thread io;
    delayq::engine eng(io.io, f, delayq::open_store(uri), o);
    eng.start();
    eng.schedule_at("c", "", far);
    eng.schedule_at("t", "", far);
    CHECK(eng.pending() == 1);  // the capped one; the other is in the store only
    boost::system::error_code ec;
    eng.schedule_at("c", "", far, {}, ec);
    CHECK(ec == delayq::errc::type_full);
    CHECK(eng.stop());
  }
  // After a restart too: start() holds the far task of the capped type.
  io_thread io;
  delayq::engine eng(io.io, f, delayq::open_store(uri), o);
  eng.start();
  CHECK(eng.stats().loaded == 1);
  boost::system::error_code ec;
  eng.schedule_at("c", "", far, {}, ec);
  CHECK(ec == delayq::errc::type_full);
  CHECK(eng.upcoming(10).size() == 2);
  CHECK(eng.stop());
}

TEST_CASE("horizon: a cancel that waited for a far schedule's write still finds the task") {
  // The schedule's write settles a task due past the horizon, so the engine
  // lets go of it; a cancel that was waiting for that write must look it up
  // in the store again rather than answer false. The cancel thread usually
  // reaches its wait before the release; every order must answer true.
  temp_dir dir;
  auto inner = delayq::open_store("sqlite:" + dir.file("wait.db"));
  auto owned = std::make_unique<controlled_store>(*inner);
  controlled_store* cs = owned.get();
  delayq::executor_factory f;
  f.add("t", [](const delayq::task&) {});
  io_thread io;
  delayq::engine eng(io.io, f, std::move(owned), horizon_options(std::chrono::minutes{1}));
  eng.start();
  const auto far = clock_type::now() + std::chrono::hours{2};
  for (int round = 0; round < 50; ++round) {
    const std::string id = "w-" + std::to_string(round);
    cs->hold_next_write();
    std::thread scheduler([&] {
      delayq::schedule_options o;
      o.id = id;
      eng.schedule_at("t", "", far, o);
    });
    REQUIRE(cs->wait_held());
    std::atomic<int> result{-1};
    std::thread canceller([&] { result = eng.cancel(id) ? 1 : 0; });
    std::this_thread::yield();
    cs->release();
    scheduler.join();
    canceller.join();
    CHECK_MESSAGE(result == 1, id);
    CHECK(stored(*inner).count(id) == 0);
  }
  CHECK(eng.stop());
}

namespace {

// Holds the pager after it read a page holding `gate_id`, until open(): a
// call can then act on that task between the pager's read and its insert.
class paused_pager_store final : public borrowed_store {
 public:
  explicit paused_pager_store(delayq::task_store& inner) : borrowed_store(inner) {}
  delayq::list_summary list_due(delayq::due_cursor& after, std::int64_t until_ms, std::size_t limit,
                                const std::function<void(delayq::task&&)>& sink,
                                boost::system::error_code& ec) override {
    bool seen = false;
    auto summary = borrowed_store::list_due(
        after, until_ms, limit,
        [&](delayq::task&& t) {
          seen = seen || t.id == gate_id;
          sink(std::move(t));
        },
        ec);
    if (seen) {
      std::unique_lock lock(m);
      paused = true;
      cv.notify_all();
      cv.wait(lock, [&] { return opened; });
    }
    return summary;
  }
  bool wait_paused() {
    std::unique_lock lock(m);
    return cv.wait_for(lock, patience, [&] { return paused; });
  }
  void open() {
    std::lock_guard lock(m);
    opened = true;
    cv.notify_all();
  }
  std::string gate_id;

 private:
  std::mutex m;
  std::condition_variable cv;
  bool paused = false, opened = false;
};

}  // namespace

TEST_CASE("horizon: a task cancelled while the pager reads its page does not come back") {
  temp_dir dir;
  auto inner = delayq::open_store("sqlite:" + dir.file("paused.db"));
  auto owned = std::make_unique<paused_pager_store>(*inner);
  paused_pager_store* ps = owned.get();
  ps->gate_id = "x";
  recorder ran;
  delayq::executor_factory f;
  f.add("t", std::ref(ran));
  io_thread io;
  delayq::engine eng(io.io, f, std::move(owned), horizon_options(200ms));
  eng.start();
  const auto due = clock_type::now() + 3s;
  delayq::schedule_options o;
  o.id = "x";
  eng.schedule_at("t", "", due, o);
  o.id = "after";
  eng.schedule_at("t", "", due + 50ms, o);
  // The pager read x's page and waits: cancel x now (the engine looks it up
  // in the store, holds it, removes it), then let the pager go on.
  REQUIRE(ps->wait_paused());
  CHECK(eng.cancel("x"));
  ps->open();
  REQUIRE(ran.wait_for_count(1));
  CHECK(ran.ids() == std::vector<std::string>{"after"});
  CHECK(eng.stop());
}

TEST_CASE("horizon: a store without list_due() gets every task held") {
  delayq::memory_store inner;
  inner.save(
      std::vector<delayq::task>{stored_task("far", clock_type::now() + std::chrono::hours{3})});
  recorder ran;
  delayq::executor_factory f;
  f.add("t", std::ref(ran));
  io_thread io;
  // borrowed_store is not in_process (it would be held whole anyway) and
  // forwards list_due() to the memory store, which answers unsupported.
  delayq::engine eng(io.io, f, std::make_unique<borrowed_store>(inner),
                     horizon_options(std::chrono::minutes{1}));
  eng.start();
  CHECK(eng.stats().loaded == 1);
  CHECK(eng.pending() == 1);
  CHECK(eng.cancel("far"));
  CHECK(eng.stop());
}
