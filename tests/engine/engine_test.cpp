// Engine tests on a real io_context run by a thread of its own, as a service
// would. They wait on events (condition variables with a generous failure
// bound), never on sleeps, and assert no timing beyond "not before the due
// time" and "within one tick plus a generous margin".
#include <doctest/doctest.h>

#include "engine_test_support.hpp"

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <condition_variable>
#include <delayq/delayq.hpp>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using delayq::errc;

using namespace delayq_test;

TEST_CASE("engine: tasks fire at their due time, never before, within a tick") {
  io_thread io;
  recorder rec;
  delayq::executor_factory f;
  f.add("order.cancel", std::ref(rec));
  auto opts = fast_options();
  delayq::engine eng(io.io, f, std::make_unique<delayq::memory_store>(), opts);
  eng.start();

  // The due time each task must carry: its delay from the moment of the
  // call, by the engine's clock (engine::now(), which a delay is counted
  // from; the system clock may be slewed meanwhile: a CI run here found a
  // due time past a window taken from clock_type::now()).
  std::map<std::string, std::pair<clock_type::time_point, clock_type::time_point>> window;
  for (int i = 0; i < 30; ++i) {
    const auto delay = std::chrono::milliseconds{(i * 37) % 300};
    const auto before = eng.now();
    const auto id = eng.schedule("order.cancel", "p" + std::to_string(i), delay);
    window[id] = {before + delay, eng.now() + delay};
  }
  REQUIRE(rec.wait_for_count(30));
  for (const auto& r : rec.snapshot()) {
    const auto [earliest, latest] = window.at(r.t.id);
    CHECK(r.t.due >= earliest);
    CHECK(r.t.due <= latest);
    CHECK(r.at >= r.t.due);
    CHECK(r.at - r.t.due < opts.tick + margin);
  }
  CHECK(eventually([&] { return eng.stats().succeeded == 30; }));
  // Each is counted as succeeded when it settles, a moment before it leaves.
  CHECK(eventually([&] { return eng.pending() == 0; }));
  const auto s = eng.stats();
  CHECK(s.fired == 30);
  CHECK(s.scheduled == 30);
  CHECK(s.lateness_p50 <= s.lateness_p99);
  CHECK(s.lateness_p99 <= s.lateness_max);
  // Each wake-up fires at least one tick's tasks (none are wasted on an
  // empty wheel), and 30 tasks over 300 ms need at least one.
  CHECK(s.wakeups >= 1);
  CHECK(s.wakeups <= 30);
}

TEST_CASE("engine: an earlier task scheduled after a later one fires first") {
  io_thread io;
  recorder rec;
  delayq::executor_factory f;
  f.add("t", std::ref(rec));
  delayq::engine eng(io.io, f, std::make_unique<delayq::memory_store>(), fast_options());
  eng.start();
  // The timer sleeps until the late task; the early one must wake it.
  const auto late = eng.schedule("t", "late", 600ms);
  const auto early = eng.schedule("t", "early", 30ms);
  REQUIRE(rec.wait_for_count(2));
  CHECK(rec.ids() == std::vector<std::string>{early, late});
}

TEST_CASE("engine: a long delay waits whole revolutions of the wheel") {
  io_thread io;
  recorder rec;
  delayq::executor_factory f;
  f.add("t", std::ref(rec));
  auto opts = fast_options();
  opts.slots = 4;  // one revolution is 40 ms; the task waits about 10
  delayq::engine eng(io.io, f, std::make_unique<delayq::memory_store>(), opts);
  eng.start();
  const auto id = eng.schedule("t", "", 400ms);
  const auto due = eng.find(id)->due;
  REQUIRE(rec.wait_for_count(1));
  CHECK(rec.snapshot()[0].at >= due);
}

