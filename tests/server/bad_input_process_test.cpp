// delayq-server process tests: malformed and hostile requests (docs/server.md,
// "Errors"). Each gets its status and error name, and leaves the server
// serving and the stored tasks as they were.
#include <doctest/doctest.h>

#include "server_test_support.hpp"

namespace {

using namespace delayq::server_test;

struct bad_request_case {
  const char* what;
  http::verb method;
  std::string target;
  std::optional<std::string> body;  // sent as it is
  unsigned status;
  std::string error;         // the expected `error`
  std::string in_message{};  // text the message must contain, if any
};

// The task every bad request must leave alone, and the checks that it did.
struct sentinel {
  std::string id = unique_name("sentinel");
  std::string payload = "sentinel payload";
  std::int64_t due_ms = now_ms() + 3600000;
};

void check_unharmed(server_process& server, http_client& c, const sentinel& s) {
  REQUIRE_MESSAGE(!server.exited(), server.output_tail());
  auto h = c.get("/healthz");
  CHECK_MESSAGE(h.status == 200, h.describe());
  auto g = c.get(task_path(s.id));
  REQUIRE_MESSAGE(g.status == 200, g.describe());
  CHECK(g.body_json["payload"] == s.payload);
  CHECK(g.body_json["due_ms"] == s.due_ms);
  CHECK(g.body_json["state"] == "delayed");
  CHECK(g.body_json["attempts"] == 0);
}

std::string nested(std::size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

}  // namespace

TEST_CASE("server: bad requests get their error and harm nothing") {
  DELAYQ_FOR_EACH_STORE(kind);
  test_store store(kind);
  auto server = server_process::start(store);
  INFO(server->output_tail());
  http_client c(server->port());
  const sentinel s;
  auto r = c.post(
      "/v1/tasks",
      json{{"type", "sentinel"}, {"payload", s.payload}, {"due_ms", s.due_ms}, {"id", s.id}});
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  const std::string type = unique_name("bad");
  const auto task = [&](json extra) {
    json t{{"type", type}, {"delay_ms", 0}};
    for (auto& [k, v] : extra.items()) t[k] = v;
    return t.dump();
  };
  const std::string sentinel_path = task_path(s.id);
  using v = http::verb;

  const std::vector<bad_request_case> cases{
      // Not JSON, or not an object.
      {"invalid JSON", v::post, "/v1/tasks", "{\"type\": \"t\", delay_ms: 5", 400, "bad_request"},
      {"truncated JSON", v::post, "/v1/tasks", "{\"type\": \"t\", \"delay_ms\": 5", 400,
       "bad_request"},
      {"an array", v::post, "/v1/tasks", "[1, 2]", 400, "bad_request"},
      {"a string", v::post, "/v1/tasks", "\"task\"", 400, "bad_request"},
      {"empty body", v::post, "/v1/tasks", "", 400, "bad_request"},
      {"invalid UTF-8", v::post, "/v1/tasks",
       "{\"type\": \"t\", \"payload\": \"\xff\xfe\", \"delay_ms\": 0}", 400, "bad_request"},
      {"deeply nested JSON", v::post, "/v1/tasks", nested(100000), 400, "bad_request"},
      {"trailing garbage", v::post, "/v1/tasks", task(json::object()) + " {}", 400, "bad_request"},
      // Wrong types.
      {"delay_ms a string", v::post, "/v1/tasks", task({{"delay_ms", "soon"}}), 400, "bad_request"},
      {"type a number", v::post, "/v1/tasks", task({{"type", 5}}), 400, "bad_request"},
      {"payload an object", v::post, "/v1/tasks", task({{"payload", {{"a", 1}}}}), 400,
       "bad_request"},
      {"id a number", v::post, "/v1/tasks", task({{"id", 12}}), 400, "bad_request"},
      {"due_ms a bool", v::post, "/v1/tasks", json{{"type", type}, {"due_ms", true}}.dump(), 400,
       "bad_request"},
      // Unknown, missing, conflicting fields.
      {"unknown field", v::post, "/v1/tasks", task({{"dealy_ms", 5}}), 400, "bad_request",
       "dealy_ms"},
      {"missing type", v::post, "/v1/tasks", json{{"delay_ms", 0}}.dump(), 400, "bad_request"},
      {"no delay_ms nor due_ms", v::post, "/v1/tasks", json{{"type", type}}.dump(), 400,
       "bad_request"},
      {"delay_ms and due_ms", v::post, "/v1/tasks", task({{"due_ms", now_ms()}}), 400,
       "bad_request"},
      {"bad conflict", v::post, "/v1/tasks", task({{"conflict", "sometimes"}}), 400, "bad_request"},
      // The engine's checks.
      {"negative delay_ms", v::post, "/v1/tasks", task({{"delay_ms", -5}}), 400, "invalid_delay"},
      {"negative due_ms", v::post, "/v1/tasks", json{{"type", type}, {"due_ms", -1}}.dump(), 400,
       "invalid_delay"},
      {"due in 31 years", v::post, "/v1/tasks", task({{"delay_ms", 1000000000000LL}}), 400,
       "due_too_far"},
      {"type with a space", v::post, "/v1/tasks", task({{"type", "has space"}}), 400,
       "invalid_type"},
      {"empty type", v::post, "/v1/tasks", task({{"type", ""}}), 400, "invalid_type"},
      {"id with a space", v::post, "/v1/tasks", task({{"id", "a b"}}), 400, "invalid_id"},
      {"the sentinel's id again", v::post, "/v1/tasks", task({{"id", s.id}}), 409, "duplicate_id"},
      {"payload over 1 MiB", v::post, "/v1/tasks",
       task({{"payload", std::string((1u << 20) + 1, 'p')}}), 413, "payload_too_large"},
      // Reserve's limits.
      {"reserve max 0", v::post, "/v1/reserve", R"({"max": 0})", 400, "bad_request"},
      {"reserve max 1001", v::post, "/v1/reserve", R"({"max": 1001})", 400, "bad_request"},
      {"reserve wait_ms over 60000", v::post, "/v1/reserve", R"({"wait_ms": 60001})", 400,
       "bad_request"},
      {"reserve negative wait_ms", v::post, "/v1/reserve", R"({"wait_ms": -1})", 400,
       "bad_request"},
      {"reserve ttr_ms under 1000", v::post, "/v1/reserve", R"({"ttr_ms": 999})", 400,
       "bad_request"},
      {"reserve types not a list", v::post, "/v1/reserve", R"({"types": "a"})", 400, "bad_request"},
      {"reserve unknown field", v::post, "/v1/reserve", R"({"maxx": 1})", 400, "bad_request",
       "maxx"},
      // Leases.
      {"finish without a lease", v::post, sentinel_path + "/finish", "{}", 400, "bad_request"},
      {"finish with a lease never given", v::post, sentinel_path + "/finish",
       R"({"lease": "forged"})", 409, "stale_lease"},
      {"fail with a lease never given", v::post, sentinel_path + "/fail",
       R"({"lease": "forged", "error": "x"})", 409, "stale_lease"},
      {"touch with a lease never given", v::post, sentinel_path + "/touch",
       R"({"lease": "forged"})", 409, "stale_lease"},
      {"reschedule without a time", v::post, sentinel_path + "/reschedule", "{}", 400,
       "bad_request"},
      // Query strings.
      {"dead limit not a number", v::get, "/v1/dead?limit=abc", std::nullopt, 400, "bad_request"},
      {"dead negative offset", v::get, "/v1/dead?offset=-1", std::nullopt, 400, "bad_request"},
      // Unknown ids.
      {"get unknown id", v::get, task_path("no-such-id"), std::nullopt, 404, "not_found"},
      {"delete unknown id", v::delete_, task_path("no-such-id"), std::nullopt, 404, "not_found"},
      {"reschedule unknown id", v::post, task_path("no-such-id") + "/reschedule",
       R"({"delay_ms": 0})", 404, "not_found"},
      {"requeue unknown dead letter", v::post, "/v1/dead/no-such-id/requeue", "{}", 404,
       "not_found"},
      {"delete unknown dead letter", v::delete_, "/v1/dead/no-such-id", std::nullopt, 404,
       "not_found"},
      {"delete unknown type", v::delete_, "/v1/types/no-such-type", std::nullopt, 404, "not_found"},
      // Unknown paths.
      {"unknown /v1/ path", v::get, "/v1/nothing", std::nullopt, 404, "not_found"},
      {"unknown top path", v::get, "/nothing", std::nullopt, 404, "not_found"},
      {"unknown task action", v::post, sentinel_path + "/explode", "{}", 404, "not_found"},
      // GET / is the dashboard (web_process_test.cpp); unknown files are not.
      {"unknown dashboard file", v::get, "/ui/no-such-file.js", std::nullopt, 404, "not_found"},
      // Known paths, other methods.
      {"PUT /v1/tasks", v::put, "/v1/tasks", "{}", 405, "method_not_allowed"},
      {"GET /v1/tasks:batch", v::get, "/v1/tasks:batch", std::nullopt, 405, "method_not_allowed"},
      {"GET /v1/reserve", v::get, "/v1/reserve", std::nullopt, 405, "method_not_allowed"},
      {"PATCH a task", v::patch, sentinel_path, "{}", 405, "method_not_allowed"},
      {"GET finish", v::get, sentinel_path + "/finish", std::nullopt, 405, "method_not_allowed"},
      {"DELETE /v1/stats", v::delete_, "/v1/stats", std::nullopt, 405, "method_not_allowed"},
      {"POST /healthz", v::post, "/healthz", "{}", 405, "method_not_allowed"},
      {"POST /", v::post, "/", "{}", 405, "method_not_allowed"},
  };

  for (const auto& bc : cases) {
    INFO("case: ", bc.what, " (", http::to_string(bc.method), " ", bc.target.substr(0, 100), ")");
    auto a = c.request_text(bc.method, bc.target, bc.body);
    CHECK_MESSAGE(a.status == bc.status, a.describe());
    CHECK_MESSAGE(a.error() == bc.error, a.describe());
    CHECK_MESSAGE(!a.message().empty(), a.describe());
    CHECK(a.header("content-type").starts_with("application/json"));
    if (!bc.in_message.empty())
      CHECK_MESSAGE(a.message().find(bc.in_message) != std::string::npos, a.describe());
    check_unharmed(*server, c, s);
  }

  // Nothing was stored by any of them: only the sentinel is pending.
  auto st = c.get("/v1/stats");
  REQUIRE(st.status == 200);
  CHECK(find_number(st.body_json, "pending") == std::optional<double>(1));
  auto none = reserve(c, {}, 0, 1000);
  CHECK(reserved_tasks(none).empty());
}

TEST_CASE("server: a body over --max-body gets 413") {
  test_store store(store_kind::sqlite);
  auto server = server_process::start(store, {"--max-body", "1024"});
  INFO(server->output_tail());
  http_client c(server->port());
  const sentinel s;
  REQUIRE(
      c.post("/v1/tasks",
             json{{"type", "sentinel"}, {"payload", s.payload}, {"due_ms", s.due_ms}, {"id", s.id}})
          .status == 201);
  const std::string type = unique_name("big");
  // A valid task, only too long as a body.
  auto a = c.post("/v1/tasks",
                  json{{"type", type}, {"payload", std::string(2000, 'b')}, {"delay_ms", 0}});
  CHECK_MESSAGE(a.status == 413, a.describe());
  CHECK(a.error() == "payload_too_large");
  check_unharmed(*server, c, s);
  // Just under the limit is fine.
  a = c.post("/v1/tasks",
             json{{"type", type}, {"payload", std::string(900, 'b')}, {"delay_ms", 0}});
  CHECK_MESSAGE(a.status == 201, a.describe());
  check_unharmed(*server, c, s);
}

TEST_CASE("server: request headers over 8 KiB get 431") {
  test_store store(store_kind::sqlite);
  auto server = server_process::start(store);
  INFO(server->output_tail());
  const sentinel s;
  http_client c(server->port());
  REQUIRE(
      c.post("/v1/tasks",
             json{{"type", "sentinel"}, {"payload", s.payload}, {"due_ms", s.due_ms}, {"id", s.id}})
          .status == 201);
  raw_connection raw(server->port());
  raw.send(raw_request("GET", "/v1/stats", "", "X-Big: " + std::string(9000, 'h') + "\r\n"));
  auto a = raw.read_response();
  REQUIRE_MESSAGE(a.has_value(), "the server closed the connection without answering");
  CHECK_MESSAGE(a->status == 431, a->describe());
  CHECK(a->error() == "headers_too_large");
  check_unharmed(*server, c, s);
}

TEST_CASE("server: headers that never finish (slowloris) are answered 408 or closed") {
  test_store store(store_kind::sqlite);
  auto server = server_process::start(store);
  INFO(server->output_tail());
  const sentinel s;
  http_client c(server->port());
  REQUIRE(
      c.post("/v1/tasks",
             json{{"type", "sentinel"}, {"payload", s.payload}, {"due_ms", s.due_ms}, {"id", s.id}})
          .status == 201);

  std::vector<std::unique_ptr<raw_connection>> slow;
  for (int i = 0; i < 8; ++i) {
    slow.push_back(std::make_unique<raw_connection>(server->port()));
    // Half a header line, then nothing.
    slow.back()->send("POST /v1/tasks HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: aaaa");
  }
  // Meanwhile, everyone else is served.
  check_unharmed(*server, c, s);
  REQUIRE(add_task(c, unique_name("meanwhile"), "x", 3600000).status == 201);

  // The header timeout (10 s) ends each: a 408, or a close without an answer.
  for (auto& conn : slow) {
    auto a = conn->read_response();
    if (a) {
      CHECK_MESSAGE(a->status == 408, a->describe());
    } else {
      CHECK(!a.has_value());  // closed: what the contract allows
    }
  }
  check_unharmed(*server, c, s);
}

// docs/server.md, "Errors": "a keep-alive connection idle for 10 s is
// closed without an answer". One request answered with keep-alive, then
// nothing: the next read must see the server close the connection, not a
// 408 or any other answer (and not the test's guard: no close at all).
TEST_CASE("server: an idle keep-alive connection is closed without an answer") {
  test_store store(store_kind::sqlite);
  auto server = server_process::start(store);
  INFO(server->output_tail());
  raw_connection raw(server->port());
  raw.send(raw_request("GET", "/v1/stats", ""));
  auto first = raw.read_response();
  REQUIRE(first.has_value());
  CHECK_MESSAGE(first->status == 200, first->describe());
  REQUIRE(first->keep_alive);
  const auto idle = raw.read_response();
  CHECK_MESSAGE(!idle.has_value(),
                "an answer on an idle connection: ", idle ? idle->describe() : std::string());
  // The server goes on serving new connections.
  http_client c(server->port());
  CHECK(c.get("/v1/stats").status == 200);
}

TEST_CASE("server: a body that never arrives is answered 408 or closed") {
  test_store store(store_kind::sqlite);
  auto server = server_process::start(store);
  INFO(server->output_tail());
  const sentinel s;
  http_client c(server->port());
  REQUIRE(
      c.post("/v1/tasks",
             json{{"type", "sentinel"}, {"payload", s.payload}, {"due_ms", s.due_ms}, {"id", s.id}})
          .status == 201);
  raw_connection raw(server->port());
  // Complete headers announcing 200 bytes; 20 of them sent.
  std::string req = raw_request("POST", "/v1/tasks", std::string(200, ' '));
  req.resize(req.size() - 180);
  raw.send(req);
  check_unharmed(*server, c, s);
  auto a = raw.read_response();  // the body timeout is 30 s
  if (a) CHECK_MESSAGE(a->status == 408, a->describe());
  check_unharmed(*server, c, s);
  auto st = c.get("/v1/stats");
  REQUIRE(st.status == 200);
  CHECK(find_number(st.body_json, "pending") == std::optional<double>(1));
}

TEST_CASE("server: garbage that is not HTTP is refused, the server keeps serving") {
  test_store store(store_kind::sqlite);
  auto server = server_process::start(store);
  INFO(server->output_tail());
  const sentinel s;
  http_client c(server->port());
  REQUIRE(
      c.post("/v1/tasks",
             json{{"type", "sentinel"}, {"payload", s.payload}, {"due_ms", s.due_ms}, {"id", s.id}})
          .status == 201);
  for (const std::string& junk :
       {std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11),  // a TLS hello
        std::string("GET / HTTP/9.9\r\n\r\n"), std::string("NOT-A-METHOD\r\n\r\n"),
        std::string("POST /v1/tasks HTTP/1.1\r\nContent-Length: -5\r\n\r\n"),
        std::string("POST /v1/tasks HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")}) {
    raw_connection raw(server->port());
    raw.send(junk);
    auto a = raw.read_response();
    // An answer, if any, is an error; closing without one is fine too.
    if (a) CHECK_MESSAGE(a->status >= 400, a->describe());
    check_unharmed(*server, c, s);
  }
}
