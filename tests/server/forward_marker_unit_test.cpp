// forward_marker_unit_test.cpp - the authenticated X-Delayq-Forwarded-By of
// a forwarded call (cluster/forward_marker.hpp): a member's marker verifies
// for its own call only, within the time window; anything else is ignored,
// counted once and removed; and the key kept in the store's settings.
#include <doctest/doctest.h>

#include <boost/beast/http/verb.hpp>
#include <delayq/memory_store.hpp>
#include <string>
#include <vector>

#include "cluster/forward_marker.hpp"
#include "push/push_registry.hpp"
#include "unit_support.hpp"

namespace {

using delayq::server::forward_marker;
using delayq::server::http_request;
using verdict = forward_marker::verdict;
namespace bhttp = boost::beast::http;
using namespace std::chrono_literals;

const forward_marker::clock::time_point marker_test_now{1'700'000'000'000ms};

http_request marked_call(bhttp::verb method, const std::string& target, const std::string& body,
                         const std::string& marker) {
  http_request req{method, target, 11};
  req.body() = body;
  if (!marker.empty()) req.set("X-Delayq-Forwarded-By", marker);
  return req;
}

}  // namespace

TEST_CASE("forward marker: a member's marker verifies for its call and no other") {
  const forward_marker m{"the-cluster-key"};
  const std::string target = "/v1/tasks/x/finish";
  const std::string body = R"({"lease":"L1"})";
  const std::string made = m.make("a", "POST", target, body, marker_test_now);
  CHECK(made.starts_with("a 1700000000000 "));
  CHECK(made.size() == std::string("a 1700000000000 ").size() + 64);
  CHECK(m.check(marked_call(bhttp::verb::post, target, body, made), marker_test_now) ==
        verdict::valid);
  CHECK(m.check(marked_call(bhttp::verb::post, target, body, ""), marker_test_now) ==
        verdict::absent);

  SUBCASE("moved to another call") {
    CHECK(m.check(marked_call(bhttp::verb::put, target, body, made), marker_test_now) ==
          verdict::bad_mac);
    CHECK(m.check(marked_call(bhttp::verb::post, "/v1/tasks/y/finish", body, made),
                  marker_test_now) == verdict::bad_mac);
    CHECK(m.check(marked_call(bhttp::verb::post, target + "?x=1", body, made), marker_test_now) ==
          verdict::bad_mac);
    CHECK(m.check(marked_call(bhttp::verb::post, target, R"({"lease":"L2"})", made),
                  marker_test_now) == verdict::bad_mac);
  }
  SUBCASE("its name or time changed") {
    std::string renamed = made;
    renamed[0] = 'b';
    CHECK(m.check(marked_call(bhttp::verb::post, target, body, renamed), marker_test_now) ==
          verdict::bad_mac);
    std::string retimed = made;
    retimed[2] = '2';
    CHECK(m.check(marked_call(bhttp::verb::post, target, body, retimed), marker_test_now) ==
          verdict::bad_mac);
  }
  SUBCASE("made with another key, or checked after a key change") {
    const forward_marker other{"another-key"};
    const std::string forged = other.make("a", "POST", target, body, marker_test_now);
    CHECK(m.check(marked_call(bhttp::verb::post, target, body, forged), marker_test_now) ==
          verdict::bad_mac);
    forward_marker changing{"the-cluster-key"};
    changing.set_key("another-key");
    CHECK(changing.check(marked_call(bhttp::verb::post, target, body, made), marker_test_now) ==
          verdict::bad_mac);
    CHECK(changing.check(marked_call(bhttp::verb::post, target, body, forged), marker_test_now) ==
          verdict::valid);
  }
  SUBCASE("the window, either way") {
    const auto call = marked_call(bhttp::verb::post, target, body, made);
    CHECK(m.check(call, marker_test_now + 60s) == verdict::valid);
    CHECK(m.check(call, marker_test_now - 60s) == verdict::valid);
    CHECK(m.check(call, marker_test_now + 60s + 1ms) == verdict::out_of_window);
    CHECK(m.check(call, marker_test_now - 60s - 1ms) == verdict::out_of_window);
  }
}

