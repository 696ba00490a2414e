// The durable path through the store writer: a call returns (or its
// completion runs) only once its write landed; a failed write acknowledges
// nothing; the newest change to an id is the one that lands last, through
// failures and retries; the queue of writes not yet sent is bounded.

#include <doctest/doctest.h>

#include <atomic>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_future.hpp>
#include <delayq/delayq.hpp>
#include <future>
#include <string>
#include <vector>

#include "engine_test_support.hpp"

using namespace delayq_test;

namespace {

// The last position of `entry` in `log`, or -1.
long last_index(const std::vector<std::string>& log, const std::string& entry) {
  for (long i = static_cast<long>(log.size()) - 1; i >= 0; --i)
    if (log[static_cast<std::size_t>(i)] == entry) return i;
  return -1;
}

}  // namespace

TEST_CASE("writer: a task is acknowledged only once its write landed") {
  io_thread io;
  delayq::executor_factory f;
  f.add("t", [](const delayq::task&) {});
  delayq::memory_store inner;
  auto owned = std::make_unique<controlled_store>(inner);
  controlled_store& store = *owned;
  delayq::engine* eng_ptr = nullptr;
  std::atomic<int> visible_while_writing{0};
  std::atomic<bool> async_done{false};
  std::atomic<int> acked_while_writing{0};
  // During the write the task must not be visible yet (a writer that
  // acknowledged first would have armed it, and woken its caller, already).
  store.on_write = [&](std::span<const delayq::store_change> changes) {
    for (const auto& c : changes) {
      if (c.what != delayq::change_kind::save) continue;
      if (eng_ptr->find(c.task->id).has_value()) ++visible_while_writing;
      if (c.task->id == "async" && async_done) ++acked_while_writing;
    }
  };
  delayq::engine eng(io.io, f, std::move(owned), fast_options());
  eng_ptr = &eng;
  eng.start();
  eng.schedule("t", "", 1h, {"blocking"});
  CHECK(stored(inner).count("blocking") == 1);
  auto fut = eng.async_schedule("t", "", 1h, {"async"}, boost::asio::use_future);
  fut.get();
  async_done = true;
  CHECK(stored(inner).count("async") == 1);
  std::vector<delayq::task_spec> many(8);
  for (int i = 0; i < 8; ++i)
    many[i] = {"t", "", clock_type::now() + 1h, {"m" + std::to_string(i)}};
  eng.schedule_many(std::move(many));
  CHECK(stored(inner).size() == 10);
  CHECK(visible_while_writing == 0);
  CHECK(acked_while_writing == 0);
  CHECK(eng.stop());
}

TEST_CASE("writer: a failed write acknowledges nothing, and keeps nothing in memory") {
  io_thread io;
  delayq::executor_factory f;
  f.add("t", [](const delayq::task&) {});
  delayq::memory_store inner;
  auto owned = std::make_unique<controlled_store>(inner);
  controlled_store& store = *owned;
  delayq::engine eng(io.io, f, std::move(owned), fast_options());
  eng.start();
  store.down = true;
  boost::system::error_code ec;
  CHECK(eng.schedule("t", "", 1h, {"a"}, ec).empty());
  CHECK(ec == delayq::errc::store_unavailable);
  auto fut = eng.async_schedule("t", "", 1h, {"b"}, boost::asio::use_future);
  try {
    fut.get();
    FAIL("a schedule whose write failed was acknowledged");
  } catch (const boost::system::system_error& e) {
    CHECK(e.code() == delayq::errc::store_unavailable);
  }
  CHECK(eng.schedule_many({delayq::task_spec{"t", "", clock_type::now(), {"c"}}}, ec).empty());
  CHECK(ec == delayq::errc::store_unavailable);
  CHECK(eng.pending() == 0);
  CHECK_FALSE(eng.find("a").has_value());
  CHECK_FALSE(eng.find("b").has_value());
  store.down = false;
  CHECK(stored(inner).empty());
  CHECK(eng.stop());
}

TEST_CASE(
    "writer: a write that timed out says the outcome is unknown, retrying with keep is safe") {
  io_thread io;
  delayq::executor_factory f;
  f.add("t", [](const delayq::task&) {});
  delayq::memory_store inner;
  auto owned = std::make_unique<controlled_store>(inner);
  controlled_store& store = *owned;
  store.error = delayq::errc::outcome_unknown;
  delayq::engine eng(io.io, f, std::move(owned), fast_options());
  eng.start();
  store.fail_writes = 1;
  boost::system::error_code ec;
  CHECK(eng.schedule("t", "first", 1h, {"u"}, ec).empty());
  CHECK(ec == delayq::errc::outcome_unknown);
  CHECK_FALSE(eng.find("u").has_value());  // nothing kept in memory
  // As if the store applied it after all: the retry with keep is still right.
  inner.save(std::vector<delayq::task>{{"u", "t", "first", clock_type::now() + 1h, 0}});
  CHECK(eng.schedule("t", "first", 1h, {"u", delayq::on_conflict::keep}) == "u");
  CHECK(eng.find("u").has_value());
  CHECK(stored(inner).size() == 1);
  CHECK(eng.stop());
}

