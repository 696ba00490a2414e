// delayq-server process tests: bugs the fault harness (tests/faults/,
// docs/faults.md) found in a cluster, each kept as a regression test.
//
// A ready task waits in the lease broker for a consumer. An instance that
// stalls (or is cut off from Redis) with such a task loses its shard to
// another instance, which runs the task and, once a consumer finished it,
// removes it. When the stalled instance came back, its broker still held
// the old attempt and handed it to the next consumer that reserved there: a
// task finished with a 204 was delivered again (the harness counted it as
// resurrected, under partition-redis). The broker now asks the engine
// whether the attempt still runs under its shard's lease before it leases
// a task (engine::attempt_current()).
#include <doctest/doctest.h>

#include <csignal>

#include "cluster_support.hpp"
#include "delayq/shard_leases.hpp"

namespace {

using namespace delayq::server_test;

// An id whose shard rendezvous hashing gives `owner` among `names`.
std::string id_owned_by(const std::string& owner, const std::vector<std::string>& names) {
  const std::string stem = unique_name("stale");
  for (int k = 0;; ++k) {
    std::string id = stem + "-" + std::to_string(k);
    if (names[delayq::rendezvous_owner(delayq::shard_of(id, shard_count), names)] == owner)
      return id;
  }
}

}  // namespace

TEST_CASE("faults: a ready task of a shard lost while stalled is not handed out after it resumes") {
  const std::string uri = cluster_store_uri(test_redis_uri());
  const std::vector<std::string> names{"a", "b"};
  auto a = start_instance(uri, "a");
  auto b = start_instance(uri, "b");
  INFO(a->output_tail());
  INFO(b->output_tail());
  struct resume_guard {
    server_process& p;
    ~resume_guard() { p.signal(SIGCONT); }
  } resume_a{*a};
  http_client ca(a->port());
  http_client cb(b->port());
  REQUIRE(eventually([&] { return settled(names, {&ca, &cb}); }));

  // A pull task of a's shard, due at once, that no consumer reserves on a:
  // it waits in a's broker, ready.
  const std::string id = id_owned_by("a", names);
  auto add =
      ca.post("/v1/tasks", json{{"type", "stale"}, {"payload", "p"}, {"delay_ms", 0}, {"id", id}});
  REQUIRE_MESSAGE(add.status == 201, add.describe());
  REQUIRE(eventually([&] {
    auto g = ca.get("/v1/tasks/" + id);
    return g.status == 200 && g.body_json["state"] == "ready";
  }));

  // a stalls past its lease; b takes every shard, reads the task, and a
  // consumer of b gets it and finishes it.
  a->signal(SIGSTOP);
  REQUIRE(eventually([&] { return shards_held(cb) == shard_count; }));
  auto r = cb.post("/v1/reserve", json{{"types", {"stale"}}, {"wait_ms", 10000}});
  REQUIRE_MESSAGE(r.status == 200, r.describe());
  REQUIRE(r.body_json["tasks"].size() == 1);
  CHECK(r.body_json["tasks"][0]["id"] == id);
  auto fin =
      cb.post("/v1/tasks/" + id + "/finish", json{{"lease", r.body_json["tasks"][0]["lease"]}});
  REQUIRE_MESSAGE(fin.status == 204, fin.describe());

  // a resumes: a consumer reserving there right away must not get the task
  // again (its attempt's lease is gone), nor later.
  a->signal(SIGCONT);
  auto again = ca.post("/v1/reserve", json{{"types", {"stale"}}, {"wait_ms", 0}});
  REQUIRE_MESSAGE(again.status == 200, again.describe());
  CHECK_MESSAGE(again.body_json["tasks"].empty(),
                "a handed out a task another instance ran and finished: " << again.body);
  auto later = ca.post("/v1/reserve", json{{"types", {"stale"}}, {"wait_ms", 1500}});
  REQUIRE_MESSAGE(later.status == 200, later.describe());
  CHECK(later.body_json["tasks"].empty());
  // And it counted the one it gave back.
  REQUIRE(eventually([&] {
    auto s = ca.get("/v1/stats");
    return s.status == 200 && s.body_json["server"]["stale_given_back"] == 1;
  }));
}
