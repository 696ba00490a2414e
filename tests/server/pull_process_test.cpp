// delayq-server process tests: consumers that pull (docs/server.md, "Pull:
// reserve, finish, fail, touch" and "Dead letters"), on Redis and on SQLite.
//
// The default retry policy applies (3 attempts, full-jitter backoff from 1 s),
// so a task dies after two retries that wait up to 1 s and 2 s; the dead
// letter test shortens the backoff with --retry-base.
#include <doctest/doctest.h>

#include <future>
#include <set>

#include "server_test_support.hpp"

namespace {

using namespace delayq::server_test;

struct pull_fixture {
  explicit pull_fixture(store_kind kind, std::vector<std::string> extra = {})
      : store(kind),
        server(server_process::start(store, std::move(extra))),
        client(server->port()) {}
  test_store store;
  std::unique_ptr<server_process> server;
  http_client client;
};

http_response finish(http_client& c, const std::string& id, const std::string& lease) {
  return c.post(task_path(id) + "/finish", json{{"lease", lease}});
}

http_response fail(http_client& c, const std::string& id, const std::string& lease,
                   const std::string& error) {
  return c.post(task_path(id) + "/fail", json{{"lease", lease}, {"error", error}});
}

// Reserves `id` (the only task of `type`) and fails it until it is a dead
// letter: max_attempts (3) attempts. Returns false when a step went wrong.
bool fail_until_dead(http_client& c, const std::string& type, const std::string& id) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto task = reserve_one(c, {type});
    if (!task.is_object() || str(task, "id") != id || task["attempts"] != attempt) return false;
    if (fail(c, id, str(task, "lease"), "boom " + std::to_string(attempt)).status != 204)
      return false;
  }
  return true;
}

}  // namespace

TEST_CASE("server: reserve long-polls until a task is due") {
  DELAYQ_FOR_EACH_STORE(kind);
  pull_fixture f(kind);
  INFO(f.server->output_tail());
  auto& c = f.client;
  const std::string type = unique_name("poll");

  // The consumer waits first, on its own connection; the task is added
  // afterwards, due a little later. The poll must answer with it, long
  // before its 60 s wait is over, and never before the task was due.
  const std::uint16_t port = f.server->port();
  auto consumer = std::async(std::launch::async, [port, type] {
    http_client mine(port);
    auto r = reserve(mine, {type}, 60000, 1);
    return std::make_pair(r, now_ms());
  });
  // Give the poll no head start assumption: the task is due 300 ms after
  // being added, whether the poll arrived first or not.
  auto r = c.post("/v1/tasks", json{{"type", type}, {"payload", "p"}, {"delay_ms", 300}});
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  const std::string id = id_of(r);
  const auto [answer, answered_at] = consumer.get();
  REQUIRE_MESSAGE(answer.status == 200, answer.describe());
  auto tasks = reserved_tasks(answer);
  REQUIRE_MESSAGE(tasks.size() == 1, answer.describe());
  const auto& t = tasks[0];
  CHECK(t["id"] == id);
  CHECK(t["type"] == type);
  CHECK(t["payload"] == "p");
  CHECK(t["attempts"] == 0);
  CHECK(!str(t, "lease").empty());
  REQUIRE(t["due_ms"].is_number_integer());
  CHECK(answered_at >= t["due_ms"].get<std::int64_t>());
  CHECK(task_state(c, id) == "reserved");
}

