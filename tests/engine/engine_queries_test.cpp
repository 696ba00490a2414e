// What an operator can ask the engine (status, upcoming) and the per-type
// capacity ("a topic may hold only one job").

#include <doctest/doctest.h>

#include <atomic>
#include <delayq/delayq.hpp>
#include <string>
#include <thread>
#include <vector>

#include "engine_test_support.hpp"

using namespace delayq_test;

TEST_CASE("upcoming: the next tasks not yet running, earliest first, of one type or all") {
  io_thread io;
  latch gate;
  delayq::executor_factory f;
  f.add("a", [](const delayq::task&) {});
  f.add("b", [](const delayq::task&) {});
  f.add("block", [&](const delayq::task&) { gate.enter_and_wait(); });
  delayq::memory_store inner;
  delayq::engine eng(io.io, f, std::make_unique<borrowed_store>(inner), fast_options());
  eng.start();
  eng.schedule("block", "", 0ms, {"running"});
  REQUIRE(gate.wait_entered(1));
  eng.schedule("a", "", 3h, {"a3"});
  eng.schedule("b", "", 1h, {"b1"});
  eng.schedule("a", "", 2h, {"a2"});
  eng.schedule("b", "", 4h, {"b4"});
  auto ids = [](const std::vector<delayq::task>& ts) {
    std::vector<std::string> out;
    for (const auto& t : ts) out.push_back(t.id);
    return out;
  };
  CHECK(ids(eng.upcoming(10)) == std::vector<std::string>{"b1", "a2", "a3", "b4"});
  CHECK(ids(eng.upcoming(2)) == std::vector<std::string>{"b1", "a2"});
  CHECK(ids(eng.upcoming(10, "a")) == std::vector<std::string>{"a2", "a3"});
  CHECK(eng.upcoming(10, "nobody").empty());
  CHECK(eng.upcoming(0).empty());
  CHECK(eng.status("running")->state == delayq::task_state::running);
  CHECK(eng.status("b1")->state == delayq::task_state::delayed);
  CHECK_FALSE(eng.status("nope").has_value());
  gate.release();
  CHECK(eng.stop());
}

TEST_CASE("capacity: a type full of pending tasks refuses more with type_full, storing nothing") {
  io_thread io;
  recorder ran;
  delayq::executor_factory f;
  f.add("topic", std::ref(ran));
  f.add("other", std::ref(ran));
  auto opts = fast_options();
  opts.type_capacity["topic"] = 1;  // one job per topic
  delayq::memory_store inner;
  delayq::engine eng(io.io, f, std::make_unique<borrowed_store>(inner), opts);
  eng.start();
  eng.schedule("topic", "first", 1h, {"t1"});
  boost::system::error_code ec;
  CHECK(eng.schedule("topic", "second", 1h, {"t2"}, ec).empty());
  CHECK(ec == delayq::errc::type_full);
  CHECK_THROWS_AS(eng.schedule_many({delayq::task_spec{"topic", "", clock_type::now(), {"t3"}}}),
                  boost::system::system_error);
  CHECK(stored(inner).size() == 1);
  // Other types are not limited, and replacing the one job is allowed.
  CHECK(eng.schedule("other", "", 1h, {"o1"}) == "o1");
  CHECK(eng.schedule("topic", "replaced", 2h, {"t1", delayq::on_conflict::replace}) == "t1");
  CHECK(eng.find("t1")->payload == "replaced");
  // Once the job left (cancelled here), there is room again.
  CHECK(eng.cancel("t1"));
  CHECK(eng.schedule("topic", "", 0ms, {"t4"}) == "t4");
  REQUIRE(ran.wait_for_count(1));
  // The success is counted when the attempt settles, a moment before the
  // task leaves the engine (and its type's count); wait for the leaving.
  REQUIRE(eventually([&] { return !eng.status("t4").has_value(); }));
  CHECK(eng.schedule("topic", "", 1h, {"t5"}) == "t5");
  CHECK(eng.stop());
}

