// delayq-server process tests: adding, reading, cancelling and rescheduling
// tasks (docs/server.md, "Tasks"), on Redis and on SQLite.
#include <doctest/doctest.h>

#include "push_receiver.hpp"

namespace {

using namespace delayq::server_test;

// The usual setup of a test: a fresh store, a server on it, a client.
struct tasks_fixture {
  explicit tasks_fixture(store_kind kind, std::vector<std::string> extra = {})
      : store(kind),
        server(server_process::start(store, std::move(extra))),
        client(server->port()) {}
  test_store store;
  std::unique_ptr<server_process> server;
  http_client client;
};

}  // namespace

TEST_CASE("server: add a task with delay_ms, due_ms or an id of its own") {
  DELAYQ_FOR_EACH_STORE(kind);
  tasks_fixture f(kind);
  INFO(f.server->output_tail());
  auto& c = f.client;
  const std::string type = unique_name("add");

  // delay_ms: due that long after the request, a generated id.
  const auto before = now_ms();
  auto r = add_task(c, type, "hello", 3600000);
  const auto after = now_ms();
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  CHECK(r.header("content-type").starts_with("application/json"));
  const std::string id = id_of(r);
  REQUIRE(!id.empty());
  auto g = c.get(task_path(id));
  REQUIRE_MESSAGE(g.status == 200, g.describe());
  CHECK(g.header("content-type").starts_with("application/json"));
  CHECK(g.body_json["id"] == id);
  CHECK(g.body_json["type"] == type);
  CHECK(g.body_json["payload"] == "hello");
  CHECK(g.body_json["attempts"] == 0);
  CHECK(g.body_json["state"] == "delayed");
  REQUIRE(g.body_json["due_ms"].is_number_integer());
  const auto due = g.body_json["due_ms"].get<std::int64_t>();
  CHECK(due >= before + 3600000);
  CHECK(due <= after + 3600000);

  // due_ms: exactly that time; payload defaults to "" and keeps any bytes.
  const std::int64_t due_at = now_ms() + 7200000;
  r = c.post("/v1/tasks", json{{"type", type}, {"due_ms", due_at}});
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  g = c.get(task_path(id_of(r)));
  REQUIRE_MESSAGE(g.status == 200, g.describe());
  CHECK(g.body_json["due_ms"] == due_at);
  CHECK(g.body_json["payload"] == "");
  CHECK(g.body_json["state"] == "delayed");

  static constexpr char odd_bytes[] = "nul\0byte \xC3\xA9 {\"json\":true}";
  const std::string odd_payload(odd_bytes, sizeof odd_bytes - 1);
  r = add_task(c, type, odd_payload, 3600000);
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  g = c.get(task_path(id_of(r)));
  REQUIRE_MESSAGE(g.status == 200, g.describe());
  CHECK(g.body_json["payload"] == odd_payload);

  // An id of the caller's, with characters that must be percent-encoded in
  // the path.
  const std::string own_id = "order/42%" + unique_name("x");
  r = add_task(c, type, "mine", 3600000, own_id);
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  CHECK(id_of(r) == own_id);
  g = c.get(task_path(own_id));
  REQUIRE_MESSAGE(g.status == 200, g.describe());
  CHECK(g.body_json["id"] == own_id);
  CHECK(g.body_json["payload"] == "mine");
}

TEST_CASE("server: add with an id that is pending: conflict reject, replace, keep") {
  DELAYQ_FOR_EACH_STORE(kind);
  tasks_fixture f(kind);
  INFO(f.server->output_tail());
  auto& c = f.client;
  const std::string type = unique_name("conflict");
  const std::string id = unique_name("c");

  auto r = add_task(c, type, "first", 3600000, id);
  REQUIRE_MESSAGE(r.status == 201, r.describe());

  {  // reject (the default): nothing changes
    r = add_task(c, type, "second", 3600000, id);
    CHECK_MESSAGE(r.status == 409, r.describe());
    CHECK(r.error() == "duplicate_id");
    CHECK(!r.message().empty());
    r = c.post("/v1/tasks", json{{"type", type},
                                 {"payload", "third"},
                                 {"delay_ms", 1000},
                                 {"id", id},
                                 {"conflict", "reject"}});
    CHECK_MESSAGE(r.status == 409, r.describe());
    CHECK(r.error() == "duplicate_id");
    auto g = c.get(task_path(id));
    REQUIRE_MESSAGE(g.status == 200, g.describe());
    CHECK(g.body_json["payload"] == "first");
  }
  {  // keep: the pending task stays as it was
    r = c.post("/v1/tasks", json{{"type", type},
                                 {"payload", "second"},
                                 {"delay_ms", 5},
                                 {"id", id},
                                 {"conflict", "keep"}});
    CHECK_MESSAGE(r.status == 201, r.describe());
    CHECK(id_of(r) == id);
    auto g = c.get(task_path(id));
    REQUIRE_MESSAGE(g.status == 200, g.describe());
    CHECK(g.body_json["payload"] == "first");
    CHECK(g.body_json["state"] == "delayed");
  }
  {  // replace: the new task takes its place
    const std::int64_t due_at = now_ms() + 9000000;
    r = c.post("/v1/tasks", json{{"type", type},
                                 {"payload", "second"},
                                 {"due_ms", due_at},
                                 {"id", id},
                                 {"conflict", "replace"}});
    CHECK_MESSAGE(r.status == 201, r.describe());
    CHECK(id_of(r) == id);
    auto g = c.get(task_path(id));
    REQUIRE_MESSAGE(g.status == 200, g.describe());
    CHECK(g.body_json["payload"] == "second");
    CHECK(g.body_json["due_ms"] == due_at);
  }
}

