// api_error_unit_test.cpp - how the API answers an engine error
// (docs/server.md, "Errors"): the status and name a client switches on, and
// the `Retry-After: 1` that the 503s of load (busy, queue_full) and of an
// unreachable owner promise.
#include <doctest/doctest.h>

#include <delayq/error.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "api/api_router.hpp"
#include "wire/api_error.hpp"

namespace {

using delayq::server::http_answer;

// The values of the answer's headers named `name` (several would be a bug).
std::vector<std::string> header_values(const http_answer& a, const std::string& name) {
  std::vector<std::string> out;
  for (const auto& [n, v] : a.headers)
    if (n == name) out.push_back(v);
  return out;
}

}  // namespace

TEST_CASE("api errors: 503 busy, queue_full and owner_unreachable carry Retry-After: 1") {
  using delayq::errc;
  for (const errc e : {errc::busy, errc::queue_full}) {
    const auto err = delayq::server::from_error_code(make_error_code(e));
    INFO("errc: ", err.name);
    const http_answer a = delayq::server::error_answer(err);
    CHECK(a.status == 503);
    CHECK(nlohmann::json::parse(a.body)["error"] == err.name);
    CHECK(header_values(a, "Retry-After") == std::vector<std::string>{"1"});
  }
  CHECK(delayq::server::from_error_code(make_error_code(errc::busy)).name == "busy");
  CHECK(delayq::server::from_error_code(make_error_code(errc::queue_full)).name == "queue_full");
  // owner_unreachable is made by the forwarder (forward_call.cpp) through the
  // same function; the whole path: peer_forwarder_unit_test.cpp.
  const http_answer o = delayq::server::error_answer({503, "owner_unreachable", "gone"});
  CHECK(header_values(o, "Retry-After") == std::vector<std::string>{"1"});
  // Not an invitation to retry what a retry will not fix.
  const http_answer c = delayq::server::error_answer(
      delayq::server::from_error_code(make_error_code(errc::duplicate_id)));
  CHECK(c.status == 409);
  CHECK(header_values(c, "Retry-After").empty());
}