TEST_CASE("server: reserve answers an empty list after wait_ms") {
  DELAYQ_FOR_EACH_STORE(kind);
  pull_fixture f(kind);
  INFO(f.server->output_tail());
  auto& c = f.client;
  const std::string type = unique_name("empty");
  // A task of another type is ready: a reserve for `type` must not take it.
  auto r = add_task(c, unique_name("other"), "x", 0);
  REQUIRE_MESSAGE(r.status == 201, r.describe());

  const auto start = std::chrono::steady_clock::now();
  auto res = reserve(c, {type}, 300, 5);
  const auto waited = std::chrono::steady_clock::now() - start;
  REQUIRE_MESSAGE(res.status == 200, res.describe());
  REQUIRE(res.body_json["tasks"].is_array());
  CHECK(res.body_json["tasks"].empty());
  // The answer cannot come before the wait is over (a lower bound only).
  CHECK(waited >= std::chrono::milliseconds(300));

  // wait_ms 0 (and absent) answers at once, also empty.
  res = c.post("/v1/reserve", json{{"types", {type}}});
  REQUIRE_MESSAGE(res.status == 200, res.describe());
  CHECK(res.body_json["tasks"] == json::array());
}

TEST_CASE("server: requests pipelined behind a long poll are answered after it, in order") {
  // A long poll's connection is watched for a hang-up while it waits (a
  // read of its own); the answer ends the watch, and the next request is
  // read once both are done. Each way the watch can end: with the next
  // request's bytes (sent while the poll waits), or cancelled by the answer
  // (the next request came with the poll, or comes after its answer).
  DELAYQ_FOR_EACH_STORE(kind);
  pull_fixture f(kind);
  INFO(f.server->output_tail());
  auto& c = f.client;
  const std::string type = unique_name("piped");
  raw_connection conn(f.server->port());
  const auto poll = [&](int wait_ms) {
    return raw_request("POST", "/v1/reserve", json{{"types", {type}}, {"wait_ms", wait_ms}}.dump());
  };

  // 1. Nothing ready: the poll waits 300 ms; a health check comes with it.
  conn.send(poll(300) + raw_request("GET", "/healthz", ""));
  auto a = conn.read_response();
  REQUIRE(a.has_value());
  CHECK_MESSAGE(a->status == 200, a->describe());
  REQUIRE(a->body_json.contains("tasks"));
  CHECK(a->body_json["tasks"].empty());
  auto b = conn.read_response();
  REQUIRE(b.has_value());
  CHECK_MESSAGE(b->status == 200, b->describe());
  CHECK_FALSE(b->body_json.contains("tasks"));

  // 2. A task ready: the poll is answered at once, while its watch reads;
  // the task's own GET comes with it and sees it reserved.
  auto r = add_task(c, type, "p", 0);
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  const std::string id = id_of(r);
  conn.send(poll(5000) + raw_request("GET", task_path(id), ""));
  a = conn.read_response();
  REQUIRE(a.has_value());
  REQUIRE_MESSAGE(a->status == 200, a->describe());
  REQUIRE(a->body_json["tasks"].size() == 1);
  CHECK(a->body_json["tasks"][0]["id"] == id);
  const std::string lease = str(a->body_json["tasks"][0], "lease");
  b = conn.read_response();
  REQUIRE(b.has_value());
  CHECK_MESSAGE(b->status == 200, b->describe());
  CHECK(b->body_json["state"] == "reserved");

  // 3. A poll that waits, and the next request sent while it does: the
  // watch ends with those bytes. The task added then answers the poll.
  conn.send(poll(30000));
  REQUIRE(eventually([&] { return waiting_consumers(c) >= 1; }));
  conn.send(raw_request("POST", task_path(id) + "/finish", json{{"lease", lease}}.dump()));
  r = add_task(c, type, "q", 0);
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  a = conn.read_response();
  REQUIRE(a.has_value());
  REQUIRE_MESSAGE(a->status == 200, a->describe());
  REQUIRE(a->body_json["tasks"].size() == 1);
  CHECK(a->body_json["tasks"][0]["id"] == id_of(r));
  b = conn.read_response();
  REQUIRE(b.has_value());
  CHECK_MESSAGE(b->status == 204, b->describe());

  // And the connection goes on serving.
  conn.send(raw_request("GET", "/healthz", ""));
  b = conn.read_response();
  REQUIRE(b.has_value());
  CHECK(b->status == 200);
}

