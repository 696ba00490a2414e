// delayq-server process tests: count-triggered tasks (POST
// /v1/tasks/{id}/signal, "trigger_count"), a SIGKILL between two signals, and
// --capacity (429 type_full), on Redis and on SQLite (docs/server.md).
#include <doctest/doctest.h>

#include <csignal>

#include "server_test_support.hpp"

namespace {

using namespace delayq::server_test;

http_response add_counted(http_client& c, const std::string& type, const std::string& id,
                          std::int64_t trigger, std::int64_t delay_ms = 3600000) {
  return c.post("/v1/tasks", json{{"type", type},
                                  {"payload", "p"},
                                  {"delay_ms", delay_ms},
                                  {"id", id},
                                  {"trigger_count", trigger}});
}

http_response signal(http_client& c, const std::string& id, std::optional<json> body = {}) {
  return c.post(task_path(id) + "/signal", body ? *body : json::object());
}

}  // namespace

TEST_CASE("server: a count-triggered task counts signals and runs on the Nth") {
  DELAYQ_FOR_EACH_STORE(kind);
  test_store store(kind);
  auto server = server_process::start(store);
  INFO(server->output_tail());
  http_client c(server->port());
  const std::string type = unique_name("count");
  const std::string id = unique_name("join");
  auto a = add_counted(c, type, id, 3);
  REQUIRE_MESSAGE(a.status == 201, a.describe());

  auto g = c.get(task_path(id));
  REQUIRE(g.status == 200);
  CHECK(g.body_json["trigger_count"] == 3);
  CHECK(g.body_json["signals"] == 0);

  auto s = signal(c, id);  // n defaults to 1
  REQUIRE_MESSAGE(s.status == 200, s.describe());
  CHECK(s.body_json["id"] == id);
  CHECK(s.body_json["signals"] == 1);
  CHECK(s.body_json["trigger_count"] == 3);
  CHECK(s.body_json["triggered"] == false);
  CHECK(c.get(task_path(id)).body_json["signals"] == 1);
  CHECK(c.get(task_path(id)).body_json["state"] == "delayed");

  // Bad n: 400, nothing counted.
  for (const json& bad :
       {json{{"n", 0}}, json{{"n", -1}}, json{{"n", 1000001}}, json{{"n", "2"}}, json{{"m", 1}}}) {
    auto b = signal(c, id, bad);
    CHECK_MESSAGE(b.status == 400, bad.dump(), " ", b.describe());
  }
  CHECK(c.get(task_path(id)).body_json["signals"] == 1);

  s = signal(c, id, json{{"n", 2}});
  REQUIRE_MESSAGE(s.status == 200, s.describe());
  CHECK(s.body_json["signals"] == 3);
  CHECK(s.body_json["triggered"] == true);
  // Due now: a consumer gets it with the count it reached.
  auto t = reserve_one(c, {type});
  REQUIRE(t.is_object());
  CHECK(t["id"] == id);
  CHECK(t["signals"] == 3);
  CHECK(t["trigger_count"] == 3);
  // Held by the lease broker (reserved): the signal is refused, 409.
  auto late = signal(c, id);
  CHECK_MESSAGE(late.status == 409, late.describe());
  CHECK(late.error() == "already_triggered");
  REQUIRE(c.post(task_path(id) + "/finish", json{{"lease", t["lease"]}}).status == 204);
  // Finished: 404.
  auto gone = signal(c, id);
  CHECK_MESSAGE(gone.status == 404, gone.describe());
  CHECK(gone.error() == "not_found");

  // Fired by its deadline short of its count, and waiting for a consumer
  // (ready) or leased (reserved): held by the lease broker, 409.
  const std::string early = unique_name("deadline");
  REQUIRE(add_counted(c, type, early, 5, 0).status == 201);
  auto d = reserve_one(c, {type});
  REQUIRE(d.is_object());
  CHECK(d["id"] == early);
  CHECK(d["signals"] == 0);  // < trigger_count: the deadline fired it
  auto held = signal(c, early);
  CHECK_MESSAGE(held.status == 409, held.describe());
  CHECK(held.error() == "already_triggered");
  REQUIRE(c.post(task_path(early) + "/finish", json{{"lease", d["lease"]}}).status == 204);

  // A task without a trigger count: 409 not_count_triggered.
  const std::string plain = unique_name("plain");
  REQUIRE(add_task(c, type, "", 3600000, plain).status == 201);
  auto p = signal(c, plain);
  CHECK_MESSAGE(p.status == 409, p.describe());
  CHECK(p.error() == "not_count_triggered");
  // A bad trigger_count on add: 400.
  CHECK(add_counted(c, type, unique_name("neg"), -1).status == 400);
  CHECK(add_counted(c, type, unique_name("big"), 1000001).status == 400);
}

