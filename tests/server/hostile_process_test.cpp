// delayq-server process tests: what a hostile client, or a web page open in
// the operator's browser, can no longer do (docs/server.md, "Security").
// Each case fails when its defence is taken out.
#include <doctest/doctest.h>

#include <regex>
#include <set>
#include <sstream>

#include "../support/prometheus_text.hpp"
#include "push_receiver.hpp"
#include "server_test_support.hpp"

namespace {

using namespace delayq::server_test;
namespace prom = delayq_test::prom;

// `delayq-server --list-routes`: every route of the router's table.
std::vector<std::pair<std::string, std::string>> listed_routes() {
  server_process lister({"--list-routes"});
  const int status = lister.wait();
  REQUIRE_MESSAGE(WIFEXITED(status), lister.output());
  REQUIRE_MESSAGE(WEXITSTATUS(status) == 0, lister.output());
  lister.stderr_after_exit();  // both pipes closed: stdout is whole
  const std::string out = lister.output();
  const std::string head = "--- stdout:\n";
  REQUIRE(out.starts_with(head));
  std::istringstream lines(out.substr(head.size(), out.find("\n--- stderr:") - head.size()));
  std::vector<std::pair<std::string, std::string>> routes;
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    const std::size_t sp = line.find(' ');
    REQUIRE_MESSAGE(sp != std::string::npos, line);
    routes.emplace_back(line.substr(0, sp), line.substr(sp + 1));
  }
  return routes;
}

// A route's pattern with every `{name}` segment replaced by `value`.
std::string fill(const std::string& pattern, const std::string& value) {
  return std::regex_replace(pattern, std::regex(R"(\{[a-z]+\})"), value);
}

std::optional<http::verb> verb_of(const std::string& method) {
  const auto v = http::string_to_verb(method);
  if (v == http::verb::unknown) return std::nullopt;
  return v;
}

// A server on loopback without a token (the default), on `store`.
std::unique_ptr<server_process> start_open(const test_store& store,
                                           std::vector<std::string> extra = {}) {
  std::vector<std::string> args{"--listen", "127.0.0.1:0", "--store", store.uri(), "--tick", "10"};
  args.insert(args.end(), extra.begin(), extra.end());
  auto p = std::make_unique<server_process>(std::move(args));
  p->wait_listening();
  return p;
}

// PUT /v1/types/TYPE with `url` as its push target.
http_response put_push_url(http_client& c, const std::string& type, const std::string& url) {
  return c.put("/v1/types/" + path_escape(type), json{{"push_url", url}});
}

// The error of `id`'s dead letter, or nullopt.
std::optional<std::string> dead_error(http_client& c, const std::string& id) {
  auto d = c.get("/v1/dead?limit=1000");
  if (d.status != 200 || !d.body_json.contains("dead")) return std::nullopt;
  for (const auto& l : d.body_json["dead"])
    if (str(l, "id") == id) return str(l, "error");
  return std::nullopt;
}

}  // namespace

TEST_CASE("server: push targets outside --push-allow are refused at PUT, loopback by default") {
  test_store store(store_kind::sqlite);
  auto server = server_process::start(store);
  INFO(server->output_tail());
  http_client c(server->port());
  const std::string self = "http://127.0.0.1:" + std::to_string(server->port()) + "/v1/tasks";
  for (const std::string& url :
       {std::string("http://169.254.169.254/latest/meta-data/"), std::string("http://[fe80::1]/"),
        std::string("http://[::ffff:169.254.169.254]/"), std::string("http://0.0.0.0:8080/"),
        std::string("http://10.1.2.3/hook"), std::string("http://192.168.1.1:22/"), self,
        std::string("http://localhost:") + std::to_string(server->port()) + "/",
        std::string("http://no-such-host.invalid/")}) {
    INFO("push_url ", url);
    auto a = put_push_url(c, unique_name("ssrf"), url);
    CHECK_MESSAGE(a.status == 400, a.describe());
    CHECK(a.error() == "push_target_refused");
  }
  CHECK(c.get("/v1/types").body_json["types"].empty());
  push_receiver receiver([](const push_call&, std::size_t) { return 200u; });
  auto ok = put_push_url(c, unique_name("local"), receiver.url());
  CHECK_MESSAGE(ok.status == 204, ok.describe());
  // A flag is checked the same way: the server does not start.
  server_process bad({"--listen", "127.0.0.1:0", "--store", store.uri(), "--token", test_token,
                      "--push", "meta=http://169.254.169.254/"});
  const int status = bad.wait();
  CHECK_MESSAGE((WIFEXITED(status) && WEXITSTATUS(status) == 2), bad.output());
  CHECK(bad.stderr_after_exit().find("link-local") != std::string::npos);
}

