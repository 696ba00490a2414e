// Count-triggered tasks (engine::signal) and the per-type capacity under
// concurrent schedules, against every store: memory, an SQLite file and a
// real Redis.

#include <doctest/doctest.h>

#include <atomic>
#include <delayq/delayq.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "engine_test_support.hpp"

using namespace delayq_test;

namespace {

// The engine's store for a store name: memory (through borrowed_store, so the
// test can look at it), an SQLite file, or a fresh Redis prefix.
struct store_choice {
  std::string name;
  std::string uri;  // empty: memory
  delayq::memory_store memory;
  std::unique_ptr<delayq::task_store> open() {
    if (uri.empty()) return std::make_unique<borrowed_store>(memory);
    return delayq::open_store(uri);
  }
  // What the store holds now (for memory: nothing while an engine runs, it
  // took the tasks; see memory_store).
  std::map<std::string, delayq::task> held() {
    if (uri.empty()) return stored(memory);
    auto direct = delayq::open_store(uri);
    return stored(*direct);
  }
};

}  // namespace

TEST_CASE("signal: a count-triggered task runs on its Nth signal, durable, on every store") {
  temp_dir dir;
  store_choice s;
  SUBCASE("memory") { s.name = "memory"; }
  SUBCASE("sqlite") {
    s.name = "sqlite";
    s.uri = "sqlite:" + dir.file("signal.db");
  }
  SUBCASE("redis") {
    s.name = "redis";
    s.uri = fresh_redis_uri("signal");
  }
  CAPTURE(s.name);
  io_thread io;
  recorder ran;
  delayq::executor_factory f;
  f.add("t", std::ref(ran));
  delayq::engine eng(io.io, f, s.open(), fast_options());
  eng.start();
  delayq::schedule_options o{"join"};
  o.trigger_count = 3;
  CHECK(eng.schedule("t", "p", 1h, o) == "join");
  CHECK(eng.find("join")->trigger_count == 3);
  CHECK(eng.find("join")->signals == 0);

  auto r = eng.signal("join");
  CHECK(r.signals == 1);
  CHECK(r.trigger_count == 3);
  CHECK_FALSE(r.triggered);
  r = eng.signal("join", 1);
  CHECK(r.signals == 2);
  CHECK_FALSE(r.triggered);
  CHECK(eng.status("join")->state == delayq::task_state::delayed);
  CHECK(eng.find("join")->signals == 2);
  if (!s.uri.empty()) {
    // Acknowledged means stored: the store holds the count already.
    const auto held = s.held();
    REQUIRE(held.count("join") == 1);
    CHECK(held.at("join").signals == 2);
    CHECK(held.at("join").trigger_count == 3);
  }
  CHECK(ran.snapshot().empty());

  const auto before = clock_type::now();
  r = eng.signal("join", 5);  // past the count: kept as is, triggers
  CHECK(r.signals == 7);
  CHECK(r.triggered);
  REQUIRE(ran.wait_for_count(1));
  const auto run = ran.snapshot().at(0);
  CHECK(run.t.id == "join");
  CHECK(run.t.payload == "p");
  CHECK(run.t.trigger_count == 3);
  CHECK(run.t.signals == 7);  // >= trigger_count: the count fired it
  CHECK(run.t.due <= run.at);
  CHECK(run.t.due >= before - 1s);  // due now, not in an hour (ms precision)
  REQUIRE(eventually([&] { return eng.stats().succeeded == 1; }));

  boost::system::error_code ec;
  eng.signal("join", 1, ec);
  CHECK(ec == delayq::errc::not_found);  // finished
  CHECK(eng.stop());
  CHECK(s.held().empty());
}

TEST_CASE("signal: the deadline fires a task short of its count, the executor can tell") {
  temp_dir dir;
  std::string uri;
  SUBCASE("sqlite") { uri = "sqlite:" + dir.file("deadline.db"); }
  SUBCASE("redis") { uri = fresh_redis_uri("deadline"); }
  CAPTURE(uri);
  io_thread io;
  latch gate;
  recorder ran;
  delayq::executor_factory f;
  f.add("t", [&](const delayq::task& t) {
    ran(t);
    gate.enter_and_wait();
  });
  delayq::engine eng(io.io, f, delayq::open_store(uri), fast_options());
  eng.start();
  delayq::schedule_options o{"late"};
  o.trigger_count = 5;
  // Due in 2 s: the signal must land before the deadline (a durable schedule
  // on a loaded sanitizer build can take a good part of 200 ms).
  eng.schedule("t", "", 2s, o);
  CHECK(eng.signal("late").signals == 1);
  REQUIRE(gate.wait_entered(1));
  const auto run = ran.snapshot().at(0);
  CHECK(run.t.trigger_count == 5);
  CHECK(run.t.signals == 1);  // < trigger_count: the deadline fired it
  // Running: a signal changes nothing any more, and says so.
  boost::system::error_code ec;
  const auto r = eng.signal("late", 1, ec);
  CHECK(ec == delayq::errc::already_triggered);
  CHECK(r.signals == 0);
  gate.release();
  REQUIRE(eventually([&] { return eng.stats().succeeded == 1; }));
  CHECK(eng.stop());
}