TEST_CASE("writer: a kept removal never lands after a newer save of the same id") {
  // With a pipelining store (several batches in flight, as on Redis), the
  // save could otherwise travel while the removal's retry is still in
  // flight; that retry fails, is kept, and would be replayed after the save.
  io_thread io;
  recorder ran;
  delayq::executor_factory f;
  f.add("t", std::ref(ran));
  delayq::memory_store inner;
  auto owned = std::make_unique<pipelined_store>(inner);
  pipelined_store& store = *owned;
  delayq::engine eng(io.io, f, std::move(owned), fast_options());
  eng.start();
  eng.schedule("t", "old", 50ms, {"x"});
  // Its removal after the success fails and is kept.
  store.down = true;
  REQUIRE(ran.wait_for_count(1));
  REQUIRE(eventually([&] { return eng.stats().writes_kept == 1; }));
  // The store comes back; the kept removal's retry is held in flight, and
  // fails once more...
  store.hold_next_write();
  store.fail_writes = 1;
  store.down = false;
  REQUIRE(store.wait_held());
  CHECK(store.log().back() == "remove:x");
  // ...while the same id is scheduled again.
  auto again = std::async(std::launch::async, [&] { return eng.schedule("t", "new", 1h, {"x"}); });
  store.release();
  CHECK(again.get() == "x");
  REQUIRE(eventually([&] { return eng.stats().writes_kept == 0; }));
  eng.dead_letters();  // flush: everything written
  const auto log = store.log();
  CHECK(last_index(log, "remove:x") < last_index(log, "save:x"));
  const auto held = stored(inner);
  REQUIRE(held.count("x") == 1);
  CHECK(held.at("x").payload == "new");
  CHECK(eng.stop());
  CHECK(stored(inner).count("x") == 1);
}

TEST_CASE("writer: a kept dead letter is written even when the id is scheduled again") {
  io_thread io;
  delayq::executor_factory f;
  f.add("dies", [](const delayq::task&) { throw std::runtime_error("broken"); });
  auto opts = fast_options();
  opts.retry.max_attempts = 1;
  delayq::memory_store inner;
  auto owned = std::make_unique<controlled_store>(inner);
  controlled_store& store = *owned;
  delayq::engine eng(io.io, f, std::move(owned), opts);
  eng.start();
  eng.schedule("dies", "old", 50ms, {"y"});
  store.down = true;
  REQUIRE(eventually([&] { return eng.stats().died == 1 && eng.stats().writes_kept == 1; }));
  store.down = false;
  eng.schedule("dies", "new", 1h, {"y"});
  REQUIRE(eventually([&] { return eng.stats().writes_kept == 0; }));
  const auto dead = inner.find_dead("y");
  REQUIRE(dead.has_value());
  CHECK(dead->task.payload == "old");
  CHECK(dead->error == "broken");
  CHECK(stored(inner).at("y").payload == "new");
  CHECK(eng.stop());
}

TEST_CASE("writer: a kept write counts as kept until its retry has landed") {
  // A cluster's hand-over waits until no write is kept (a leaving shard's
  // last removal may be one): a kept write on its way to the store again is
  // still unwritten, and must still count.
  io_thread io;
  latch running;
  delayq::executor_factory f;
  f.add("t", [&](const delayq::task&) { running.enter_and_wait(); });
  delayq::memory_store inner;
  auto owned = std::make_unique<controlled_store>(inner);
  controlled_store& store = *owned;
  delayq::engine eng(io.io, f, std::move(owned), fast_options());
  eng.start();
  eng.schedule("t", "", 0ms, {"x"});
  REQUIRE(running.wait_entered(1));
  store.down = true;  // the success's removal fails, and is kept
  running.release();
  REQUIRE(eventually([&] { return eng.stats().succeeded == 1 && eng.stats().writes_kept == 1; }));
  // The next write is the removal's retry: hold it on its way.
  store.hold_next_write();
  store.down = false;
  REQUIRE(store.wait_held());
  CHECK(eng.stats().writes_kept == 1);
  CHECK(eng.metrics().store.writes_kept == 1);
  store.release();
  REQUIRE(eventually([&] { return eng.stats().writes_kept == 0; }));
  CHECK(stored(inner).empty());
  CHECK(eng.stop());
}