TEST_CASE("engine: cancel from another thread") {
  io_thread io;
  recorder rec;
  delayq::executor_factory f;
  f.add("t", std::ref(rec));
  delayq::engine eng(io.io, f, std::make_unique<delayq::memory_store>(), fast_options());
  eng.start();
  const auto doomed = eng.schedule("t", "doomed", 200ms);
  bool cancelled = false;
  std::thread([&] { cancelled = eng.cancel(doomed); }).join();
  CHECK(cancelled);
  CHECK_FALSE(eng.find(doomed).has_value());
  CHECK_FALSE(eng.cancel(doomed));  // a second cancel finds nothing
  CHECK_FALSE(eng.cancel("never-existed"));
  // A sentinel due after the cancelled one: once it ran, the other would have.
  const auto sentinel = eng.schedule("t", "sentinel", 300ms);
  REQUIRE(rec.wait_for_count(1));
  CHECK(rec.ids() == std::vector<std::string>{sentinel});
  CHECK(eng.stats().cancelled == 1);
}

TEST_CASE("engine: reschedule moves a waiting task") {
  io_thread io;
  recorder rec;
  delayq::executor_factory f;
  f.add("t", std::ref(rec));
  delayq::engine eng(io.io, f, std::make_unique<delayq::memory_store>(), fast_options());
  eng.start();
  const auto a = eng.schedule("t", "a", 100ms);
  const auto b = eng.schedule("t", "b", 10min);
  const auto new_due = clock_type::now() + 50ms;
  CHECK(eng.reschedule(b, new_due));
  CHECK(eng.reschedule(a, clock_type::now() + 400ms));
  CHECK(eng.find(b)->due == std::chrono::floor<std::chrono::milliseconds>(new_due));
  CHECK_FALSE(eng.reschedule("nope", new_due));
  REQUIRE(rec.wait_for_count(2));
  CHECK(rec.ids() == std::vector<std::string>{b, a});
  CHECK(rec.snapshot()[0].at >= std::chrono::floor<std::chrono::milliseconds>(new_due));
}

TEST_CASE("engine: a blocking executor does not delay other tasks") {
  io_thread io;
  recorder rec;
  latch slow_gate;
  delayq::executor_factory f;
  f.add("slow", [&](const delayq::task&) { slow_gate.enter_and_wait(); });
  f.add("fast", std::ref(rec));
  delayq::engine eng(io.io, f, std::make_unique<delayq::memory_store>(), fast_options());
  eng.start();
  eng.schedule("slow", "", 0ms);
  REQUIRE(slow_gate.wait_entered(1));
  eng.schedule("fast", "", 20ms);
  eng.schedule("fast", "", 40ms);
  // Both fast tasks run while the slow one still holds a worker.
  REQUIRE(rec.wait_for_count(2));
  CHECK(eng.stats().running >= 1);
  slow_gate.release();
  CHECK(eventually([&] { return eng.stats().succeeded == 3; }));
}

TEST_CASE("engine: a per-type concurrency limit holds") {
  io_thread io;
  std::atomic<int> now_running{0}, most{0}, done{0};
  latch first;
  delayq::executor_factory f;
  f.add("limited", [&](const delayq::task&) {
    const int n = ++now_running;
    int seen = most.load();
    while (n > seen && !most.compare_exchange_weak(seen, n)) {
    }
    std::this_thread::yield();
    --now_running;
    ++done;
  });
  auto opts = fast_options();
  opts.workers = 4;
  opts.type_concurrency["limited"] = 1;
  delayq::engine eng(io.io, f, std::make_unique<delayq::memory_store>(), opts);
  eng.start();
  for (int i = 0; i < 40; ++i) eng.schedule("limited", "", 0ms);
  CHECK(eventually([&] { return done.load() == 40; }));
  CHECK(most.load() == 1);
}

TEST_CASE("engine: a failed attempt stays stored and is retried") {
  io_thread io;
  std::mutex m;
  std::vector<std::uint32_t> attempts_seen;
  delayq::executor_factory f;
  f.add("flaky", [&](const delayq::task& t) {
    std::lock_guard lock(m);
    attempts_seen.push_back(t.attempts);
    if (t.attempts < 2) throw std::runtime_error("downstream said 503");
  });
  delayq::memory_store store;
  {
    delayq::engine eng(io.io, f, std::make_unique<borrowed_store>(store), fast_options());
    eng.start();
    const auto id = eng.schedule("flaky", "x", 0ms);
    CHECK(eventually([&] { return eng.stats().succeeded == 1; }));
    const auto s = eng.stats();
    CHECK(s.failed == 2);
    CHECK(s.fired == 3);
    CHECK(eng.stop());
    CHECK(stored(store).count(id) == 0);  // removed only after success
  }
  std::lock_guard lock(m);
  CHECK(attempts_seen == std::vector<std::uint32_t>{0, 1, 2});
}

