// delayq-server process tests: push targets (docs/server.md, "Push"), with a
// real HTTP receiver in the test process, on Redis and on SQLite.
#include <doctest/doctest.h>

#include <tuple>

#include "push_receiver.hpp"

namespace {

using namespace delayq::server_test;

std::string type_path(const std::string& type) { return "/v1/types/" + path_escape(type); }

// The dead letter of `id`, or null.
json dead_letter(http_client& c, const std::string& id) {
  auto d = c.get("/v1/dead?limit=1000");
  if (d.status != 200 || !d.body_json.contains("dead")) return nullptr;
  for (const auto& l : d.body_json["dead"])
    if (str(l, "id") == id) return l;
  return nullptr;
}

}  // namespace

TEST_CASE("server: push retries a failing receiver until it answers 2xx") {
  DELAYQ_FOR_EACH_STORE(kind);
  // Fails the first two calls, then succeeds: the third and last attempt.
  push_receiver receiver(
      [](const push_call&, std::size_t index) { return index < 2 ? 500u : 200u; });
  test_store store(kind);
  auto server = server_process::start(store);
  INFO(server->output_tail());
  http_client c(server->port());
  const std::string type = unique_name("push");

  auto p =
      c.put(type_path(type), json{{"push_url", receiver.url("/hook/a")}, {"timeout_ms", 5000}});
  REQUIRE_MESSAGE(p.status == 204, p.describe());
  auto g = c.get(type_path(type));
  REQUIRE_MESSAGE(g.status == 200, g.describe());
  CHECK(g.body_json["push_url"] == receiver.url("/hook/a"));
  auto all = c.get("/v1/types");
  REQUIRE_MESSAGE(all.status == 200, all.describe());
  REQUIRE(all.body_json["types"].is_object());
  CHECK(all.body_json["types"].contains(type));

  auto r = add_task(c, type, "{\"order\":7}", 0);
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  const std::string id = id_of(r);

  REQUIRE(receiver.wait_for_calls(3));
  // Done once the success is recorded: the task is gone, no dead letter.
  CHECK(eventually([&] { return c.get(task_path(id)).status == 404; }));
  CHECK(dead_letter(c, id).is_null());

  const auto calls = receiver.calls();
  CHECK(calls.size() == 3);
  for (std::size_t i = 0; i < calls.size(); ++i) {
    INFO("call ", i);
    const auto& call = calls[i];
    CHECK(call.target == "/hook/a");
    CHECK(call.task_id == id);
    CHECK(call.attempt == std::to_string(i + 1));
    REQUIRE(call.body.is_object());
    CHECK(call.body["id"] == id);
    CHECK(call.body["type"] == type);
    CHECK(call.body["payload"] == "{\"order\":7}");
    CHECK(call.body["attempts"] == i);
    CHECK(call.body["due_ms"].is_number_integer());
  }
  // A push type is not served to pulling consumers.
  auto none = reserve(c, {type}, 0, 10);
  REQUIRE(none.status == 200);
  CHECK(reserved_tasks(none).empty());
}

TEST_CASE("server: a replaced push task waiting for its push slot is never pushed") {
  DELAYQ_FOR_EACH_STORE(kind);
  // Found by the fault harness (redis-kill): the old version of a replaced
  // task, queued behind its type's `concurrency`, was pushed after the
  // replace had been answered.
  push_receiver receiver(
      [](const push_call&, std::size_t index) { return index == 0 ? push_receiver::hold : 200u; });
  test_store store(kind);
  auto server = server_process::start(store);
  INFO(server->output_tail());
  http_client c(server->port());
  const std::string type = unique_name("replaced");
  auto p = c.put(type_path(type),
                 json{{"push_url", receiver.url()}, {"timeout_ms", 600000}, {"concurrency", 1}});
  REQUIRE_MESSAGE(p.status == 204, p.describe());
  auto first = add_task(c, type, "holds the slot", 0);
  REQUIRE_MESSAGE(first.status == 201, first.describe());
  REQUIRE(receiver.wait_for_task(id_of(first)));
  // Due now: it fires and waits for the slot.
  auto old = add_task(c, type, "old", 0, "x");
  REQUIRE_MESSAGE(old.status == 201, old.describe());
  REQUIRE(eventually([&] {
    auto st = c.get("/v1/stats");
    return st.status == 200 && st.body_json["server"]["pushes_queued"] == 1;
  }));
  auto replaced = c.post("/v1/tasks", json{{"type", type},
                                           {"payload", "new"},
                                           {"delay_ms", 3600000},
                                           {"id", "x"},
                                           {"conflict", "replace"}});
  REQUIRE_MESSAGE(replaced.status == 201, replaced.describe());
  // Queued after "old": with one slot, "old" would be pushed before it.
  auto marker = add_task(c, type, "marker", 0);
  REQUIRE_MESSAGE(marker.status == 201, marker.describe());
  receiver.answer_held(200);
  REQUIRE(receiver.wait_for_task(id_of(marker)));
  for (const auto& call : receiver.calls())
    CHECK_MESSAGE(call.body["payload"] != "old", "the replaced version was pushed");
  CHECK(receiver.calls_for("x") == 0);
  auto st = c.get("/v1/stats");
  REQUIRE(st.status == 200);
  CHECK(st.body_json["server"]["pushes_withdrawn"] == 1);
  // The new version waits for its time.
  auto g = c.get(task_path("x"));
  REQUIRE_MESSAGE(g.status == 200, g.describe());
  CHECK(g.body_json["payload"] == "new");
}

