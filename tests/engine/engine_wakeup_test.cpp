// The timer's wake-ups: a task armed by any thread, at any moment, gets one.
// The engine's timer sleeps until the earliest tick any table waits for, and
// an arm earlier than the tick it sleeps for re-points it; a task whose arm
// raced that re-pointing waited, on a quiet engine, for ever.
#include <doctest/doctest.h>

#include <atomic>
#include <delayq/delayq.hpp>
#include <delayq/memory_store.hpp>
#include <string>

#include "detail/test_seams.hpp"
#include "engine_test_support.hpp"

using namespace delayq_test;

namespace {

std::atomic<delayq::engine*> window_engine{nullptr};
std::atomic<bool> window_used{false};

// The seam: once, in the rearm() after a tick fired its last task (the
// timer was set, and nothing is armed now), schedule a task due in two
// ticks, as the store writer's thread arms a retry whose write has landed.
// Not due at once: schedule() hands such a task to the workers itself,
// without the timer.
void schedule_in_the_window(std::uint64_t before, std::uint64_t wake) {
  if (before == delayq::timer_wheel::no_tick || wake != delayq::timer_wheel::no_tick) return;
  delayq::engine* eng = window_engine.load();
  if (eng == nullptr || window_used.exchange(true)) return;
  eng->schedule("t", "armed-in-the-window", 20ms);
}

struct seam_guard {
  explicit seam_guard(delayq::engine& eng) {
    window_used = false;
    window_engine = &eng;
    delayq::detail::test_seams::rearm_scanned = &schedule_in_the_window;
  }
  ~seam_guard() {
    delayq::detail::test_seams::rearm_scanned = nullptr;
    window_engine = nullptr;
  }
};

}  // namespace

TEST_CASE("wake-ups: a task armed while the timer is re-pointed still runs") {
  // rearm() reads every table's earliest tick, then stores the one it found
  // where arms compare theirs. An arm in between (another thread's) found
  // the tick just fired there, at or before its own, and asked for no
  // rearm(); the timer then slept past it. Seen in CI as one retry of
  // twenty that never ran (tests/engine/engine_minimal_store_test.cpp).
  recorder ran;
  delayq::executor_factory f;
  f.add("t", std::ref(ran));
  io_thread io;
  delayq::engine eng(io.io, f, std::make_unique<delayq::memory_store>(), fast_options());
  eng.start();
  seam_guard seam(eng);
  eng.schedule("t", "first", 20ms);  // through the timer: 0 ms runs at once
  const bool both = ran.wait_for_count(2);
  INFO("runs " << ran.snapshot().size() << ", seam used " << window_used.load());
  REQUIRE(both);
  CHECK(window_used.load());
  const auto runs = ran.snapshot();
  CHECK(runs[1].t.payload == "armed-in-the-window");
  CHECK(eng.stop());
}