TEST_CASE("server: batch stores all tasks or none") {
  DELAYQ_FOR_EACH_STORE(kind);
  tasks_fixture f(kind);
  INFO(f.server->output_tail());
  auto& c = f.client;
  const std::string type = unique_name("batch");

  {  // one bad task: 400 naming tasks[i], none stored
    const std::string a = unique_name("ba"), b = unique_name("bb"), d = unique_name("bd");
    // Each bad task at index 1 or 2, with the good ones around it carrying
    // ids, so that none of them may be found afterwards.
    struct bad_case {
      const char* what;
      json task;
      std::size_t index;
    };
    const std::vector<bad_case> cases{
        {"negative delay", {{"type", type}, {"delay_ms", -1}}, 1},
        {"wrong field type", {{"type", type}, {"delay_ms", "soon"}}, 2},
        {"unknown field", {{"type", type}, {"dealy_ms", 5}}, 1},
        {"missing type", {{"delay_ms", 5}}, 2},
        {"bad type name", {{"type", "has space"}, {"delay_ms", 5}}, 1},
    };
    for (const auto& bc : cases) {
      INFO("bad task: ", bc.what);
      json tasks = json::array();
      tasks.push_back({{"type", type}, {"delay_ms", 3600000}, {"id", a}});
      tasks.push_back({{"type", type}, {"delay_ms", 3600000}, {"id", b}});
      tasks.push_back({{"type", type}, {"delay_ms", 3600000}, {"id", d}});
      tasks[bc.index] = bc.task;
      auto r = c.post("/v1/tasks:batch", json{{"tasks", tasks}});
      CHECK_MESSAGE(r.status == 400, r.describe());
      CHECK(!r.error().empty());
      CHECK_MESSAGE(
          r.message().find("tasks[" + std::to_string(bc.index) + "]") != std::string::npos,
          r.describe());
      for (const auto& id : {a, b, d}) {
        if (bc.index == 1 && id == b) continue;
        if (bc.index == 2 && id == d) continue;
        auto g = c.get(task_path(id));
        CHECK_MESSAGE(g.status == 404, id, ": ", g.describe());
      }
    }
    // Nothing of the type was stored: nothing to reserve once the good ones
    // would have been due (they are 1 h away, so check the ids above only),
    // and the stats count no pending task.
    auto s = c.get("/v1/stats");
    REQUIRE_MESSAGE(s.status == 200, s.describe());
    auto pending = find_number(s.body_json, "pending");
    REQUIRE(pending.has_value());
    CHECK(*pending == 0);
  }

  {  // not a list, or over 10000 tasks
    auto r = c.post("/v1/tasks:batch", json{{"tasks", "nope"}});
    CHECK_MESSAGE(r.status == 400, r.describe());
    CHECK(r.error() == "bad_request");
    json many = json::array();
    for (int i = 0; i < 10001; ++i) many.push_back({{"type", type}, {"delay_ms", 3600000}});
    r = c.post("/v1/tasks:batch", json{{"tasks", many}});
    // docs/server.md does not name the status; 413 payload_too_large is what
    // the server answers, 400 would do as well.
    CHECK_MESSAGE((r.status == 400 || r.status == 413), r.describe());
    auto s = c.get("/v1/stats");
    REQUIRE(s.status == 200);
    CHECK(find_number(s.body_json, "pending") == std::optional<double>(0));
  }
  {  // all good: 201 with every id, in order
    json tasks = json::array();
    tasks.push_back({{"type", type}, {"payload", "a"}, {"delay_ms", 3600000}});
    tasks.push_back({{"type", type}, {"payload", "b"}, {"due_ms", now_ms() + 3600000}});
    tasks.push_back({{"type", type}, {"payload", "c"}, {"delay_ms", 3600000}, {"id", "b-own"}});
    auto r = c.post("/v1/tasks:batch", json{{"tasks", tasks}});
    REQUIRE_MESSAGE(r.status == 201, r.describe());
    REQUIRE(r.body_json["ids"].is_array());
    REQUIRE(r.body_json["ids"].size() == 3);
    CHECK(r.body_json["ids"][2] == "b-own");
    const char* payloads[] = {"a", "b", "c"};
    for (std::size_t i = 0; i < 3; ++i) {
      auto g = c.get(task_path(r.body_json["ids"][i].get<std::string>()));
      REQUIRE_MESSAGE(g.status == 200, g.describe());
      CHECK(g.body_json["payload"] == payloads[i]);
      CHECK(g.body_json["type"] == type);
    }
  }

  {  // a batch with an id that is pending (reject): 409, none stored
    const std::string id = unique_name("dup");
    json tasks = json::array();
    tasks.push_back({{"type", type}, {"delay_ms", 3600000}, {"id", id}});
    auto r = add_task(c, type, "there", 3600000, id);
    REQUIRE_MESSAGE(r.status == 201, r.describe());
    const std::string other = unique_name("other");
    tasks.insert(tasks.begin(), json{{"type", type}, {"delay_ms", 3600000}, {"id", other}});
    r = c.post("/v1/tasks:batch", json{{"tasks", tasks}});
    CHECK_MESSAGE(r.status == 409, r.describe());
    CHECK(r.error() == "duplicate_id");
    CHECK(c.get(task_path(other)).status == 404);
    auto g = c.get(task_path(id));
    REQUIRE(g.status == 200);
    CHECK(g.body_json["payload"] == "there");
  }
}

