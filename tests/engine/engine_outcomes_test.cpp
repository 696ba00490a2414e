// Priority and ttr on every schedule path, and the two outcomes an
// asynchronous attempt may report besides success and failure:
// attempt_completion::release() (wait again, attempt not counted) and
// attempt_completion::bury() (a dead letter now, whatever retries are left).
// delayq-server's beanstalkd listener answers RELEASED and BURIED only from
// their on_stored, so these promises are what those replies mean.

#include <doctest/doctest.h>

#include <boost/asio/use_future.hpp>
#include <delayq/delayq.hpp>
#include <future>
#include <mutex>
#include <optional>
#include <vector>

#include "engine_test_support.hpp"

using namespace delayq_test;
using namespace std::chrono_literals;

namespace {

// Keeps every attempt of type "t" (its task and its completion) for the test.
struct outcome_attempts {
  std::mutex m;
  std::condition_variable cv;
  std::vector<delayq::task> tasks;
  std::vector<delayq::attempt_completion> dones;
  void start(const delayq::task& t, delayq::attempt_completion d) {
    std::lock_guard lock(m);
    tasks.push_back(t);
    dones.push_back(std::move(d));
    cv.notify_all();
  }
  bool wait_started(std::size_t n) {
    std::unique_lock lock(m);
    return cv.wait_for(lock, patience, [&] { return tasks.size() >= n; });
  }
  // The n-th attempt (from 1).
  delayq::task task(std::size_t n) {
    std::lock_guard lock(m);
    return tasks.at(n - 1);
  }
  delayq::attempt_completion take(std::size_t n) {
    std::lock_guard lock(m);
    return std::exchange(dones.at(n - 1), {});
  }
  std::size_t started() {
    std::lock_guard lock(m);
    return tasks.size();
  }
};

delayq::executor_factory keeping(outcome_attempts& a) {
  delayq::executor_factory f;
  f.add_async("t", [&a](const delayq::task& t, delayq::attempt_completion done) {
    a.start(t, std::move(done));
  });
  return f;
}

struct durable_probe {
  std::promise<boost::system::error_code> p;
  std::future<boost::system::error_code> f = p.get_future();
  delayq::attempt_completion::stored_handler handler() {
    return [this](boost::system::error_code ec) { p.set_value(ec); };
  }
  bool ready() { return f.wait_for(0s) == std::future_status::ready; }
  boost::system::error_code get() {
    REQUIRE(f.wait_for(patience) == std::future_status::ready);
    return f.get();
  }
};

// Retries far away: a failed attempt must not run again during a test.
delayq::engine_options outcome_options() {
  auto o = fast_options();
  o.retry.base = 1h;
  o.retry.cap = 1h;
  return o;
}

std::int64_t ms_of(clock_type::time_point t) { return delayq::to_epoch_ms(t); }

}  // namespace

// ---- priority and ttr ---------------------------------------------------------

TEST_CASE("engine: every schedule path stores priority and ttr, and the executor sees them") {
  io_thread io;
  delayq::memory_store inner;
  outcome_attempts a;
  delayq::engine eng(io.io, keeping(a), std::make_unique<borrowed_store>(inner), outcome_options());
  eng.start();
  const auto opts = [](const char* id, std::uint32_t priority, std::chrono::milliseconds ttr) {
    delayq::schedule_options o;
    o.id = id;
    o.priority = priority;
    o.ttr = ttr;
    return o;
  };
  eng.schedule("t", "", 1h, opts("delay", 1, 1000ms));
  eng.schedule_at("t", "", clock_type::now() + 1h, opts("at", 2, 2000ms));
  eng.schedule_many({delayq::task_spec{"t", "", clock_type::now() + 1h, opts("many", 3, 0ms)}});
  eng.async_schedule("t", "", 1h, opts("async", 0, 4000ms), boost::asio::use_future).get();
  eng.async_schedule_at("t", "", clock_type::now() + 1h, opts("async-at", 5, 5000ms),
                        boost::asio::use_future)
      .get();
  // A replace takes the new values, whatever the old ones were.
  auto replace = opts("delay", 9, 9000ms);
  replace.conflict = delayq::on_conflict::replace;
  eng.schedule("t", "new", 1h, replace);
  auto plain = opts("replaced-to-plain", 7, 7000ms);
  eng.schedule("t", "", 1h, plain);
  plain = opts("replaced-to-plain", 0, 0ms);
  plain.conflict = delayq::on_conflict::replace;
  eng.schedule("t", "", 1h, plain);

  const auto s = stored(inner);
  const auto check = [&](const std::string& id, std::uint32_t priority,
                         std::chrono::milliseconds ttr) {
    REQUIRE_MESSAGE(s.count(id) == 1, id);
    CHECK_MESSAGE(s.at(id).priority == priority, id);
    CHECK_MESSAGE(s.at(id).ttr == ttr, id);
    const auto found = eng.find(id);
    REQUIRE(found.has_value());
    CHECK(found->priority == priority);
    CHECK(found->ttr == ttr);
  };
  check("delay", 9, 9000ms);
  check("at", 2, 2000ms);
  check("many", 3, 0ms);
  check("async", 0, 4000ms);
  check("async-at", 5, 5000ms);
  check("replaced-to-plain", 0, 0ms);

  // The executor's copy carries them.
  eng.reschedule("at", clock_type::now());
  REQUIRE(a.wait_started(1));
  CHECK(a.task(1).id == "at");
  CHECK(a.task(1).priority == 2);
  CHECK(a.task(1).ttr == 2000ms);
  a.take(1)("");  // settled: stop() need not wait out the attempt
  CHECK(eng.stop());
}