TEST_CASE("server: reserve hands out at most max tasks, of the types asked") {
  DELAYQ_FOR_EACH_STORE(kind);
  pull_fixture f(kind);
  INFO(f.server->output_tail());
  auto& c = f.client;
  const std::string a = unique_name("ta"), b = unique_name("tb");

  std::vector<std::string> ids_a, ids_b;
  for (int i = 0; i < 5; ++i) {
    auto r = add_task(c, a, "a" + std::to_string(i), 0);
    REQUIRE_MESSAGE(r.status == 201, r.describe());
    ids_a.push_back(id_of(r));
  }
  for (int i = 0; i < 2; ++i) {
    auto r = add_task(c, b, "b" + std::to_string(i), 0);
    REQUIRE_MESSAGE(r.status == 201, r.describe());
    ids_b.push_back(id_of(r));
  }
  // All 7 must be offered to consumers before the counts below are exact:
  // GET says "ready" both for a due task the engine has not dispatched yet
  // and for one waiting for a consumer, so wait for the broker's count of
  // tasks it holds for consumers (the engine's count of attempts started
  // goes up before the attempt reaches the broker).
  REQUIRE(eventually([&] {
    auto s = c.get("/v1/stats");
    return s.status == 200 &&
           find_number(s.body_json, "ready_for_consumers") == std::optional<double>(7);
  }));
  for (const auto& id : ids_a) CHECK(task_state(c, id) == "ready");
  for (const auto& id : ids_b) CHECK(task_state(c, id) == "ready");

  // Only type b, max 10: exactly the 2 of b.
  auto r = reserve(c, {b}, 0, 10);
  REQUIRE_MESSAGE(r.status == 200, r.describe());
  auto tasks = reserved_tasks(r);
  CHECK(tasks.size() == 2);
  for (const auto& t : tasks) CHECK(t["type"] == b);

  // Type a, max 3, then the 2 left.
  r = reserve(c, {a}, 0, 3);
  REQUIRE_MESSAGE(r.status == 200, r.describe());
  tasks = reserved_tasks(r);
  CHECK(tasks.size() == 3);
  std::set<std::string> seen;
  for (const auto& t : tasks) {
    CHECK(t["type"] == a);
    seen.insert(str(t, "id"));
  }
  // Any type (no `types`): the rest of a.
  r = c.post("/v1/reserve", json{{"max", 1000}});
  REQUIRE_MESSAGE(r.status == 200, r.describe());
  tasks = reserved_tasks(r);
  CHECK(tasks.size() == 2);
  for (const auto& t : tasks) seen.insert(str(t, "id"));
  CHECK(seen == std::set<std::string>(ids_a.begin(), ids_a.end()));
  r = reserve(c, {}, 0, 10);
  CHECK(reserved_tasks(r).empty());
}

TEST_CASE("server: finish removes a reserved task") {
  DELAYQ_FOR_EACH_STORE(kind);
  pull_fixture f(kind);
  INFO(f.server->output_tail());
  auto& c = f.client;
  const std::string type = unique_name("fin");
  auto r = add_task(c, type, "work", 0);
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  const std::string id = id_of(r);

  auto task = reserve_one(c, {type});
  REQUIRE(task.is_object());
  const std::string lease = str(task, "lease");
  REQUIRE(!lease.empty());

  // A lease that is not the task's: 409, and the task is still reserved.
  auto x = finish(c, id, lease + "x");
  CHECK_MESSAGE(x.status == 409, x.describe());
  CHECK(x.error() == "stale_lease");
  CHECK(task_state(c, id) == "reserved");

  x = finish(c, id, lease);
  CHECK_MESSAGE(x.status == 204, x.describe());
  CHECK(x.body.empty());
  auto g = c.get(task_path(id));
  CHECK_MESSAGE(g.status == 404, g.describe());
  // Finishing again: the lease ended.
  x = finish(c, id, lease);
  CHECK_MESSAGE((x.status == 409 || x.status == 404), x.describe());
  auto none = reserve(c, {type}, 0, 10);
  CHECK(reserved_tasks(none).empty());
}

