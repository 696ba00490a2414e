// What the engine does when things go wrong: executors that throw, hang or
// finish asynchronously, tasks that run out of attempts, alerts, and a store
// that goes away and comes back.
#include <doctest/doctest.h>

#include <atomic>
#include <stdexcept>

#include "engine_test_support.hpp"

using namespace delayq_test;
using delayq::errc;

namespace {

delayq::engine_options failure_options() {
  auto o = fast_options();
  o.retry.max_attempts = 3;
  o.retry.base = 1ms;
  o.retry.cap = 5ms;
  return o;
}

// A memory store that can be switched off: while `down`, every call fails
// with errc::store_unavailable, as redis_store does when Redis is away.
class flaky_store final : public borrowed_store {
 public:
  flaky_store() : borrowed_store(inner) {}
  using task_store::list;
  using task_store::remove;
  using task_store::save;
  void save(std::span<const delayq::task> t, boost::system::error_code& ec) override {
    if (down) {
      ec = errc::store_unavailable;
      return;
    }
    borrowed_store::save(t, ec);
  }
  void remove(std::span<const std::string> ids, boost::system::error_code& ec) override {
    if (down) {
      ec = errc::store_unavailable;
      return;
    }
    borrowed_store::remove(ids, ec);
  }
  void bury(std::span<const delayq::dead_letter> d, boost::system::error_code& ec) override {
    if (down) {
      ec = errc::store_unavailable;
      return;
    }
    borrowed_store::bury(d, ec);
  }
  std::atomic<bool> down{false};
  delayq::memory_store inner;
};

}  // namespace

TEST_CASE("failure: attempts run out and the task becomes a dead letter") {
  io_thread io;
  std::mutex m;
  std::vector<std::uint32_t> seen;
  delayq::executor_factory f;
  f.add("always.fails", [&](const delayq::task& t) {
    {
      std::lock_guard lock(m);
      seen.push_back(t.attempts);
    }
    throw std::runtime_error("payment gateway said 502 (attempt " + std::to_string(t.attempts) +
                             ")");
  });
  delayq::memory_store store;
  delayq::engine eng(io.io, f, std::make_unique<borrowed_store>(store), failure_options());
  eng.start();
  const auto id = eng.schedule("always.fails", "order-7", 0ms);
  REQUIRE(eventually([&] { return eng.stats().died == 1; }));
  {
    std::lock_guard lock(m);
    CHECK(seen == std::vector<std::uint32_t>{0, 1, 2});
  }
  const auto s = eng.stats();
  CHECK(s.failed == 3);
  CHECK(s.retried == 2);
  CHECK(s.dead == 1);
  CHECK(s.pending == 0);
  const auto dead = eng.dead_letters();
  REQUIRE(dead.size() == 1);
  CHECK(dead[0].task.id == id);
  CHECK(dead[0].task.payload == "order-7");
  CHECK(dead[0].task.attempts == 3);
  CHECK(dead[0].error == "payment gateway said 502 (attempt 2)");
  CHECK(dead[0].died_at <= clock_type::now());
  CHECK(stored(store).count(id) == 0);
  CHECK_FALSE(eng.find(id).has_value());
}

TEST_CASE("failure: a retry keeps its id and is persisted with its attempt count and due time") {
  io_thread io;
  std::atomic<int> runs{0};
  delayq::executor_factory f;
  f.add("once", [&](const delayq::task&) {
    ++runs;
    throw std::runtime_error("try later");
  });
  delayq::memory_store store;
  auto opts = failure_options();
  opts.retry.base = 10min;  // the retry waits: the test looks at it meanwhile
  opts.retry.cap = 10min;
  delayq::engine eng(io.io, f, std::make_unique<borrowed_store>(store), opts);
  eng.start();
  const auto id = eng.schedule("once", "", 0ms);
  // find() shows the retry once its new attempt count is durable and armed.
  REQUIRE(eventually([&] {
    const auto t = eng.find(id);
    return t && t->attempts == 1;
  }));
  const auto failed_at = clock_type::now();
  const auto t = eng.find(id);
  REQUIRE(t.has_value());
  CHECK(t->attempts == 1);
  // Full jitter: somewhere in [0, min(cap, base)] after the failure.
  CHECK(t->due <= failed_at + 10min);
  const auto kept = stored(store);
  REQUIRE(kept.count(id) == 1);
  CHECK(kept.at(id).attempts == 1);
  CHECK(kept.at(id).due == t->due);
  CHECK(runs.load() == 1);
}

