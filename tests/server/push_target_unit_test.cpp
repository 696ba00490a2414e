// push_target_unit_test.cpp - http:// URL parsing and the JSON form of a push target.
#include <doctest/doctest.h>

#include <string>

#include "push/push_target.hpp"
#include "wire/dump_json.hpp"
#include "wire/http_url.hpp"
#include "wire/task_json.hpp"

using delayq::server::http_url;
using delayq::server::parse_http_url;
using delayq::server::push_target;
using delayq::server::push_target_from_json;
using json = nlohmann::json;

namespace {

http_url parsed(std::string_view url) {
  std::string why;
  auto u = parse_http_url(url, why);
  INFO("url: ", url, ", why: ", why);
  REQUIRE(u.has_value());
  CHECK(why.empty());
  return *u;
}

std::string refused(std::string_view url) {
  std::string why;
  auto u = parse_http_url(url, why);
  INFO("url: ", url);
  CHECK_FALSE(u.has_value());
  CHECK_FALSE(why.empty());
  return why;
}

std::string refused_json(const json& j) {
  std::string why;
  auto t = push_target_from_json(j, why);
  INFO("json: ", j.dump());
  CHECK_FALSE(t.has_value());
  CHECK_FALSE(why.empty());
  return why;
}

}  // namespace

TEST_CASE("push target: parse_http_url splits host, port and target") {
  CHECK(parsed("http://example.com") == http_url{"example.com", "80", "/"});
  CHECK(parsed("http://example.com/") == http_url{"example.com", "80", "/"});
  CHECK(parsed("HTTP://Example.com:8080/a/b?c=d&e") ==
        http_url{"Example.com", "8080", "/a/b?c=d&e"});
  CHECK(parsed("http://127.0.0.1:7/hook") == http_url{"127.0.0.1", "7", "/hook"});
  CHECK(parsed("http://host?x=1") == http_url{"host", "80", "/?x=1"});
  CHECK(parsed("http://[::1]:9000/p") == http_url{"::1", "9000", "/p"});
  CHECK(parsed("http://[2001:db8::1]") == http_url{"2001:db8::1", "80", "/"});
}

TEST_CASE("push target: Host header brackets IPv6 and omits port 80") {
  CHECK(parsed("http://example.com/x").host_header() == "example.com");
  CHECK(parsed("http://example.com:81/x").host_header() == "example.com:81");
  CHECK(parsed("http://[::1]:9000/").host_header() == "[::1]:9000");
  CHECK(parsed("http://[::1]/").host_header() == "[::1]");
}

TEST_CASE("push target: parse_http_url refusals") {
  CHECK(refused("https://example.com/") ==
        "only http:// push targets are supported; put a local proxy in front for https");
  CHECK(refused("HTTPS://example.com/").find("local proxy") != std::string::npos);
  CHECK(refused("ftp://example.com/").find("http://") != std::string::npos);
  CHECK(refused("example.com/hook").find("http://") != std::string::npos);
  CHECK(refused("").find("http://") != std::string::npos);
  CHECK(refused("http://").find("no host") != std::string::npos);
  CHECK(refused("http:///path").find("no host") != std::string::npos);
  CHECK(refused("http://:80/").find("no host") != std::string::npos);
  CHECK(refused("http://user:pw@example.com/").find("user information") != std::string::npos);
  CHECK(refused("http://user@example.com/").find("user information") != std::string::npos);
  for (const char* bad_port : {"http://h:0/", "http://h:65536/", "http://h:abc/", "http://h:-1/",
                               "http://h:+80/", "http://h:80x/", "http://h:99999999999/"}) {
    CHECK(refused(bad_port).find("port") != std::string::npos);
  }
  CHECK(refused("http://h:/").find("empty port") != std::string::npos);
  CHECK(refused("http://[::1/").find("IPv6") != std::string::npos);
  CHECK(refused("http://[]/").find("IPv6") != std::string::npos);
  CHECK(refused("http://[zz::1]/").find("IPv6") != std::string::npos);
  CHECK(refused("http://[::1]x/").find("IPv6") != std::string::npos);
  CHECK(refused("http://h/a b").find("space") != std::string::npos);
  CHECK(refused("http://h/a\r\nX-Evil: 1").find("control") != std::string::npos);
  CHECK(refused("http://h/#frag").find("fragment") != std::string::npos);
  CHECK(refused("http://ho$t/").find("host") != std::string::npos);
}

