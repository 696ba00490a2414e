// Promises the docs make that no test guarded before: each of these tests
// fails when the promise is broken in the code (checked by breaking it once).

#include <doctest/doctest.h>

#include <atomic>
#include <boost/asio/post.hpp>
#include <boost/asio/use_future.hpp>
#include <delayq/delayq.hpp>
#include <future>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "detail/failure_policy.hpp"
#include "engine_test_support.hpp"

using namespace delayq_test;

TEST_CASE(
    "cancel: through a real Redis and an SQLite file, true means gone from memory and store") {
  temp_dir dir;
  std::string uri;
  SUBCASE("sqlite") { uri = "sqlite:" + dir.file("cancel.db"); }
  SUBCASE("redis") { uri = fresh_redis_uri("cancel"); }
  CAPTURE(uri);
  io_thread io;
  recorder ran;
  delayq::executor_factory f;
  f.add("t", std::ref(ran));
  delayq::engine eng(io.io, f, delayq::open_store(uri), fast_options());
  eng.start();
  eng.schedule("t", "", 150ms, {"doomed"});
  eng.schedule("t", "", 150ms, {"other"});
  CHECK(eng.cancel("doomed"));
  CHECK_FALSE(eng.find("doomed").has_value());
  CHECK_FALSE(eng.cancel("doomed"));  // once
  {
    auto direct = delayq::open_store(uri);
    const auto held = stored(*direct);
    CHECK(held.count("doomed") == 0);
    CHECK(held.count("other") == 1);
  }
  REQUIRE(ran.wait_for_count(1));
  REQUIRE(eventually([&] { return eng.stats().succeeded == 1; }));
  CHECK(ran.ids() == std::vector<std::string>{"other"});
  CHECK(eng.stop());
  auto direct = delayq::open_store(uri);
  CHECK(stored(*direct).empty());
}