TEST_CASE("failure: per-type retry policies override the engine's") {
  io_thread io;
  delayq::executor_factory f;
  auto boom = [](const delayq::task&) { throw std::runtime_error("boom"); };
  f.add("fragile", boom);
  f.add("sturdy", boom);
  auto opts = failure_options();
  opts.retry_per_type["fragile"] = delayq::retry_policy{1, 1ms, 1ms};
  opts.retry.max_attempts = 4;
  delayq::engine eng(io.io, f, std::make_unique<delayq::memory_store>(), opts);
  eng.start();
  const auto fragile = eng.schedule("fragile", "", 0ms);
  const auto sturdy = eng.schedule("sturdy", "", 0ms);
  REQUIRE(eventually([&] { return eng.stats().died == 2; }));
  std::map<std::string, std::uint32_t> attempts;
  for (const auto& d : eng.dead_letters()) attempts[d.task.id] = d.task.attempts;
  CHECK(attempts.at(fragile) == 1);
  CHECK(attempts.at(sturdy) == 4);
}

TEST_CASE("failure: a dead letter can be requeued or purged") {
  io_thread io;
  std::atomic<bool> healthy{false};
  recorder rec;
  delayq::executor_factory f;
  f.add("t", [&](const delayq::task& t) {
    if (!healthy) throw std::runtime_error("down");
    rec(t);
  });
  delayq::memory_store store;
  delayq::engine eng(io.io, f, std::make_unique<borrowed_store>(store), failure_options());
  eng.start();
  const auto a = eng.schedule("t", "a", 0ms);
  const auto b = eng.schedule("t", "b", 0ms);
  REQUIRE(eventually([&] { return eng.stats().died == 2; }));
  CHECK(eng.dead_letters().size() == 2);
  CHECK(eng.dead_letters(1, 10).size() == 1);
  CHECK(eng.dead_letters(2, 10).empty());

  healthy = true;
  CHECK(eng.requeue(a, clock_type::now()));
  REQUIRE(rec.wait_for_count(1));
  CHECK(rec.snapshot()[0].t.id == a);
  CHECK(rec.snapshot()[0].t.attempts == 0);        // a fresh start
  CHECK_FALSE(eng.requeue(a, clock_type::now()));  // no longer a dead letter
  CHECK_FALSE(eng.requeue("never-died", clock_type::now()));

  // A live task holding the id blocks a requeue.
  eng.schedule("t", "live", 1h, {b, delayq::on_conflict::reject});
  boost::system::error_code ec;
  CHECK_FALSE(eng.requeue(b, clock_type::now(), ec));
  CHECK(ec == errc::duplicate_id);

  CHECK(eng.purge(b));
  CHECK_FALSE(eng.purge(b));
  CHECK(eng.dead_letters().empty());
  CHECK(eng.stats().dead == 0);
  CHECK(eng.find(b)->payload == "live");  // the live task was left alone
}