TEST_CASE("server: SIGKILL between two signals keeps the count, the next signal fires the task") {
  DELAYQ_FOR_EACH_STORE(kind);
  test_store store(kind);
  const std::string type = unique_name("crash");
  const std::string id = unique_name("kept");
  {
    auto server = server_process::start(store);
    INFO(server->output_tail());
    http_client c(server->port());
    REQUIRE(add_counted(c, type, id, 2).status == 201);
    auto s = signal(c, id);
    REQUIRE_MESSAGE(s.status == 200, s.describe());
    CHECK(s.body_json["signals"] == 1);
    server->signal(SIGKILL);  // no drain: only what was durable survives
    const int status = server->wait();
    CHECK(WIFSIGNALED(status));
  }
  auto server = server_process::start(store);
  INFO(server->output_tail());
  http_client c(server->port());
  auto g = c.get(task_path(id));
  REQUIRE_MESSAGE(g.status == 200, g.describe());
  CHECK(g.body_json["signals"] == 1);
  CHECK(g.body_json["trigger_count"] == 2);
  CHECK(g.body_json["state"] == "delayed");
  auto s = signal(c, id);
  REQUIRE_MESSAGE(s.status == 200, s.describe());
  CHECK(s.body_json["signals"] == 2);
  CHECK(s.body_json["triggered"] == true);
  auto t = reserve_one(c, {type});
  REQUIRE(t.is_object());
  CHECK(t["id"] == id);
  CHECK(t["signals"] == 2);
  CHECK(c.post(task_path(id) + "/finish", json{{"lease", t["lease"]}}).status == 204);
}

TEST_CASE("server: --capacity TYPE=N refuses the N+1th pending task with 429 type_full") {
  DELAYQ_FOR_EACH_STORE(kind);
  test_store store(kind);
  const std::string type = unique_name("topic");
  auto server = server_process::start(store, {"--capacity", type + "=1"});
  INFO(server->output_tail());
  http_client c(server->port());
  const std::string first = unique_name("one");
  REQUIRE(add_task(c, type, "", 3600000, first).status == 201);
  auto full = add_task(c, type, "", 3600000);
  CHECK_MESSAGE(full.status == 429, full.describe());
  CHECK(full.error() == "type_full");
  // A batch that would overfill it fails as a whole, naming the task.
  const std::string other = unique_name("other");
  auto b = c.post("/v1/tasks:batch",
                  json{{"tasks", json::array({json{{"type", other}, {"delay_ms", 3600000}},
                                              json{{"type", type}, {"delay_ms", 3600000}}})}});
  CHECK_MESSAGE(b.status == 429, b.describe());
  CHECK(b.message().find("tasks[1]") != std::string::npos);
  CHECK(c.get("/v1/upcoming?type=" + other).body_json["tasks"].empty());
  // Replacing the one job is allowed; once it left there is room again.
  auto r =
      c.post("/v1/tasks",
             json{{"type", type}, {"delay_ms", 7200000}, {"id", first}, {"conflict", "replace"}});
  CHECK_MESSAGE(r.status == 201, r.describe());
  REQUIRE(c.del(task_path(first)).status == 204);
  CHECK(add_task(c, type, "", 3600000).status == 201);
}

TEST_CASE("server: a bad --capacity is a usage error (exit 2)") {
  test_store store(store_kind::sqlite);
  for (const std::string bad :
       {"topic", "=3", "topic=0", "topic=x", "topic=-1", "topic=1x", "bad type=1", "t/x=2"}) {
    server_process p({"--listen", "127.0.0.1:0", "--store", store.uri(), "--capacity", bad});
    const int status = p.wait();
    CHECK_MESSAGE((WIFEXITED(status) && WEXITSTATUS(status) == 2), bad, ": ",
                  describe_status(status));
  }
  // The same type twice is ambiguous (which limit?): refused, not first-wins.
  server_process twice({"--listen", "127.0.0.1:0", "--store", store.uri(), "--capacity", "topic=1",
                        "--capacity", "topic=2"});
  const int status = twice.wait();
  CHECK_MESSAGE((WIFEXITED(status) && WEXITSTATUS(status) == 2), describe_status(status));
}
