// delayq-server process tests: faults (issue 12, "Bad input and faults"). A
// consumer that goes away during a long poll, SIGKILL and SIGTERM of the
// server with tasks reserved, and a Redis that cannot be reached.
#include <doctest/doctest.h>

#include <cstdio>
#include <future>
#include <set>

#include "server_test_support.hpp"

namespace {

using namespace delayq::server_test;

// Tasks acknowledged before a crash, to be found again after it.
struct acked_task {
  std::string id;
  std::string payload;
  std::int64_t due_ms = 0;
};

}  // namespace

TEST_CASE("server: a consumer that disconnects during a long poll loses no task") {
  DELAYQ_FOR_EACH_STORE(kind);
  test_store store(kind);
  auto server = server_process::start(store);
  INFO(server->output_tail());
  http_client c(server->port());

  for (const bool reset : {false, true}) {
    INFO("the consumer's socket is ", (reset ? "reset (RST)" : "closed (FIN)"));
    const std::string type = unique_name("gone");
    // The consumer asks for a task with a long wait and a short lease, then
    // goes away while it waits.
    raw_connection consumer(server->port());
    consumer.send(
        raw_request("POST", "/v1/reserve",
                    json{{"types", {type}}, {"wait_ms", 60000}, {"ttr_ms", 1000}}.dump()));
    REQUIRE(eventually([&] { return waiting_consumers(c) >= 1; }));
    consumer.close(reset);

    // A task becomes due after that, while the vanished consumer may still be
    // the oldest waiter. The server must not count that poll as an attempt:
    // the next consumer gets the task with attempts 0 (had it been leased to
    // the dead connection, its 1 s lease would expire and it would come back
    // with attempts 1).
    auto r = add_task(c, type, "not lost", 200);
    REQUIRE_MESSAGE(r.status == 201, r.describe());
    const std::string id = id_of(r);
    auto task = reserve_one(c, {type});
    REQUIRE(task.is_object());
    CHECK(task["id"] == id);
    CHECK(task["payload"] == "not lost");
    CHECK_MESSAGE(task["attempts"] == 0, "the vanished consumer's poll counted as an attempt");
    auto x = c.post(task_path(id) + "/finish", json{{"lease", task["lease"]}});
    CHECK_MESSAGE(x.status == 204, x.describe());
  }
  auto s = c.get("/v1/stats");
  REQUIRE(s.status == 200);
  CHECK(find_number(s.body_json, "leases_expired") == std::optional<double>(0));
}

TEST_CASE("server: a consumer that disconnects while holding leases loses nothing") {
  DELAYQ_FOR_EACH_STORE(kind);
  test_store store(kind);
  auto server = server_process::start(store);
  INFO(server->output_tail());
  http_client c(server->port());
  const std::string type = unique_name("holder");
  for (int i = 0; i < 3; ++i) REQUIRE(add_task(c, type, "held", 0).status == 201);
  std::set<std::string> held;
  {
    http_client consumer(server->port());
    while (held.size() < 3) {
      auto t = reserve_one(consumer, {type}, 1000);
      REQUIRE(t.is_object());
      held.insert(str(t, "id"));
    }
  }  // the consumer's connection closes with 3 leases held
  // Each comes back once its lease ends, as a failed attempt.
  std::set<std::string> again;
  while (again.size() < 3) {
    auto t = reserve_one(c, {type});
    REQUIRE(t.is_object());
    // 1 when the lease ran out; 0 if the server gave it back at the close.
    CHECK(t["attempts"].get<int>() <= 1);
    again.insert(str(t, "id"));
    CHECK(c.post(task_path(str(t, "id")) + "/finish", json{{"lease", t["lease"]}}).status == 204);
  }
  CHECK(again == held);
}

