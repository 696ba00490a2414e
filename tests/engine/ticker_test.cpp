// The engine's clock (detail/ticker.hpp): where wall-clock due times fall on
// the wheel's ticks. A tick must begin when its millisecond begins: later,
// and every task is late by the difference; earlier, and tasks run early.
#include <doctest/doctest.h>

#include <boost/asio/io_context.hpp>
#include <chrono>

#include "detail/ticker.hpp"

namespace {

using wall_clock = std::chrono::system_clock;

std::int64_t wall_ms_of(wall_clock::time_point t) {
  return std::chrono::floor<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

wall_clock::time_point wall_at_ms(std::int64_t ms) {
  return wall_clock::time_point(std::chrono::milliseconds{ms});
}

}  // namespace

TEST_CASE("ticker: a tick of 1 ms begins exactly when its wall-clock millisecond begins") {
  boost::asio::io_context io;
  // Each anchor() reads the clocks somewhere inside a millisecond: before
  // ticks were aligned, that fraction was every task's extra lateness.
  for (int start = 0; start < 20; ++start) {
    delayq::detail::ticker t(io.get_executor(), std::chrono::milliseconds{1});
    t.anchor();
    const std::int64_t now = t.now_ms();
    for (std::int64_t due = now + 1; due < now + 60; due += 7) {
      const auto begins = t.boundary(t.tick_for(due));
      CHECK(t.wall_at(begins) == wall_at_ms(due));
      CHECK(wall_ms_of(t.wall_at(begins - std::chrono::nanoseconds{1})) == due - 1);
    }
  }
}

TEST_CASE("ticker: a longer tick begins at the first of its boundaries at or after the due time") {
  boost::asio::io_context io;
  delayq::detail::ticker t(io.get_executor(), std::chrono::milliseconds{10});
  t.anchor();
  const std::int64_t now = t.now_ms();
  for (std::int64_t due = now + 1; due < now + 100; ++due) {
    const auto begins = t.wall_at(t.boundary(t.tick_for(due)));
    CHECK(begins >= wall_at_ms(due));
    CHECK(begins < wall_at_ms(due + 10));
    // On a boundary of the wall clock's milliseconds, as with a 1 ms tick.
    CHECK(begins == wall_at_ms(wall_ms_of(begins)));
  }
}

TEST_CASE(
    "ticker: the engine's clock is never behind the system clock, and ahead by lead() at most") {
  // Never behind: a due time made from "now + delay" is never before the
  // system clock's now + delay. Ahead by lead() at most, which every firing
  // decision allows for (the next case).
  boost::asio::io_context io;
  delayq::detail::ticker t(io.get_executor(), std::chrono::milliseconds{1});
  t.anchor();
  CHECK(t.lead() >= std::chrono::steady_clock::duration::zero());
  for (int i = 0; i < 1000; ++i) {
    const auto wall_before = wall_clock::now();
    const auto steady = std::chrono::steady_clock::now();
    const auto wall_after = wall_clock::now();
    CHECK(t.wall_at(steady) >= wall_before);
    CHECK(t.wall_at(steady) <= wall_after + t.lead());
  }
}

TEST_CASE("ticker: what it says has begun has begun by the system clock") {
  boost::asio::io_context io;
  delayq::detail::ticker t(io.get_executor(), std::chrono::milliseconds{1});
  t.anchor();
  for (int i = 0; i < 1000; ++i) {
    const std::int64_t begun = t.begun_ms();
    const auto begins = t.wall_at(t.boundary(t.current_tick()));
    const auto wall = wall_clock::now();  // read after
    CHECK(begun <= wall_ms_of(wall));
    CHECK(begins <= wall);
  }
}