TEST_CASE("retry: the backoff ceiling doubles from base up to the cap, without overflow") {
  using delayq::detail::failure_policy;
  delayq::retry_policy p;
  p.base = 100ms;
  p.cap = 1000ms;
  CHECK(failure_policy::ceiling(p, 1) == 100ms);
  CHECK(failure_policy::ceiling(p, 2) == 200ms);
  CHECK(failure_policy::ceiling(p, 3) == 400ms);
  CHECK(failure_policy::ceiling(p, 4) == 800ms);
  CHECK(failure_policy::ceiling(p, 5) == 1000ms);  // the cap, not 1600
  CHECK(failure_policy::ceiling(p, 63) == 1000ms);
  CHECK(failure_policy::ceiling(p, 4'000'000'000u) == 1000ms);  // no overflow
  p.base = std::chrono::hours(24 * 365);
  p.cap = std::chrono::hours(24 * 365 * 100);
  CHECK(failure_policy::ceiling(p, 40) == p.cap);  // base << 39 would overflow
}

TEST_CASE("retry: waits are drawn over the whole of [0, ceiling]") {
  delayq::detail::failure_policy policy(delayq::alert_options{}, /*seed=*/42);
  delayq::retry_policy p;
  p.base = 1000ms;
  p.cap = 1000ms;
  std::int64_t lo = 1'000'000, hi = -1;
  std::array<int, 10> deciles{};
  for (int i = 0; i < 2000; ++i) {
    const auto w = policy.backoff(p, 3).count();
    REQUIRE(w >= 0);
    REQUIRE(w <= 1000);
    lo = std::min(lo, w);
    hi = std::max(hi, w);
    ++deciles[static_cast<std::size_t>(std::min<std::int64_t>(w / 100, 9))];
  }
  CHECK(lo <= 5);
  CHECK(hi >= 995);
  for (int d : deciles) CHECK(d > 100);  // about 200 each: uniform, not clustered
}

TEST_CASE("retry: the engine spreads the retries of tasks that failed together") {
  io_thread io;
  delayq::executor_factory f;
  f.add("t", [](const delayq::task&) { throw std::runtime_error("down"); });
  auto opts = fast_options();
  opts.retry.base = 60s;
  opts.retry.cap = 60s;
  delayq::engine eng(io.io, f, std::make_unique<delayq::memory_store>(), opts);
  eng.start();
  constexpr int n = 200;
  std::vector<delayq::task_spec> specs(n);
  for (int i = 0; i < n; ++i) {
    specs[i].type = "t";
    specs[i].due = clock_type::now();
    specs[i].options.id = "r-" + std::to_string(i);
  }
  const auto failed_at = clock_type::now();
  eng.schedule_many(std::move(specs));
  // At least n: full jitter may draw a retry a few milliseconds away, which
  // can fail again before the last of the n first failures is counted.
  REQUIRE(eventually([&] { return eng.stats().retried >= n; }));
  const auto settled_by = clock_type::now();
  std::vector<double> offsets;
  for (int i = 0; i < n; ++i) {
    const auto t = eng.find("r-" + std::to_string(i));
    REQUIRE(t.has_value());
    REQUIRE(t->attempts >= 1);
    if (t->attempts > 1) continue;  // its first retry came early and failed too
    CHECK(t->due >= std::chrono::floor<std::chrono::milliseconds>(failed_at));
    CHECK(t->due <= settled_by + 60s);  // never beyond the ceiling
    offsets.push_back(std::chrono::duration<double>(t->due - failed_at).count());
  }
  // Spread over the minute, not bunched at one instant.
  CHECK(*std::min_element(offsets.begin(), offsets.end()) < 15);
  CHECK(*std::max_element(offsets.begin(), offsets.end()) > 45);
  CHECK(eng.stop(0ms));
}

TEST_CASE("store: a task leaves the store only after its executor returned") {
  io_thread io;
  latch gate;
  std::atomic<bool> returned{false};
  std::atomic<int> early_removals{0};
  delayq::executor_factory f;
  f.add("t", [&](const delayq::task&) {
    gate.enter_and_wait();
    returned = true;
  });
  delayq::memory_store inner;
  auto owned = std::make_unique<controlled_store>(inner);
  owned->on_write = [&](std::span<const delayq::store_change> changes) {
    for (const auto& c : changes)
      if (c.what == delayq::change_kind::remove && c.task->id == "x" && !returned) ++early_removals;
  };
  delayq::engine eng(io.io, f, std::move(owned), fast_options());
  eng.start();
  eng.schedule("t", "", 0ms, {"x"});
  REQUIRE(gate.wait_entered(1));
  // Whatever the engine handed its store writer so far is written now: a
  // removal made before the executor returned would land here, every time.
  CHECK(eng.dead_letters().empty());
  CHECK(stored(inner).count("x") == 1);
  CHECK(early_removals == 0);
  gate.release();
  REQUIRE(eventually([&] { return stored(inner).empty(); }));
  CHECK(early_removals == 0);
  CHECK(eng.stop());
}

TEST_CASE("validation: a delay past what the clock holds is refused, on every store") {
  temp_dir dir;
  std::string uri;
  SUBCASE("memory") { uri = "memory:"; }
  SUBCASE("sqlite") { uri = "sqlite:" + dir.file("far.db"); }
  SUBCASE("redis") { uri = fresh_redis_uri("far"); }
  CAPTURE(uri);
  io_thread io;
  recorder ran;
  delayq::executor_factory f;
  f.add("t", std::ref(ran));
  auto opts = fast_options();
  opts.max_delay = std::chrono::milliseconds::max();  // as large as it goes
  delayq::engine eng(io.io, f, delayq::open_store(uri), opts);
  eng.start();
  const auto centuries =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::hours(24) * 366 * 300);
  boost::system::error_code ec;
  CHECK(eng.schedule("t", "", centuries, {"far"}, ec).empty());
  CHECK(ec == delayq::errc::due_too_far);
  CHECK(eng.schedule("t", "", std::chrono::milliseconds::max(), {"farther"}, ec).empty());
  CHECK(ec == delayq::errc::due_too_far);
  CHECK(eng.schedule_at("t", "", clock_type::time_point::max(), {"end"}, ec).empty());
  CHECK(ec == delayq::errc::due_too_far);
  auto fut = eng.async_schedule("t", "", centuries, {"async"}, boost::asio::use_future);
  try {
    fut.get();
    FAIL("a 300-year async delay was accepted");
  } catch (const boost::system::system_error& e) {
    CHECK(e.code() == delayq::errc::due_too_far);
  }
  eng.schedule("t", "", 1h, {"near"});
  CHECK_FALSE(eng.reschedule("near", clock_type::time_point::max(), ec));
  CHECK(ec == delayq::errc::due_too_far);
  // Nothing of it stored, nothing ran early: a sentinel due now runs alone.
  eng.schedule("t", "", 0ms, {"sentinel"});
  REQUIRE(ran.wait_for_count(1));
  REQUIRE(eventually([&] { return eng.stats().succeeded == 1; }));
  CHECK(ran.ids() == std::vector<std::string>{"sentinel"});
  // "near" only, once the sentinel's removal landed (succeeded is counted
  // when its attempt ends, pending() when its removal is durable: a cold
  // ASan CI run here saw 2 in between).
  CHECK(eventually([&] { return eng.pending() == 1; }));
  CHECK(eng.stop());
  if (uri != "memory:") {
    auto direct = delayq::open_store(uri);
    const auto held = stored(*direct);
    CHECK(held.size() == 1);
    CHECK(held.count("near") == 1);
  }
}

TEST_CASE("state: every call says not_running before start() and after stop()") {
  io_thread io;
  delayq::executor_factory f;
  f.add("t", [](const delayq::task&) {});
  delayq::memory_store inner;
  delayq::engine eng(io.io, f, std::make_unique<borrowed_store>(inner), fast_options());
  auto all_refused = [&] {
    boost::system::error_code ec;
    const auto due = clock_type::now();
    eng.schedule("t", "", 0ms, {}, ec);
    CHECK(ec == delayq::errc::not_running);
    eng.schedule("no such type", "", -1ms, {}, ec);  // the state is checked first
    CHECK(ec == delayq::errc::not_running);
    eng.schedule_many({delayq::task_spec{"t", "", due, {}}}, ec);
    CHECK(ec == delayq::errc::not_running);
    CHECK_FALSE(eng.cancel("x", ec));
    CHECK(ec == delayq::errc::not_running);
    CHECK_FALSE(eng.reschedule("x", due, ec));
    CHECK(ec == delayq::errc::not_running);
    CHECK_FALSE(eng.requeue("x", due, ec));
    CHECK(ec == delayq::errc::not_running);
    CHECK_FALSE(eng.purge("x", ec));
    CHECK(ec == delayq::errc::not_running);
    eng.dead_letters(0, 10, ec);
    CHECK(ec == delayq::errc::not_running);
    auto fut = eng.async_schedule("t", "", 0ms, boost::asio::use_future);
    CHECK_THROWS_AS(fut.get(), boost::system::system_error);
  };
  SUBCASE("before start") { all_refused(); }
  SUBCASE("after stop") {
    eng.start();
    CHECK(eng.stop());
    all_refused();
  }
}

TEST_CASE("ids: generated ids are 15 characters and differ between engines") {
  io_thread io;
  delayq::executor_factory f;
  f.add("t", [](const delayq::task&) {});
  delayq::memory_store shared;
  std::set<std::string> seen;
  std::set<std::string> prefixes;
  for (int e = 0; e < 2; ++e) {
    // Two engines on one store, in turn, as two processes (or a restart) would.
    delayq::engine eng(io.io, f, std::make_unique<borrowed_store>(shared), fast_options());
    eng.start();
    for (int i = 0; i < 100; ++i) {
      const std::string id = eng.schedule("t", "", 1h);
      CHECK(id.size() == 15);
      CHECK(seen.insert(id).second);
      prefixes.insert(id.substr(0, 9));
    }
    CHECK(eng.stop());
  }
  CHECK(seen.size() == 200);
  CHECK(prefixes.size() == 2);  // one random nonce per engine
  CHECK(stored(shared).size() == 200);
}

TEST_CASE("stop: called from inside an executor it returns without waiting for attempts") {
  io_thread io;
  latch other;
  std::atomic<bool> stop_returned{false};
  std::atomic<bool> stop_result{true};
  delayq::engine* self = nullptr;
  delayq::executor_factory f;
  f.add("hold", [&](const delayq::task&) { other.enter_and_wait(); });
  f.add("stopper", [&](const delayq::task&) {
    // Another attempt is held until this call returns: a stop() that waited
    // for the attempts to drain would wait for ever.
    stop_result = self->stop(std::chrono::hours(1));
    stop_returned = true;
  });
  auto opts = fast_options();
  opts.workers = 2;
  delayq::engine eng(io.io, f, std::make_unique<delayq::memory_store>(), opts);
  self = &eng;
  eng.start();
  eng.schedule("hold", "", 0ms);
  REQUIRE(other.wait_entered(1));
  eng.schedule("stopper", "", 0ms);
  REQUIRE(eventually([&] { return stop_returned.load(); }));
  CHECK_FALSE(stop_result);  // attempts were running: not drained
  boost::system::error_code ec;
  eng.schedule("hold", "", 0ms, {}, ec);
  CHECK(ec == delayq::errc::not_running);
  other.release();
}

TEST_CASE("start: a stored task whose id the engine rejects is quarantined, not run") {
  io_thread io;
  recorder ran;
  delayq::executor_factory f;
  f.add("t", std::ref(ran));
  delayq::memory_store inner;
  inner.save(std::vector<delayq::task>{{"bad id", "t", "", clock_type::now(), 0},
                                       {"good", "t", "", clock_type::now(), 0},
                                       {"bad-type", "bad type!", "", clock_type::now(), 0}});
  delayq::engine eng(io.io, f, std::make_unique<borrowed_store>(inner), fast_options());
  eng.start();
  CHECK(eng.stats().loaded == 1);
  CHECK(eng.stats().quarantined == 2);
  REQUIRE(ran.wait_for_count(1));
  CHECK(ran.ids() == std::vector<std::string>{"good"});
  CHECK(inner.quarantined() == 2);
  REQUIRE(eventually([&] { return eng.stats().succeeded == 1; }));
  CHECK(eng.stop());
  CHECK(stored(inner).empty());  // not left to be met again at every start
}

// engine.hpp's class comment: every call is safe "from handlers on the
// engine's own io_context". Here the io_context has one thread and the
// handler holds it while it calls: a call that needed that thread to finish
// (a write completed there, a hop to the engine's strand that the caller
// waits for) would never return. On stores with real writes, where the
// blocking calls wait for them.
TEST_CASE("calls: every call works from a handler running on the engine's own io_context") {
  temp_dir dir;
  std::string uri;
  SUBCASE("sqlite") { uri = "sqlite:" + dir.file("handler.db"); }
  SUBCASE("redis") { uri = fresh_redis_uri("handler"); }
  CAPTURE(uri);
  io_thread io;  // one thread runs io.io
  recorder ran;
  delayq::executor_factory f;
  f.add("t", std::ref(ran));
  f.add("orphan", [](const delayq::task&) { throw std::runtime_error("fails"); });
  auto opts = fast_options();
  opts.retry_per_type["orphan"] = delayq::retry_policy{1, 1ms, 1ms};
  delayq::engine eng(io.io, f, delayq::open_store(uri), opts);
  eng.start();
  // "orphan" fails its one attempt: dead letters.
  eng.schedule("orphan", "", 0ms, {"dead"});
  eng.schedule("orphan", "", 0ms, {"dead2"});
  REQUIRE(eventually([&] { return eng.stats().dead == 2; }));

  // Each call's outcome, read on the test thread once the handler returned.
  struct outcomes {
    std::thread::id thread;
    std::string scheduled;
    std::size_t batch = 0;
    bool found = false, status = false, rescheduled = false, signalled = false;
    bool cancelled = false, requeued = false, purged = false;
    std::set<std::string> upcoming;
    std::size_t dead = 0;
    std::string error;
  };
  std::promise<outcomes> done;
  auto result = done.get_future();
  boost::asio::post(io.io, [&] {
    outcomes o;
    o.thread = std::this_thread::get_id();
    try {
      o.scheduled = eng.schedule("t", "from a handler", 1h, {"h1"});
      o.batch = eng.schedule_many({{"t", "b1", clock_type::now() + 1h, {"h2"}},
                                   {"t", "b2", clock_type::now() + 1h, {"h3"}}})
                    .size();
      o.found = eng.find("h1").has_value();
      o.status = eng.status("h2").has_value();
      o.rescheduled = eng.reschedule("h2", clock_type::now() + 2h);
      delayq::schedule_options counted{"h4"};
      counted.trigger_count = 1;
      eng.schedule("t", "counted", 1h, counted);
      o.signalled = eng.signal("h4").triggered;
      o.cancelled = eng.cancel("h3");
      for (const auto& t : eng.upcoming(10)) o.upcoming.insert(t.id);
      o.dead = eng.dead_letters().size();
      o.requeued = eng.requeue("dead", clock_type::now() + 1h);
      o.purged = eng.purge("dead2");
      (void)eng.stats();
    } catch (const std::exception& e) {
      o.error = e.what();
    }
    done.set_value(std::move(o));
  });
  REQUIRE_MESSAGE(result.wait_for(std::chrono::seconds{30}) == std::future_status::ready,
                  "a call from a handler on the engine's io_context never returned");
  const outcomes o = result.get();
  CHECK(o.thread == io.runner.get_id());
  CHECK(o.error == "");
  CHECK(o.scheduled == "h1");
  CHECK(o.batch == 2);
  CHECK(o.found);
  CHECK(o.status);
  CHECK(o.rescheduled);
  CHECK(o.signalled);
  CHECK(o.cancelled);
  CHECK(o.upcoming.count("h1") == 1);
  CHECK(o.upcoming.count("h2") == 1);
  CHECK(o.upcoming.count("h3") == 0);  // cancelled
  CHECK(o.dead == 2);
  CHECK(o.requeued);
  CHECK(o.purged);
  // The task the handler's signal fired runs once the handler gave the
  // thread back; what the handler stored is in the store.
  REQUIRE(ran.wait_for_count(1));
  CHECK(ran.snapshot().at(0).t.id == "h4");
  CHECK(eng.stop());
  auto direct = delayq::open_store(uri);
  const auto held = stored(*direct);
  CHECK(held.count("h1") == 1);
  CHECK(held.count("h2") == 1);
  CHECK(held.count("h3") == 0);
  CHECK(held.count("dead") == 1);  // requeued: a live task again
}