TEST_CASE("capacity: a batch that overfills a type names the first task past the cap") {
  io_thread io;
  recorder ran;
  delayq::executor_factory f;
  f.add("topic", std::ref(ran));
  f.add("other", std::ref(ran));
  auto opts = fast_options();
  opts.type_capacity["topic"] = 3;
  opts.type_capacity["other"] = 1;
  f.add("third", std::ref(ran));
  delayq::memory_store inner;
  delayq::engine eng(io.io, f, std::make_unique<borrowed_store>(inner), opts);
  eng.start();
  eng.schedule("topic", "", 1h, {"t1"});
  const auto spec = [](const char* type, const char* id) {
    return delayq::task_spec{type, "", clock_type::now() + 1h, {id}};
  };
  boost::system::error_code ec;
  std::size_t bad = 99;
  // "other" fills its cap at index 1; "topic" reaches 3 at index 3 and goes
  // past it at index 4 (the error names it, not the batch's last task); a
  // replace of t1 in between adds nothing.
  CHECK(eng.schedule_many(
               {spec("topic", "t2"), spec("other", "o1"),
                delayq::task_spec{
                    "topic", "", clock_type::now() + 1h, {"t1", delayq::on_conflict::replace}},
                spec("topic", "t3"), spec("topic", "t4"), spec("third", "x1")},
               ec, bad)
            .empty());
  CHECK(ec == delayq::errc::type_full);
  CHECK(bad == 4);
  CHECK(eng.pending() == 1);
  // Without the last one the batch fits, exactly.
  CHECK(eng.schedule_many({spec("topic", "t2"), spec("other", "o1"), spec("topic", "t3")}, ec, bad)
            .size() == 3);
  CHECK_FALSE(ec);
  CHECK(eng.pending() == 4);
  CHECK(eng.stop());
}

// The pending counts are striped by thread when uncapped and one atomic when
// capped (detail/striped.hpp, pending_count): both must come out exact after
// threads that schedule and cancel at once.
TEST_CASE("counts: four threads scheduling and cancelling at once leave exact counts") {
  io_thread io;
  delayq::executor_factory f;
  f.add("free", [](const delayq::task&) {});
  f.add("capped", [](const delayq::task&) {});
  auto opts = fast_options();
  opts.type_capacity["capped"] = 100;
  delayq::memory_store inner;
  delayq::engine eng(io.io, f, std::make_unique<borrowed_store>(inner), opts);
  eng.start();
  constexpr int threads = 4, each = 500;
  std::atomic<int> capped_taken{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int i = 0; i < each; ++i) {
        const std::string id = "f" + std::to_string(t) + "-" + std::to_string(i);
        eng.schedule("free", "", 1h, {id});
        if (i % 2 == 1) CHECK(eng.cancel(id));  // every other one leaves again
        boost::system::error_code ec;
        eng.schedule("capped", "", 1h, {"c" + std::to_string(t) + "-" + std::to_string(i)}, ec);
        if (!ec)
          capped_taken.fetch_add(1);
        else
          CHECK(ec == delayq::errc::type_full);
      }
    });
  for (auto& th : pool) th.join();
  CHECK(capped_taken.load() == 100);  // the cap, exactly: no more, no fewer
  const std::size_t free_left = threads * each / 2;
  CHECK(eng.pending() == free_left + 100);
  const auto st = eng.stats();
  CHECK(st.pending == free_left + 100);
  CHECK(st.scheduled == threads * each + 100);
  CHECK(st.cancelled == threads * each / 2);
  std::size_t free_pending = 0, capped_pending = 0;
  for (const auto& t : eng.metrics().types) {
    if (t.type == "free") free_pending = t.pending;
    if (t.type == "capped") capped_pending = t.pending;
  }
  CHECK(free_pending == free_left);
  CHECK(capped_pending == 100);
  CHECK(stored(inner).size() == free_left + 100);
  CHECK(eng.stop());
}