TEST_CASE("failure: alerts on a death and on a failure rate, and a throwing alert hook") {
  io_thread io;
  std::mutex m;
  std::vector<delayq::alert> alerts;
  delayq::executor_factory f;
  f.add("bad", [](const delayq::task&) { throw std::runtime_error("nope"); });
  f.add("good", [](const delayq::task&) {});
  auto opts = failure_options();
  opts.retry_per_type["bad"] = delayq::retry_policy{1, 1ms, 1ms};
  opts.alerts.min_attempts = 4;
  opts.alerts.failure_rate_threshold = 0.5;
  opts.alerts.window = std::chrono::seconds{3600};
  opts.alerts.on_alert = [&](const delayq::alert& a) {
    std::lock_guard lock(m);
    alerts.push_back(a);
    if (alerts.size() == 1) throw std::runtime_error("the pager is down");
  };
  delayq::engine eng(io.io, f, std::make_unique<delayq::memory_store>(), opts);
  eng.start();
  for (int i = 0; i < 6; ++i) eng.schedule("bad", "", 0ms);
  for (int i = 0; i < 3; ++i) eng.schedule("good", "", 0ms);
  REQUIRE(eventually([&] {
    const auto s = eng.stats();
    return s.died == 6 && s.succeeded == 3;
  }));
  // Alerts are raised after the counters move: wait for all seven.
  REQUIRE(eventually([&] {
    std::lock_guard lock(m);
    return alerts.size() >= 7;
  }));
  std::lock_guard lock(m);
  int deaths = 0, rates = 0;
  for (const auto& a : alerts) {
    if (a.what == delayq::alert::kind::task_died) {
      ++deaths;
      CHECK(a.type == "bad");
      CHECK(a.error == "nope");
      CHECK_FALSE(a.task_id.empty());
    } else {
      ++rates;
      CHECK(a.type == "bad");
      CHECK(a.attempts == 4);  // raised when the window first had enough attempts
      CHECK(a.failure_rate == doctest::Approx(1.0));
    }
  }
  CHECK(deaths == 6);
  CHECK(rates == 1);  // raised once while the rate stays above the threshold
}

// failure-handling.md and alert_options: one failure_rate alert per
// crossing; "raised again only after the rate fell below". Each task makes
// one attempt (max_attempts 1) and runs alone, so the rate moves one attempt
// at a time: 4 failures (1.0, the first alert), 5 successes (4/9, below 0.5),
// one failure (5/10, at the threshold again: the second alert).
TEST_CASE("failure: a failure_rate alert is raised again once the rate fell below and rose") {
  io_thread io;
  std::mutex m;
  std::vector<delayq::alert> rates;
  std::atomic<bool> failing{true};
  delayq::executor_factory f;
  f.add("flaky", [&](const delayq::task&) {
    if (failing) throw std::runtime_error("flaky");
  });
  auto opts = failure_options();
  opts.workers = 1;
  opts.retry_per_type["flaky"] = delayq::retry_policy{1, 1ms, 1ms};
  opts.alerts.min_attempts = 4;
  opts.alerts.failure_rate_threshold = 0.5;
  opts.alerts.window = std::chrono::seconds{3600};
  opts.alerts.on_alert = [&](const delayq::alert& a) {
    if (a.what != delayq::alert::kind::failure_rate) return;
    std::lock_guard lock(m);
    rates.push_back(a);
  };
  const auto alerts_seen = [&] {
    std::lock_guard lock(m);
    return rates.size();
  };
  delayq::engine eng(io.io, f, std::make_unique<delayq::memory_store>(), opts);
  eng.start();
  // One task at a time, each waited for: the order of outcomes is the
  // order the rate sees them.
  const auto run_one = [&](std::uint64_t finished) {
    eng.schedule("flaky", "", 0ms);
    return eventually([&] {
      const auto s = eng.stats();
      return s.died + s.succeeded == finished;
    });
  };
  std::uint64_t finished = 0;
  for (int i = 0; i < 4; ++i) REQUIRE(run_one(++finished));
  REQUIRE(eventually([&] { return alerts_seen() == 1; }));

  failing = false;
  for (int i = 0; i < 5; ++i) REQUIRE(run_one(++finished));
  failing = true;
  REQUIRE(run_one(++finished));
  CHECK(eventually([&] { return alerts_seen() == 2; }));
  CHECK(eng.stop());

  std::lock_guard lock(m);
  REQUIRE(rates.size() == 2);
  CHECK(rates[0].attempts == 4);
  CHECK(rates[0].failures == 4);
  CHECK(rates[1].type == "flaky");
  CHECK(rates[1].attempts == 10);
  CHECK(rates[1].failures == 5);
  CHECK(rates[1].failure_rate == doctest::Approx(0.5));
}