TEST_CASE("engine: a task whose type has no executor becomes a dead letter at once") {
  io_thread io;
  delayq::executor_factory f;
  delayq::memory_store store;
  auto opts = fast_options();
  opts.accept_unregistered_types = true;
  delayq::engine eng(io.io, f, std::make_unique<borrowed_store>(store), opts);
  eng.start();
  const auto id = eng.schedule("nobody.home", "x", 0ms);
  CHECK(eventually([&] { return eng.stats().died == 1; }));
  const auto dead = eng.dead_letters();
  REQUIRE(dead.size() == 1);
  CHECK(dead[0].task.id == id);
  CHECK(dead[0].task.attempts == 1);  // not retried: nothing would change
  CHECK(dead[0].error == "no executor registered for type nobody.home");
  CHECK(stored(store).count(id) == 0);  // out of the live set, kept as a dead letter
  CHECK(eng.stats().dead == 1);
}

TEST_CASE("engine: the store holds a task until its executor returned") {
  io_thread io;
  latch gate;
  delayq::executor_factory f;
  f.add("t", [&](const delayq::task&) { gate.enter_and_wait(); });
  delayq::memory_store store;
  delayq::engine eng(io.io, f, std::make_unique<borrowed_store>(store), fast_options());
  eng.start();
  const auto id = eng.schedule("t", "payload", 0ms);
  CHECK(stored(store).count(id) == 1);  // durable before schedule returned
  REQUIRE(gate.wait_entered(1));
  CHECK(stored(store).count(id) == 1);  // still there while running
  CHECK(eng.find(id).has_value());      // and findable
  gate.release();
  CHECK(eventually([&] { return eng.stats().succeeded == 1; }));
  CHECK(eng.stop());
  CHECK(stored(store).empty());
}

TEST_CASE("engine: restart runs overdue tasks at once in due order, the rest on time") {
  io_thread io;
  recorder rec;
  delayq::executor_factory f;
  f.add("t", std::ref(rec));
  delayq::memory_store store;
  const auto now = clock_type::now();
  auto at = [](clock_type::time_point tp) {
    return std::chrono::floor<std::chrono::milliseconds>(tp);
  };
  // As a crashed process would have left them: three overdue, one future.
  store.save(std::vector<delayq::task>{
      {"c", "t", "", at(now - 1s), 0},
      {"a", "t", "", at(now - 5s), 1},
      {"future", "t", "", at(now + 150ms), 0},
      {"b", "t", "", at(now - 3s), 0},
  });
  auto opts = fast_options();
  opts.workers = 1;  // attempts start in due order; one worker also runs them in it
  delayq::engine eng(io.io, f, std::make_unique<borrowed_store>(store), opts);
  eng.start();
  CHECK(eng.stats().loaded == 4);
  REQUIRE(rec.wait_for_count(4));
  const auto runs = rec.snapshot();
  CHECK(rec.ids() == std::vector<std::string>{"a", "b", "c", "future"});
  CHECK(runs[0].t.attempts == 1);  // the attempt count survives the restart
  CHECK(runs[3].at >= at(now + 150ms));
  CHECK(eventually([&] { return eng.stats().succeeded == 4; }));
  CHECK(eng.stop());
  CHECK(stored(store).empty());
}

TEST_CASE("engine: a task scheduled before a restart fires after it") {
  io_thread io;
  recorder rec;
  delayq::executor_factory f;
  f.add("t", std::ref(rec));
  delayq::memory_store store;
  std::string id;
  {
    delayq::engine first(io.io, f, std::make_unique<borrowed_store>(store), fast_options());
    first.start();
    id = first.schedule("t", "survives", 200ms);
    CHECK(first.stop());  // "crash" before it was due
  }
  CHECK(rec.snapshot().empty());
  delayq::engine second(io.io, f, std::make_unique<borrowed_store>(store), fast_options());
  second.start();
  REQUIRE(rec.wait_for_count(1));
  CHECK(rec.ids() == std::vector<std::string>{id});
  CHECK(rec.snapshot()[0].t.payload == "survives");
}