TEST_CASE(
    "server: SIGKILL loses no acknowledged task and reserved tasks come back after a restart") {
  DELAYQ_FOR_EACH_STORE(kind);
  test_store store(kind);
  const std::string type = unique_name("kill");
  std::vector<acked_task> waiting;  // delayed, must survive as they were
  std::set<std::string> reserved;   // reserved at the kill, must come back
  std::string finished;             // finished before the kill, must stay gone
  {
    auto server = server_process::start(store);
    INFO(server->output_tail());
    http_client c(server->port());
    for (int i = 0; i < 5; ++i) {
      acked_task t{"", "delayed " + std::to_string(i), now_ms() + 3600000 + i};
      auto r =
          c.post("/v1/tasks", json{{"type", type}, {"payload", t.payload}, {"due_ms", t.due_ms}});
      REQUIRE_MESSAGE(r.status == 201, r.describe());
      t.id = id_of(r);
      waiting.push_back(t);
    }
    json batch = json::array();
    for (int i = 0; i < 3; ++i)
      batch.push_back({{"type", type},
                       {"payload", "batched " + std::to_string(i)},
                       {"due_ms", now_ms() + 7200000}});
    auto b = c.post("/v1/tasks:batch", json{{"tasks", batch}});
    REQUIRE_MESSAGE(b.status == 201, b.describe());
    for (std::size_t i = 0; i < 3; ++i)
      waiting.push_back({b.body_json["ids"][i].get<std::string>(),
                         batch[i]["payload"].get<std::string>(),
                         batch[i]["due_ms"].get<std::int64_t>()});

    for (int i = 0; i < 4; ++i) REQUIRE(add_task(c, type, "due", 0).status == 201);
    std::vector<json> leased;
    while (leased.size() < 4) {
      auto t = reserve_one(c, {type}, 600000);  // a lease far longer than the test
      REQUIRE(t.is_object());
      leased.push_back(t);
    }
    finished = str(leased[0], "id");
    auto x = c.post(task_path(finished) + "/finish", json{{"lease", leased[0]["lease"]}});
    REQUIRE_MESSAGE(x.status == 204, x.describe());
    for (std::size_t i = 1; i < leased.size(); ++i) reserved.insert(str(leased[i], "id"));

    server->signal(SIGKILL);
    const int status = server->wait();
    CHECK(WIFSIGNALED(status));
  }

  auto server = server_process::start(store);
  INFO(server->output_tail());
  http_client c(server->port());
  for (const auto& t : waiting) {
    INFO("task ", t.id, " (", t.payload, ")");
    auto g = c.get(task_path(t.id));
    REQUIRE_MESSAGE(g.status == 200, g.describe());
    CHECK(g.body_json["payload"] == t.payload);
    CHECK(g.body_json["due_ms"] == t.due_ms);
    CHECK(g.body_json["state"] == "delayed");
  }
  CHECK(c.get(task_path(finished)).status == 404);
  std::set<std::string> again;
  while (again.size() < reserved.size()) {
    auto t = reserve_one(c, {type});
    REQUIRE(t.is_object());
    const std::string id = str(t, "id");
    CHECK_MESSAGE(reserved.count(id) == 1, "handed out after the restart: ", t.dump());
    CHECK(again.insert(id).second);
    CHECK(c.post(task_path(id) + "/finish", json{{"lease", t["lease"]}}).status == 204);
  }
  CHECK(again == reserved);
  // The finished one never comes back.
  auto none = reserve(c, {type}, 0, 100);
  REQUIRE(none.status == 200);
  CHECK(reserved_tasks(none).empty());
}