TEST_CASE("failure: an attempt past its timeout fails and is retried") {
  io_thread io;
  latch stuck;
  std::atomic<int> calls{0};
  delayq::executor_factory f;
  f.add("slow", [&](const delayq::task&) {
    if (++calls == 1) stuck.enter_and_wait();  // the first attempt hangs
  });
  auto opts = failure_options();
  opts.workers = 2;
  opts.timeout_per_type["slow"] = 50ms;
  delayq::engine eng(io.io, f, std::make_unique<delayq::memory_store>(), opts);
  eng.start();
  eng.schedule("slow", "", 0ms);
  REQUIRE(eventually([&] { return eng.stats().succeeded == 1; }));
  const auto s = eng.stats();
  CHECK(s.timed_out == 1);
  CHECK(s.failed == 1);
  CHECK(calls.load() == 2);
  stuck.release();  // the first attempt returns late; its outcome is ignored
  CHECK(eng.stop());
  CHECK(eng.stats().succeeded == 1);
}

TEST_CASE("failure: asynchronous executors complete through a callback") {
  io_thread io;
  std::mutex m;
  std::vector<delayq::async_executor::completion> parked;
  std::vector<std::thread> threads;
  delayq::executor_factory f;
  // Completes later, from a thread of its own, the way an I/O library would.
  f.add_async("ok", [&](const delayq::task&, delayq::async_executor::completion done) {
    std::lock_guard lock(m);
    threads.emplace_back([done] { done(""); });
  });
  f.add_async("fails", [&](const delayq::task&, delayq::async_executor::completion done) {
    std::lock_guard lock(m);
    threads.emplace_back([done] { done("remote said no"); });
  });
  f.add_async("never", [&](const delayq::task&, delayq::async_executor::completion done) {
    std::lock_guard lock(m);
    parked.push_back(std::move(done));  // never called until the end
  });
  f.add_async("throws", [](const delayq::task&, delayq::async_executor::completion) {
    throw std::runtime_error("could not even start");
  });
  auto opts = failure_options();
  opts.workers = 1;  // asynchronous attempts do not hold it
  opts.timeout_per_type["never"] = 30ms;
  delayq::engine eng(io.io, f, std::make_unique<delayq::memory_store>(), opts);
  eng.start();
  eng.schedule("ok", "", 0ms);
  eng.schedule("fails", "", 0ms);
  eng.schedule("never", "", 0ms);
  eng.schedule("throws", "", 0ms);
  REQUIRE(eventually([&] {
    const auto s = eng.stats();
    return s.succeeded == 1 && s.died == 3;
  }));
  const auto s = eng.stats();
  CHECK(s.timed_out == 3);  // "never", all three attempts
  std::map<std::string, std::string> errors;
  for (const auto& d : eng.dead_letters()) errors[d.task.type] = d.error;
  CHECK(errors.at("fails") == "remote said no");
  CHECK(errors.at("never") == "timed out after 30 ms");
  CHECK(errors.at("throws") == "could not even start");
  // Late completions are ignored, whatever they say.
  std::lock_guard lock(m);
  for (auto& done : parked) done("");
  CHECK(eng.stats().succeeded == 1);
  for (auto& t : threads) t.join();
}

// async_executor's promise: the task start() was given stays valid while any
// copy of `done` lives, even after the attempt has ended (delayq-server's
// lease broker keeps a pointer to it beside `done` instead of a copy).
// Under AddressSanitizer a task freed early is a use-after-free here.
TEST_CASE("failure: an async executor's task lives as long as a copy of its completion") {
  io_thread io;
  std::mutex m;
  const delayq::task* kept = nullptr;
  std::vector<delayq::async_executor::completion> parked;
  delayq::executor_factory f;
  f.add_async("keeps", [&](const delayq::task& t, delayq::async_executor::completion done) {
    std::lock_guard lock(m);
    kept = &t;
    parked.push_back(std::move(done));
  });
  delayq::engine eng(io.io, f, std::make_unique<delayq::memory_store>(), failure_options());
  eng.start();
  const std::string payload(200, 'p');  // past the short-string buffer: on the heap
  eng.schedule("keeps", payload, 0ms, {"kept-1"});
  REQUIRE(eventually([&] {
    std::lock_guard lock(m);
    return kept != nullptr;
  }));
  std::lock_guard lock(m);
  const delayq::async_executor::completion copy = parked.front();
  parked.front()("");  // the attempt ends: the task leaves the engine
  REQUIRE(eventually([&] { return eng.stats().succeeded == 1 && eng.pending() == 0; }));
  parked.clear();  // one copy is left
  CHECK(kept->id == "kept-1");
  CHECK(kept->payload == payload);
  CHECK(kept->type == "keeps");
  CHECK(eng.stop());
}