TEST_CASE("engine: conflicting ids follow the policy of the call") {
  io_thread io;
  recorder rec;
  delayq::executor_factory f;
  f.add("t", std::ref(rec));
  f.add("u", std::ref(rec));
  delayq::engine eng(io.io, f, std::make_unique<delayq::memory_store>(), fast_options());
  eng.start();
  delayq::schedule_options o;
  o.id = "order-42";
  CHECK(eng.schedule("t", "first", 10min, o) == "order-42");

  SUBCASE("reject") {
    boost::system::error_code ec;
    CHECK(eng.schedule("t", "second", 10min, o, ec).empty());
    CHECK(ec == errc::duplicate_id);
    CHECK(eng.find("order-42")->payload == "first");
    CHECK_THROWS_AS(eng.schedule("t", "second", 10min, o), boost::system::system_error);
  }
  SUBCASE("keep") {
    o.conflict = delayq::on_conflict::keep;
    CHECK(eng.schedule("t", "second", 1min, o) == "order-42");
    CHECK(eng.find("order-42")->payload == "first");
  }
  SUBCASE("replace") {
    o.conflict = delayq::on_conflict::replace;
    CHECK(eng.schedule("u", "second", 20ms, o) == "order-42");
    auto t = eng.find("order-42");
    REQUIRE(t.has_value());
    CHECK(t->payload == "second");
    CHECK(t->type == "u");
    REQUIRE(rec.wait_for_count(1));
    CHECK(rec.snapshot()[0].t.payload == "second");
  }
  CHECK(eng.pending() <= 1);
}

TEST_CASE("engine: generated ids are unique") {
  io_thread io;
  delayq::executor_factory f;
  f.add("t", [](const delayq::task&) {});
  delayq::engine eng(io.io, f, std::make_unique<delayq::memory_store>(), fast_options());
  eng.start();
  std::set<std::string> ids;
  for (int i = 0; i < 2000; ++i) ids.insert(eng.schedule("t", "", 1h));
  CHECK(ids.size() == 2000);
  CHECK(eng.pending() == 2000);
}

TEST_CASE("engine: bad input is rejected with a clear error and nothing is stored") {
  io_thread io;
  delayq::executor_factory f;
  f.add("t", [](const delayq::task&) {});
  delayq::memory_store store;
  auto opts = fast_options();
  opts.max_payload = 16;
  opts.max_pending = 3;
  opts.max_delay = 24h;
  delayq::engine eng(io.io, f, std::make_unique<borrowed_store>(store), opts);
  boost::system::error_code ec;

  SUBCASE("before start") {
    eng.schedule("t", "", 1s, {}, ec);
    CHECK(ec == errc::not_running);
  }
  eng.start();
  SUBCASE("empty type") {
    eng.schedule("", "", 1s, {}, ec);
    CHECK(ec == errc::invalid_type);
  }
  SUBCASE("malformed type") {
    eng.schedule("has space", "", 1s, {}, ec);
    CHECK(ec == errc::invalid_type);
    eng.schedule(std::string(129, 'a'), "", 1s, {}, ec);
    CHECK(ec == errc::invalid_type);
  }
  SUBCASE("type without an executor") {
    eng.schedule("nobody.home", "", 1s, {}, ec);
    CHECK(ec == errc::unknown_type);
    CHECK(ec.message().find("no executor") != std::string::npos);
  }
  SUBCASE("negative delay") {
    eng.schedule("t", "", -1ms, {}, ec);
    CHECK(ec == errc::invalid_delay);
    CHECK_THROWS_AS(eng.schedule("t", "", -5s), boost::system::system_error);
  }
  SUBCASE("due before the epoch") {
    eng.schedule_at("t", "", clock_type::time_point{} - 1s, {}, ec);
    CHECK(ec == errc::invalid_delay);
  }
  SUBCASE("due absurdly far away") {
    eng.schedule("t", "", 25h, {}, ec);
    CHECK(ec == errc::due_too_far);
    eng.schedule("t", "", std::chrono::milliseconds::max(), {}, ec);
    CHECK(ec == errc::due_too_far);
    eng.schedule_at("t", "", clock_type::time_point::max(), {}, ec);
    CHECK(ec == errc::due_too_far);
  }
  SUBCASE("payload over the limit") {
    eng.schedule("t", std::string(17, 'x'), 1s, {}, ec);
    CHECK(ec == errc::payload_too_large);
  }
  SUBCASE("bad ids") {
    delayq::schedule_options o;
    o.id = "has space";
    eng.schedule("t", "", 1s, o, ec);
    CHECK(ec == errc::invalid_id);
    o.id = std::string(257, 'i');
    eng.schedule("t", "", 1s, o, ec);
    CHECK(ec == errc::invalid_id);
    o.id = std::string("nul\0inside", 10);
    eng.schedule("t", "", 1s, o, ec);
    CHECK(ec == errc::invalid_id);
  }
  SUBCASE("max_pending reached") {
    for (int i = 0; i < 3; ++i) eng.schedule("t", "", 1h);
    eng.schedule("t", "", 1h, {}, ec);
    CHECK(ec == errc::queue_full);
    CHECK(stored(store).size() == 3);
    return;
  }
  SUBCASE("after stop") {
    CHECK(eng.stop());
    eng.schedule("t", "", 1s, {}, ec);
    CHECK(ec == errc::not_running);
    CHECK_FALSE(eng.cancel("x", ec));
    CHECK(ec == errc::not_running);
  }
  SUBCASE("reschedule to a bad time") {
    const auto id = eng.schedule("t", "", 1h);
    CHECK_FALSE(eng.reschedule(id, clock_type::time_point::max(), ec));
    CHECK(ec == errc::due_too_far);
    CHECK(stored(store).size() == 1);
    return;
  }
  CHECK(ec.category() == delayq::delayq_category());
  CHECK(stored(store).empty());
}

