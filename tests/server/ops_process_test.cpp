// delayq-server process tests: operations (stats, health, metrics) and
// authentication (docs/server.md, "Running it" and "Operations").
#include <doctest/doctest.h>

#include <limits>
#include <regex>
#include <set>

#include "server_test_support.hpp"

namespace {

using namespace delayq::server_test;

// One sample of the Prometheus text format.
struct sample {
  std::string name;
  std::string labels;
  double value = 0;
};

// Parses the Prometheus text exposition format line by line; every line must
// be empty, a comment (`# ...`, with `# HELP name text` and `# TYPE name
// kind` checked), or a sample `name{labels} value [timestamp]`. Returns the
// samples; adds a message to `errors` for every line that is none of these.
std::vector<sample> parse_prometheus(const std::string& text, std::vector<std::string>& errors,
                                     std::set<std::string>& typed) {
  static const std::regex name_re(R"([a-zA-Z_:][a-zA-Z0-9_:]*)");
  static const std::regex help_re(R"(# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .*)");
  static const std::regex type_re(
      R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped))");
  // name, optional {label="value",...} (values with \\ \" \n escapes), value,
  // optional integer timestamp.
  static const std::regex sample_re(
      R"re(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*")(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*")*,?\}|\{\})? ([^ ]+)( -?[0-9]+)?)re");
  std::vector<sample> out;
  std::size_t start = 0;
  int line_no = 0;
  while (start < text.size()) {
    auto end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    ++line_no;
    if (line.empty()) continue;
    std::smatch m;
    if (line[0] == '#') {
      if (line.starts_with("# HELP ") && !std::regex_match(line, help_re))
        errors.push_back("line " + std::to_string(line_no) + ": bad HELP: " + line);
      if (line.starts_with("# TYPE ")) {
        if (std::regex_match(line, m, type_re))
          typed.insert(m[1]);
        else
          errors.push_back("line " + std::to_string(line_no) + ": bad TYPE: " + line);
      }
      continue;
    }
    if (!std::regex_match(line, m, sample_re)) {
      errors.push_back("line " + std::to_string(line_no) + ": not a sample: " + line);
      continue;
    }
    sample s{m[1], m[2], 0};
    const std::string v = m[3];
    if (v == "+Inf" || v == "Inf") {
      s.value = std::numeric_limits<double>::infinity();
    } else if (v == "-Inf") {
      s.value = -std::numeric_limits<double>::infinity();
    } else if (v == "NaN") {
      s.value = std::numeric_limits<double>::quiet_NaN();
    } else {
      std::size_t used = 0;
      try {
        s.value = std::stod(v, &used);
      } catch (...) {
        used = 0;
      }
      if (used != v.size()) {
        errors.push_back("line " + std::to_string(line_no) + ": bad value: " + line);
        continue;
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

TEST_CASE("server: healthz answers ok without a token") {
  DELAYQ_FOR_EACH_STORE(kind);
  test_store store(kind);
  auto server = server_process::start(store);
  INFO(server->output_tail());
  http_client anonymous(server->port(), "");
  auto h = anonymous.get("/healthz");
  CHECK_MESSAGE(h.status == 200, h.describe());
  CHECK(h.body_json.value("status", "") == "ok");
  CHECK(h.header("content-type").starts_with("application/json"));

  // docs/server.md, "Operations": `checked_ms_ago`, since the probe that
  // decided the answer ended. An ok answer is never older than the 3 s
  // after which a probe that has not come back reads as unhealthy.
  const auto checked = [](const http_response& r) -> std::int64_t {
    REQUIRE_MESSAGE(r.body_json.contains("checked_ms_ago"), r.describe());
    const json& n = r.body_json["checked_ms_ago"];
    REQUIRE_MESSAGE(n.is_number_integer(), r.describe());
    return n.get<std::int64_t>();
  };
  const std::int64_t first = checked(h);
  CHECK(first >= 0);
  CHECK(first <= 3000);
  // The probe runs again (once a second): a later answer is decided by a
  // newer probe, so its age drops below one seen before it.
  std::int64_t last = first;
  CHECK(eventually([&] {
    auto again = anonymous.get("/healthz");
    if (again.status != 200) return false;
    const std::int64_t age = checked(again);
    CHECK(age >= 0);
    CHECK(age <= 3000);
    const bool newer = age < last;
    last = age;
    return newer;
  }));
}

TEST_CASE("server: stats count tasks, reservations and consumers") {
  DELAYQ_FOR_EACH_STORE(kind);
  test_store store(kind);
  auto server = server_process::start(store);
  INFO(server->output_tail());
  http_client c(server->port());
  const std::string type = unique_name("stats");

  for (int i = 0; i < 3; ++i) REQUIRE(add_task(c, type, "s", 3600000).status == 201);
  const std::string ready_id = id_of(add_task(c, type, "r", 0));
  REQUIRE(!ready_id.empty());
  auto task = reserve_one(c, {type});
  REQUIRE(task.is_object());

  auto s = c.get("/v1/stats");
  REQUIRE_MESSAGE(s.status == 200, s.describe());
  REQUIRE(s.body_json.is_object());
  INFO("stats: ", s.body);
  for (const char* key :
       {"pending", "ready", "running", "scheduled", "fired", "succeeded", "failed", "died", "dead",
        "reserved", "waiting_consumers", "leases_expired"}) {
    INFO("key: ", key);
    CHECK(find_number(s.body_json, key).has_value());
  }
  CHECK(find_number(s.body_json, "pending") == std::optional<double>(4));
  CHECK(find_number(s.body_json, "scheduled") == std::optional<double>(4));
  CHECK(find_number(s.body_json, "reserved") == std::optional<double>(1));
  CHECK(find_number(s.body_json, "waiting_consumers") == std::optional<double>(0));
  // Some counter about pushes is there ("pushes..."), whatever its name.
  bool has_push_counter = false;
  std::function<void(const json&)> walk = [&](const json& j) {
    if (!j.is_object()) return;
    for (const auto& [k, v] : j.items()) {
      if (k.starts_with("push")) has_push_counter = true;
      walk(v);
    }
  };
  walk(s.body_json);
  CHECK(has_push_counter);
}

TEST_CASE("server: metrics are valid Prometheus text") {
  DELAYQ_FOR_EACH_STORE(kind);
  test_store store(kind);
  auto server = server_process::start(store);
  INFO(server->output_tail());
  http_client c(server->port());
  const std::string type = unique_name("metrics");
  // Something to count: a task done, one failed once, one waiting.
  REQUIRE(add_task(c, type, "m", 0).status == 201);
  REQUIRE(add_task(c, type, "m", 3600000).status == 201);
  auto task = reserve_one(c, {type});
  REQUIRE(task.is_object());
  REQUIRE(
      c.post(task_path(task["id"].get<std::string>()) + "/finish", json{{"lease", task["lease"]}})
          .status == 204);

  http_client anonymous(server->port(), "");
  auto m = anonymous.get("/metrics");
  REQUIRE_MESSAGE(m.status == 200, m.describe());
  CHECK(m.header("content-type").starts_with("text/plain"));
  std::vector<std::string> errors;
  std::set<std::string> typed;
  const auto samples = parse_prometheus(m.body, errors, typed);
  INFO("metrics:\n", m.body.substr(0, 6000));
  for (const auto& e : errors) FAIL_CHECK(e);
  CHECK(errors.empty());
  REQUIRE(!samples.empty());
  // Every sample's family was declared with # TYPE (a histogram's or a
  // summary's _bucket/_sum/_count belong to theirs).
  for (const auto& s : samples) {
    std::string family = s.name;
    for (const char* suffix : {"_bucket", "_sum", "_count"})
      if (!typed.count(family) && family.ends_with(suffix))
        family.resize(family.size() - std::strlen(suffix));
    CHECK_MESSAGE(typed.count(family) == 1, "no # TYPE for ", s.name);
  }
  // At least what the issue asks for, by name.
  for (const char* word :
       {"pending", "ready", "reserved", "fired", "succeeded", "failed", "died", "lateness"}) {
    const bool found = std::any_of(samples.begin(), samples.end(), [&](const sample& s) {
      return s.name.find(word) != std::string::npos;
    });
    CHECK_MESSAGE(found, "no metric named after ", word);
  }
  // The counts agree with what happened: some `succeeded` sample is 1 and
  // some `pending` sample is 1.
  auto some = [&](const char* word, double v) {
    return std::any_of(samples.begin(), samples.end(), [&](const sample& s) {
      return s.name.find(word) != std::string::npos && s.value == v;
    });
  };
  CHECK(some("succeeded", 1));
  CHECK(some("pending", 1));
}

TEST_CASE("server: no token is needed without --token on loopback") {
  test_store store(store_kind::sqlite);
  server_process server({"--listen", "127.0.0.1:0", "--store", store.uri(), "--tick", "10"});
  server.wait_listening();
  INFO(server.output_tail());
  http_client anonymous(server.port(), "");
  auto r = add_task(anonymous, unique_name("open"), "x", 1000);
  CHECK_MESSAGE(r.status == 201, r.describe());
}

TEST_CASE("server: refuses a non-loopback address without a token") {
  test_store store(store_kind::sqlite);
  server_process server({"--listen", "0.0.0.0:0", "--store", store.uri(), "--tick", "10"});
  const int status = server.wait();
  const std::string err = server.stderr_after_exit();
  INFO(server.output_tail());
  CHECK_MESSAGE((WIFEXITED(status) && WEXITSTATUS(status) == 2), describe_status(status));
  CHECK(!err.empty());
  // It never said it listened.
  CHECK(server.output().find("listening on") == std::string::npos);
}

TEST_CASE(
    "server: --cluster flags are checked, and a store holding unsharded tasks stops it at start") {
  test_store store(store_kind::redis);
  SUBCASE("a bad --lease is a usage error") {
    for (const char* bad : {"5", "5x", "100ms", "11m", "-1s"}) {
      CAPTURE(bad);
      server_process server(
          {"--listen", "127.0.0.1:0", "--store", store.uri(), "--cluster", "--lease", bad});
      const int status = server.wait();
      const std::string err = server.stderr_after_exit();
      CHECK_MESSAGE((WIFEXITED(status) && WEXITSTATUS(status) != 0), describe_status(status));
      CHECK(err.find("--lease") != std::string::npos);
    }
  }
  SUBCASE("--shards without --cluster is a usage error") {
    server_process server({"--listen", "127.0.0.1:0", "--store", store.uri(), "--shards", "8"});
    const int status = server.wait();
    CHECK_MESSAGE((WIFEXITED(status) && WEXITSTATUS(status) != 0), describe_status(status));
    CHECK(server.stderr_after_exit().find("--cluster") != std::string::npos);
  }
  SUBCASE("a store with unsharded tasks: refused at start, naming the migration") {
    {
      // A server without --cluster leaves a task in the unsharded layout
      // (stored once answered 201, so the SIGKILL at the end loses nothing).
      auto plain = server_process::start(store);
      http_client c(plain->port());
      auto r = add_task(c, "t", "x", 3'600'000);
      REQUIRE_MESSAGE(r.status == 201, r.describe());
    }
    server_process server({"--listen", "127.0.0.1:0", "--store", store.uri(), "--cluster",
                           "--shards", "8", "--lease", "500ms", "--instance", "srv-a"});
    const int status = server.wait();
    const std::string err = server.stderr_after_exit();
    INFO(server.output_tail());
    CHECK_MESSAGE((WIFEXITED(status) && WEXITSTATUS(status) == 1), describe_status(status));
    CHECK(err.find("holds an unsharded task set (1 task and 0 dead letters") != std::string::npos);
    CHECK(err.find("delayqctl migrate-shards --store '") != std::string::npos);
  }
}

TEST_CASE("server: two --cluster servers share the shards, each id has one owner") {
  test_store store(store_kind::redis);
  const std::string uri = store.uri() + "&shards=8";
  const auto start = [&](const char* name) {
    auto p = std::make_unique<server_process>(std::vector<std::string>{
        "--listen", "127.0.0.1:0", "--store", uri, "--token", test_token, "--tick", "10",
        "--cluster", "--shards", "8", "--lease", "2s", "--instance", name});
    p->wait_listening();
    return p;
  };
  auto a = start("srv-a");
  auto b = start("srv-b");
  http_client ca(a->port()), cb(b->port());
  const auto held = [](http_client& c) {
    auto r = c.get("/v1/stats");
    return r.status == 200 ? r.body_json.value("shards_held", 0) : -1;
  };
  // Both hold some, and every shard is held: from then on nothing moves.
  REQUIRE(eventually([&] {
    const int ha = held(ca), hb = held(cb);
    return ha > 0 && hb > 0 && ha + hb == 8;
  }));
  for (int k = 0; k < 16; ++k) {
    const std::string id = "probe-" + std::to_string(k);
    CAPTURE(id);
    auto ra = ca.del(task_path(id));
    auto rb = cb.del(task_path(id));
    // Exactly one owner. Both answer 404 (no such task): the other instance
    // forwards the call to the owner, whose answer comes back naming it in
    // X-Delayq-Instance; the owner's own answer names no other instance.
    const std::string both = ra.describe() + " / " + rb.describe();
    CHECK_MESSAGE(ra.status == 404, both);
    CHECK_MESSAGE(rb.status == 404, both);
    const bool a_forwarded = ra.header("x-delayq-instance") == "srv-b";
    const bool b_forwarded = rb.header("x-delayq-instance") == "srv-a";
    CHECK_MESSAGE(a_forwarded != b_forwarded, both, " / a says ", ra.header("x-delayq-instance"),
                  ", b says ", rb.header("x-delayq-instance"));
  }
}