TEST_CASE("engine: a ttr below 0 or past 2^32 - 1 ms is refused with invalid_ttr") {
  io_thread io;
  delayq::memory_store inner;
  outcome_attempts a;
  delayq::engine eng(io.io, keeping(a), std::make_unique<borrowed_store>(inner), outcome_options());
  eng.start();
  for (auto ttr : {-1ms, std::chrono::milliseconds{std::int64_t{1} << 32}}) {
    delayq::schedule_options o;
    o.ttr = ttr;
    boost::system::error_code ec;
    eng.schedule("t", "", 1h, o, ec);
    CHECK(ec == delayq::errc::invalid_ttr);
    std::size_t bad = 7;
    eng.schedule_many({delayq::task_spec{"t", "", clock_type::now(), {}},
                       delayq::task_spec{"t", "", clock_type::now(), o}},
                      ec, bad);
    CHECK(ec == delayq::errc::invalid_ttr);
    CHECK(bad == 1);
    auto f = eng.async_schedule("t", "", 1h, o, boost::asio::use_future);
    CHECK_THROWS(f.get());
  }
  delayq::schedule_options most;
  most.ttr = std::chrono::milliseconds{0xffffffffLL};
  const std::string id = eng.schedule("t", "", 1h, most);
  CHECK(stored(inner).at(id).ttr == most.ttr);
  CHECK(stored(inner).size() == 1);
  eng.stop();
}

// ---- release ------------------------------------------------------------------

TEST_CASE("engine: release moves the due time, keeps the attempt count, and counts neither way") {
  io_thread io;
  delayq::memory_store inner;
  auto owned = std::make_unique<controlled_store>(inner);
  controlled_store& store = *owned;
  outcome_attempts a;
  auto opts = fast_options();
  opts.retry.base = 1ms;  // the first failure retries at once
  opts.retry.cap = 1ms;
  delayq::engine eng(io.io, keeping(a), std::move(owned), opts);
  eng.start();
  eng.schedule("t", "", 0ms, {"x"});
  REQUIRE(a.wait_started(1));
  a.take(1)("first try fails");
  REQUIRE(a.wait_started(2));
  CHECK(a.task(2).attempts == 1);

  const auto due = std::chrono::floor<std::chrono::milliseconds>(clock_type::now() + 1h);
  store.hold_next_write();
  durable_probe probe;
  a.take(2).release(due, std::nullopt, probe.handler());
  REQUIRE(store.wait_held());  // the new due time is being written, and waits
  CHECK_FALSE(probe.ready());
  CHECK(ms_of(stored(inner).at("x").due) != ms_of(due));
  store.release();
  CHECK_FALSE(probe.get());
  const delayq::task after = stored(inner).at("x");
  CHECK(ms_of(after.due) == ms_of(due));
  CHECK(after.attempts == 1);  // not counted
  CHECK(after.priority == 0);  // none given: unchanged
  const auto found = eng.find("x");
  REQUIRE(found.has_value());
  CHECK(ms_of(found->due) == ms_of(due));
  CHECK(found->attempts == 1);
  const auto s = eng.stats();
  CHECK(s.released == 1);
  CHECK(s.succeeded == 0);
  CHECK(s.failed == 1);  // the first attempt's
  CHECK(s.retried == 1);
  CHECK(s.pending == 1);
  const auto m = eng.metrics();
  REQUIRE(m.types.size() >= 1);
  for (const auto& t : m.types)
    if (t.type == "t") CHECK(t.released == 1);
  CHECK(a.started() == 2);  // not run again: it waits for its new due time
  eng.stop();
}