TEST_CASE("server: fail retries with attempts+1, then makes a dead letter") {
  DELAYQ_FOR_EACH_STORE(kind);
  pull_fixture f(kind);
  INFO(f.server->output_tail());
  auto& c = f.client;
  const std::string type = unique_name("fail");
  auto r = add_task(c, type, "doomed", 0);
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  const std::string id = id_of(r);

  for (int attempt = 0; attempt < 3; ++attempt) {
    INFO("attempt ", attempt + 1);
    auto task = reserve_one(c, {type});
    REQUIRE(task.is_object());
    CHECK(task["id"] == id);
    CHECK(task["attempts"] == attempt);
    CHECK(task["payload"] == "doomed");
    auto x = fail(c, id, str(task, "lease"), "boom " + std::to_string(attempt));
    REQUIRE_MESSAGE(x.status == 204, x.describe());
    // The lease is gone with the attempt.
    x = fail(c, id, str(task, "lease"), "again");
    CHECK_MESSAGE(x.status == 409, x.describe());
    CHECK(x.error() == "stale_lease");
    if (attempt < 2) {
      // Waiting for its retry: still known, one more attempt counted.
      auto g = c.get(task_path(id));
      REQUIRE_MESSAGE(g.status == 200, g.describe());
      CHECK(g.body_json["attempts"] == attempt + 1);
      CHECK((g.body_json["state"] == "delayed" || g.body_json["state"] == "ready"));
    }
  }
  // The third failure made it a dead letter, durably, before the 204.
  CHECK(c.get(task_path(id)).status == 404);
  auto d = c.get("/v1/dead");
  REQUIRE_MESSAGE(d.status == 200, d.describe());
  REQUIRE(d.body_json["dead"].is_array());
  REQUIRE(d.body_json["dead"].size() == 1);
  const auto& letter = d.body_json["dead"][0];
  CHECK(letter["id"] == id);
  CHECK(letter["type"] == type);
  CHECK(letter["payload"] == "doomed");
  CHECK(letter["attempts"] == 3);
  CHECK(str(letter, "error").find("boom 2") != std::string::npos);
  CHECK(letter["died_ms"].is_number_integer());
  CHECK(letter["due_ms"].is_number_integer());
  CHECK(d.body_json["total"] == 1);
  // Not handed out any more.
  CHECK(reserved_tasks(reserve(c, {type}, 0, 10)).empty());
}

TEST_CASE("server: touch extends a lease") {
  DELAYQ_FOR_EACH_STORE(kind);
  pull_fixture f(kind);
  INFO(f.server->output_tail());
  auto& c = f.client;
  const std::string type = unique_name("touch");
  auto r = add_task(c, type, "long job", 0);
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  const std::string id = id_of(r);

  auto task = reserve_one(c, {type}, 3000);  // short, with room for a slow machine
  REQUIRE(task.is_object());
  const std::string lease = str(task, "lease");
  auto t = c.post(task_path(id) + "/touch", json{{"lease", lease}, {"ttr_ms", 60000}});
  CHECK_MESSAGE(t.status == 204, t.describe());

  // Wait (on the server) well past the first lease's end: had it not been
  // extended, the task would have come back for this poll.
  auto again = reserve(c, {type}, 5000, 1);
  REQUIRE_MESSAGE(again.status == 200, again.describe());
  CHECK(reserved_tasks(again).empty());
  CHECK(task_state(c, id) == "reserved");
  // The original lease is still the task's, well after its first end.
  auto x = finish(c, id, lease);
  CHECK_MESSAGE(x.status == 204, x.describe());

  // Touching an ended lease: 409.
  t = c.post(task_path(id) + "/touch", json{{"lease", lease}});
  CHECK_MESSAGE((t.status == 409 || t.status == 404), t.describe());

  // Touch without ttr_ms takes the reserve's (here the default, 30 s).
  r = add_task(c, type, "another", 0);
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  auto other = reserve_one(c, {type});
  REQUIRE(other.is_object());
  t = c.post(task_path(str(other, "id")) + "/touch", json{{"lease", other["lease"]}});
  CHECK_MESSAGE(t.status == 204, t.describe());
  x = finish(c, str(other, "id"), str(other, "lease"));
  CHECK_MESSAGE(x.status == 204, x.describe());
}