TEST_CASE("forward marker: what is not INSTANCE UNIX_MS MAC is malformed") {
  const forward_marker m{"the-cluster-key"};
  const std::string mac(64, 'a');
  const std::vector<std::string> malformed{"b",
                                           "b 1700000000000",
                                           "b x " + mac,
                                           "b -1 " + mac,
                                           "b  " + mac,
                                           " 1700000000000 " + mac,
                                           "b 1700000000000 " + mac + " extra",
                                           "b 1700000000000 abc",
                                           "b 1700000000000 " + mac + "a",
                                           "b 99999999999999999999 " + mac};
  for (const std::string& bad : malformed) {
    CAPTURE(bad);
    CHECK(m.check(marked_call(bhttp::verb::get, "/", "", bad), marker_test_now) ==
          verdict::malformed);
  }
  // Twice, even with one that verifies: which one would count?
  auto twice = marked_call(bhttp::verb::get, "/", "", m.make("a", "GET", "/", "", marker_test_now));
  twice.insert("X-Delayq-Forwarded-By", "b 1 " + mac);
  CHECK(m.check(twice, marker_test_now) == verdict::malformed);
}

TEST_CASE("forward marker: is_forwarded keeps a valid marker, drops and counts another once") {
  const forward_marker m{"the-cluster-key"};
  const auto now = forward_marker::clock::now();
  auto good = marked_call(bhttp::verb::delete_, "/v1/tasks/t", "",
                          m.make("b", "DELETE", "/v1/tasks/t", "", now));
  CHECK(m.is_forwarded(good));
  CHECK(m.is_forwarded(good));
  CHECK(good.count("X-Delayq-Forwarded-By") == 1);
  auto none = marked_call(bhttp::verb::delete_, "/v1/tasks/t", "", "");
  CHECK_FALSE(m.is_forwarded(none));
  CHECK(m.rejected() == 0);

  delayq::server_test::log_capture logs;
  auto bare = marked_call(bhttp::verb::delete_, "/v1/tasks/t", "", "b");
  CHECK_FALSE(m.is_forwarded(bare));
  CHECK(bare.count("X-Delayq-Forwarded-By") == 0);
  CHECK_FALSE(m.is_forwarded(bare));  // asked again (end_lease, then forward_to)
  CHECK(m.rejected() == 1);
  auto moved = marked_call(bhttp::verb::delete_, "/v1/tasks/u", "",
                           m.make("b", "DELETE", "/v1/tasks/t", "", now));
  CHECK_FALSE(m.is_forwarded(moved));
  CHECK(m.rejected() == 2);
  // One warning for both: at most one a minute.
  const auto lines = logs.taken();
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].find("ignored a forwarding marker naming \"b\"") != std::string::npos);
}

TEST_CASE("forward marker: the key kept in the store is created once and shared") {
  delayq::memory_store store;
  boost::system::error_code ec;
  const std::string first = forward_marker::load_or_create_key(store, {}, ec);
  REQUIRE_FALSE(ec);
  CHECK(first.size() == 64);
  CHECK(first.find_first_not_of("0123456789abcdef") == std::string::npos);
  // Another instance, and this one again, find it.
  CHECK(forward_marker::load_or_create_key(store, {}, ec) == first);
  CHECK(forward_marker::load_or_create_key(store, "mine") == first);
  // A store that lost it gets the caller's back, not a new one.
  CHECK(store.erase_setting(forward_marker::setting_key, ec));
  CHECK(forward_marker::load_or_create_key(store, first, ec) == first);
  REQUIRE_FALSE(ec);
  // GET /v1/types lists the push registry's settings: the key is not one.
  delayq::server::push_registry targets{store};
  targets.load(ec);
  REQUIRE_FALSE(ec);
  CHECK(targets.all().empty());
}