TEST_CASE("engine: a release to a past due time fires again at once, attempts unchanged") {
  io_thread io;
  delayq::memory_store inner;
  outcome_attempts a;
  delayq::engine eng(io.io, keeping(a), std::make_unique<borrowed_store>(inner), outcome_options());
  eng.start();
  eng.schedule("t", "", 0ms, {"x"});
  REQUIRE(a.wait_started(1));
  durable_probe probe;
  a.take(1).release(clock_type::now() - 1h, 3, probe.handler());
  CHECK_FALSE(probe.get());
  REQUIRE(a.wait_started(2));
  CHECK(a.task(2).id == "x");
  CHECK(a.task(2).attempts == 0);
  CHECK(a.task(2).priority == 3);
  a.take(2)("");
  CHECK(eventually([&] { return stored(inner).empty(); }));
  CHECK(eng.stats().released == 1);
  CHECK(eng.stats().succeeded == 1);
  eng.stop();
}

TEST_CASE("engine: a release with a priority stores it: an SQLite file read again has it") {
  temp_dir dir;
  const std::string uri = "sqlite:" + dir.file("release.db");
  const auto due = std::chrono::floor<std::chrono::milliseconds>(clock_type::now() + 1h);
  {
    io_thread io;
    outcome_attempts a;
    delayq::engine eng(io.io, keeping(a), delayq::open_store(uri), outcome_options());
    eng.start();
    delayq::schedule_options o;
    o.id = "job-1";
    o.priority = 100;
    o.ttr = 30s;
    eng.schedule("t", "body", 0ms, o);
    REQUIRE(a.wait_started(1));
    CHECK(a.task(1).priority == 100);
    CHECK(a.task(1).ttr == 30s);
    durable_probe probe;
    a.take(1).release(due, 7, probe.handler());
    CHECK_FALSE(probe.get());
    CHECK(eng.stop());
  }
  {
    auto store = delayq::open_store(uri);
    const auto s = stored(*store);
    REQUIRE(s.count("job-1") == 1);
    const delayq::task& t = s.at("job-1");
    CHECK(t.priority == 7);
    CHECK(t.ttr == 30s);  // a release keeps the ttr
    CHECK(t.attempts == 0);
    CHECK(ms_of(t.due) == ms_of(due));
    CHECK(t.payload == "body");
  }
  // A new engine on the file holds it as stored.
  io_thread io;
  outcome_attempts a;
  delayq::engine eng(io.io, keeping(a), delayq::open_store(uri), outcome_options());
  eng.start();
  CHECK(eng.stats().loaded == 1);
  const auto found = eng.find("job-1");
  REQUIRE(found.has_value());
  CHECK(found->priority == 7);
  CHECK(found->ttr == 30s);
  CHECK(ms_of(found->due) == ms_of(due));
  CHECK(eng.stop());
}

TEST_CASE("engine: a release's failed write is reported to on_stored and still lands") {
  io_thread io;
  delayq::memory_store inner;
  auto owned = std::make_unique<controlled_store>(inner);
  controlled_store& store = *owned;
  outcome_attempts a;
  delayq::engine eng(io.io, keeping(a), std::move(owned), outcome_options());
  eng.start();
  eng.schedule("t", "", 0ms, {"x"});
  REQUIRE(a.wait_started(1));
  const auto due = std::chrono::floor<std::chrono::milliseconds>(clock_type::now() + 1h);
  store.fail_writes = 1;
  durable_probe probe;
  a.take(1).release(due, 4, probe.handler());
  CHECK(probe.get() == delayq::errc::store_unavailable);
  // Kept and written again.
  CHECK(eventually([&] {
    const auto s = stored(inner);
    return s.count("x") == 1 && ms_of(s.at("x").due) == ms_of(due) && s.at("x").priority == 4;
  }));
  eng.stop();
}

// ---- bury ---------------------------------------------------------------------