TEST_CASE("push target: JSON form round trip and defaults") {
  std::string why;
  auto t = push_target_from_json(json{{"push_url", "http://127.0.0.1:9/h"}}, why);
  REQUIRE(t.has_value());
  CHECK(t->url == "http://127.0.0.1:9/h");
  CHECK(t->timeout == std::chrono::milliseconds{10000});
  CHECK(t->concurrency == 64);

  push_target full{"http://h:1/x?y", std::chrono::milliseconds{600000}, 10000};
  const json j = delayq::server::to_json(full);
  CHECK(j == json{{"push_url", "http://h:1/x?y"}, {"timeout_ms", 600000}, {"concurrency", 10000}});
  auto back = push_target_from_json(j, why);
  REQUIRE(back.has_value());
  CHECK(*back == full);

  auto low = push_target_from_json(
      json{{"push_url", "http://h/"}, {"timeout_ms", 1}, {"concurrency", 1}}, why);
  REQUIRE(low.has_value());
  CHECK(low->timeout == std::chrono::milliseconds{1});
  CHECK(low->concurrency == 1);
}

TEST_CASE("push target: JSON form refusals name the field") {
  CHECK(refused_json(json::array()) == "the push target must be a JSON object");
  CHECK(refused_json(json::object()) == "push_url: required");
  CHECK(refused_json(json{{"timeout_ms", 5}}) == "push_url: required");
  CHECK(refused_json(json{{"push_url", 5}}) == "push_url: must be a string");
  CHECK(refused_json(json{{"push_url", "https://h/"}}) ==
        "push_url: only http:// push targets are supported; put a local proxy in front for https");
  CHECK(refused_json(json{{"push_url", "http://h/"}, {"push_ulr", "x"}}) ==
        "unknown field \"push_ulr\"");
  CHECK(refused_json(json{{"push_url", "http://h/"}, {"timeout_ms", "5"}}) ==
        "timeout_ms: must be an integer");
  CHECK(refused_json(json{{"push_url", "http://h/"}, {"timeout_ms", 1.5}}) ==
        "timeout_ms: must be an integer");
  CHECK(refused_json(json{{"push_url", "http://h/"}, {"timeout_ms", nullptr}}) ==
        "timeout_ms: must be an integer");
  for (const json& bad : {json(0), json(-1), json(600001), json(std::uint64_t{1} << 63)}) {
    CHECK(refused_json(json{{"push_url", "http://h/"}, {"timeout_ms", bad}}) ==
          "timeout_ms: must be between 1 and 600000");
  }
  for (const json& bad : {json(0), json(-5), json(10001)}) {
    CHECK(refused_json(json{{"push_url", "http://h/"}, {"concurrency", bad}}) ==
          "concurrency: must be between 1 and 10000");
  }
  CHECK(refused_json(json{{"push_url", "http://h/"}, {"concurrency", true}}) ==
        "concurrency: must be an integer");
}

TEST_CASE("push target: task_json and dump_json replace invalid UTF-8") {
  delayq::task t;
  t.id = "t-1";
  t.type = "mail.send";
  t.payload = std::string("ok\xff", 3) + std::string(1, '\0');
  t.due = delayq::from_epoch_ms(1700000000123);
  t.attempts = 4;
  const json j = delayq::server::task_json(t);
  const std::string text = delayq::server::dump_json(j);
  CHECK(text ==
        "{\"attempts\":4,\"due_ms\":1700000000123,\"id\":\"t-1\",\"payload\":"
        "\"ok\xEF\xBF\xBD\\u0000\","
        "\"priority\":0,\"signals\":0,\"trigger_count\":0,\"ttr_ms\":0,\"type\":\"mail.send\"}");
  CHECK_THROWS(j.dump());  // Why dump_json exists.
}