TEST_CASE(
    "server: --push-allow names what pushes may reach, and a name is checked where it resolves") {
  test_store store(store_kind::sqlite);
  push_receiver receiver([](const push_call&, std::size_t) { return 200u; });
  const std::string receiver_port = std::to_string(receiver.port());
  auto server = server_process::start(
      store, {"--push-allow", "10.0.0.0/8", "--push-allow", "localhost", "--retry-max", "1"});
  INFO(server->output_tail());
  http_client c(server->port());
  CHECK(put_push_url(c, unique_name("ten"), "http://10.1.2.3:9/hook").status == 204);
  // Loopback is no longer allowed by default once rules are given...
  auto a = put_push_url(c, unique_name("lo"), receiver.url());
  CHECK_MESSAGE(a.status == 400, a.describe());
  // ...but the name localhost is, wherever it resolves, except to this server.
  const std::string type = unique_name("named");
  a = put_push_url(c, type, "http://localhost:" + receiver_port + "/hook");
  CHECK_MESSAGE(a.status == 204, a.describe());
  a = put_push_url(c, unique_name("me"),
                   "http://localhost:" + std::to_string(server->port()) + "/v1/tasks");
  CHECK_MESSAGE(a.status == 400, a.describe());
  CHECK(a.message().find("this server") != std::string::npos);
  auto r = add_task(c, type, "p", 0);
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  CHECK(eventually([&] { return receiver.calls().size() == 1; }));
}

TEST_CASE("server: a stored push target the policy no longer allows is refused at push time") {
  test_store store(store_kind::sqlite);
  push_receiver receiver([](const push_call&, std::size_t) { return 200u; });
  const std::string type = unique_name("stale");
  {
    auto server = server_process::start(store);  // loopback allowed
    INFO(server->output_tail());
    http_client c(server->port());
    REQUIRE(put_push_url(c, type, receiver.url()).status == 204);
    c.close();
    server->signal(SIGTERM);
    const int status = server->wait();
    REQUIRE_MESSAGE((WIFEXITED(status) && WEXITSTATUS(status) == 0), describe_status(status));
  }
  auto server = server_process::start(store, {"--push-allow", "10.0.0.0/8", "--retry-max", "1"});
  INFO(server->output_tail());
  http_client c(server->port());
  auto r = add_task(c, type, "p", 0);
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  std::optional<std::string> error;
  CHECK(eventually([&] { return (error = dead_error(c, id_of(r))).has_value(); }));
  REQUIRE(error.has_value());
  CHECK_MESSAGE(error->find("refused") != std::string::npos, *error);
  CHECK(receiver.calls().empty());
}