TEST_CASE("server: a lease that expired is stale, the task comes back with attempts+1") {
  DELAYQ_FOR_EACH_STORE(kind);
  pull_fixture f(kind);
  INFO(f.server->output_tail());
  auto& c = f.client;
  const std::string type = unique_name("stale");
  auto r = add_task(c, type, "slow consumer", 0);
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  const std::string id = id_of(r);

  auto first = reserve_one(c, {type}, 1000);
  REQUIRE(first.is_object());
  CHECK(first["attempts"] == 0);
  const std::string old_lease = str(first, "lease");

  // The lease ends after 1 s; the attempt fails ("lease expired"), and after
  // its backoff the task is handed out again.
  auto second = reserve_one(c, {type}, 30000);
  REQUIRE(second.is_object());
  CHECK(second["id"] == id);
  CHECK(second["attempts"] == 1);
  const std::string new_lease = str(second, "lease");
  CHECK(!new_lease.empty());
  CHECK(new_lease != old_lease);

  // The slow consumer can neither finish, fail nor touch the new attempt.
  auto x = finish(c, id, old_lease);
  CHECK_MESSAGE(x.status == 409, x.describe());
  CHECK(x.error() == "stale_lease");
  x = fail(c, id, old_lease, "late");
  CHECK_MESSAGE(x.status == 409, x.describe());
  CHECK(x.error() == "stale_lease");
  x = c.post(task_path(id) + "/touch", json{{"lease", old_lease}});
  CHECK_MESSAGE(x.status == 409, x.describe());
  CHECK(x.error() == "stale_lease");
  CHECK(task_state(c, id) == "reserved");

  x = finish(c, id, new_lease);
  CHECK_MESSAGE(x.status == 204, x.describe());
  CHECK(c.get(task_path(id)).status == 404);

  auto s = c.get("/v1/stats");
  REQUIRE(s.status == 200);
  auto expired = find_number(s.body_json, "leases_expired");
  REQUIRE(expired.has_value());
  CHECK(*expired >= 1);
}

TEST_CASE("server: dead letters can be listed, requeued and deleted") {
  DELAYQ_FOR_EACH_STORE(kind);
  // Short backoffs (--retry-base): six failed attempts to get through.
  pull_fixture f(kind, {"--retry-base", "100"});
  INFO(f.server->output_tail());
  auto& c = f.client;
  const std::string type = unique_name("dead");
  std::vector<std::string> ids;
  for (int i = 0; i < 2; ++i) {
    auto r = add_task(c, type, "d" + std::to_string(i), 0);
    REQUIRE_MESSAGE(r.status == 201, r.describe());
    ids.push_back(id_of(r));
    REQUIRE(fail_until_dead(c, type, ids.back()));
  }

  auto d = c.get("/v1/dead?offset=0&limit=100");
  REQUIRE_MESSAGE(d.status == 200, d.describe());
  CHECK(d.body_json["total"] == 2);
  REQUIRE(d.body_json["dead"].size() == 2);
  std::set<std::string> listed;
  for (const auto& l : d.body_json["dead"]) listed.insert(str(l, "id"));
  CHECK(listed == std::set<std::string>(ids.begin(), ids.end()));

  // Paging.
  auto p0 = c.get("/v1/dead?offset=0&limit=1");
  auto p1 = c.get("/v1/dead?offset=1&limit=1");
  auto p2 = c.get("/v1/dead?offset=2&limit=1");
  REQUIRE(p0.status == 200);
  REQUIRE(p1.status == 200);
  REQUIRE(p2.status == 200);
  REQUIRE(p0.body_json["dead"].size() == 1);
  REQUIRE(p1.body_json["dead"].size() == 1);
  CHECK(p0.body_json["dead"][0]["id"] != p1.body_json["dead"][0]["id"]);
  CHECK(p2.body_json["dead"].empty());
  CHECK(p2.body_json["total"] == 2);

  // Requeue the first: it runs again, its attempts reset.
  auto q = c.post("/v1/dead/" + path_escape(ids[0]) + "/requeue", json::object());
  CHECK_MESSAGE(q.status == 204, q.describe());
  auto task = reserve_one(c, {type});
  REQUIRE(task.is_object());
  CHECK(task["id"] == ids[0]);
  CHECK(task["attempts"] == 0);
  CHECK(task["payload"] == "d0");
  CHECK(finish(c, ids[0], str(task, "lease")).status == 204);
  q = c.post("/v1/dead/" + path_escape(ids[0]) + "/requeue", json{{"delay_ms", 0}});
  CHECK_MESSAGE(q.status == 404, q.describe());
  CHECK(q.error() == "not_found");

  // Delete the second.
  auto x = c.del("/v1/dead/" + path_escape(ids[1]));
  CHECK_MESSAGE(x.status == 204, x.describe());
  x = c.del("/v1/dead/" + path_escape(ids[1]));
  CHECK_MESSAGE(x.status == 404, x.describe());
  CHECK(x.error() == "not_found");
  d = c.get("/v1/dead");
  REQUIRE(d.status == 200);
  CHECK(d.body_json["total"] == 0);
  CHECK(d.body_json["dead"].empty());
  CHECK(c.get(task_path(ids[1])).status == 404);
}