TEST_CASE("server: push to a receiver that always fails makes a dead letter") {
  DELAYQ_FOR_EACH_STORE(kind);
  push_receiver receiver([](const push_call&, std::size_t) { return 503u; });
  test_store store(kind);
  auto server = server_process::start(store, {"--retry-base", "100"});
  INFO(server->output_tail());
  http_client c(server->port());
  const std::string type = unique_name("pushdead");

  // Two types: one pushed to the failing receiver, one to a port where
  // nothing listens (a refused connection).
  const std::string refused_type = unique_name("pushrefused");
  const std::string refused_url = "http://127.0.0.1:" + std::to_string(unused_port()) + "/hook";
  auto p = c.put(type_path(type), json{{"push_url", receiver.url()}});
  REQUIRE_MESSAGE(p.status == 204, p.describe());
  p = c.put(type_path(refused_type), json{{"push_url", refused_url}});
  REQUIRE_MESSAGE(p.status == 204, p.describe());
  auto r = add_task(c, type, "never", 0);
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  const std::string id = id_of(r);
  r = add_task(c, refused_type, "refused", 0);
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  const std::string refused_id = id_of(r);

  for (const auto& [t, i, payload] :
       {std::tuple{type, id, "never"}, std::tuple{refused_type, refused_id, "refused"}}) {
    INFO("type ", t);
    json letter;
    CHECK(eventually([&] { return !(letter = dead_letter(c, i)).is_null(); }));
    REQUIRE(letter.is_object());
    CHECK(letter["attempts"] == 3);
    CHECK(letter["type"] == t);
    CHECK(letter["payload"] == payload);
    CHECK(!str(letter, "error").empty());
    CHECK(c.get(task_path(i)).status == 404);
  }
  const auto calls = receiver.calls();
  CHECK(calls.size() == 3);
  for (const auto& call : calls) CHECK(call.task_id == id);
}

TEST_CASE("server: a push target survives a restart, --push registers one, delete pulls again") {
  DELAYQ_FOR_EACH_STORE(kind);
  test_store store(kind);
  const std::string type = unique_name("kept");
  const std::string flag_type = unique_name("flag");
  const std::string url = "http://127.0.0.1:" + std::to_string(unused_port()) + "/kept";
  const std::string flag_url = "http://127.0.0.1:" + std::to_string(unused_port()) + "/flag";
  {
    auto server = server_process::start(store, {"--push", flag_type + "=" + flag_url});
    INFO(server->output_tail());
    http_client c(server->port());
    auto p =
        c.put(type_path(type), json{{"push_url", url}, {"timeout_ms", 1234}, {"concurrency", 3}});
    REQUIRE_MESSAGE(p.status == 204, p.describe());
    auto g = c.get(type_path(flag_type));
    REQUIRE_MESSAGE(g.status == 200, g.describe());
    CHECK(g.body_json["push_url"] == flag_url);
    c.close();
    server->signal(SIGTERM);
    const int status = server->wait();
    CHECK_MESSAGE((WIFEXITED(status) && WEXITSTATUS(status) == 0), describe_status(status));
  }
  auto server = server_process::start(store);
  INFO(server->output_tail());
  http_client c(server->port());
  auto g = c.get(type_path(type));
  REQUIRE_MESSAGE(g.status == 200, g.describe());
  CHECK(g.body_json["push_url"] == url);
  CHECK(g.body_json["timeout_ms"] == 1234);
  CHECK(g.body_json["concurrency"] == 3);
  // The --push of the first run is kept in the store too.
  g = c.get(type_path(flag_type));
  CHECK_MESSAGE(g.status == 200, g.describe());

  auto d = c.del(type_path(type));
  CHECK_MESSAGE(d.status == 204, d.describe());
  g = c.get(type_path(type));
  CHECK_MESSAGE(g.status == 404, g.describe());
  CHECK(g.error() == "not_found");
  d = c.del(type_path(type));
  CHECK_MESSAGE(d.status == 404, d.describe());

  // Pulled again: a consumer gets its tasks.
  auto r = add_task(c, type, "pull me", 0);
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  auto task = reserve_one(c, {type});
  REQUIRE(task.is_object());
  CHECK(task["id"] == id_of(r));
}

