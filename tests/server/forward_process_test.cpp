// delayq-server process tests: under --cluster a call on a task's id answers
// on any instance (docs/scale-out.md, "Calls on any instance"). Two
// instances on one Redis; every call below names a task of b's shards and is
// made on a, which forwards it to b once and brings b's answer back. When b
// is gone, a says so (503 owner_unreachable: nothing was done) until it has
// taken b's shards over, and a GET reads the store meanwhile.
#include <doctest/doctest.h>

#include "cluster_support.hpp"
#include "push_receiver.hpp"

namespace {

using namespace delayq::server_test;

const std::vector<std::string> names{"a", "b"};

// The next id from `stem` whose shard rendezvous hashing gives to `owner`.
std::string id_owned_by(const std::string& owner, const std::string& stem) {
  for (int i = 0;; ++i) {
    std::string id = stem + "-" + std::to_string(i);
    const std::uint32_t s = delayq::shard_of(id, shard_count);
    if (names[delayq::rendezvous_owner(s, names)] == owner) return id;
  }
}

// `name` in lower case (http_response::headers keys are).
std::string header(const http_response& r, const std::string& name) {
  const auto it = r.headers.find(name);
  return it == r.headers.end() ? std::string{} : it->second;
}

// Instances a and b on one store, with clients of each; b is resumed
// (SIGCONT) when the test ends, however it ends, for the tests that stall
// it (SIGSTOP).
struct instance_pair {
  explicit instance_pair(const std::string& lease = "1s",
                         const std::vector<std::string>& extra = {})
      : a(start_instance(uri, "a", lease, extra)), b(start_instance(uri, "b", lease, extra)) {}
  ~instance_pair() { b->signal(SIGCONT); }
  std::string uri = cluster_store_uri(test_redis_uri());
  std::unique_ptr<server_process> a;
  std::unique_ptr<server_process> b;
  http_client ca{a->port()};
  http_client cb{b->port()};
};

// For a stalled b: leases long enough that b's shards stay b's while a call
// waits for it, and a 500 ms forward timeout.
const std::vector<std::string> quick_forward{"--forward-timeout", "500ms"};

}  // namespace