TEST_CASE("server: every route the router lists needs the token, but the dashboard and probes") {
  const auto routes = listed_routes();
  REQUIRE(routes.size() >= 20);
  test_store store(store_kind::sqlite);
  auto server = server_process::start(store);  // --token test_token
  INFO(server->output_tail());
  http_client good(server->port());
  http_client none(server->port(), "");
  http_client wrong(server->port(), test_token + "x");
  const std::string type = unique_name("auth");
  auto r = add_task(good, type, "secret", 3600000);
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  const std::string id = id_of(r);

  // The open ones are named here: a route that joins them must be added on
  // purpose, not by a slip in the table.
  const std::set<std::pair<std::string, std::string>> open{
      {"GET", "/healthz"}, {"GET", "/metrics"}, {"GET", "/"}, {"GET", "/ui/{file}"}};
  std::set<std::pair<std::string, std::string>> seen_open;
  std::size_t guarded = 0;
  for (const auto& [method, pattern] : routes) {
    INFO(method, " ", pattern);
    const auto verb = verb_of(method);
    REQUIRE(verb.has_value());
    if (!pattern.starts_with("/v1/")) {
      CHECK(open.count({method, pattern}) == 1);
      seen_open.insert({method, pattern});
      auto a = none.request(*verb, fill(pattern, "app.js"));
      CHECK_MESSAGE(a.status != 401, a.describe());
      continue;
    }
    ++guarded;
    const std::string target = fill(pattern, id);
    const bool has_body = *verb == http::verb::post || *verb == http::verb::put;
    const std::optional<json> body =
        has_body ? std::optional<json>(json{{"type", type}, {"delay_ms", 0}}) : std::nullopt;
    for (auto* c : {&none, &wrong}) {
      INFO((c == &none ? "no token" : "wrong token"));
      auto a = c->request(*verb, target, body);
      CHECK_MESSAGE(a.status == 401, a.describe());
      CHECK(a.error() == "unauthorized");
    }
  }
  CHECK(seen_open == open);
  CHECK(guarded >= 16);
  // The router decodes the path: an escaped /v1/ is the API too.
  auto escaped = none.get("/%76%31/stats");
  CHECK_MESSAGE(escaped.status == 401, escaped.describe());
  auto unknown = none.get("/v1/no-such-path");
  CHECK_MESSAGE(unknown.status == 401, unknown.describe());
  // Other schemes and malformed headers are refused too.
  for (const std::string& header :
       std::vector<std::string>{"Basic " + test_token, "Bearer", "bearer" + test_token,
                                "Bearer  " + test_token + " extra"}) {
    INFO("Authorization: ", header);
    auto a = none.request_text(http::verb::get, "/v1/stats", std::nullopt, "",
                               {{"Authorization", header}});
    CHECK_MESSAGE(a.status == 401, a.describe());
  }

  // Nothing the refused requests asked for happened.
  auto g = good.get(task_path(id));
  REQUIRE_MESSAGE(g.status == 200, g.describe());
  CHECK(g.body_json["payload"] == "secret");
  auto s = good.get("/v1/stats");
  REQUIRE(s.status == 200);
  CHECK(find_number(s.body_json, "pending") == std::optional<double>(1));
}

