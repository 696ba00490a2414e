// The checks every call makes of its arguments (detail/validation.hpp),
// byte by byte: valid_id() reads eight bytes at a time, and must agree
// with the rule it stands for at every byte value in every position.
#include <doctest/doctest.h>

#include <string>

#include "detail/validation.hpp"

using delayq::detail::valid_id;

TEST_CASE("validation: valid_id refuses a space, a control byte or DEL wherever it is, and nothing else") {
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
