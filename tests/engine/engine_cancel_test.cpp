// What cancel() and reschedule() promise: true only if no attempt of the task
// starts after they return (reschedule: not before the new time), for a task
// waiting for its time, due and queued for a worker, held back by a per-type
// limit, or waiting its turn in the catch-up after start(); false, changing
// nothing, for a task whose attempt is running. The races are made
// deterministic by holding the only worker (or the only slot of a type) in a
// blocking executor while due tasks queue up behind it.

#include <doctest/doctest.h>

#include <atomic>
#include <delayq/delayq.hpp>
#include <set>
#include <string>
#include <vector>

#include "engine_test_support.hpp"

using namespace delayq_test;

namespace {

// The store a subcase runs against: the memory store (no store writes at
// all), or a durable one (every change goes through the store writer).
std::unique_ptr<delayq::task_store> store_for(bool durable, delayq::memory_store& inner) {
  if (durable) return std::make_unique<borrowed_store>(inner);
  return std::make_unique<delayq::memory_store>();
}

std::vector<delayq::task_spec> due_now(const std::string& type, const std::string& prefix, int n) {
  std::vector<delayq::task_spec> specs(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    specs[static_cast<std::size_t>(i)].type = type;
    specs[static_cast<std::size_t>(i)].due = clock_type::now();
    specs[static_cast<std::size_t>(i)].options.id = prefix + std::to_string(i);
  }
  return specs;
}

}  // namespace

TEST_CASE("cancel: due tasks queued behind a busy worker are cancelled and never run") {
  bool durable = false;
  SUBCASE("memory store") {}
  SUBCASE("durable store") { durable = true; }
  io_thread io;
  latch gate;
  recorder ran;
  delayq::executor_factory f;
  f.add("block", [&](const delayq::task&) { gate.enter_and_wait(); });
  f.add("t", std::ref(ran));
  auto opts = fast_options();
  opts.workers = 1;
  delayq::memory_store inner;
  delayq::engine eng(io.io, f, store_for(durable, inner), opts);
  eng.start();
  eng.schedule("block", "", 0ms);
  REQUIRE(gate.wait_entered(1));

  constexpr int n = 200;
  eng.schedule_many(due_now("t", "q-", n));
  // All 200 are due and queued behind the held worker.
  REQUIRE(eventually([&] { return eng.stats().ready == n; }));
  for (int i = 0; i < n; ++i) {
    const std::string id = "q-" + std::to_string(i);
    CHECK(eng.status(id)->state == delayq::task_state::ready);
    CHECK(eng.cancel(id));
    CHECK_FALSE(eng.find(id).has_value());
  }
  CHECK(eng.stats().cancelled == n);
  CHECK(eng.stats().ready == 0);
  if (durable) CHECK(stored(inner).size() == 1);  // the blocker only: they left the store
  gate.release();
  // A sentinel queued behind them: once it ran, any of them would have.
  eng.schedule("t", "", 0ms, {"sentinel"});
  REQUIRE(ran.wait_for_count(1));
  REQUIRE(eventually([&] { return eng.stats().succeeded == 2; }));
  CHECK(ran.ids() == std::vector<std::string>{"sentinel"});
  // Counted as succeeded when it settles, a moment before it leaves.
  CHECK(eventually([&] { return eng.pending() == 0; }));
  CHECK(eng.stop());
}

TEST_CASE("cancel: tasks held back by a per-type limit are cancelled and never run") {
  bool durable = false;
  SUBCASE("memory store") {}
  SUBCASE("durable store") { durable = true; }
  io_thread io;
  latch gate;
  recorder ran;
  delayq::executor_factory f;
  f.add("limited", [&](const delayq::task& t) {
    if (t.id == "holder") gate.enter_and_wait();
    ran(t);
  });
  auto opts = fast_options();
  opts.workers = 2;  // a free worker: only the limit holds them back
  opts.type_concurrency["limited"] = 1;
  delayq::memory_store inner;
  delayq::engine eng(io.io, f, store_for(durable, inner), opts);
  eng.start();
  eng.schedule("limited", "", 0ms, {"holder"});
  REQUIRE(gate.wait_entered(1));
  constexpr int n = 100;
  eng.schedule_many(due_now("limited", "g-", n));
  REQUIRE(eventually([&] { return eng.stats().ready == n; }));
  for (int i = 0; i < n; ++i) CHECK(eng.cancel("g-" + std::to_string(i)));
  if (durable) CHECK(stored(inner).size() == 1);
  gate.release();
  eng.schedule("limited", "", 0ms, {"sentinel"});
  REQUIRE(eventually([&] { return eng.stats().succeeded == 2; }));
  CHECK(ran.ids() == std::vector<std::string>{"holder", "sentinel"});
  CHECK(eng.stop());
}