TEST_CASE("scale-out: a call on a task's id answers on any instance") {
  const std::string uri = cluster_store_uri(test_redis_uri());
  // 2 s leases: b's shards stay b's for a while after its kill below.
  const std::vector<std::string> fail_fast{"--retry-max", "2", "--retry-base", "1"};
  auto a = start_instance(uri, "a", "2s", fail_fast);
  auto b = start_instance(uri, "b", "2s", fail_fast);
  INFO(a->output_tail());
  INFO(b->output_tail());
  http_client ca(a->port());
  http_client cb(b->port());
  REQUIRE(eventually([&] { return settled(names, {&ca, &cb}); }));
  const std::string type = "fwd";  // no push target: consumers reserve it

  // A schedule naming an id: b decides (it holds the shard), and keeps it.
  const std::string x = id_owned_by("b", "x");
  auto r = add_task(ca, type, "x", 600000, x);
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  CHECK(r.body_json["id"] == x);
  CHECK(header(r, "x-delayq-instance") == "b");
  CHECK(cb.get(task_path(x)).status == 200);
  r = add_task(ca, type, "x again", 600000, x);
  CHECK_MESSAGE(r.error() == "duplicate_id", r.describe());

  // A batch whose ids are all b's goes to b whole; ids of both are split
  // (cluster_batch_process_test.cpp has the rest).
  const std::string b1 = id_owned_by("b", "b1"), b2 = id_owned_by("b", b1);
  r = ca.post("/v1/tasks:batch",
              json{{"tasks", json::array({{{"type", type}, {"delay_ms", 600000}, {"id", b1}},
                                          {{"type", type}, {"delay_ms", 600000}},
                                          {{"type", type}, {"delay_ms", 600000}, {"id", b2}}})}});
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  CHECK(header(r, "x-delayq-instance") == "b");
  CHECK(cb.get(task_path(b1)).status == 200);
  CHECK(cb.get(task_path(b2)).status == 200);
  const std::string a1 = id_owned_by("a", "a1"), b3 = id_owned_by("b", "b3");
  r = ca.post("/v1/tasks:batch",
              json{{"tasks", json::array({{{"type", type}, {"delay_ms", 600000}, {"id", a1}},
                                          {{"type", type}, {"delay_ms", 600000}, {"id", b3}}})}});
  CHECK_MESSAGE(r.status == 201, r.describe());
  CHECK(r.body_json["ids"] == json{a1, b3});
  CHECK(ca.get(task_path(a1)).status == 200);
  CHECK(cb.get(task_path(b3)).status == 200);

  // GET and reschedule through a: b's view, b's change.
  auto g = ca.get(task_path(x));
  REQUIRE_MESSAGE(g.status == 200, g.describe());
  CHECK(g.body_json["state"] == "delayed");
  CHECK(header(g, "x-delayq-instance") == "b");
  const auto due = g.body_json["due_ms"].get<std::int64_t>();
  r = ca.post(task_path(x) + "/reschedule", json{{"delay_ms", 1200000}});
  CHECK_MESSAGE(r.status == 204, r.describe());
  CHECK(cb.get(task_path(x)).body_json["due_ms"].get<std::int64_t>() > due);

  // Cancel through a: b cancelled it (a true cancel: it will not run).
  r = ca.del(task_path(x));
  CHECK_MESSAGE(r.status == 204, r.describe());
  CHECK(cb.get(task_path(x)).status == 404);
  CHECK(server_number(cb, "cancelled") == 1);
  CHECK(ca.del(task_path(x)).status == 404);

  // Signal through a: b counts it.
  const std::string t = id_owned_by("b", "t");
  r = ca.post(
      "/v1/tasks",
      json{
          {"type", type}, {"payload", "t"}, {"delay_ms", 600000}, {"id", t}, {"trigger_count", 2}});
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  r = ca.post(task_path(t) + "/signal", json::object());
  REQUIRE_MESSAGE(r.status == 200, r.describe());
  CHECK(r.body_json["signals"] == 1);
  CHECK(cb.get(task_path(t)).body_json["signals"] == 1);

  // A consumer that reserved from b ends its lease through a: touch, fail
  // (until the task is a dead letter), requeue, finish.
  const std::string y = id_owned_by("b", "y");
  REQUIRE(add_task(ca, type, "y", 0, y).status == 201);
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto task = reserve_one(cb, {type});
    REQUIRE(task.is_object());
    REQUIRE(task["id"] == y);
    const std::string lease = task["lease"].get<std::string>();
    if (attempt == 0) {
      r = ca.post(task_path(y) + "/touch", json{{"lease", lease}});
      CHECK_MESSAGE(r.status == 204, r.describe());
    }
    r = ca.post(task_path(y) + "/fail", json{{"lease", lease}, {"error", "boom"}});
    REQUIRE_MESSAGE(r.status == 204, r.describe());
  }
  REQUIRE(eventually([&] { return server_number(cb, "dead") == 1; }));
  r = ca.post("/v1/dead/" + path_escape(y) + "/requeue", json::object());
  REQUIRE_MESSAGE(r.status == 204, r.describe());
  auto task = reserve_one(cb, {type});
  REQUIRE(task.is_object());
  REQUIRE(task["id"] == y);
  r = ca.post(task_path(y) + "/finish", json{{"lease", task["lease"]}});
  CHECK_MESSAGE(r.status == 204, r.describe());
  REQUIRE(eventually([&] { return cb.get(task_path(y)).status == 404; }));

  // Once only: a call a member forwarded here is answered here, not sent on
  // (its marker made with the cluster's key, here the token).
  r = ca.request_text(http::verb::delete_, task_path(t), std::nullopt, std::nullopt,
                      {{"X-Delayq-Forwarded-By",
                        forwarding_marker(test_token, "b", now_ms(), "DELETE", task_path(t))}});
  CHECK_MESSAGE(r.status == 421, r.describe());
  CHECK(r.error() == "not_owner");
  CHECK(cb.get(task_path(t)).status == 200);

  // b dies. Until a holds b's shards a call on them cannot be made (503
  // owner_unreachable, and nothing was done), or a makes it itself; a GET
  // reads the store.
  const std::string w = id_owned_by("b", "w");
  REQUIRE(add_task(ca, type, "w", 600000, w).status == 201);
  // And a consumer holds a lease of b's when b dies.
  const std::string z = id_owned_by("b", "z");
  REQUIRE(add_task(ca, type, "z", 0, z).status == 201);
  const auto reserved = reserve_one(cb, {type});
  REQUIRE(reserved.is_object());
  REQUIRE(reserved["id"] == z);
  b->kill_now();
  g = ca.get(task_path(w));
  CHECK_MESSAGE(g.status == 200, g.describe());
  r = ca.del(task_path(w));
  // 204 once a took b's shards over. outcome_unknown if the DELETE was
  // written on a kept-alive connection whose end b's kernel had not shown
  // yet (nothing tells a dead owner from one that read the call and died).
  const bool unreachable = r.status == 503 && r.error() == "owner_unreachable";
  const bool unknown = r.status == 503 && r.error() == "outcome_unknown";
  CHECK_MESSAGE((unreachable || unknown || r.status == 204), r.describe());
  MESSAGE("a call right after b's kill: ", r.status, " ", r.error());
  REQUIRE(eventually([&] { return shards_held(ca) == shard_count; }));
  // b was dead: a 503 did nothing.
  CHECK(ca.get(task_path(w)).status == (r.status == 204 ? 404 : 200));
  CHECK(ca.del(task_path(t)).status == 204);
  // b's lease cannot be ended any more (409, not "try again"); a delivers
  // the task again.
  r = ca.post(task_path(z) + "/finish", json{{"lease", reserved["lease"]}});
  CHECK_MESSAGE(r.status == 409, r.describe());
  CHECK(r.error() == "stale_lease");
  const auto again = reserve_one(ca, {type});
  REQUIRE(again.is_object());
  CHECK(again["id"] == z);
  CHECK(again["lease"].get<std::string>().ends_with("@a"));
}