TEST_CASE("engine: inconsistent options are refused at construction") {
  io_thread io;
  delayq::executor_factory f;
  auto make = [&](delayq::engine_options o) {
    delayq::engine eng(io.io, f, std::make_unique<delayq::memory_store>(), o);
  };
  delayq::engine_options o;
  o.tick = 0ms;
  CHECK_THROWS_AS(make(o), boost::system::system_error);
  o = {};
  o.slots = 0;
  CHECK_THROWS_AS(make(o), boost::system::system_error);
  o = {};
  o.workers = 0;
  CHECK_THROWS_AS(make(o), boost::system::system_error);
}

TEST_CASE("engine: stop drains running attempts and is safe to repeat") {
  io_thread io;
  latch gate;
  delayq::executor_factory f;
  f.add("t", [&](const delayq::task&) { gate.enter_and_wait(); });
  delayq::memory_store store;
  auto eng = std::make_unique<delayq::engine>(io.io, f, std::make_unique<borrowed_store>(store),
                                              fast_options());
  eng->start();
  boost::system::error_code ec;
  eng->start(ec);
  CHECK(ec == errc::already_started);
  const auto running = eng->schedule("t", "", 0ms);
  const auto waiting = eng->schedule("t", "", 1h);
  REQUIRE(gate.wait_entered(1));

  SUBCASE("a drain deadline that passes reports what is still running") {
    CHECK_FALSE(eng->stop(0ms));
    gate.release();
    eng.reset();  // the destructor waits for the attempt to return
    CHECK(stored(store).count(waiting) == 1);
  }
  SUBCASE("a drain that completes") {
    auto stopped = std::async(std::launch::async, [&] { return eng->stop(patience); });
    gate.release();
    CHECK(stopped.get());
    CHECK(eng->stop());  // twice is fine
    const auto kept = stored(store);
    CHECK(kept.count(running) == 0);  // it succeeded during the drain
    CHECK(kept.count(waiting) == 1);  // never ran: kept for the next start
  }
}

TEST_CASE("engine: destroying a running engine with pending work is safe") {
  io_thread io;
  delayq::executor_factory f;
  f.add("t", [](const delayq::task&) {});
  delayq::engine_options o = fast_options();
  {
    delayq::engine eng(io.io, f, std::make_unique<delayq::memory_store>(), o);
    eng.start();
    for (int i = 0; i < 100; ++i) eng.schedule("t", "", std::chrono::milliseconds{i});
  }
  delayq::engine never_started(io.io, f, std::make_unique<delayq::memory_store>(), o);
  CHECK(never_started.stop());
}