TEST_CASE("failure: while the store is down, schedules fail fast and nothing is lost") {
  io_thread io;
  recorder rec;
  delayq::executor_factory f;
  f.add("t", std::ref(rec));
  auto owned = std::make_unique<flaky_store>();
  flaky_store& store = *owned;
  delayq::engine eng(io.io, f, std::move(owned), failure_options());
  eng.start();
  const auto before = eng.schedule("t", "scheduled before the outage", 100ms);

  store.down = true;
  boost::system::error_code ec;
  CHECK(eng.schedule("t", "during", 0ms, {}, ec).empty());
  CHECK(ec == errc::store_unavailable);
  CHECK(eng.schedule_many({delayq::task_spec{"t", "x", clock_type::now(), {}}}, ec).empty());
  CHECK(ec == errc::store_unavailable);
  CHECK_FALSE(eng.cancel(before, ec));
  CHECK(ec == errc::store_unavailable);
  CHECK(eng.find(before).has_value());  // a failed cancel leaves it scheduled

  // What is in memory keeps firing; its removal cannot be written yet.
  REQUIRE(rec.wait_for_count(1));
  CHECK(rec.ids() == std::vector<std::string>{before});
  REQUIRE(eventually([&] { return eng.stats().succeeded == 1; }));
  CHECK(stored(store.inner).count(before) == 1);
  CHECK(stored(store.inner).size() == 1);  // nothing of the failed calls

  // The store comes back: the kept removal lands by itself.
  store.down = false;
  CHECK(eventually([&] { return stored(store.inner).empty(); }));
  CHECK(rec.ids().size() == 1);  // and the task did not run again
}

TEST_CASE("failure: an asynchronous executor that drops its completion abandons the attempt") {
  io_thread io;
  std::mutex m;
  std::vector<std::uint32_t> seen;
  delayq::executor_factory f;
  f.add_async("flaky", [&](const delayq::task& t, delayq::async_executor::completion done) {
    std::lock_guard lock(m);
    seen.push_back(t.attempts);
    if (seen.size() == 1) return;  // the first attempt lets `done` go uncalled
    done("");
  });
  delayq::memory_store store;
  delayq::engine eng(io.io, f, std::make_unique<borrowed_store>(store), failure_options());
  eng.start();
  const auto id = eng.schedule("flaky", "", 0ms);
  REQUIRE(eventually([&] { return eng.stats().succeeded == 1; }));
  const auto s = eng.stats();
  CHECK(s.fired == 2);
  CHECK(s.failed == 0);  // not counted: run again as it was
  CHECK(s.retried == 0);
  {
    std::lock_guard lock(m);
    CHECK(seen == std::vector<std::uint32_t>{0, 0});
  }
  CHECK(eng.stop());
  CHECK(stored(store).count(id) == 0);
}

TEST_CASE("failure: an attempt abandoned while the engine stops stays stored as it was") {
  io_thread io;
  std::mutex m;
  std::vector<delayq::async_executor::completion> parked;
  delayq::executor_factory f;
  f.add_async("held", [&](const delayq::task&, delayq::async_executor::completion done) {
    std::lock_guard lock(m);
    parked.push_back(std::move(done));
  });
  delayq::memory_store store;
  std::string id;
  {
    delayq::engine eng(io.io, f, std::make_unique<borrowed_store>(store), failure_options());
    eng.start();
    id = eng.schedule("held", "kept", 0ms);
    REQUIRE(eventually([&] { return eng.stats().fired == 1; }));
    CHECK_FALSE(eng.stop(0ms));  // its attempt is out
    std::lock_guard lock(m);
    parked.clear();  // given back, as delayq-server does with unreserved tasks
  }
  const auto held = stored(store);
  REQUIRE(held.count(id) == 1);
  CHECK(held.at(id).attempts == 0);
  CHECK(held.at(id).payload == "kept");
}