TEST_CASE("engine: bury makes a dead letter at once, with retries left, once it is durable") {
  io_thread io;
  delayq::memory_store inner;
  auto owned = std::make_unique<controlled_store>(inner);
  controlled_store& store = *owned;
  outcome_attempts a;
  auto opts = outcome_options();
  opts.retry.max_attempts = 10;
  delayq::engine eng(io.io, keeping(a), std::move(owned), opts);
  eng.start();
  delayq::schedule_options o;
  o.id = "x";
  o.ttr = 5s;
  eng.schedule("t", "p", 0ms, o);
  REQUIRE(a.wait_started(1));

  store.hold_next_write();
  durable_probe probe;
  a.take(1).bury("poison message", 12, probe.handler());
  REQUIRE(store.wait_held());
  CHECK_FALSE(probe.ready());
  boost::system::error_code ec;
  CHECK_FALSE(inner.find_dead("x", ec).has_value());
  store.release();
  CHECK_FALSE(probe.get());
  const auto dead = inner.find_dead("x", ec);
  REQUIRE_FALSE(ec);
  REQUIRE(dead.has_value());
  CHECK(dead->error == "poison message");
  CHECK(dead->task.priority == 12);
  CHECK(dead->task.ttr == 5s);
  CHECK(dead->task.attempts == 1);  // this attempt, as a last-attempt bury counts it
  CHECK(dead->task.payload == "p");
  CHECK(stored(inner).count("x") == 0);
  const auto s = eng.stats();
  CHECK(s.died == 1);
  CHECK(s.dead == 1);
  CHECK(s.failed == 0);
  CHECK(s.retried == 0);
  CHECK(s.pending == 0);
  // A requeue (beanstalkd's kick) brings it back with its priority and ttr.
  CHECK(eng.requeue("x", clock_type::now() + 1h));
  const auto back = eng.find("x");
  REQUIRE(back.has_value());
  CHECK(back->priority == 12);
  CHECK(back->ttr == 5s);
  CHECK(stored(inner).at("x").priority == 12);
  eng.stop();
}

TEST_CASE("engine: release and bury of a task replaced while it ran change nothing") {
  io_thread io;
  delayq::memory_store inner;
  outcome_attempts a;
  delayq::engine eng(io.io, keeping(a), std::make_unique<borrowed_store>(inner), outcome_options());
  eng.start();
  eng.schedule("t", "old", 0ms, {"x"});
  eng.schedule("t", "old", 0ms, {"y"});
  REQUIRE(a.wait_started(2));
  delayq::schedule_options replace;
  replace.conflict = delayq::on_conflict::replace;
  replace.priority = 1;
  for (const char* id : {"x", "y"}) {
    replace.id = id;
    eng.schedule("t", "new", 1h, replace);
  }
  const auto x_at = a.task(1).id == "x" ? 1 : 2;
  durable_probe released, buried;
  a.take(x_at).release(clock_type::now() + 2h, 50, released.handler());
  a.take(3 - x_at).bury("nope", 60, buried.handler());
  CHECK_FALSE(released.get());
  CHECK_FALSE(buried.get());
  boost::system::error_code ec;
  CHECK_FALSE(inner.find_dead("y", ec).has_value());
  const auto s = stored(inner);
  for (const char* id : {"x", "y"}) {
    REQUIRE(s.count(id) == 1);
    CHECK(s.at(id).payload == "new");
    CHECK(s.at(id).priority == 1);
  }
  CHECK(eng.stats().died == 0);
  CHECK(eng.stats().pending == 2);
  eng.stop();
}

TEST_CASE("engine: a second report after release is ignored with attempt_ended") {
  io_thread io;
  delayq::memory_store inner;
  outcome_attempts a;
  delayq::engine eng(io.io, keeping(a), std::make_unique<borrowed_store>(inner), outcome_options());
  eng.start();
  eng.schedule("t", "", 0ms, {"x"});
  REQUIRE(a.wait_started(1));
  auto done = a.take(1);
  durable_probe first, second;
  done.release(clock_type::now() + 1h, std::nullopt, first.handler());
  CHECK_FALSE(first.get());
  done.bury("late", std::nullopt, second.handler());
  CHECK(second.get() == delayq::errc::attempt_ended);
  boost::system::error_code ec;
  CHECK_FALSE(inner.find_dead("x", ec).has_value());
  CHECK(stored(inner).count("x") == 1);
  eng.stop();
}