TEST_CASE("signal: errors for an unknown id, a plain task, a zero signal, a stopped engine") {
  io_thread io;
  delayq::executor_factory f;
  f.add("t", [](const delayq::task&) {});
  delayq::memory_store inner;
  delayq::engine eng(io.io, f, std::make_unique<borrowed_store>(inner), fast_options());
  boost::system::error_code ec;
  eng.signal("x", 1, ec);
  CHECK(ec == delayq::errc::not_running);
  eng.start();
  eng.signal("nobody", 1, ec);
  CHECK(ec == delayq::errc::not_found);
  CHECK_THROWS_AS(eng.signal("nobody"), boost::system::system_error);
  eng.schedule("t", "", 1h, {"plain"});
  eng.signal("plain", 1, ec);
  CHECK(ec == delayq::errc::not_count_triggered);
  delayq::schedule_options o{"counted"};
  o.trigger_count = 2;
  eng.schedule("t", "", 1h, o);
  eng.signal("counted", 0, ec);
  CHECK(ec == delayq::errc::invalid_signal);
  CHECK(eng.find("counted")->signals == 0);
  // A cancelled task is gone: not_found.
  CHECK(eng.cancel("counted"));
  eng.signal("counted", 1, ec);
  CHECK(ec == delayq::errc::not_found);
  CHECK(eng.stop());
}

TEST_CASE("signal: a signal whose store write fails is refused and not counted") {
  io_thread io;
  delayq::executor_factory f;
  f.add("t", [](const delayq::task&) {});
  delayq::memory_store inner;
  auto owned = std::make_unique<controlled_store>(inner);
  controlled_store& store = *owned;
  delayq::engine eng(io.io, f, std::move(owned), fast_options());
  eng.start();
  delayq::schedule_options o{"c"};
  o.trigger_count = 2;
  eng.schedule("t", "", 1h, o);
  store.down = true;
  boost::system::error_code ec;
  eng.signal("c", 1, ec);
  CHECK(ec);  // the store's error: the caller knows the signal did not count
  CHECK(eng.find("c")->signals == 0);
  store.down = false;
  CHECK(eng.signal("c").signals == 1);
  CHECK(eng.status("c")->state == delayq::task_state::delayed);
  CHECK(eng.stop());
}

TEST_CASE("signal: a restart between signals keeps the count, the next signal fires it") {
  temp_dir dir;
  std::string uri;
  SUBCASE("sqlite") { uri = "sqlite:" + dir.file("restart.db"); }
  SUBCASE("redis") { uri = fresh_redis_uri("restart"); }
  CAPTURE(uri);
  recorder ran;
  delayq::executor_factory f;
  f.add("t", std::ref(ran));
  delayq::schedule_options o{"r"};
  o.trigger_count = 2;
  {
    io_thread io;
    delayq::engine eng(io.io, f, delayq::open_store(uri), fast_options());
    eng.start();
    eng.schedule("t", "", 1h, o);
    CHECK(eng.signal("r").signals == 1);
    CHECK(eng.stop());
  }
  io_thread io;
  delayq::engine eng(io.io, f, delayq::open_store(uri), fast_options());
  eng.start();
  REQUIRE(eng.find("r").has_value());
  CHECK(eng.find("r")->signals == 1);
  CHECK(eng.find("r")->trigger_count == 2);
  CHECK(eng.signal("r").triggered);
  REQUIRE(ran.wait_for_count(1));
  CHECK(ran.snapshot().at(0).t.signals == 2);
  REQUIRE(eventually([&] { return eng.stats().succeeded == 1; }));
  CHECK(eng.stop());
}

TEST_CASE(
    "signal: a replace resets the count, a batch takes trigger counts, retries follow policy") {
  io_thread io;
  std::atomic<int> calls{0};
  recorder ran;
  delayq::executor_factory f;
  f.add("t", [&](const delayq::task& t) {
    ran(t);
    if (calls.fetch_add(1) == 0) throw std::runtime_error("first attempt fails");
  });
  temp_dir dir;
  delayq::engine eng(io.io, f, delayq::open_store("sqlite:" + dir.file("replace.db")),
                     fast_options());
  eng.start();
  delayq::schedule_options o{"x"};
  o.trigger_count = 2;
  eng.schedule("t", "", 1h, o);
  eng.signal("x");
  o.conflict = delayq::on_conflict::replace;
  o.trigger_count = 3;
  eng.schedule("t", "v2", 1h, o);
  CHECK(eng.find("x")->signals == 0);
  CHECK(eng.find("x")->trigger_count == 3);
  delayq::task_spec spec{"t", "", clock_type::now() + 1h, {"b"}};
  spec.options.trigger_count = 1;
  CHECK(eng.schedule_many({spec}) == std::vector<std::string>{"b"});
  CHECK(eng.signal("b").triggered);
  REQUIRE(ran.wait_for_count(2));  // the failed attempt and its retry
  const auto runs = ran.snapshot();
  CHECK(runs.at(0).t.signals == 1);
  CHECK(runs.at(1).t.signals == 1);
  CHECK(runs.at(1).t.attempts == 1);
  REQUIRE(eventually([&] { return eng.stats().succeeded == 1; }));
  CHECK(eng.stop());
}

