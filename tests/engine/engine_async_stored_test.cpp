// attempt_completion's on_stored: an asynchronous attempt hears when its
// outcome is durable. delayq-server answers a consumer's finish and fail only
// from it, so "204 means gone for good" rests on these promises.

#include <doctest/doctest.h>

#include <delayq/delayq.hpp>
#include <future>
#include <mutex>
#include <thread>

#include "engine_test_support.hpp"

using namespace delayq_test;
using namespace std::chrono_literals;

namespace {

// Keeps the completion of the one attempt of type "t" for the test to call.
struct held_attempt {
  std::mutex m;
  std::condition_variable cv;
  delayq::attempt_completion done;
  int started = 0;
  void start(delayq::attempt_completion d) {
    std::lock_guard lock(m);
    done = std::move(d);
    ++started;
    cv.notify_all();
  }
  bool wait_started(int n) {
    std::unique_lock lock(m);
    return cv.wait_for(lock, patience, [&] { return started >= n; });
  }
  delayq::attempt_completion take() {
    std::lock_guard lock(m);
    return std::exchange(done, {});
  }
};

struct stored_probe {
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

delayq::executor_factory holding(held_attempt& h) {
  delayq::executor_factory f;
  f.add_async("t", [&h](const delayq::task&, delayq::attempt_completion done) {
    h.start(std::move(done));
  });
  return f;
}

// An engine on a `Store` over `inner` whose executor holds the one attempt
// of task "x" (type "t"): started, and waiting in `h` for its completion.
template <class Store>
struct one_attempt {
  explicit one_attempt(delayq::engine_options opts = fast_options())
      : eng(io.io, holding(h), own(), std::move(opts)) {
    eng.start();
    eng.schedule("t", "", 0ms, {"x"});
    REQUIRE(h.wait_started(1));
  }

  io_thread io;
  delayq::memory_store inner;
  held_attempt h;
  Store* store = nullptr;  // owned by eng
  delayq::engine eng;

 private:
  std::unique_ptr<Store> own() {
    auto s = std::make_unique<Store>(inner);
    store = s.get();
    return s;
  }
};

}  // namespace

TEST_CASE("engine: on_stored of a success comes once the removal is durable, not before") {
  one_attempt<controlled_store> a;
  auto& [io, inner, h, store_ptr, eng] = a;
  controlled_store& store = *store_ptr;

  store.hold_next_write();
  stored_probe probe;
  h.take()("", probe.handler());
  REQUIRE(store.wait_held());  // the removal is being written, and waits
  CHECK_FALSE(probe.ready());
  CHECK(stored(inner).count("x") == 1);
  store.release();
  CHECK_FALSE(probe.get());
  CHECK(stored(inner).count("x") == 0);
  eng.stop();
}

TEST_CASE("engine: on a pipelining store, an outcome's write crosses one thread and back") {
  // The reporting thread hands the removal to the store's async_write()
  // itself, and the store's completion thread reports it: no detour through
  // the engine's writer thread either way (store_writer, "Hand-offs").
  // delayq-server's finish is answered from there.
  one_attempt<pipelined_store> a;
  auto& [io, inner, h, store_ptr, eng] = a;
  pipelined_store& store = *store_ptr;

  std::promise<std::thread::id> reported_on;
  h.take()("", [&](boost::system::error_code ec) {
    CHECK_FALSE(ec);
    reported_on.set_value(std::this_thread::get_id());
  });
  auto f = reported_on.get_future();
  REQUIRE(f.wait_for(patience) == std::future_status::ready);
  CHECK(f.get() == store.thread_id());
  CHECK(store.last_caller() == std::this_thread::get_id());
  CHECK(stored(inner).count("x") == 0);
  eng.stop();
}

TEST_CASE("engine: on_stored of a failure comes once the retry is durable") {
  auto opts = fast_options();
  opts.retry.base = 1h;  // the retry must not run during the test
  opts.retry.cap = 1h;
  one_attempt<controlled_store> a(opts);
  auto& [io, inner, h, store_ptr, eng] = a;
  controlled_store& store = *store_ptr;

  store.hold_next_write();
  stored_probe probe;
  h.take()("downstream said no", probe.handler());
  REQUIRE(store.wait_held());
  CHECK_FALSE(probe.ready());
  CHECK(stored(inner).at("x").attempts == 0);
  store.release();
  CHECK_FALSE(probe.get());
  CHECK(stored(inner).at("x").attempts == 1);
  eng.stop();
}

TEST_CASE("engine: on_stored of the last failure comes once the dead letter is durable") {
  auto opts = fast_options();
  opts.retry.max_attempts = 1;
  one_attempt<borrowed_store> a(opts);
  auto& [io, inner, h, store_ptr, eng] = a;
  stored_probe probe;
  h.take()("no", probe.handler());
  CHECK_FALSE(probe.get());
  boost::system::error_code ec;
  auto dead = inner.find_dead("x", ec);
  REQUIRE_FALSE(ec);
  REQUIRE(dead.has_value());
  CHECK(dead->error == "no");
  eng.stop();
}

TEST_CASE("engine: on_stored reports a failed write, and the change still lands later") {
  one_attempt<controlled_store> a;
  auto& [io, inner, h, store_ptr, eng] = a;
  controlled_store& store = *store_ptr;
  store.fail_writes = 1;
  stored_probe probe;
  h.take()("", probe.handler());
  CHECK(probe.get() == delayq::errc::store_unavailable);
  // Kept and written again: the success is not lost.
  CHECK(eventually([&] { return stored(inner).count("x") == 0; }));
  eng.stop();
}

TEST_CASE("engine: on_stored says attempt_ended when the timeout ended the attempt first") {
  auto opts = fast_options();
  opts.timeout_per_type["t"] = 10ms;
  opts.retry.base = 1h;
  opts.retry.cap = 1h;
  one_attempt<borrowed_store> a(opts);
  auto& [io, inner, h, store_ptr, eng] = a;
  REQUIRE(eventually([&] { return eng.stats().timed_out == 1; }));
  stored_probe probe;
  h.take()("", probe.handler());
  CHECK(probe.get() == delayq::errc::attempt_ended);
  // The late success was ignored: the task waits for its retry.
  CHECK(stored(inner).count("x") == 1);
  eng.stop();
}