TEST_CASE("scale-out: a lease is ended where it was handed out, during a hand-over too") {
  instance_pair pair;
  auto& [uri, a, b, ca, cb] = pair;
  INFO(a->output_tail());
  INFO(b->output_tail());
  REQUIRE(eventually([&] { return settled(names, {&ca, &cb}); }));
  const std::string type = "fwd.handover";

  // A task of a shard b owns now, and c once it joins.
  const std::vector<std::string> three{"a", "b", "c"};
  std::string y;
  for (int k = 0; y.empty(); ++k) {
    const std::string id = "y-" + std::to_string(k);
    const std::uint32_t s = delayq::shard_of(id, shard_count);
    if (names[delayq::rendezvous_owner(s, names)] == "b" &&
        three[delayq::rendezvous_owner(s, three)] == "c")
      y = id;
  }
  REQUIRE(add_task(ca, type, "y", 0, y).status == 201);
  auto task = reserve_one(cb, {type});
  REQUIRE(task.is_object());
  REQUIRE(task["id"] == y);
  const std::string lease = task["lease"].get<std::string>();
  CHECK(lease.ends_with("@b"));

  // c joins: b keeps y's shard while the attempt runs on it (leaving), and
  // a names c as its owner. A touch on a and a finish on c reach b anyway.
  auto c = start_instance(uri, "c");
  INFO(c->output_tail());
  http_client cc(c->port());
  REQUIRE(eventually([&] { return server_number(cb, "shards_leaving") == 1; }));
  auto r = ca.post(task_path(y) + "/touch", json{{"lease", lease}});
  CHECK_MESSAGE(r.status == 204, r.describe());
  r = cc.post(task_path(y) + "/finish", json{{"lease", lease}});
  CHECK_MESSAGE(r.status == 204, r.describe());
  CHECK(header(r, "x-delayq-instance") == "b");
  // Settled, the shard moves on, and the task is gone.
  REQUIRE(eventually([&] { return settled(three, {&ca, &cb, &cc}); }));
  CHECK(cc.get(task_path(y)).status == 404);
}

TEST_CASE("scale-out: a call forwarded to a stalled owner answers outcome_unknown") {
  instance_pair pair("5s", quick_forward);
  auto& [uri, a, b, ca, cb] = pair;
  INFO(a->output_tail());
  REQUIRE(eventually([&] { return settled(names, {&ca, &cb}); }));
  const std::string x = id_owned_by("b", "x");
  REQUIRE(add_task(ca, "fwd.stall", "x", 600000, x).status == 201);

  // b's kernel takes the connection and the request; b answers nothing.
  b->signal(SIGSTOP);
  auto r = ca.del(task_path(x));
  CHECK_MESSAGE(r.status == 503, r.describe());
  CHECK(r.error() == "outcome_unknown");
  b->signal(SIGCONT);
  // b goes on serving, and the cancel it read meanwhile may have been made.
  const auto g = cb.get(task_path(x));
  CHECK((g.status == 200 || g.status == 404));
}