TEST_CASE(
    "cancel: tasks waiting their turn in the catch-up after start() never run once cancelled") {
  io_thread io;
  recorder ran;
  delayq::executor_factory f;
  f.add("t", std::ref(ran));
  delayq::memory_store inner;
  constexpr int n = 100;
  std::vector<delayq::task> overdue;
  for (int i = 0; i < n; ++i)
    overdue.push_back({"c-" + std::to_string(i), "t", "",
                       clock_type::now() - 1h + std::chrono::milliseconds(i),
                       0});  // released in this order
  inner.save(overdue);
  auto opts = fast_options();
  opts.catch_up_rate = 1;  // one a second: 100 s to release them all
  delayq::engine eng(io.io, f, std::make_unique<borrowed_store>(inner), opts);
  eng.start();
  std::set<std::string> cancelled;
  for (int i = 0; i < n; ++i) {
    const std::string id = "c-" + std::to_string(i);
    if (eng.cancel(id)) cancelled.insert(id);
  }
  // The first may have been released before its cancel came (then cancel()
  // said false); the last one is 99 s away from its turn.
  CHECK(cancelled.count("c-99") == 1);
  REQUIRE(eventually([&] { return eng.stats().succeeded == n - cancelled.size(); }));
  for (const std::string& id : ran.ids()) CHECK(cancelled.count(id) == 0);
  // A success is counted before its removal is written: stop() writes what
  // is queued.
  CHECK(eng.stop());
  CHECK(stored(inner).empty());
}

TEST_CASE("cancel: a running attempt is not stopped: cancel() says false and changes nothing") {
  io_thread io;
  latch gate;
  delayq::executor_factory f;
  f.add("t", [&](const delayq::task&) { gate.enter_and_wait(); });
  delayq::memory_store inner;
  delayq::engine eng(io.io, f, std::make_unique<borrowed_store>(inner), fast_options());
  eng.start();
  const auto id = eng.schedule("t", "", 0ms);
  REQUIRE(gate.wait_entered(1));
  CHECK(eng.status(id)->state == delayq::task_state::running);
  CHECK_FALSE(eng.cancel(id));
  CHECK_FALSE(eng.reschedule(id, clock_type::now() + 1h));
  CHECK(eng.status(id)->state == delayq::task_state::running);
  CHECK(eng.stats().cancelled == 0);
  gate.release();
  REQUIRE(eventually([&] { return eng.stats().succeeded == 1; }));
  CHECK(eng.stop());
  CHECK(stored(inner).empty());
}

TEST_CASE("cancel: a task cancelled while queued leaves the store, even if stop() comes first") {
  io_thread io;
  latch gate;
  recorder ran;
  delayq::executor_factory f;
  f.add("block", [&](const delayq::task&) { gate.enter_and_wait(); });
  f.add("t", std::ref(ran));
  auto opts = fast_options();
  opts.workers = 1;
  delayq::memory_store inner;
  {
    delayq::engine eng(io.io, f, std::make_unique<borrowed_store>(inner), opts);
    eng.start();
    eng.schedule("block", "", 0ms, {"block"});
    REQUIRE(gate.wait_entered(1));
    eng.schedule("t", "", 0ms, {"doomed"});
    eng.schedule("t", "", 0ms, {"kept"});
    REQUIRE(eventually([&] { return eng.stats().ready == 2; }));
    CHECK(eng.cancel("doomed"));
    // stop() before the worker reaches either: it is released only once
    // the engine has stopped starting attempts.
    std::thread releaser([&] {
      CHECK(wait_stopping(eng));
      gate.release();
    });
    eng.stop();
    releaser.join();
  }
  const auto left = stored(inner);
  CHECK(left.count("doomed") == 0);
  CHECK(left.count("kept") == 1);  // never attempted: stays for the next start
  CHECK(ran.snapshot().empty());
  delayq::engine again(io.io, f, std::make_unique<borrowed_store>(inner), opts);
  again.start();
  REQUIRE(ran.wait_for_count(1));
  REQUIRE(eventually([&] { return again.stats().succeeded == 1; }));
  CHECK(ran.ids() == std::vector<std::string>{"kept"});
  CHECK(again.stop());
}