TEST_CASE("server: finish and fail with next end the attempt and reserve in one call") {
  DELAYQ_FOR_EACH_STORE(kind);
  pull_fixture f(kind);
  INFO(f.server->output_tail());
  auto& c = f.client;
  const std::string type = unique_name("next");
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    auto r =
        c.post("/v1/tasks", json{{"type", type}, {"payload", std::to_string(i)}, {"delay_ms", 0}});
    REQUIRE_MESSAGE(r.status == 201, r.describe());
    ids.push_back(id_of(r));
  }
  auto t = reserve_one(c, {type});
  REQUIRE(t.is_object());
  // finish + next: the finished task is gone, the answer carries the next.
  auto r = c.post(task_path(str(t, "id")) + "/finish",
                  json{{"lease", str(t, "lease")}, {"next", {{"types", {type}}, {"max", 1}}}});
  REQUIRE_MESSAGE(r.status == 200, r.describe());
  auto next = reserved_tasks(r);
  REQUIRE_MESSAGE(next.size() == 1, r.describe());
  CHECK(str(next[0], "id") != str(t, "id"));
  CHECK(!str(next[0], "lease").empty());
  CHECK(c.get(task_path(str(t, "id"))).status == 404);
  // fail + next: the failed task is retried later (attempts 1), the answer
  // carries the last one.
  r = c.post(task_path(str(next[0], "id")) + "/fail",
             json{{"lease", str(next[0], "lease")},
                  {"error", "boom"},
                  {"next", {{"types", {type}}, {"max", 5}}}});
  REQUIRE_MESSAGE(r.status == 200, r.describe());
  auto last = reserved_tasks(r);
  REQUIRE_MESSAGE(last.size() == 1, r.describe());
  std::set<std::string> seen{str(t, "id"), str(next[0], "id"), str(last[0], "id")};
  CHECK(seen == std::set<std::string>(ids.begin(), ids.end()));
  auto failed = c.get(task_path(str(next[0], "id")));
  REQUIRE_MESSAGE(failed.status == 200, failed.describe());
  CHECK(failed.body_json["attempts"] == 1);
  // Nothing left ready: next with no wait answers an empty list, and the
  // finish is still done.
  r = c.post(task_path(str(last[0], "id")) + "/finish",
             json{{"lease", str(last[0], "lease")}, {"next", {{"types", {type}}}}});
  REQUIRE_MESSAGE(r.status == 200, r.describe());
  CHECK(reserved_tasks(r).empty());
  CHECK(c.get(task_path(str(last[0], "id"))).status == 404);
  // A stale lease neither ends anything nor reserves.
  r = c.post(task_path(str(last[0], "id")) + "/finish",
             json{{"lease", str(last[0], "lease")}, {"next", {{"types", {type}}}}});
  CHECK(r.status == 409);
  // A bad next is refused before anything is done, pointing at the field.
  auto again = reserve_one(c, {type});  // the failed one, once its backoff passed
  REQUIRE(again.is_object());
  r = c.post(task_path(str(again, "id")) + "/finish",
             json{{"lease", str(again, "lease")}, {"next", {{"max", 0}}}});
  CHECK(r.status == 400);
  CHECK(r.body.find("next") != std::string::npos);
  CHECK(c.get(task_path(str(again, "id"))).status == 200);  // not finished
}