TEST_CASE("server: bad push targets are refused") {
  test_store store(store_kind::sqlite);
  auto server = server_process::start(store);
  INFO(server->output_tail());
  http_client c(server->port());
  const std::string type = unique_name("badpush");
  const std::vector<json> bad{
      json{{"push_url", "https://127.0.0.1:1/x"}},
      json{{"push_url", "ftp://127.0.0.1/x"}},
      json{{"push_url", "not a url"}},
      json{{"push_url", 5}},
      json::object(),
      json{{"push_url", "http://127.0.0.1:1/x"}, {"timeout_ms", 0}},
      json{{"push_url", "http://127.0.0.1:1/x"}, {"timeout_ms", 600001}},
      json{{"push_url", "http://127.0.0.1:1/x"}, {"concurrency", 0}},
      json{{"push_url", "http://127.0.0.1:1/x"}, {"concurrency", 10001}},
      json{{"push_url", "http://127.0.0.1:1/x"}, {"pushurl", "x"}},
  };
  for (const auto& body : bad) {
    INFO("body: ", body.dump());
    auto p = c.put(type_path(type), body);
    CHECK_MESSAGE(p.status == 400, p.describe());
    CHECK(!p.error().empty());
  }
  CHECK(c.get(type_path(type)).status == 404);
  CHECK(c.get(type_path(unique_name("never-set"))).status == 404);
}

TEST_CASE("server: a push the receiver never answers times out and is retried") {
  DELAYQ_FOR_EACH_STORE(kind);
  // Silent on the first call, then 200.
  push_receiver receiver([](const push_call&, std::size_t index) { return index < 1 ? 0u : 200u; });
  test_store store(kind);
  auto server = server_process::start(store, {"--retry-base", "100"});
  INFO(server->output_tail());
  http_client c(server->port());
  const std::string type = unique_name("silent");
  auto p = c.put(type_path(type), json{{"push_url", receiver.url()}, {"timeout_ms", 300}});
  REQUIRE_MESSAGE(p.status == 204, p.describe());
  auto r = add_task(c, type, "slow", 0);
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  const std::string id = id_of(r);

  REQUIRE(receiver.wait_for_calls(2));
  CHECK(eventually([&] { return c.get(task_path(id)).status == 404; }));
  CHECK(dead_letter(c, id).is_null());
  const auto calls = receiver.calls();
  REQUIRE(calls.size() >= 2);
  CHECK(calls[0].attempt == "1");
  CHECK(calls[1].attempt == "2");
  CHECK(calls[1].body["attempts"] == 1);
}

// The drain (docs/server.md, "Running it"): a push in flight at SIGTERM is
// awaited up to --drain-timeout, and its 2xx settles the task for good.
TEST_CASE("server: a push answered 2xx during the drain is settled and never pushed again") {
  DELAYQ_FOR_EACH_STORE(kind);
  // The first call is held until the test answers it; every later one 200.
  push_receiver receiver(
      [](const push_call&, std::size_t index) { return index == 0 ? push_receiver::hold : 200u; });
  test_store store(kind);
  const std::string type = unique_name("drained");
  std::string id;
  {
    auto server = server_process::start(store);
    INFO(server->output_tail());
    http_client c(server->port());
    // One push at a time: after the restart the tasks go out in due order.
    auto p = c.put(type_path(type),
                   json{{"push_url", receiver.url()}, {"timeout_ms", 600000}, {"concurrency", 1}});
    REQUIRE_MESSAGE(p.status == 204, p.describe());
    auto r = add_task(c, type, "answered while draining", 0);
    REQUIRE_MESSAGE(r.status == 201, r.describe());
    id = id_of(r);
    REQUIRE(receiver.wait_for_task(id));
    c.close();

    server->signal(SIGTERM);
    // The drain has stopped the engine and waits for the push: answer it now.
    CHECK_MESSAGE(server->wait_for_stderr("drain: 1 push in flight"),
                  "the server exited without waiting for the push in flight");
    receiver.answer_held(200);
    const int status = server->wait();
    CHECK_MESSAGE((WIFEXITED(status) && WEXITSTATUS(status) == 0), describe_status(status));
    CHECK(server->stderr_text().find("unanswered") == std::string::npos);
  }
  // One worker: were the task still stored, it would be pushed (it is
  // overdue, due first) before a marker added after the start.
  auto server = server_process::start(store, {"--workers", "1"});
  INFO(server->output_tail());
  http_client c(server->port());
  auto r = add_task(c, type, "marker", 0);
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  const std::string marker = id_of(r);
  REQUIRE(receiver.wait_for_task(marker));
  CHECK(receiver.calls_for(id) == 1);
  CHECK(c.get(task_path(id)).status == 404);
  CHECK(dead_letter(c, id).is_null());
}