TEST_CASE(
    "stop: tasks held back by a per-type limit stay stored, unattempted, for the next start") {
  io_thread io;
  latch gate;
  recorder ran;
  delayq::executor_factory f;
  f.add("limited", [&](const delayq::task& t) {
    if (t.id == "holder") gate.enter_and_wait();
    ran(t);
  });
  auto opts = fast_options();
  opts.type_concurrency["limited"] = 1;
  delayq::memory_store inner;
  {
    delayq::engine eng(io.io, f, std::make_unique<borrowed_store>(inner), opts);
    eng.start();
    eng.schedule("limited", "", 0ms, {"holder"});
    REQUIRE(gate.wait_entered(1));
    eng.schedule_many(due_now("limited", "h-", 5));
    REQUIRE(eventually([&] { return eng.stats().ready == 5; }));
    std::thread releaser([&] {
      CHECK(wait_stopping(eng));
      gate.release();
    });
    CHECK(eng.stop());
    releaser.join();
  }
  const auto left = stored(inner);
  REQUIRE(left.size() == 5);
  for (const auto& [id, t] : left) CHECK(t.attempts == 0);
  delayq::engine again(io.io, f, std::make_unique<borrowed_store>(inner), opts);
  again.start();
  REQUIRE(eventually([&] { return again.stats().succeeded == 5; }));
  CHECK(again.stop());
  CHECK(stored(inner).empty());
}

TEST_CASE("reschedule: a due task queued behind a busy worker runs at its new time, not before") {
  bool durable = false;
  SUBCASE("memory store") {}
  SUBCASE("durable store") { durable = true; }
  io_thread io;
  latch gate;
  recorder ran;
  delayq::executor_factory f;
  f.add("block", [&](const delayq::task&) { gate.enter_and_wait(); });
  f.add("t", std::ref(ran));
  auto opts = fast_options();
  opts.workers = 1;
  delayq::memory_store inner;
  delayq::engine eng(io.io, f, store_for(durable, inner), opts);
  eng.start();
  eng.schedule("block", "", 0ms);
  REQUIRE(gate.wait_entered(1));
  eng.schedule("t", "", 0ms, {"moved"});
  REQUIRE(eventually([&] { return eng.stats().ready == 1; }));
  const auto later = std::chrono::floor<std::chrono::milliseconds>(clock_type::now() + 1h);
  CHECK(eng.reschedule("moved", later));
  CHECK(eng.stats().ready == 0);
  const auto s = eng.status("moved");
  REQUIRE(s.has_value());
  CHECK(s->state == delayq::task_state::delayed);
  CHECK(s->task.due == later);
  if (durable) CHECK(stored(inner).at("moved").due == later);
  gate.release();
  eng.schedule("t", "", 0ms, {"sentinel"});
  REQUIRE(eventually([&] { return eng.stats().succeeded == 2; }));
  CHECK(ran.ids() == std::vector<std::string>{"sentinel"});
  CHECK(eng.find("moved").has_value());
  CHECK(eng.stop());
}

TEST_CASE("cancel: replacing a due task takes it out of the queue: only the new version runs") {
  io_thread io;
  latch gate;
  recorder ran;
  delayq::executor_factory f;
  f.add("block", [&](const delayq::task&) { gate.enter_and_wait(); });
  f.add("t", std::ref(ran));
  auto opts = fast_options();
  opts.workers = 1;
  delayq::engine eng(io.io, f, std::make_unique<delayq::memory_store>(), opts);
  eng.start();
  eng.schedule("block", "", 0ms);
  REQUIRE(gate.wait_entered(1));
  eng.schedule("t", "old", 0ms, {"x"});
  REQUIRE(eventually([&] { return eng.stats().ready == 1; }));
  eng.schedule("t", "new", 0ms, {"x", delayq::on_conflict::replace});
  gate.release();
  REQUIRE(eventually([&] { return eng.stats().succeeded == 2; }));
  const auto runs = ran.snapshot();
  REQUIRE(runs.size() == 1);
  CHECK(runs[0].t.payload == "new");
  CHECK(eng.stop());
}