TEST_CASE("server: get shows delayed, ready and reserved tasks") {
  DELAYQ_FOR_EACH_STORE(kind);
  tasks_fixture f(kind);
  INFO(f.server->output_tail());
  auto& c = f.client;
  const std::string type = unique_name("states");

  auto r = add_task(c, type, "later", 3600000);
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  CHECK(task_state(c, id_of(r)) == "delayed");

  r = add_task(c, type, "now", 0);
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  const std::string now_id = id_of(r);
  // Due at once, with no consumer: it becomes ready at the next tick.
  CHECK(eventually([&] { return task_state(c, now_id) == "ready"; }));

  auto task = reserve_one(c, {type});
  REQUIRE(task.is_object());
  CHECK(task["id"] == now_id);
  auto g = c.get(task_path(now_id));
  REQUIRE_MESSAGE(g.status == 200, g.describe());
  CHECK(g.body_json["state"] == "reserved");
  CHECK(g.body_json["attempts"] == 0);

  g = c.get(task_path("no-such-task"));
  CHECK_MESSAGE(g.status == 404, g.describe());
  CHECK(g.error() == "not_found");
}

TEST_CASE("server: delete cancels a task for good") {
  DELAYQ_FOR_EACH_STORE(kind);
  tasks_fixture f(kind);
  INFO(f.server->output_tail());
  auto& c = f.client;
  const std::string type = unique_name("del");

  // The cancelled task would be due first; the kept one after it.
  auto r = add_task(c, type, "cancelled", 300);
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  const std::string gone = id_of(r);
  r = add_task(c, type, "kept", 600);
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  const std::string kept = id_of(r);

  auto d = c.del(task_path(gone));
  CHECK_MESSAGE(d.status == 204, d.describe());
  CHECK(d.body.empty());
  CHECK(c.get(task_path(gone)).status == 404);
  d = c.del(task_path(gone));
  CHECK_MESSAGE(d.status == 404, d.describe());
  CHECK(d.error() == "not_found");

  // Only the kept task is ever handed out.
  auto task = reserve_one(c, {type});
  REQUIRE(task.is_object());
  CHECK(task["id"] == kept);
  auto more = reserve(c, {type}, 0, 10);
  REQUIRE_MESSAGE(more.status == 200, more.describe());
  CHECK(reserved_tasks(more).empty());

  // A reserved task cannot be cancelled.
  d = c.del(task_path(kept));
  CHECK_MESSAGE(d.status == 409, d.describe());
  CHECK(d.error() == "conflict");
  CHECK(task_state(c, kept) == "reserved");
}

