// The dashboard's files as the server serves them (docs/server.md,
// "Dashboard"): built into the binary, byte for byte the files of
// server/web/, without the token, with their types and no-cache; the API
// keeps its token. The page itself is tested in a browser (tests/dashboard).
#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "server_test_support.hpp"

namespace {

using namespace delayq::server_test;

std::string source_file(const std::string& name) {
  std::ifstream in(std::string(DELAYQ_WEB_DIR) + "/" + name, std::ios::binary);
  REQUIRE_MESSAGE(in, "cannot read server/web/" << name);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The dashboard's Content-Security-Policy as docs/server.md states it: only
// the server's own scripts, styles and API, no inline script, no framing.
// Directives are read one by one, so an added source (another origin,
// 'unsafe-inline') fails, not only a missing directive.
void check_policy(const std::string& policy) {
  INFO("Content-Security-Policy: " << policy);
  std::map<std::string, std::string> directives;
  std::istringstream in(policy);
  for (std::string part; std::getline(in, part, ';');) {
    std::istringstream words(part);
    std::string name, source, sources;
    if (!(words >> name)) continue;
    while (words >> source) sources += (sources.empty() ? "" : " ") + source;
    CHECK_MESSAGE(directives.emplace(name, sources).second, "directive twice: ", name);
  }
  CHECK(directives["default-src"] == "'none'");  // nothing not named below
  CHECK(directives["script-src"] == "'self'");   // no inline script, no other origin
  CHECK(directives["style-src"] == "'self'");
  CHECK(directives["connect-src"] == "'self'");  // the API, on this server only
  CHECK(directives["frame-ancestors"] == "'none'");
  for (const auto& [name, sources] : directives) {
    INFO(name << " " << sources);
    for (const char* loose : {"unsafe", "*", "http:", "https:"})
      CHECK(sources.find(loose) == std::string::npos);
  }
}

}  // namespace

TEST_CASE("dashboard files: served from the binary without the token, the API keeps it") {
  test_store store(store_kind::sqlite);
  auto server = server_process::start(store);
  http_client c(server->port(), /*token=*/"");

  struct expected {
    std::string target, file, type;
  };
  for (const expected& e : {expected{"/", "index.html", "text/html; charset=utf-8"},
                            expected{"/ui/index.html", "index.html", "text/html; charset=utf-8"},
                            expected{"/ui/app.js", "app.js", "text/javascript; charset=utf-8"},
                            expected{"/ui/style.css", "style.css", "text/css; charset=utf-8"}}) {
    INFO("GET " << e.target);
    auto r = c.get(e.target);
    REQUIRE_MESSAGE(r.status == 200, r.describe());
    CHECK(r.header("content-type") == e.type);
    CHECK(r.header("cache-control") == "no-cache");
    check_policy(r.header("content-security-policy"));
    CHECK(r.body == source_file(e.file));
  }

  // Unknown files: 404 (with the token: a path outside the dashboard's
  // own shape, /ui/FILE, needs it like the API does).
  for (const std::string target :
       {"/ui/nope.js", "/ui/", "/ui/a/app.js", "/ui/..%2Fapp.js", "/index.html", "/ui"}) {
    INFO("GET " << target);
    auto r = c.request(http::verb::get, target, std::nullopt, test_token);
    CHECK_MESSAGE(r.status == 404, r.describe());
    CHECK(r.error() == "not_found");
  }
  for (const std::string target : {"/ui/nope.js", "/ui/..%2Fapp.js"}) {
    INFO("GET " << target << " without the token");
    CHECK(c.get(target).status == 404);
  }
  for (const std::string target : {"/ui/", "/ui/a/app.js", "/index.html", "/ui"}) {
    INFO("GET " << target << " without the token");
    CHECK(c.get(target).status == 401);
  }

  for (auto m : {http::verb::post, http::verb::put, http::verb::delete_}) {
    for (const std::string target : {"/", "/ui/app.js"}) {
      INFO(http::to_string(m) << " " << target);
      auto r = c.request(m, target);
      CHECK_MESSAGE(r.status == 405, r.describe());
      CHECK(r.error() == "method_not_allowed");
    }
  }

  // The page holds no data; the API it calls still wants the token.
  CHECK(c.get("/v1/stats").status == 401);
  CHECK(c.request(http::verb::get, "/v1/stats", std::nullopt, test_token).status == 200);
}
