// The checks every call makes of its arguments (detail/validation.hpp),
// byte by byte: valid_id() reads eight bytes at a time, and must agree
// with the rule it stands for at every byte value in every position. And,
// as small, a table's stamps (detail/task_table.hpp).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "detail/task_table.hpp"
#include "detail/validation.hpp"

using delayq::detail::valid_id;

TEST_CASE("validation: valid_id refuses a space, a control byte or DEL anywhere, nothing else") {
  std::size_t wrong = 0;
  for (std::size_t len : {1, 7, 8, 9, 16, 23, 256}) {
    for (std::size_t at = 0; at < len; ++at) {
      for (int b = 0; b < 256; ++b) {
        std::string id(len, 'a');
        id[at] = static_cast<char>(b);
        const bool expected = b > 0x20 && b != 0x7f;  // UTF-8 bytes (0x80 and up) are fine
        wrong += valid_id(id) != expected;
      }
    }
  }
  CHECK(wrong == 0);
  // Neighbours of a bad byte in the same word do not hide it, nor make it.
  CHECK_FALSE(valid_id(std::string("\x80\x21 \xff\x7e\x7f\x20\x21", 8)));
  CHECK(valid_id(std::string("\x80\x21\x22\xff\x7e\x80\xfe\x21", 8)));
  CHECK_FALSE(valid_id(""));
  CHECK_FALSE(valid_id(std::string(257, 'a')));
  CHECK(valid_id(std::string(256, 'a')));
}

// ---------------------------------------------------------------- stamps
//
// Not a check of arguments, but as small: a table's stamps (the order of
// tasks due at one instant) must rise in the order they are made, whatever
// floors the calls bring (each call reads the clock before it takes the
// table's lock, so a later stamp may bring an earlier floor), and never sit
// below a floor.

TEST_CASE("stamps: a table's stamps rise in the order made, each at or above its floor") {
  delayq::detail::task_table t(0, 64, nullptr);
  std::vector<delayq::timer_wheel::handle> hs;
  const std::uint64_t floors[] = {100, 100, 90, 500, 499, 501, 0, 1000};
  for (std::uint64_t f : floors) {
    const auto h =
        t.wheel.insert(delayq::timer_wheel::item{"s" + std::to_string(hs.size()), {}}, 5);
    REQUIRE(h != delayq::timer_wheel::npos);
    t.stamp(h, f);
    CHECK(t.order_of(h) >= f);
    if (!hs.empty()) CHECK(t.order_of(h) > t.order_of(hs.back()));
    hs.push_back(h);
  }
  CHECK(t.order_of(hs[0]) == 100);  // a floor above the last stamp is taken as it is
  CHECK(t.order_of(hs[3]) == 500);
}
