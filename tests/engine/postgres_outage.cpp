// A real PostgreSQL outage: the server of scripts/with-postgres.sh is
// stopped as a crash would stop it (pg_ctl -m immediate, or SIGKILL to every
// process of it) while the engine works, and started again on the same data.
// This file is a program of its own (delayq_postgres_outage_tests), run by a
// ctest entry with a server of its own (tests/CMakeLists.txt): it kills its
// server, which the other tests must not share.
#include <doctest/doctest.h>

#include <boost/asio/executor_work_guard.hpp>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <mutex>
#include <set>

#include "delayq/postgres_store.hpp"
#include "engine_test_support.hpp"
#include "freezing_proxy.hpp"
#include "pg_test_support.hpp"

using namespace delayq_test;
using delayq::errc;

namespace {

// $DELAYQ_TEST_POSTGRES_CTL stop|kill|start (scripts/with-postgres.sh).
void postgres_ctl(const char* what) {
  const char* ctl = std::getenv("DELAYQ_TEST_POSTGRES_CTL");
  const char* mine = std::getenv("DELAYQ_TEST_POSTGRES_PRIVATE");
  if (!ctl || !*ctl || !mine || std::string_view(mine) != "1")
    FAIL(
        "this test stops its PostgreSQL server: run it through its ctest entry (\"failure: "
        "PostgreSQL outages\"), which gives it a server of its own (scripts/with-postgres.sh "
        "env DELAYQ_TEST_POSTGRES_PRIVATE=1 delayq_postgres_outage_tests)");
  const std::string cmd = std::string(ctl) + " " + what + " >/dev/null";
  REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0, cmd);
}

// Short timeouts: an outage is noticed fast.
std::string outage_uri(const std::string& tag) {
  // Generous timeouts: a dial to a stopped server is refused at once, so
  // they do not slow the outage; a loaded machine (a sanitizer build, a
  // busy CI) may need seconds for a login's password hashing. (300 ms
  // failed an open_store() in an ASan run here.)
  return delayq::test::postgres_uri_for(delayq::test::unique_schema(tag),
                                        "connect_timeout_ms=10000&command_timeout_ms=10000");
}

std::map<std::string, delayq::task> stored_at(const std::string& uri) {
  auto store = delayq::open_store(uri);
  return stored(*store);
}

}  // namespace

TEST_CASE("failure: a real PostgreSQL stopped and restarted mid-run loses nothing") {
  const std::string uri = outage_uri("outage");
  io_thread io;
  recorder rec;
  delayq::executor_factory f;
  f.add("t", std::ref(rec));
  delayq::engine eng(io.io, f, delayq::open_store(uri), fast_options());
  eng.start();
  const auto soon = eng.schedule("t", "fires during the outage", 300ms);
  const auto later = eng.schedule("t", "waits it out", 1h);

  postgres_ctl("stop");  // immediate: no checkpoint, the WAL is replayed at start
  boost::system::error_code ec;
  CHECK(eng.schedule("t", "refused", 0ms, {}, ec).empty());
  // Unavailable, or unknown when the writer had sent it on a connection the
  // stop closed; either way it never lands (checked below).
  CHECK((ec == errc::store_unavailable || ec == errc::outcome_unknown));

  // The task in memory still fires; its removal waits for the server.
  REQUIRE(rec.wait_for_count(1));
  CHECK(rec.ids() == std::vector<std::string>{soon});
  REQUIRE(eventually([&] { return eng.stats().succeeded == 1; }));

  postgres_ctl("start");  // same port, same data
  // The kept removal lands by itself, and new work is accepted again, on
  // connections the store dials by itself.
  CHECK(eventually([&] { return stored_at(uri).count(soon) == 0; }));
  const auto kept = stored_at(uri);
  CHECK(kept.size() == 1);
  CHECK(kept.count(later) == 1);
  const auto after = eng.schedule("t", "after the outage", 1h);
  CHECK(stored_at(uri).count(after) == 1);
  CHECK(rec.ids().size() == 1);
}