TEST_CASE("server: a push unanswered at the drain deadline is pushed again after the restart") {
  DELAYQ_FOR_EACH_STORE(kind);
  // The first call is never answered; every later one 200.
  push_receiver receiver(
      [](const push_call&, std::size_t index) { return index == 0 ? 0u : 200u; });
  test_store store(kind);
  const std::string type = unique_name("undrained");
  std::string id;
  {
    auto server = server_process::start(store, {"--drain-timeout", "200ms"});
    INFO(server->output_tail());
    http_client c(server->port());
    auto p = c.put(type_path(type), json{{"push_url", receiver.url()}, {"timeout_ms", 600000}});
    REQUIRE_MESSAGE(p.status == 204, p.describe());
    auto r = add_task(c, type, "unanswered", 0);
    REQUIRE_MESSAGE(r.status == 201, r.describe());
    id = id_of(r);
    REQUIRE(receiver.wait_for_task(id));
    c.close();

    server->signal(SIGTERM);
    CHECK(server->wait_for_stderr("drain: 1 push unanswered at the deadline"));
    const int status = server->wait();
    CHECK_MESSAGE((WIFEXITED(status) && WEXITSTATUS(status) == 0), describe_status(status));
  }
  auto server = server_process::start(store);
  INFO(server->output_tail());
  http_client c(server->port());
  REQUIRE(receiver.wait_for_calls(2));
  const auto calls = receiver.calls();
  CHECK(calls[1].task_id == id);
  // Abandoned, not failed: the attempt did not count.
  CHECK(calls[1].attempt == "1");
  CHECK(calls[1].body["attempts"] == 0);
  CHECK(eventually([&] { return c.get(task_path(id)).status == 404; }));
  CHECK(dead_letter(c, id).is_null());
}

// docs/server.md, "Running it": SIGINT drains like SIGTERM, and a second
// signal during the drain exits at once with status 130. A push held
// unanswered keeps the drain open (the drain waits for pushes in flight), so
// the second signal is known to arrive while it runs. The signal handling
// does not touch the store: SQLite only.
TEST_CASE("server: SIGINT drains like SIGTERM, and a second signal during the drain exits 130") {
  int first = SIGINT;
  int second = 0;  // none: the drain is let finish
  SUBCASE("SIGINT alone drains and exits 0") {}
  SUBCASE("SIGINT, then SIGTERM during the drain") { second = SIGTERM; }
  SUBCASE("SIGTERM, then SIGINT during the drain") {
    first = SIGTERM;
    second = SIGINT;
  }
  SUBCASE("SIGINT twice") { second = SIGINT; }
  INFO("first signal ", first, ", second ", second);

  push_receiver receiver([](const push_call&, std::size_t) { return push_receiver::hold; });
  test_store store(store_kind::sqlite);
  const std::string type = unique_name("signalled");
  const std::string later_type = unique_name("later");
  std::string later_id;
  {
    // A drain deadline far enough that an exit before it is the second
    // signal's doing, near enough that a server ignoring it fails the
    // check below instead of the test's guard.
    auto server = server_process::start(store, {"--drain-timeout", "20s"});
    INFO(server->output_tail());
    http_client c(server->port());
    auto p = c.put(type_path(type), json{{"push_url", receiver.url()}, {"timeout_ms", 600000}});
    REQUIRE_MESSAGE(p.status == 204, p.describe());
    auto l = add_task(c, later_type, "acknowledged before the signal", 3600000);
    REQUIRE_MESSAGE(l.status == 201, l.describe());
    later_id = id_of(l);
    auto r = add_task(c, type, "held through the drain", 0);
    REQUIRE_MESSAGE(r.status == 201, r.describe());
    REQUIRE(receiver.wait_for_task(id_of(r)));
    c.close();

    server->signal(first);
    REQUIRE_MESSAGE(server->wait_for_stderr("drain: 1 push in flight"),
                    "the server did not drain on signal ", first);
    if (second != 0) {
      server->signal(second);
    } else {
      receiver.answer_held(200);
    }
    const int status = server->wait();
    const int expected = second != 0 ? 130 : 0;
    CHECK_MESSAGE((WIFEXITED(status) && WEXITSTATUS(status) == expected), describe_status(status),
                  ", expected exit status ", expected);
  }
  // Nothing acknowledged is lost either way.
  auto server = server_process::start(store);
  INFO(server->output_tail());
  http_client c(server->port());
  auto g = c.get(task_path(later_id));
  CHECK_MESSAGE(g.status == 200, g.describe());
}