TEST_CASE("writer: past max_queued_writes, calls that wait for their write are refused with busy") {
  io_thread io;
  delayq::executor_factory f;
  f.add("t", [](const delayq::task&) {});
  auto opts = fast_options();
  opts.max_queued_writes = 2;
  delayq::memory_store inner;
  auto owned = std::make_unique<controlled_store>(inner);
  controlled_store& store = *owned;
  delayq::engine eng(io.io, f, std::move(owned), opts);
  eng.start();
  store.hold_next_write();
  auto a = eng.async_schedule("t", "", 1h, {"a"}, boost::asio::use_future);
  REQUIRE(store.wait_held());  // a is on its way; b and c wait behind it
  auto b = eng.async_schedule("t", "", 1h, {"b"}, boost::asio::use_future);
  auto c = eng.async_schedule("t", "", 1h, {"c"}, boost::asio::use_future);
  auto d = eng.async_schedule("t", "", 1h, {"d"}, boost::asio::use_future);
  try {
    d.get();  // refused at once: the call neither blocks nor waits for room
    FAIL("a write past the bound was queued");
  } catch (const boost::system::system_error& e) {
    CHECK(e.code() == delayq::errc::busy);
  }
  boost::system::error_code ec;
  CHECK(eng.schedule("t", "", 1h, {"e"}, ec).empty());
  CHECK(ec == delayq::errc::busy);
  CHECK_FALSE(eng.find("d").has_value());
  store.release();
  CHECK(a.get() == "a");
  CHECK(b.get() == "b");
  CHECK(c.get() == "c");
  const auto held = stored(inner);
  CHECK(held.size() == 3);
  CHECK(held.count("d") == 0);
  CHECK(eng.stop());
}

TEST_CASE("writer: with the wait policy, a blocking schedule waits for room instead") {
  io_thread io;
  delayq::executor_factory f;
  f.add("t", [](const delayq::task&) {});
  auto opts = fast_options();
  opts.max_queued_writes = 1;
  opts.when_write_queue_full = delayq::engine_options::queue_full_policy::wait;
  delayq::memory_store inner;
  auto owned = std::make_unique<controlled_store>(inner);
  controlled_store& store = *owned;
  delayq::engine eng(io.io, f, std::move(owned), opts);
  eng.start();
  store.hold_next_write();
  auto a = eng.async_schedule("t", "", 1h, {"a"}, boost::asio::use_future);
  REQUIRE(store.wait_held());
  auto b = eng.async_schedule("t", "", 1h, {"b"}, boost::asio::use_future);  // fills the queue
  auto c = std::async(std::launch::async, [&] { return eng.schedule("t", "", 1h, {"c"}); });
  store.release();
  CHECK(c.get() == "c");  // waited, then written: not refused
  CHECK(a.get() == "a");
  CHECK(b.get() == "b");
  CHECK(stored(inner).size() == 3);
  CHECK(eng.stop());
}

TEST_CASE("writer: async_schedule completes on the handler's associated executor") {
  io_thread io;
  delayq::executor_factory f;
  f.add("t", [](const delayq::task&) {});
  delayq::memory_store inner;
  delayq::engine eng(io.io, f, std::make_unique<borrowed_store>(inner), fast_options());
  eng.start();
  auto strand = boost::asio::make_strand(io.io);
  std::promise<bool> on_strand;
  eng.async_schedule(
      "t", "", 1h, {"s"},
      boost::asio::bind_executor(strand, [&](boost::system::error_code ec, std::string id) {
        on_strand.set_value(!ec && id == "s" && strand.running_in_this_thread());
      }));
  CHECK(on_strand.get_future().get());
  CHECK(eng.stop());
}

TEST_CASE("writer: many async schedules in flight from one thread all land, in few batches") {
  io_thread io;
  delayq::executor_factory f;
  f.add("t", [](const delayq::task&) {});
  delayq::memory_store inner;
  auto owned = std::make_unique<controlled_store>(inner);
  controlled_store& store = *owned;
  delayq::engine eng(io.io, f, std::move(owned), fast_options());
  eng.start();
  // Held first write: the rest pile up behind it and go out together.
  store.hold_next_write();
  std::atomic<int> ok{0}, failed{0};
  constexpr int n = 5000;
  auto first = eng.async_schedule("t", "", 1h, {"first"}, boost::asio::use_future);
  REQUIRE(store.wait_held());
  for (int i = 0; i < n; ++i)
    eng.async_schedule("t", "", 1h, {"a" + std::to_string(i)},
                       [&](boost::system::error_code ec, std::string) { ec ? ++failed : ++ok; });
  store.release();
  first.get();
  REQUIRE(eventually([&] { return ok + failed == n; }));
  CHECK(failed == 0);
  CHECK(stored(inner).size() == n + 1);
  CHECK(store.log().size() == n + 1);
  // Everything was queued while the first write was held: it went out in as
  // few batches as the batch size allows (4096 + 904), not one per call.
  CHECK(store.writes == 3);
  CHECK(eng.stop());
}
