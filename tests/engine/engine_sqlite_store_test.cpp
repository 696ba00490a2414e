// The engine on an SQLite file: what start() does with a stored record it
// cannot accept, and the settings the engine's users keep beside the tasks.

#include <doctest/doctest.h>

#include <delayq/delayq.hpp>
#include <string>
#include <vector>

#include "engine_test_support.hpp"

using namespace delayq_test;

TEST_CASE("start: an SQLite record whose id the engine rejects is quarantined once, never run") {
  temp_dir dir;
  const std::string uri = "sqlite:" + dir.file("reject.db");
  {
    // Written behind the engine's back (copy_tasks, another tool): the store
    // takes any id, the engine does not.
    auto store = delayq::open_store(uri);
    store->save(std::vector<delayq::task>{{"bad id", "t", "", clock_type::now(), 0},
                                          {"good", "t", "", clock_type::now(), 0}});
  }
  recorder ran;
  delayq::executor_factory f;
  f.add("t", std::ref(ran));
  {
    io_thread io;
    delayq::engine eng(io.io, f, delayq::open_store(uri), fast_options());
    eng.start();
    CHECK(eng.stats().loaded == 1);
    CHECK(eng.stats().quarantined == 1);  // moved by sqlite_store::quarantine()
    REQUIRE(ran.wait_for_count(1));
    REQUIRE(eventually([&] { return eng.stats().succeeded == 1; }));
    CHECK(eng.stop());
  }
  CHECK(ran.ids() == std::vector<std::string>{"good"});
  // Gone from the live tasks: the next start meets nothing to reject.
  auto store = delayq::open_store(uri);
  CHECK(stored(*store).empty());
  io_thread io;
  delayq::engine again(io.io, f, delayq::open_store(uri), fast_options());
  again.start();
  CHECK(again.stats().loaded == 0);
  CHECK(again.stats().quarantined == 0);
  CHECK(again.stop());
}