TEST_CASE("server: a reserve whose wait ends at or after a task's due time gets the task") {
  // The broker's timer and the engine's tick are two clocks: with a 1 s
  // tick the engine alone would hand the task over up to a second after it
  // is due, and the reserve would time out first. A task due by the time
  // the wait ends wins (engine::fire_due()).
  DELAYQ_FOR_EACH_STORE(kind);
  pull_fixture f(kind, {"--tick", "1000"});
  INFO(f.server->output_tail());
  auto& c = f.client;
  const std::string type = unique_name("parity");
  for (int round = 0; round < 2; ++round) {
    CAPTURE(round);
    auto r = c.post("/v1/tasks", json{{"type", type}, {"payload", "p"}, {"delay_ms", 700}});
    REQUIRE_MESSAGE(r.status == 201, r.describe());
    // Added before the reserve: due no later than the wait's end.
    auto answer = reserve(c, {type}, 700);
    REQUIRE_MESSAGE(answer.status == 200, answer.describe());
    auto tasks = reserved_tasks(answer);
    REQUIRE_MESSAGE(tasks.size() == 1, answer.describe());
    CHECK(finish(c, str(tasks[0], "id"), str(tasks[0], "lease")).status == 204);
  }
}

TEST_CASE("server: tasks:finish ends several attempts in one call, each with its own outcome") {
  // POST /v1/tasks:finish: each finish is a POST /v1/tasks/{id}/finish, with
  // its outcome in "results" at its task's place, and the call is answered
  // once every removal is durable: a SIGKILL right after the answer brings
  // none of the finished tasks back, and the one whose lease was wrong is
  // delivered again.
  DELAYQ_FOR_EACH_STORE(kind);
  test_store store(kind);
  const std::string type = unique_name("fin-batch");
  std::string kept_id;
  std::set<std::string> finished;
  {
    auto server = server_process::start(store);
    INFO(server->output_tail());
    http_client c(server->port());
    for (int i = 0; i < 4; ++i) {
      auto r = add_task(c, type, "p" + std::to_string(i), 0);
      REQUIRE_MESSAGE(r.status == 201, r.describe());
    }
    auto got = reserve(c, {type}, 10000, 4);
    REQUIRE_MESSAGE(got.status == 200, got.describe());
    auto tasks = reserved_tasks(got);
    // The engine may hand them over in more than one tick.
    for (int round = 0; round < 10 && tasks.size() < 4; ++round) {
      auto more = reserved_tasks(reserve(c, {type}, 10000, 4 - static_cast<int>(tasks.size())));
      tasks.insert(tasks.end(), more.begin(), more.end());
    }
    REQUIRE(tasks.size() == 4);
    json list = json::array();
    for (int i = 0; i < 3; ++i) {
      list.push_back(json{{"id", str(tasks[i], "id")}, {"lease", str(tasks[i], "lease")}});
      finished.insert(str(tasks[i], "id"));
    }
    kept_id = str(tasks[3], "id");
    list.push_back(json{{"id", kept_id}, {"lease", str(tasks[3], "lease") + "x"}});
    list.push_back(json{{"id", "no-such-task"}, {"lease", "l"}});
    list.push_back(list[0]);  // named twice: finished once, its lease then ended
    auto r = c.post("/v1/tasks:finish",
                    json{{"tasks", list}, {"next", {{"types", {type}}, {"max", 10}}}});
    REQUIRE_MESSAGE(r.status == 200, r.describe());
    const json& results = r.body_json["results"];
    REQUIRE_MESSAGE(results.size() == 6, r.describe());
    for (std::size_t i = 0; i < 6; ++i) {
      CAPTURE(i);
      CHECK(results[i]["id"] == list[i]["id"]);
      CHECK(results[i]["status"] == (i < 3 ? 204 : 409));
      if (i >= 3) CHECK(results[i]["error"] == "stale_lease");
    }
    CHECK(reserved_tasks(r).empty());             // "next" ran: nothing else is ready
    CHECK(task_state(c, kept_id) == "reserved");  // a wrong lease ended nothing
    for (const auto& id : finished) CHECK(c.get(task_path(id)).status == 404);
    server->signal(SIGKILL);  // no drain: only what was durable survives
    CHECK(WIFSIGNALED(server->wait()));
  }
  auto server = server_process::start(store);
  INFO(server->output_tail());
  http_client c(server->port());
  for (const auto& id : finished) CHECK(c.get(task_path(id)).status == 404);
  auto again = reserve_one(c, {type});  // its lease died with the process
  REQUIRE(again.is_object());
  CHECK(str(again, "id") == kept_id);
  auto r =
      c.post("/v1/tasks:finish",
             json{{"tasks", json::array({json{{"id", kept_id}, {"lease", str(again, "lease")}}})}});
  REQUIRE_MESSAGE(r.status == 200, r.describe());
  CHECK(r.body_json["results"][0]["status"] == 204);
  CHECK_FALSE(r.body_json.contains("tasks"));  // no "next", no reserve
  CHECK(c.get(task_path(kept_id)).status == 404);
}