TEST_CASE(
    "server: a body that is not application/json is refused 415: a page's post stores nothing") {
  test_store store(store_kind::sqlite);
  auto server = start_open(store);
  INFO(server->output_tail());
  http_client c(server->port(), "");
  const std::string type = unique_name("xsite");
  const std::string body = json{{"type", type}, {"delay_ms", 3600000}}.dump();
  // What fetch(..., {mode: 'no-cors', body}) sends from a page on another
  // site: text/plain (and the page's Origin, refused by itself without a
  // token: the next case); a form sends its own types.
  for (const std::string& content_type :
       {std::string("text/plain;charset=UTF-8"), std::string("application/x-www-form-urlencoded"),
        std::string("multipart/form-data; boundary=x"), std::string("application/jsonx")}) {
    INFO("Content-Type: ", content_type);
    auto a =
        c.request_text(http::verb::post, "/v1/tasks", body, "", {{"Content-Type", content_type}});
    CHECK_MESSAGE(a.status == 415, a.describe());
    CHECK(a.error() == "unsupported_media_type");
  }
  // No Content-Type at all.
  raw_connection raw(server->port());
  raw.send("POST /v1/tasks HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body);
  auto bare = raw.read_response();
  REQUIRE(bare.has_value());
  CHECK_MESSAGE(bare->status == 415, bare->describe());
  CHECK(find_number(c.get("/v1/stats").body_json, "pending") == std::optional<double>(0));

  // JSON's own type, with a parameter and in another case, is accepted.
  auto ok = c.request_text(http::verb::post, "/v1/tasks", body, "",
                           {{"Content-Type", "Application/JSON; charset=utf-8"}});
  CHECK_MESSAGE(ok.status == 201, ok.describe());
  CHECK(find_number(c.get("/v1/stats").body_json, "pending") == std::optional<double>(1));
}

TEST_CASE("server: without a token, a request a page of another site sends is refused 403") {
  test_store store(store_kind::sqlite);
  auto server = start_open(store);
  INFO(server->output_tail());
  const std::string own = "http://127.0.0.1:" + std::to_string(server->port());
  http_client c(server->port(), "");
  const std::string type = unique_name("origin");
  REQUIRE(add_task(c, type, "p", 0).status == 201);
  // A form with no fields, or fetch(..., {method: 'POST', mode: 'no-cors'}):
  // no body, so no type to check, but the browser names the page.
  for (const std::string& origin :
       std::vector<std::string>{"http://evil.example", "null", "https://127.0.0.1.evil.example",
                                "http://evil.example:" + std::to_string(server->port())}) {
    INFO("Origin: ", origin);
    raw_connection raw(server->port());
    raw.send("POST /v1/reserve HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(server->port()) +
             "\r\nOrigin: " + origin +
             "\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 0\r\n\r\n");
    auto a = raw.read_response();
    REQUIRE(a.has_value());
    CHECK_MESSAGE(a->status == 403, a->describe());
    CHECK(a->error() == "forbidden_origin");
  }
  // The task was not reserved: a request from the server's own page gets it.
  auto mine = c.request_text(http::verb::post, "/v1/reserve",
                             json{{"types", json::array({type})}, {"wait_ms", 30000}}.dump(), "",
                             {{"Origin", own}});
  REQUIRE_MESSAGE(mine.status == 200, mine.describe());
  CHECK(reserved_tasks(mine).size() == 1);
}

TEST_CASE("server: without a token, a Host that does not name the server is refused 403") {
  test_store store(store_kind::sqlite);
  auto server = start_open(store, {"--allowed-host", "Delayq.Internal"});
  INFO(server->output_tail());
  const std::string port = std::to_string(server->port());
  http_client c(server->port(), "");
  // A page whose name was rebound to 127.0.0.1 sends its own name.
  for (const std::string target : {"/v1/stats", "/", "/healthz", "/metrics"}) {
    for (const std::string& host :
         std::vector<std::string>{"evil.example:" + port, "evil.example", "127.0.0.1.evil.example",
                                  "localhost.evil.example:" + port, ""}) {
      INFO(target, " Host: '", host, "'");
      auto a = c.request_text(http::verb::get, target, std::nullopt, "", {{"Host", host}});
      CHECK_MESSAGE(a.status == 403, a.describe());
      CHECK(a.error() == "forbidden_host");
    }
  }
  for (const std::string& host :
       std::vector<std::string>{"127.0.0.1:" + port, "localhost:" + port, "LOCALHOST",
                                "delayq.internal:" + port, "[::1]:" + port}) {
    INFO("Host: ", host);
    auto a = c.request_text(http::verb::get, "/v1/stats", std::nullopt, "", {{"Host", host}});
    CHECK_MESSAGE(a.status == 200, a.describe());
  }
  // An HTTP/1.0 request without a Host says nothing of where it was meant for.
  raw_connection raw(server->port());
  raw.send("GET /v1/stats HTTP/1.0\r\n\r\n");
  auto a = raw.read_response();
  REQUIRE(a.has_value());
  CHECK_MESSAGE(a->status == 403, a->describe());
}

TEST_CASE("server: with a token, any Host is served (a page never has the token)") {
  test_store store(store_kind::sqlite);
  auto server = server_process::start(store);
  INFO(server->output_tail());
  http_client c(server->port());
  auto a = c.request_text(http::verb::get, "/v1/stats", std::nullopt, std::nullopt,
                          {{"Host", "delayq.example.com"}});
  CHECK_MESSAGE(a.status == 200, a.describe());
}

TEST_CASE("server: a request without the token is refused before its body is read") {
  test_store store(store_kind::sqlite);
  auto server = server_process::start(store);
  INFO(server->output_tail());
  const std::string head =
      "POST /v1/tasks HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
      "Content-Length: 8000000\r\n\r\n";
  {
    // Headers only: a server that read the body first would wait for it and
    // answer 408 when the body timeout passed.
    raw_connection raw(server->port());
    raw.send(head);
    auto a = raw.read_response();
    REQUIRE(a.has_value());
    CHECK_MESSAGE(a->status == 401, a->describe());
    CHECK_FALSE(a->keep_alive);
    CHECK_FALSE(raw.read_response().has_value());  // then it closes
  }
  {
    // Some of the body on the way: the answer still arrives whole.
    raw_connection raw(server->port());
    raw.send(head + std::string(64 << 10, 'x'));
    auto a = raw.read_response();
    REQUIRE(a.has_value());
    CHECK_MESSAGE(a->status == 401, a->describe());
  }
  // A wrong token is refused the same way.
  raw_connection raw(server->port());
  raw.send(
      "POST /v1/tasks HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer nope\r\n"
      "Content-Type: application/json\r\nContent-Length: 8000000\r\n\r\n");
  auto a = raw.read_response();
  REQUIRE(a.has_value());
  CHECK_MESSAGE(a->status == 401, a->describe());
  http_client c(server->port());
  CHECK(find_number(c.get("/v1/stats").body_json, "pending") == std::optional<double>(0));
}

TEST_CASE("server: past --max-connections a connection is closed at once, and counted") {
  test_store store(store_kind::sqlite);
  auto server = server_process::start(store, {"--max-connections", "3"});
  INFO(server->output_tail());
  // Three kept-alive connections, each known to the server (it answered).
  std::vector<std::unique_ptr<http_client>> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(std::make_unique<http_client>(server->port()));
    auto a = held.back()->get("/healthz");
    REQUIRE_MESSAGE(a.status == 200, a.describe());
  }
  raw_connection fourth(server->port());
  fourth.send(raw_request("GET", "/healthz", ""));
  CHECK_FALSE(fourth.read_response().has_value());
  fourth.close();

  auto m = held[0]->get("/metrics");
  REQUIRE_MESSAGE(m.status == 200, m.describe());
  const prom::exposition e = prom::parse(m.body);
  CHECK(e.value("delayq_http_connections_refused_total", {}) == std::optional<double>(1));
  CHECK(e.value("delayq_http_connections", {}) == std::optional<double>(3));
  // One closed, one more fits, once the server has seen the close (asked
  // over a connection it holds already).
  held.pop_back();
  const auto give_up = std::chrono::steady_clock::now() + hang_guard;
  for (;;) {
    auto now = held[0]->get("/metrics");
    REQUIRE_MESSAGE(now.status == 200, now.describe());
    if (prom::parse(now.body).value("delayq_http_connections", {}) == std::optional<double>(2))
      break;
    REQUIRE(std::chrono::steady_clock::now() < give_up);
  }
  http_client again(server->port());
  CHECK(again.get("/healthz").status == 200);
}

