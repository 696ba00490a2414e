// A heavy tick: 256 tasks or more due in one tick are taken from the wheel a
// little before the tick begins and handed to the workers when it does
// (engine_core::rearm(), on_early()). What must not change: none runs before
// its due time, they run in the order they were scheduled, and a cancel that
// answers true still wins, also in the window where they are taken and not
// yet due.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "engine_test_support.hpp"

namespace {

struct timed_run {
  std::string id;
  std::chrono::system_clock::time_point at, due;
};

// Records each run with the system clock, the clock due times are in.
struct wall_recorder {
  std::mutex m;
  std::condition_variable cv;
  std::vector<timed_run> runs;
  void operator()(const delayq::task& t) {
    const auto at = std::chrono::system_clock::now();
    std::lock_guard lock(m);
    runs.push_back({t.id, at, t.due});
    cv.notify_all();
  }
  bool wait_for_count(std::size_t n) {
    std::unique_lock lock(m);
    return cv.wait_for(lock, patience, [&] { return runs.size() >= n; });
  }
};

std::string heavy_id(std::size_t i) {
  std::string n = std::to_string(i);
  return "h-" + std::string(5 - n.size(), '0') + n;  // sorts as scheduled
}

}  // namespace

TEST_CASE("engine: a heavy tick runs in order, not early, and a cancel that answers true wins") {
  io_thread io;
  wall_recorder rec;
  delayq::executor_factory f;
  f.add("t", std::ref(rec));
  delayq::engine_options opts;  // the default 1 ms tick
  opts.workers = 1;             // one worker: the order they start in is the order they run in
  delayq::engine eng(io.io, f, std::make_unique<delayq::memory_store>(), opts);
  eng.start();
  constexpr std::size_t n = 3000;
  const auto due = std::chrono::system_clock::now() + 400ms;
  std::vector<delayq::task_spec> batch;
  for (std::size_t i = 0; i < n; ++i) {
    delayq::task_spec s{"t", "", due, {}};
    s.options.id = heavy_id(i);
    batch.push_back(std::move(s));
  }
  eng.schedule_many(std::move(batch));
  const std::uint64_t wakeups_before = eng.stats().wakeups;

  // Cancelled while waiting in the wheel: every one answers true.
  std::set<std::string> cancelled;
  for (std::size_t i = 0; i < n; i += 3) {
    CHECK(eng.cancel(heavy_id(i)));
    cancelled.insert(heavy_id(i));
  }
  const std::size_t left = n - cancelled.size();
  // Then while taken ahead of the tick (counted ready), if the test gets
  // there before the tick begins: each answer decides, true or false.
  std::set<std::string> cancelled_late, refused_late;
  REQUIRE(eventually([&] {
    if (eng.stats().ready >= left) return true;
    std::lock_guard lock(rec.m);
    return !rec.runs.empty();
  }));
  for (std::size_t i = 1; i < n; i += 7) {
    if (i % 3 == 0) continue;
    if (eng.cancel(heavy_id(i)))
      cancelled_late.insert(heavy_id(i));
    else
      refused_late.insert(heavy_id(i));
  }
  REQUIRE(rec.wait_for_count(left - cancelled_late.size()));
  // Settled: nothing more may come (a wrongly cancelled task would run now).
  eng.stop();
  std::lock_guard lock(rec.m);
  CHECK(rec.runs.size() == left - cancelled_late.size());
  std::vector<std::string> ids;
  for (const timed_run& r : rec.runs) {
    CHECK(r.at >= r.due);  // never early
    CHECK(cancelled.count(r.id) == 0);
    CHECK(cancelled_late.count(r.id) == 0);
    ids.push_back(r.id);
  }
  CHECK(std::is_sorted(ids.begin(), ids.end()));  // in the order scheduled
  for (const std::string& id : refused_late)
    CHECK(std::find(ids.begin(), ids.end(), id) != ids.end());  // false: it ran
  // The tick was taken ahead: its timer woke twice (before it, and at it).
  CHECK(eng.stats().wakeups - wakeups_before >= 2);
}