TEST_CASE("server: SIGTERM drains and exits 0 and acknowledged tasks survive") {
  DELAYQ_FOR_EACH_STORE(kind);
  test_store store(kind);
  const std::string type = unique_name("term");
  std::vector<acked_task> waiting;
  std::string reserved_id;
  {
    auto server = server_process::start(store);
    INFO(server->output_tail());
    http_client c(server->port());
    for (int i = 0; i < 3; ++i) {
      acked_task t{"", "kept " + std::to_string(i), now_ms() + 3600000};
      auto r =
          c.post("/v1/tasks", json{{"type", type}, {"payload", t.payload}, {"due_ms", t.due_ms}});
      REQUIRE_MESSAGE(r.status == 201, r.describe());
      t.id = id_of(r);
      waiting.push_back(t);
    }
    REQUIRE(add_task(c, type, "held at shutdown", 0).status == 201);
    auto held = reserve_one(c, {type}, 600000);
    REQUIRE(held.is_object());
    reserved_id = str(held, "id");

    // A consumer waits for another type while the server is told to stop:
    // its poll is answered (empty, or 503 draining), not dropped.
    const std::uint16_t port = server->port();
    const std::string idle_type = unique_name("idle");
    auto poll = std::async(std::launch::async, [port, idle_type] {
      http_client mine(port);
      return reserve(mine, {idle_type}, 60000, 1);
    });
    REQUIRE(eventually([&] { return waiting_consumers(c) >= 1; }));
    // `c` stays connected, idle: the drain must not wait for it.
    server->signal(SIGTERM);
    http_response answer;
    REQUIRE_NOTHROW(answer = poll.get());
    CHECK_MESSAGE((answer.status == 200 || answer.status == 503), answer.describe());
    if (answer.status == 200) CHECK(reserved_tasks(answer).empty());
    if (answer.status == 503) CHECK(answer.error() == "draining");
    const int status = server->wait();
    CHECK_MESSAGE((WIFEXITED(status) && WEXITSTATUS(status) == 0), describe_status(status));
  }

  auto server = server_process::start(store);
  INFO(server->output_tail());
  http_client c(server->port());
  for (const auto& t : waiting) {
    auto g = c.get(task_path(t.id));
    REQUIRE_MESSAGE(g.status == 200, g.describe());
    CHECK(g.body_json["payload"] == t.payload);
    CHECK(g.body_json["due_ms"] == t.due_ms);
  }
  // The reserved task was given back: delivered again.
  auto t = reserve_one(c, {type});
  REQUIRE(t.is_object());
  CHECK(t["id"] == reserved_id);
  CHECK(t["payload"] == "held at shutdown");
}