TEST_CASE("server: lists a client sends are capped with a 400") {
  test_store store(store_kind::sqlite);
  auto server = server_process::start(store);
  INFO(server->output_tail());
  http_client c(server->port());
  std::vector<std::string> many;
  for (int i = 0; i < 101; ++i) many.push_back("t" + std::to_string(i));
  auto r = reserve(c, many, 0);
  CHECK_MESSAGE(r.status == 400, r.describe());
  many.pop_back();
  auto fine = reserve(c, many, 0);
  CHECK_MESSAGE(fine.status == 200, fine.describe());

  auto deep = c.get("/v1/dead?offset=18446744073709550000&limit=1000");
  CHECK_MESSAGE(deep.status == 400, deep.describe());
  CHECK(c.get("/v1/dead?offset=10001&limit=1").status == 400);
  CHECK(c.get("/v1/dead?offset=10000&limit=1000").status == 200);
}

TEST_CASE("server: leases carry 128 random bits") {
  test_store store(store_kind::sqlite);
  auto server = server_process::start(store);
  INFO(server->output_tail());
  http_client c(server->port());
  const std::string type = unique_name("lease");
  for (int i = 0; i < 8; ++i) REQUIRE(add_task(c, type, "p", 0).status == 201);
  std::set<std::string> randoms;
  const std::regex shape("([0-9a-f]{32})-[0-9a-f]+");
  for (int got = 0; got < 8;) {
    auto r = reserve(c, {type}, 30000, 8);
    REQUIRE_MESSAGE(r.status == 200, r.describe());
    for (const auto& t : reserved_tasks(r)) {
      const std::string lease = str(t, "lease");
      std::smatch m;
      REQUIRE_MESSAGE(std::regex_match(lease, m, shape), lease);
      randoms.insert(m[1]);
      ++got;
    }
  }
  CHECK(randoms.size() == 8);
}
