// delayq-server process tests: under --cluster a POST /v1/tasks:batch whose
// ids belong to several instances is split by owner, each part forwarded to
// its owner (and stored there in one atomic write), and answered once with
// every id (docs/scale-out.md, "Batches across owners"). Three instances on
// one Redis.
#include <doctest/doctest.h>

#include "cluster_support.hpp"

namespace {

using namespace delayq::server_test;

const std::vector<std::string> trio{"a", "b", "c"};

// The next id from `stem` whose shard rendezvous hashing gives to `owner`
// among the three.
std::string batch_id_of(const std::string& owner, const std::string& stem) {
  for (int i = 0;; ++i) {
    std::string id = stem + "-" + std::to_string(i);
    if (trio[delayq::rendezvous_owner(delayq::shard_of(id, shard_count), trio)] == owner) return id;
  }
}

json batch_task(const std::string& type, const std::string& id, const std::string& conflict = {}) {
  json t{{"type", type}, {"payload", id.empty() ? "no id" : id}, {"delay_ms", 600000}};
  if (!id.empty()) t["id"] = id;
  if (!conflict.empty()) t["conflict"] = conflict;
  return t;
}

// Pending tasks on all three, by GET /v1/stats.
double pending_on_all(std::vector<http_client*> clients) {
  double n = 0;
  for (http_client* c : clients) n += server_number(*c, "pending");
  return n;
}

}  // namespace

TEST_CASE("scale-out: a batch of three owners' ids is stored by each owner, on any instance") {
  const std::string uri = cluster_store_uri(test_redis_uri());
  auto a = start_instance(uri, "a", "2s");
  auto b = start_instance(uri, "b", "2s");
  auto c = start_instance(uri, "c", "2s");
  INFO(a->output_tail());
  http_client ca(a->port()), cb(b->port()), cc(c->port());
  const std::vector<http_client*> all{&ca, &cb, &cc};
  REQUIRE(eventually([&] { return settled(trio, all); }));
  const std::string type = "batch.split";

  // Sent to each instance in turn: ids of all three owners and two tasks
  // without an id (stored where the batch landed).
  for (std::size_t at = 0; at < all.size(); ++at) {
    const std::string stem = "t" + std::to_string(at);
    std::vector<std::string> ids{batch_id_of("a", stem + "a"), batch_id_of("b", stem + "b"),
                                 batch_id_of("c", stem + "c")};
    json tasks =
        json::array({batch_task(type, ids[2]), batch_task(type, ""), batch_task(type, ids[0]),
                     batch_task(type, ids[1]), batch_task(type, "")});
    auto r = all[at]->post("/v1/tasks:batch", json{{"tasks", tasks}});
    REQUIRE_MESSAGE(r.status == 201, r.describe());
    const json& got = r.body_json["ids"];
    REQUIRE(got.size() == 5);
    CHECK(got[0] == ids[2]);
    CHECK(got[2] == ids[0]);
    CHECK(got[3] == ids[1]);
    // Each owner holds its own (asked directly: no forwarding).
    for (std::size_t k = 0; k < ids.size(); ++k) {
      auto g = all[k]->get(task_path(ids[k]));
      CHECK_MESSAGE(g.status == 200, g.describe());
    }
    for (const std::size_t k : {std::size_t{1}, std::size_t{4}}) {
      auto g = all[at]->get(task_path(got[k].get<std::string>()));
      CHECK_MESSAGE(g.status == 200, g.describe());
    }
  }
  CHECK(eventually([&] { return pending_on_all(all) == 15; }));

  // A part an owner refuses (an id it has already, conflict "reject"): the
  // other parts are stored, and the answer says which tasks were.
  const std::string dup = batch_id_of("c", "dup");
  REQUIRE(add_task(cc, type, "dup", 600000, dup).status == 201);
  const std::string fresh_a = batch_id_of("a", "fresh"), fresh_b = batch_id_of("b", "fresh");
  json tasks =
      json::array({batch_task(type, fresh_a), batch_task(type, fresh_b), batch_task(type, dup)});
  auto r = ca.post("/v1/tasks:batch", json{{"tasks", tasks}});
  CHECK_MESSAGE(r.status == 409, r.describe());
  CHECK(r.error() == "duplicate_id");
  CHECK(r.body_json["ids"] == json{fresh_a, fresh_b, nullptr});
  REQUIRE(r.body_json["failed"].size() == 1);
  CHECK(r.body_json["failed"][0]["instance"] == "c");
  CHECK(r.body_json["failed"][0]["tasks"] == json{2});
  CHECK(r.body_json["failed"][0]["message"].get<std::string>().starts_with("tasks[2]"));
  CHECK(eventually([&] { return pending_on_all(all) == 18; }));

  // Sent again with conflict "keep": every id is there once, nothing twice.
  for (json& t : tasks) t["conflict"] = "keep";
  r = cb.post("/v1/tasks:batch", json{{"tasks", tasks}});
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  CHECK(r.body_json["ids"] == json{fresh_a, fresh_b, dup});
  CHECK(eventually([&] { return pending_on_all(all) == 18; }));

  // A batch with a bad task is refused whole before any part is sent.
  const std::string never = batch_id_of("b", "never");
  r = ca.post("/v1/tasks:batch",
              json{{"tasks", json::array({batch_task(type, never),
                                          json{{"type", type}, {"delay_ms", -5}}})}});
  CHECK_MESSAGE(r.status == 400, r.describe());
  CHECK(cb.get(task_path(never)).status == 404);
}

TEST_CASE("scale-out: a batch part whose owner stalls is named, and a retry stores nothing twice") {
  const std::string uri = cluster_store_uri(test_redis_uri());
  // Leases long enough that c's shards stay c's while it is stopped.
  const std::vector<std::string> quick{"--forward-timeout", "500ms"};
  auto a = start_instance(uri, "a", "5s", quick);
  auto b = start_instance(uri, "b", "5s", quick);
  auto c = start_instance(uri, "c", "5s", quick);
  struct resume_guard {
    server_process& p;
    ~resume_guard() { p.signal(SIGCONT); }
  } resume_c{*c};
  INFO(a->output_tail());
  http_client ca(a->port()), cb(b->port()), cc(c->port());
  const std::vector<http_client*> all{&ca, &cb, &cc};
  REQUIRE(eventually([&] { return settled(trio, all); }));
  const std::string type = "batch.stall";
  const std::string ia = batch_id_of("a", "s"), ib = batch_id_of("b", "s"),
                    ic = batch_id_of("c", "s");
  json tasks = json::array(
      {batch_task(type, ia, "keep"), batch_task(type, ic, "keep"), batch_task(type, ib, "keep")});

  // c's kernel takes the part; c answers nothing: its part's outcome is
  // unknown, the others are stored.
  c->signal(SIGSTOP);
  auto r = ca.post("/v1/tasks:batch", json{{"tasks", tasks}});
  CHECK_MESSAGE(r.status == 503, r.describe());
  CHECK(r.error() == "outcome_unknown");
  CHECK(r.body_json["ids"] == json{ia, nullptr, ib});
  REQUIRE(r.body_json["failed"].size() == 1);
  CHECK(r.body_json["failed"][0]["instance"] == "c");
  c->signal(SIGCONT);

  // Sent again (conflict "keep"): 201, and each task is stored once.
  REQUIRE(eventually([&] {
    r = ca.post("/v1/tasks:batch", json{{"tasks", tasks}});
    return r.status == 201;
  }));
  CHECK(r.body_json["ids"] == json{ia, ic, ib});
  CHECK(eventually([&] { return pending_on_all(all) == 3; }));
}
