// Tasks of immediate types (async_start::immediate) start where they come
// due, and engine::fire_due() hands over what is due by now ahead of the
// timer: what lets a server answer a put with the task already handed on,
// and a consumer's wait that ends as a task comes due get the task.
#include <doctest/doctest.h>

#include "engine_test_support.hpp"

namespace {

using namespace delayq_test;

// An immediate executor that records the thread each attempt started on and
// ends it at once.
struct immediate_log {
  std::mutex m;
  std::vector<std::pair<std::string, std::thread::id>> starts;
  void operator()(const delayq::task& t, delayq::attempt_completion done) {
    {
      std::lock_guard lock(m);
      starts.emplace_back(t.id, std::this_thread::get_id());
    }
    done("");
  }
  std::size_t size() {
    std::lock_guard lock(m);
    return starts.size();
  }
};

}  // namespace

TEST_CASE("immediate: a task due when its write lands has started when schedule() returns") {
  io_thread io;
  immediate_log log;
  delayq::executor_factory f;
  f.add_async(
      "now", [&log](const delayq::task& t, delayq::attempt_completion done) { log(t, done); },
      delayq::async_start::immediate);
  delayq::engine_options o;
  o.tick = std::chrono::milliseconds{1000};  // the timer would take up to a second
  delayq::engine eng(io.io, f, std::make_unique<delayq::memory_store>(), o);
  eng.start();
  for (int i = 0; i < 20; ++i) {
    const std::string id = eng.schedule("now", "p", std::chrono::milliseconds{0});
    REQUIRE(log.size() == static_cast<std::size_t>(i) + 1);
    std::lock_guard lock(log.m);
    CHECK(log.starts.back().first == id);
    CHECK(log.starts.back().second == std::this_thread::get_id());  // on the caller's thread
  }
  // Through async_schedule with a direct completion: started before the
  // completion runs, and the completion runs before the call returns.
  bool completed = false;
  eng.async_schedule("now", "q", std::chrono::milliseconds{0},
                     delayq::direct([&](boost::system::error_code ec, std::string id) {
                       CHECK(!ec);
                       std::lock_guard lock(log.m);
                       CHECK(log.starts.back().first == id);
                       completed = true;
                     }));
  CHECK(completed);
  CHECK(eng.stop());
}

TEST_CASE("immediate: fire_due() hands over a task due by now, never one not due yet") {
  io_thread io;
  immediate_log log;
  delayq::executor_factory f;
  f.add_async(
      "t", [&log](const delayq::task& t, delayq::attempt_completion done) { log(t, done); },
      delayq::async_start::immediate);
  delayq::engine_options o;
  o.tick = std::chrono::milliseconds{60'000};  // the timer alone: up to a minute late
  delayq::engine eng(io.io, f, std::make_unique<delayq::memory_store>(), o);
  eng.start();
  const auto due = clock_type::now() + std::chrono::milliseconds{20};
  const std::string soon = eng.schedule_at("t", "", due);
  const std::string later = eng.schedule("t", "", std::chrono::hours{1});
  // Before its due time nothing fires (a call may come after it passed on
  // a slow machine: then it fires, and not before its due time).
  const std::size_t early = eng.fire_due();
  if (early == 1) CHECK(clock_type::now() >= due);
  // Waits for the wall clock, not for a duration: the event is "due has passed".
  while (clock_type::now() < due + std::chrono::milliseconds{1}) std::this_thread::yield();
  const std::size_t fired = eng.fire_due();
  CHECK(early + fired == 1);
  REQUIRE(log.size() == 1);
  {
    std::lock_guard lock(log.m);
    CHECK(log.starts[0].first == soon);
  }
  CHECK(eng.fire_due() == 0);  // nothing else is due
  CHECK(eng.status(later).has_value());
  CHECK(eng.status(later)->state == delayq::task_state::delayed);
  CHECK(eng.stop());
}