TEST_CASE("server: reschedule moves a task's due time") {
  DELAYQ_FOR_EACH_STORE(kind);
  tasks_fixture f(kind);
  INFO(f.server->output_tail());
  auto& c = f.client;
  const std::string type = unique_name("resched");

  // Later to now: it is then handed out.
  auto r = add_task(c, type, "soon", 3600000);
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  const std::string id = id_of(r);
  auto s = c.post(task_path(id) + "/reschedule", json{{"delay_ms", 0}});
  CHECK_MESSAGE(s.status == 204, s.describe());
  auto task = reserve_one(c, {type});
  REQUIRE(task.is_object());
  CHECK(task["id"] == id);
  CHECK(task["attempts"] == 0);

  // A reserved task cannot be moved.
  s = c.post(task_path(id) + "/reschedule", json{{"delay_ms", 1000}});
  CHECK_MESSAGE(s.status == 409, s.describe());
  CHECK(s.error() == "conflict");

  // Ready to later (due_ms): it goes back to waiting with the new due time.
  r = add_task(c, type, "back", 0);
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  const std::string back = id_of(r);
  REQUIRE(eventually([&] { return task_state(c, back) == "ready"; }));
  const std::int64_t due_at = now_ms() + 3600000;
  s = c.post(task_path(back) + "/reschedule", json{{"due_ms", due_at}});
  CHECK_MESSAGE(s.status == 204, s.describe());
  auto g = c.get(task_path(back));
  REQUIRE_MESSAGE(g.status == 200, g.describe());
  CHECK(g.body_json["state"] == "delayed");
  CHECK(g.body_json["due_ms"] == due_at);
  auto none = reserve(c, {type}, 0, 10);
  REQUIRE_MESSAGE(none.status == 200, none.describe());
  CHECK(reserved_tasks(none).empty());

  s = c.post(task_path("no-such-task") + "/reschedule", json{{"delay_ms", 0}});
  CHECK_MESSAGE(s.status == 404, s.describe());
  CHECK(s.error() == "not_found");
  s = c.post(task_path(back) + "/reschedule", json{{"delay_ms", -5}});
  CHECK_MESSAGE(s.status == 400, s.describe());
  CHECK(s.error() == "invalid_delay");
}

namespace {

// Waits until the server holds `n` tasks for consumers (handed over by the
// engine, not yet reserved).
bool wait_ready_for_consumers(http_client& c, double n) {
  return eventually([&] {
    auto s = c.get("/v1/stats");
    auto v = find_number(s.body_json, "ready_for_consumers");
    return s.status == 200 && v && *v >= n;
  });
}

}  // namespace

TEST_CASE("server: a replaced task that waited for a consumer is never delivered") {
  DELAYQ_FOR_EACH_STORE(kind);
  tasks_fixture f(kind);
  INFO(f.server->output_tail());
  auto& c = f.client;
  const std::string type = unique_name("repl");

  auto r = add_task(c, type, "old", 0, "r1");
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  REQUIRE(wait_ready_for_consumers(c, 1));

  // The new version is due in an hour: nothing of r1 is due now.
  r = c.post("/v1/tasks", json{{"type", type},
                               {"payload", "new"},
                               {"delay_ms", 3600000},
                               {"id", "r1"},
                               {"conflict", "replace"}});
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  auto got = reserve(c, {type}, 0, 10);
  REQUIRE_MESSAGE(got.status == 200, got.describe());
  CHECK_MESSAGE(reserved_tasks(got).empty(), got.describe());
  CHECK(task_state(c, "r1") == "delayed");

  // And a cancel of it leaves nothing to deliver either.
  auto d = c.del(task_path("r1"));
  CHECK_MESSAGE(d.status == 204, d.describe());
  got = reserve(c, {type}, 0, 10);
  CHECK_MESSAGE(reserved_tasks(got).empty(), got.describe());
  CHECK(c.get(task_path("r1")).status == 404);
}

TEST_CASE("server: registering a push target pushes the tasks already waiting for consumers") {
  DELAYQ_FOR_EACH_STORE(kind);
  tasks_fixture f(kind);
  INFO(f.server->output_tail());
  auto& c = f.client;
  const std::string type = unique_name("late-push");

  auto r = add_task(c, type, "waiting", 0, "w1");
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  REQUIRE(wait_ready_for_consumers(c, 1));

  push_receiver receiver([](const push_call&, std::size_t) { return 200u; });
  auto p = c.put("/v1/types/" + path_escape(type), json{{"push_url", receiver.url()}});
  REQUIRE_MESSAGE(p.status == 204, p.describe());
  REQUIRE(receiver.wait_for_calls(1));
  CHECK(receiver.calls()[0].task_id == "w1");
  CHECK(eventually([&] { return c.get(task_path("w1")).status == 404; }));
}