TEST_CASE("capacity: threads racing for the last place of a type: exactly one gets it") {
  temp_dir dir;
  store_choice s;
  SUBCASE("memory") { s.name = "memory"; }
  SUBCASE("sqlite") {
    s.name = "sqlite";
    s.uri = "sqlite:" + dir.file("race.db");
  }
  SUBCASE("redis") {
    s.name = "redis";
    s.uri = fresh_redis_uri("race");
  }
  CAPTURE(s.name);
  io_thread io;
  delayq::executor_factory f;
  f.add("topic", [](const delayq::task&) {});
  auto opts = fast_options();
  opts.type_capacity["topic"] = 2;
  delayq::engine eng(io.io, f, s.open(), opts);
  eng.start();
  eng.schedule("topic", "", 1h, {"first"});
  constexpr int threads = 8, rounds = 20;
  for (int round = 0; round < rounds; ++round) {
    std::atomic<int> won{0}, full{0}, other{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> racers;
    for (int k = 0; k < threads; ++k)
      racers.emplace_back([&, k] {
        while (!go.load()) std::this_thread::yield();
        boost::system::error_code ec;
        eng.schedule("topic", "", 1h, {"r" + std::to_string(round) + "-" + std::to_string(k)}, ec);
        if (!ec)
          ++won;
        else if (ec == delayq::errc::type_full)
          ++full;
        else
          ++other;
      });
    go = true;
    for (auto& t : racers) t.join();
    CHECK(won == 1);
    CHECK(full == threads - 1);
    CHECK(other == 0);
    CHECK(eng.pending() == 2);
    if (!s.uri.empty()) CHECK(s.held().size() == 2);
    // Free the place again for the next round.
    for (int k = 0; k < threads; ++k)
      eng.cancel("r" + std::to_string(round) + "-" + std::to_string(k));
  }
  CHECK(eng.stop());
}

// engine.hpp, requeue(): "a count-triggered task comes back as an ordinary
// one (its trigger count is dropped)". Checked in memory, through a signal,
// in the store, after a restart, and by the task's run.
TEST_CASE("signal: a requeued count-triggered dead letter comes back as an ordinary task") {
  temp_dir dir;
  std::string uri;
  SUBCASE("sqlite") { uri = "sqlite:" + dir.file("requeue.db"); }
  SUBCASE("redis") { uri = fresh_redis_uri("requeue"); }
  CAPTURE(uri);
  std::atomic<bool> healthy{false};
  recorder ran;
  delayq::executor_factory f;
  f.add("t", [&](const delayq::task& t) {
    if (!healthy) throw std::runtime_error("down");
    ran(t);
  });
  auto opts = fast_options();
  opts.retry.max_attempts = 1;  // the first failure makes the dead letter
  delayq::schedule_options o{"ct"};
  o.trigger_count = 2;
  {
    io_thread io;
    delayq::engine eng(io.io, f, delayq::open_store(uri), opts);
    eng.start();
    eng.schedule("t", "", 1h, o);
    CHECK(eng.signal("ct").signals == 1);
    CHECK(eng.signal("ct").triggered);
    REQUIRE(eventually([&] { return eng.stats().died == 1; }));
    const auto dead = eng.find_dead("ct");
    REQUIRE(dead.has_value());
    CHECK(dead->task.trigger_count == 2);  // the dead letter keeps what it was

    REQUIRE(eng.requeue("ct", clock_type::now() + 1h));
    const auto back = eng.find("ct");
    REQUIRE(back.has_value());
    CHECK(back->trigger_count == 0);
    CHECK(back->signals == 0);
    CHECK(back->attempts == 0);
    // Ordinary: a signal means nothing to it now.
    boost::system::error_code ec;
    eng.signal("ct", 1, ec);
    CHECK(ec == delayq::errc::not_count_triggered);
    CHECK(eng.stop());
  }
  {
    auto direct = delayq::open_store(uri);
    const auto held = stored(*direct);
    REQUIRE(held.count("ct") == 1);
    CHECK(held.at("ct").trigger_count == 0);
    CHECK(held.at("ct").signals == 0);
  }
  // After a restart it is still ordinary, and runs at its due time as one.
  healthy = true;
  io_thread io;
  delayq::engine eng(io.io, f, delayq::open_store(uri), opts);
  eng.start();
  const auto again = eng.find("ct");
  REQUIRE(again.has_value());
  CHECK(again->trigger_count == 0);
  REQUIRE(eng.reschedule("ct", clock_type::now()));
  REQUIRE(ran.wait_for_count(1));
  CHECK(ran.snapshot().at(0).t.id == "ct");
  CHECK(ran.snapshot().at(0).t.trigger_count == 0);
  REQUIRE(eventually([&] { return eng.stats().succeeded == 1; }));
  CHECK(eng.stop());
}