TEST_CASE("scale-out: tasks:finish sends each lease's finish where it was handed out") {
  instance_pair pair;
  auto& [uri, a, b, ca, cb] = pair;
  INFO(a->output_tail());
  INFO(b->output_tail());
  REQUIRE(eventually([&] { return settled(names, {&ca, &cb}); }));
  const std::string type = "fwd.batch-finish";
  const std::string a1 = id_owned_by("a", "fa"), b1 = id_owned_by("b", "fb"),
                    b2 = id_owned_by("b", b1);
  for (const auto& id : {a1, b1, b2}) REQUIRE(add_task(ca, type, id, 0, id).status == 201);
  // Each instance hands out the tasks of its own shards.
  std::map<std::string, std::string> lease;
  for (int round = 0; round < 20 && lease.size() < 3; ++round)
    for (http_client* c : {&ca, &cb})
      for (const json& t : reserved_tasks(reserve(*c, {type}, 200, 3)))
        lease[str(t, "id")] = str(t, "lease");
  REQUIRE(lease.size() == 3);
  CHECK(lease[a1].ends_with("@a"));
  CHECK(lease[b1].ends_with("@b"));
  // All on a: b's go to b in one call (one of them a lease b never gave).
  const json list = json::array(
      {json{{"id", b1}, {"lease", lease[b1]}}, json{{"id", a1}, {"lease", lease[a1]}},
       json{{"id", b2}, {"lease", "not-this-one@b"}}, json{{"id", b2}, {"lease", lease[b2]}}});
  auto r = ca.post("/v1/tasks:finish", json{{"tasks", list}});
  REQUIRE_MESSAGE(r.status == 200, r.describe());
  const json& results = r.body_json["results"];
  REQUIRE_MESSAGE(results.size() == 4, r.describe());
  const std::vector<int> expect{204, 204, 409, 204};
  for (std::size_t i = 0; i < 4; ++i) {
    CAPTURE(i);
    CHECK(results[i]["id"] == list[i]["id"]);
    CHECK(results[i]["status"] == expect[i]);
  }
  CHECK(results[2]["error"] == "stale_lease");
  for (const auto& id : {a1, b1, b2}) {
    CAPTURE(id);
    CHECK(ca.get(task_path(id)).status == 404);
    CHECK(cb.get(task_path(id)).status == 404);
  }
}

TEST_CASE("scale-out: tasks:finish says per finish that a stalled holder never answered") {
  // The finish forwarded to b gets no answer: outcome_unknown for it (b may
  // have done it), and the "next" reserves nothing though a task is ready.
  instance_pair pair("5s", quick_forward);
  auto& [uri, a, b, ca, cb] = pair;
  INFO(a->output_tail());
  INFO(b->output_tail());
  REQUIRE(eventually([&] { return settled(names, {&ca, &cb}); }));
  const std::string on_b = "fwd.batch-stall-b", on_a = "fwd.batch-stall-a";
  const std::string x = id_owned_by("b", "x"), y = id_owned_by("a", "y");
  REQUIRE(add_task(ca, on_b, "x", 0, x).status == 201);
  const auto held = reserve_one(cb, {on_b});
  REQUIRE(held.is_object());
  REQUIRE(held["id"] == x);
  REQUIRE(add_task(ca, on_a, "y", 0, y).status == 201);  // ready on a for a "next"

  b->signal(SIGSTOP);
  auto r = ca.post("/v1/tasks:finish",
                   json{{"tasks", json::array({json{{"id", x}, {"lease", held["lease"]}}})},
                        {"next", {{"types", {on_a}}, {"wait_ms", 2000}}}});
  REQUIRE_MESSAGE(r.status == 200, r.describe());
  CHECK(r.body_json["results"][0]["id"] == x);
  CHECK(r.body_json["results"][0]["status"] == 503);
  CHECK(r.body_json["results"][0]["error"] == "outcome_unknown");
  CHECK(reserved_tasks(r).empty());
  b->signal(SIGCONT);
  const auto t = reserve_one(ca, {on_a});  // still there for the next consumer
  REQUIRE(t.is_object());
  CHECK(t["id"] == y);
}
