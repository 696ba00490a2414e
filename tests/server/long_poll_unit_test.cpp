// long_poll_unit_test.cpp - which requests the HTTP layer watches for the
// client going away (api_router::is_long_poll): those that may wait for
// tasks, and no others, since a watch costs a read and its cancel.
#include <doctest/doctest.h>

#include <string>

#include "api/api_router.hpp"

namespace {

using delayq::server::api_router;
namespace bhttp = boost::beast::http;

bool watched(bhttp::verb verb, const std::string& target, const std::string& body) {
  delayq::server::http_request req{verb, target, 11};
  req.body() = body;
  return api_router::is_long_poll(req);
}

bool post(const std::string& target, const std::string& body) {
  return watched(bhttp::verb::post, target, body);
}

}  // namespace

TEST_CASE("long poll: a reserve is watched when its wait_ms is not 0") {
  CHECK(post("/v1/reserve", R"({"types": ["t"], "wait_ms": 1000})"));
  CHECK(post("/v1/reserve", R"({"wait_ms" :  5 , "types": ["t"]})"));
  CHECK(post("/v1/reserve", "{\"wait_ms\":\n60000}"));
  // A type named like the key is a string, not the key.
  CHECK(post("/v1/reserve", R"({"types": ["wait_ms"], "wait_ms": 100})"));
  CHECK_FALSE(post("/v1/reserve", R"({"types": ["t"], "wait_ms": 0})"));
  CHECK_FALSE(post("/v1/reserve", R"({"types": ["t"],"wait_ms":0})"));
  CHECK_FALSE(post("/v1/reserve", R"({"types": ["t"]})"));  // default 0
  CHECK_FALSE(post("/v1/reserve", R"({"types": ["wait_ms"]})"));
  CHECK_FALSE(post("/v1/reserve", ""));
}

TEST_CASE("long poll: unsure is watched (the handler refuses what is not an integer)") {
  CHECK(post("/v1/reserve", R"({"wait_ms": 0.5})"));
  CHECK(post("/v1/reserve", R"({"wait_ms": 01})"));
  CHECK(post("/v1/reserve", R"({"wait_ms": 0e3})"));
  CHECK(post("/v1/reserve", R"({"wait_ms": -0})"));
  CHECK(post("/v1/reserve", R"({"wait_ms": "0"})"));
  CHECK(post("/v1/reserve", R"({"wait_ms": null})"));
  CHECK(post("/v1/reserve", R"({"wait_ms":)"));
  CHECK(post("/v1/reserve", R"({"wait_ms": 0, "wait_ms": 9})"));
}

TEST_CASE("long poll: a finish or fail is watched only when its next may wait") {
  for (const std::string verb : {"finish", "fail"}) {
    const std::string target = "/v1/tasks/a/" + verb;
    CAPTURE(target);
    CHECK(post(target, R"({"lease": "l", "next": {"types": ["t"], "wait_ms": 1000}})"));
    CHECK_FALSE(post(target, R"({"lease": "l", "next": {"types": ["t"], "wait_ms": 0}})"));
    CHECK_FALSE(post(target, R"({"lease": "l", "next": {"types": ["t"], "max": 1}})"));
    CHECK_FALSE(post(target, R"({"lease": "l"})"));
    // wait_ms means nothing without next.
    CHECK_FALSE(post(target, R"({"lease": "l", "wait_ms": 1000})"));
  }
  // POST /v1/tasks:finish, several finishes and one next.
  CHECK(post("/v1/tasks:finish",
             R"({"tasks": [{"id": "a", "lease": "l"}], "next": {"wait_ms": 1000}})"));
  CHECK_FALSE(post("/v1/tasks:finish",
                   R"({"tasks": [{"id": "a", "lease": "l"}], "next": {"wait_ms": 0}})"));
  CHECK_FALSE(post("/v1/tasks:finish", R"({"tasks": [{"id": "a", "lease": "l"}]})"));
  CHECK_FALSE(post("/v1/tasks:batch", R"({"tasks": [], "next": {"wait_ms": 1000}})"));
  CHECK_FALSE(post("/v1/tasks/a/touch", R"({"lease": "l", "next": {"wait_ms": 1000}})"));
  CHECK_FALSE(watched(bhttp::verb::get, "/v1/reserve", R"({"wait_ms": 1000})"));
}