namespace {

// A redis-server of the test's own on `port`, data in `dir` (append-only file,
// fsync always, so a SIGKILL loses nothing acknowledged); returns once it
// accepts connections.
std::unique_ptr<server_process> start_redis(std::uint16_t port, const std::string& dir) {
  auto redis = std::make_unique<server_process>(
      std::vector<std::string>{"--port", std::to_string(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "yes", "--appendfsync", "always", "--dir", dir},
      "redis-server");
  if (!eventually([&] {
        return redis->exited() ||
               redis->output().find("Ready to accept connections") != std::string::npos;
      }) ||
      redis->exited())
    throw std::runtime_error("redis-server did not start:\n" + redis->output_tail());
  return redis;
}

}  // namespace

TEST_CASE("server: started on an unreachable Redis, healthz and writes answer 503, then recover") {
  const std::uint16_t port = unused_port();
  const std::string uri =
      "redis://127.0.0.1:" + std::to_string(port) + "?prefix=" + unique_name("down").substr(0, 60);
  // The server must come up and say the store is down, not exit.
  auto server = std::make_unique<server_process>(std::vector<std::string>{
      "--listen", "127.0.0.1:0", "--store", uri, "--token", test_token, "--tick", "10"});
  server->wait_listening();
  INFO(server->output_tail());
  http_client c(server->port());

  auto h = c.get("/healthz");
  CHECK_MESSAGE(h.status == 503, h.describe());
  CHECK(h.body_json.value("status", "") == "store_unavailable");
  auto r = add_task(c, unique_name("down"), "x", 0);
  CHECK_MESSAGE(r.status == 503, r.describe());
  const std::set<std::string> store_errors{"store_unavailable", "store_error", "outcome_unknown"};
  CHECK_MESSAGE(store_errors.count(r.error()) == 1, r.describe());

  // Redis comes up on that port: the server notices by itself.
  temp_dir redis_dir;
  auto redis = start_redis(port, redis_dir.path());
  CHECK(eventually([&] { return c.get("/healthz").status == 200; }));
  r = add_task(c, unique_name("up"), "x", 3600000);
  CHECK_MESSAGE(r.status == 201, r.describe());
  if (r.status == 201) CHECK(c.get(task_path(id_of(r))).status == 200);
}

TEST_CASE("server: Redis going away answers 503, and the server recovers by itself") {
  const std::uint16_t port = unused_port();
  temp_dir redis_dir;
  auto redis = start_redis(port, redis_dir.path());
  const std::string uri =
      "redis://127.0.0.1:" + std::to_string(port) + "?prefix=" + unique_name("away").substr(0, 60);
  auto server = std::make_unique<server_process>(std::vector<std::string>{
      "--listen", "127.0.0.1:0", "--store", uri, "--token", test_token, "--tick", "10"});
  server->wait_listening();
  INFO(server->output_tail());
  http_client c(server->port());
  const std::string type = unique_name("away");

  auto before = add_task(c, type, "acknowledged before", 3600000);
  REQUIRE_MESSAGE(before.status == 201, before.describe());
  CHECK(c.get("/healthz").status == 200);

  redis->kill_now();
  CHECK(eventually([&] { return c.get("/healthz").status == 503; }));
  auto h = c.get("/healthz");
  CHECK(h.body_json.value("status", "") == "store_unavailable");
  auto r = add_task(c, type, "while down", 3600000);
  CHECK_MESSAGE(r.status == 503, r.describe());
  const std::set<std::string> store_errors{"store_unavailable", "store_error", "outcome_unknown"};
  CHECK_MESSAGE(store_errors.count(r.error()) == 1, r.describe());
  CHECK(!server->exited());

  redis = start_redis(port, redis_dir.path());
  CHECK(eventually([&] { return c.get("/healthz").status == 200; }));
  r = add_task(c, type, "after", 3600000);
  CHECK_MESSAGE(r.status == 201, r.describe());
  auto g = c.get(task_path(id_of(before)));
  CHECK_MESSAGE(g.status == 200, g.describe());
  CHECK(g.body_json["payload"] == "acknowledged before");
}

TEST_CASE(
    "server: a finish the store cannot confirm is 503 not_durable_yet, reserves nothing, and "
    "lands once the store is back") {
  // docs/server.md, "Pull": the attempt ends, its lease with it, and the
  // engine writes the removal when the store is back. For one finish and
  // for POST /v1/tasks:finish, whose results say it per task.
  const std::uint16_t port = unused_port();
  temp_dir redis_dir;
  auto redis = start_redis(port, redis_dir.path());
  const std::string uri =
      "redis://127.0.0.1:" + std::to_string(port) + "?prefix=" + unique_name("nd").substr(0, 60);
  const std::vector<std::string> args{"--listen", "127.0.0.1:0", "--store", uri,
                                      "--token",  test_token,    "--tick",  "10"};
  const std::string type = unique_name("nd");
  std::vector<json> tasks;
  {
    auto server = std::make_unique<server_process>(args);
    server->wait_listening();
    INFO(server->output_tail());
    http_client c(server->port());
    // Five tasks, four reserved: one stays ready for a "next" to take (each
    // "next" below would wait 5 s for it).
    for (int i = 0; i < 5; ++i)
      REQUIRE(add_task(c, type, "p" + std::to_string(i), 0).status == 201);
    for (int round = 0; round < 10 && tasks.size() < 4; ++round)
      for (const json& t :
           reserved_tasks(reserve(c, {type}, 10000, 4 - static_cast<int>(tasks.size()))))
        tasks.push_back(t);
    REQUIRE(tasks.size() == 4);

    redis->kill_now();
    auto one = c.post(
        task_path(str(tasks[0], "id")) + "/finish",
        json{{"lease", str(tasks[0], "lease")}, {"next", {{"types", {type}}, {"wait_ms", 5000}}}});
    CHECK_MESSAGE(one.status == 503, one.describe());
    CHECK(one.error() == "not_durable_yet");
    json list = json::array();
    for (int i = 1; i < 3; ++i)
      list.push_back(json{{"id", str(tasks[i], "id")}, {"lease", str(tasks[i], "lease")}});
    auto batch =
        c.post("/v1/tasks:finish",
               json{{"tasks", list}, {"next", {{"types", {type}}, {"max", 5}, {"wait_ms", 5000}}}});
    REQUIRE_MESSAGE(batch.status == 200, batch.describe());
    for (int i = 0; i < 2; ++i) {
      CAPTURE(i);
      CHECK(batch.body_json["results"][i]["status"] == 503);
      CHECK(batch.body_json["results"][i]["error"] == "not_durable_yet");
    }
    CHECK(batch.body_json.contains("tasks"));
    CHECK(reserved_tasks(batch).empty());  // the fifth task stays ready
    // Ended: the leases are gone, a second finish is stale.
    auto again = c.post("/v1/tasks:finish", json{{"tasks", json::array({list[0]})}});
    CHECK(again.body_json["results"][0]["status"] == 409);

    redis = start_redis(port, redis_dir.path());
    // The kept writes land: nothing queued, nothing kept for a retry.
    CHECK(eventually([&] {
      auto st = c.get("/v1/stats");
      return st.status == 200 && st.body_json.value("writes_kept", 1) == 0 &&
             st.body_json.value("writes_queued", 1) == 0;
    }));
    server->signal(SIGKILL);  // only what was written survives
    CHECK(WIFSIGNALED(server->wait()));
  }
  auto server = std::make_unique<server_process>(args);
  server->wait_listening();
  INFO(server->output_tail());
  http_client c(server->port());
  for (int i = 0; i < 3; ++i) CHECK(c.get(task_path(str(tasks[i], "id"))).status == 404);
  // The unfinished one, delivered again, and the fifth, which no "next" took.
  std::set<std::string> left;
  for (int i = 0; i < 2; ++i) {
    auto t = reserve_one(c, {type});
    REQUIRE(t.is_object());
    left.insert(str(t, "id"));
  }
  CHECK(left.count(str(tasks[3], "id")) == 1);
  for (int i = 0; i < 3; ++i) CHECK(left.count(str(tasks[i], "id")) == 0);
  CHECK(reserved_tasks(reserve(c, {type}, 0)).empty());
}

namespace {

// A number from `redis-cli -p PORT INFO stats` ("total_commands_processed").
long long redis_info_number(std::uint16_t port, const std::string& key) {
  const std::string cmd = "redis-cli -p " + std::to_string(port) + " INFO stats";
  std::unique_ptr<FILE, int (*)(FILE*)> out(::popen(cmd.c_str(), "r"), ::pclose);
  REQUIRE(out != nullptr);
  std::string text;
  char buf[4096];
  while (const std::size_t n = std::fread(buf, 1, sizeof buf, out.get())) text.append(buf, n);
  const std::size_t at = text.find(key + ":");
  REQUIRE_MESSAGE(at != std::string::npos, text);
  return std::stoll(text.substr(at + key.size() + 1));
}

}  // namespace

TEST_CASE("server: healthz answers from a kept state, not a store read per call") {
  // A Redis of the test's own: no other test's commands in its counts.
  const std::uint16_t port = unused_port();
  temp_dir redis_dir;
  auto redis = start_redis(port, redis_dir.path());
  const std::string uri =
      "redis://127.0.0.1:" + std::to_string(port) + "?prefix=" + unique_name("hz").substr(0, 60);
  auto server = std::make_unique<server_process>(
      std::vector<std::string>{"--listen", "127.0.0.1:0", "--store", uri, "--tick", "10"});
  server->wait_listening();
  INFO(server->output_tail());
  http_client c(server->port());
  REQUIRE(c.get("/healthz").status == 200);

  // 500 health checks: the store sees the server's own probe (one a
  // second), not one read per check.
  constexpr int checks = 500;
  const long long before = redis_info_number(port, "total_commands_processed");
  for (int i = 0; i < checks; ++i) REQUIRE(c.get("/healthz").status == 200);
  const long long after = redis_info_number(port, "total_commands_processed");
  // One INFO of ours is counted too. A read per check would be 500; the
  // probe would need 50 s to make 50.
  CHECK_MESSAGE(after - before - 1 < checks / 10, "store commands: ", after - before - 1);
}

TEST_CASE("server: a store that stops answering stalls no I/O thread, and its error is no 404") {
  const std::uint16_t port = unused_port();
  temp_dir redis_dir;
  auto redis = start_redis(port, redis_dir.path());
  struct resume_redis {
    server_process& p;
    ~resume_redis() { p.signal(SIGCONT); }
  } resume{*redis};
  // A command timeout longer than the test: a stopped Redis holds every
  // read that reaches it until it resumes. --horizon: a GET of an id the
  // engine does not hold reads the store. One I/O thread: one such GET on
  // it would stall every connection.
  const std::string uri = "redis://127.0.0.1:" + std::to_string(port) +
                          "?command_timeout_ms=600000&prefix=" + unique_name("stall").substr(0, 50);
  auto server = std::make_unique<server_process>(
      std::vector<std::string>{"--listen", "127.0.0.1:0", "--store", uri, "--token", test_token,
                               "--tick", "10", "--horizon", "1", "--io-threads", "1"});
  server->wait_listening();
  INFO(server->output_tail());
  http_client c(server->port());
  REQUIRE(c.get("/v1/tasks/unknown-before").status == 404);

  redis->signal(SIGSTOP);
  std::vector<std::unique_ptr<raw_connection>> waiting;
  for (int i = 0; i < 3; ++i) {
    waiting.push_back(std::make_unique<raw_connection>(server->port()));
    waiting.back()->send(raw_request("GET", "/v1/tasks/unknown-" + std::to_string(i), ""));
  }
  // Served while those wait on the store (the client gives up after the
  // hang guard: a stalled I/O thread fails here).
  for (int i = 0; i < 3; ++i) {
    http_client fresh(server->port());
    auto s = fresh.get("/v1/stats");
    CHECK_MESSAGE(s.status == 200, s.describe());
    CHECK(fresh.get("/healthz").status > 0);
  }
  // docs/server.md, "Operations": a probe that has not come back for 3 s
  // reads as unhealthy; checked_ms_ago is the age of the last probe that
  // ended (the one before the store stopped), so past 3000.
  http_client health(server->port());
  CHECK(eventually([&] {
    auto h = health.get("/healthz");
    return h.status == 503 && h.body_json.value("status", "") == "store_unavailable" &&
           h.body_json.value("checked_ms_ago", std::int64_t{0}) > 3000;
  }));
  redis->signal(SIGCONT);
  for (auto& w : waiting) {
    auto r = w->read_response();
    REQUIRE(r.has_value());
    CHECK_MESSAGE(r->status == 404, r->describe());
  }

  // The store gone: the server cannot tell whether the task exists, and
  // says so (a 404 would tell a client its task is gone).
  redis->kill_now();
  auto r = c.get("/v1/tasks/unknown-after");
  CHECK_MESSAGE(r.status == 503, r.describe());
  const std::set<std::string> store_errors{"store_unavailable", "store_error", "outcome_unknown"};
  CHECK_MESSAGE(store_errors.count(r.error()) == 1, r.describe());
}