TEST_CASE("server: tasks:finish refuses a malformed body before finishing anything") {
  DELAYQ_FOR_EACH_STORE(kind);
  pull_fixture f(kind);
  INFO(f.server->output_tail());
  auto& c = f.client;
  const std::string type = unique_name("fin-bad");
  REQUIRE(add_task(c, type, "p", 0).status == 201);
  auto t = reserve_one(c, {type});
  REQUIRE(t.is_object());
  const json good{{"id", str(t, "id")}, {"lease", str(t, "lease")}};
  json too_many = json::array();
  for (int i = 0; i < 1001; ++i) too_many.push_back(good);
  const std::vector<std::pair<json, std::string>> bad = {
      {json{{"tasks", json::array()}}, "must not be empty"},
      {json{{"tasks", "x"}}, "must be an array"},
      {json{{"tasks", json::array({good, json{{"id", "a"}}})}},
       "tasks[1]: missing field \"lease\""},
      {json{{"tasks", json::array({good, json{{"id", "a"}, {"lease", 1}}})}}, "tasks[1]"},
      {json{{"tasks", json::array({json{{"id", "a"}, {"lease", "l"}, {"extra", 1}}})}},
       "unknown field \"extra\""},
      {json{{"tasks", json::array({good})}, {"next", {{"max", 0}}}}, "next"},
      {json{{"tasks", json::array({good})}, {"more", 1}}, "unknown field \"more\""},
      {json{{"tasks", too_many}}, "at most 1000"},
  };
  for (const auto& [body, says] : bad) {
    CAPTURE(body.dump().substr(0, 200));
    auto r = c.post("/v1/tasks:finish", body);
    CHECK_MESSAGE(r.status == 400, r.describe());
    CHECK(r.error() == "bad_request");
    CHECK(r.message().find(says) != std::string::npos);
  }
  CHECK(task_state(c, str(t, "id")) == "reserved");  // none of them finished it
}