namespace {

// `on_io`: the store's writes driven on the engine's io_context, as
// delayq-server drives them (task_store::drive_writes_on()).
void check_killed_mid_run(bool on_io) {
  const std::string uri = outage_uri("killed");
  io_thread io;
  recorder rec;
  delayq::executor_factory f;
  f.add("t", std::ref(rec));
  auto store = delayq::open_store(uri);
  if (on_io) store->drive_writes_on(io.io.get_executor());
  auto eng = std::make_unique<delayq::engine>(io.io, f, std::move(store), fast_options());
  eng->start();

  // Schedules go on, 64 in flight at a time, while every process of the
  // server is killed (SIGKILL: no shutdown at all) and started again, until
  // 300 more were acknowledged after the restart.
  std::mutex m;
  std::set<std::string> acked;
  std::atomic<int> acked_count{0}, failed{0}, in_flight{0}, phase{0};
  int acked_before_restart = 0;
  std::thread ctl([&] {
    while (acked_count.load() < 300) std::this_thread::yield();
    phase = 1;
    postgres_ctl("kill");
    while (failed.load() == 0) std::this_thread::yield();  // felt by the engine
    postgres_ctl("start");
    phase = 2;
  });
  int total = 0;
  for (;; ++total) {
    if (phase.load() == 2) {
      if (acked_before_restart == 0) acked_before_restart = acked_count.load() + 1;
      if (acked_count.load() >= acked_before_restart + 300) break;
    }
    while (in_flight.load() >= 64) std::this_thread::yield();
    // While the server is down the answers come at once: pace the loop.
    if (phase.load() == 1) std::this_thread::sleep_for(1ms);
    ++in_flight;
    delayq::schedule_options o;
    o.id = "k-" + std::to_string(total);
    eng->async_schedule_at("t", "p", clock_type::now() + 1h, o,
                           [&, id = o.id](boost::system::error_code e, std::string) {
                             if (!e) {
                               std::lock_guard lock(m);
                               acked.insert(id);
                               ++acked_count;
                             } else {
                               ++failed;
                             }
                             --in_flight;
                           });
  }
  ctl.join();
  REQUIRE(eventually([&] { return in_flight.load() == 0; }));
  CHECK(eng->stop(patience));
  eng.reset();

  // Every acknowledged schedule is in the store.
  const auto kept = stored_at(uri);
  std::size_t lost = 0;
  CHECK(kept.size() >= acked.size());
  for (const std::string& id : acked)
    if (!kept.count(id)) ++lost;
  MESSAGE(acked.size() << " acknowledged, " << failed.load() << " refused, " << lost << " lost");
  CHECK(lost == 0);
  CHECK(failed.load() > 0);  // the kill was felt
  CHECK(acked.size() >= 600);
}

}  // namespace

TEST_CASE("failure: PostgreSQL killed with schedules in flight loses no acknowledged task") {
  check_killed_mid_run(false);
}

TEST_CASE("failure: PostgreSQL killed mid-run, its writes on the engine's io_context: none lost") {
  check_killed_mid_run(true);
}

TEST_CASE(
    "failure: a PostgreSQL write held past command_timeout on the engine's io_context fails "
    "outcome_unknown there, and the engine closes") {
  // The pipeline's timer and socket waits are handlers of the engine's
  // io_context (delayq-server's arrangement). A write a frozen proxy holds
  // fails at command_timeout, on that io_context, while engine::close()
  // waits for it; the engine then goes after the io_context stopped, as
  // delayq-server's drain has it (close, then stop the I/O).
  const std::string schema = delayq::test::unique_schema("close");
  auto o = delayq::postgres_options::parse(delayq::test::postgres_uri_for(schema));
  delayq::test::freezing_proxy proxy(o.connection.port, 1);
  o.connection.port = proxy.port();
  o.connection.command_timeout = 1s;
  boost::asio::io_context io{1};
  auto guard = boost::asio::make_work_guard(io);
  std::thread runner([&] { io.run(); });
  // A failed REQUIRE still stops and joins the runner (no terminate).
  struct stopper {
    boost::asio::io_context& io;
    std::thread& t;
    ~stopper() {
      io.stop();
      if (t.joinable()) t.join();
    }
  } stop_on_exit{io, runner};
  recorder rec;
  delayq::executor_factory f;
  f.add("t", std::ref(rec));
  auto store = delayq::open_postgres_store(o);
  store->drive_writes_on(io.get_executor());
  auto eng = std::make_shared<delayq::engine>(io, f, std::move(store), fast_options());
  eng->start();
  std::promise<boost::system::error_code> warm;
  eng->async_schedule_at("t", "warm", clock_type::now() + 1h, {},
                         [&](boost::system::error_code e, std::string) { warm.set_value(e); });
  auto warmed = warm.get_future();
  REQUIRE(warmed.wait_for(patience) == std::future_status::ready);
  REQUIRE_FALSE(warmed.get());  // the pipeline's connection is open

  proxy.freeze();
  std::promise<boost::system::error_code> held;
  eng->async_schedule_at("t", "held", clock_type::now() + 1h, {},
                         [&](boost::system::error_code e, std::string) { held.set_value(e); });
  // On a thread of its own, so that a close() that never returns fails the
  // test instead of hanging it (unwinding would wait for it: end here).
  auto closed_p = std::make_shared<std::promise<void>>();
  auto closed = closed_p->get_future();
  std::thread([e = eng.get(), closed_p] {
    e->close();
    closed_p->set_value();
  }).detach();
  if (closed.wait_for(patience) != std::future_status::ready) {
    std::fprintf(stderr, "FAILED: engine::close() did not return within %lld s\n",
                 static_cast<long long>(patience.count()));
    std::_Exit(1);
  }
  // Its outcome came within close(): unknown (sent whole, never answered).
  // Its completion is posted to the io_context: it comes after close().
  // Unknown when the pipeline timed it out (sent whole, never answered);
  // unavailable in the rare case the writer thread wrote it through a pool
  // connection instead, whose dial the frozen proxy holds.
  auto outcome = held.get_future();
  REQUIRE(outcome.wait_for(patience) == std::future_status::ready);
  const boost::system::error_code held_ec = outcome.get();
  CHECK((held_ec == errc::outcome_unknown || held_ec == errc::store_unavailable));

  guard.reset();
  io.stop();
  runner.join();
  // The destructor waits for nothing now; a thread of its own, so that a
  // wait for ever fails the test instead of hanging it.
  auto done = std::make_shared<std::promise<void>>();
  std::thread([eng = std::move(eng), done]() mutable {
    eng.reset();
    done->set_value();
  }).detach();
  CHECK(done->get_future().wait_for(patience) == std::future_status::ready);
  proxy.thaw();
}