TEST_CASE("server: with --horizon a far task stays in the store and every call still reaches it") {
  DELAYQ_FOR_EACH_STORE(kind);
  tasks_fixture f(kind, {"--horizon", "1"});
  INFO(f.server->output_tail());
  auto& c = f.client;
  const std::string type = unique_name("horizon");

  // An hour away: past the 1 s horizon, in the store only.
  const std::string id = unique_name("far");
  auto r = add_task(c, type, "far", 3600000, id);
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  CHECK(task_state(c, id) == "delayed");
  r = add_task(c, type, "again", 3600000, id);
  CHECK_MESSAGE(r.status == 409, r.describe());  // the duplicate is seen in the store
  auto d = c.del(task_path(id));
  CHECK_MESSAGE(d.status == 204, d.describe());
  d = c.del(task_path(id));
  CHECK_MESSAGE(d.status == 404, d.describe());

  // Three seconds away: the pager reads it in before it is due; a consumer gets it.
  const std::string soon = unique_name("soon");
  r = add_task(c, type, "soon", 3000, soon);
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  auto task = reserve_one(c, {type});
  REQUIRE(task.is_object());
  CHECK(task["id"] == soon);
  CHECK(task["payload"] == "soon");
  auto stats = c.get("/v1/stats");
  REQUIRE_MESSAGE(stats.status == 200, stats.describe());
  CHECK(find_number(stats.body_json, "paged") >= std::optional<double>(1));  // read in, not loaded
}

TEST_CASE("server: priority and ttr_ms put over HTTP read back, after a restart too") {
  DELAYQ_FOR_EACH_STORE(kind);
  tasks_fixture f(kind);
  INFO(f.server->output_tail());
  auto& c = f.client;
  const std::string type = unique_name("prio");

  auto r = c.post(
      "/v1/tasks",
      json{{"type", type}, {"delay_ms", 3600000}, {"priority", 4294967295u}, {"ttr_ms", 43200000}});
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  const std::string top = id_of(r);
  r = c.post("/v1/tasks", json{{"type", type}, {"delay_ms", 3600000}});
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  const std::string plain = id_of(r);
  r = c.post(
      "/v1/tasks:batch",
      json{{"tasks",
            json::array(
                {json{{"type", type}, {"delay_ms", 3600000}, {"priority", 7}, {"ttr_ms", 1000}},
                 json{{"type", type}, {"delay_ms", 3600000}, {"ttr_ms", 0}, {"priority", 0}}})}});
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  REQUIRE(r.body_json["ids"].size() == 2);
  const std::string batched = r.body_json["ids"][0].get<std::string>();
  const std::string batched_plain = r.body_json["ids"][1].get<std::string>();

  const auto check = [&](http_client& client, const std::string& id, std::uint64_t priority,
                         std::int64_t ttr_ms) {
    INFO("task ", id);
    auto g = client.get(task_path(id));
    REQUIRE_MESSAGE(g.status == 200, g.describe());
    CHECK(g.body_json["priority"] == priority);
    CHECK(g.body_json["ttr_ms"] == ttr_ms);
  };
  check(c, top, 4294967295u, 43200000);
  check(c, plain, 0, 0);
  check(c, batched, 7, 1000);
  check(c, batched_plain, 0, 0);

  // Bad values: the same 400 as any bad field, nothing stored.
  for (const json& bad :
       {json{{"priority", -1}}, json{{"priority", 4294967296ull}}, json{{"priority", "high"}},
        json{{"priority", 1.5}}, json{{"ttr_ms", 999}}, json{{"ttr_ms", 1}}, json{{"ttr_ms", -1}},
        json{{"ttr_ms", 43200001}}, json{{"ttr_ms", "30s"}}}) {
    INFO("bad: ", bad.dump());
    json body{{"type", type}, {"delay_ms", 3600000}, {"id", unique_name("bad")}};
    body.update(bad);
    auto b = c.post("/v1/tasks", body);
    CHECK_MESSAGE(b.status == 400, b.describe());
    CHECK(b.error() == "bad_request");
    CHECK(c.get(task_path(body["id"].get<std::string>())).status == 404);
    auto bb = c.post("/v1/tasks:batch", json{{"tasks", json::array({body})}});
    CHECK_MESSAGE(bb.status == 400, bb.describe());
  }

  // Stored with the task: a new server on the same store shows them.
  f.server.reset();
  f.server = server_process::start(f.store);
  http_client again(f.server->port());
  check(again, top, 4294967295u, 43200000);
  check(again, batched, 7, 1000);
  check(again, plain, 0, 0);
}
