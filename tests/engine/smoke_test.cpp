// Checks the error category wiring: the first thing every other test relies on.
#include "delayq/error.hpp"

#include <doctest/doctest.h>

#include <string_view>

TEST_CASE("error: codes carry the delayq category and a message") {
  const boost::system::error_code ec = delayq::make_error_code(delayq::errc::queue_full);
  CHECK(ec);
  CHECK(ec.value() == static_cast<int>(delayq::errc::queue_full));
  CHECK(std::string_view{ec.category().name()} == "delayq");
  CHECK_FALSE(ec.message().empty());
  CHECK(ec == delayq::errc::queue_full);  // via is_error_code_enum
  CHECK(ec != delayq::errc::store_error);
}
