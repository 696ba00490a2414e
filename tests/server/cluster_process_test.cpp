// delayq-server process tests: three instances sharing one store
// (docs/scale-out.md), with one instance killed (SIGKILL, then restarted)
// and one stalled past its lease (SIGSTOP, then SIGCONT) in the middle of a
// run. A push receiver in the test process records every delivery with the
// instance that made it (X-Delayq-Instance).
//
// On one Redis (DELAYQ_TEST_REDIS) under the `server` label, and on the local
// Redis Cluster (DELAYQ_TEST_REDIS_CLUSTER, scripts/with-redis-cluster.sh)
// under the `cluster` label: that case is marked skip, so the `server`
// discovery does not list it; tests/server/CMakeLists.txt runs it with
// --no-skip inside with-redis-cluster.sh.
//
// Push targets are cluster-wide: a PUT or DELETE /v1/types on one instance
// reaches the running others through the store's setting notice
// (engine_options::on_settings_changed). The second case here shows that;
// the first sets its target before `b` and `c` start, so every task is
// pushed from the start.
#include <doctest/doctest.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>

#include "cluster_support.hpp"
#include "delayq/shard_leases.hpp"
#include "push_receiver.hpp"

namespace {

using namespace delayq::server_test;

constexpr std::size_t task_count = 10000;
constexpr std::int64_t spread_ms = 20000;  // delays over ~20 s

void run_three_instances(const std::string& base_uri) {
  push_receiver receiver([](const push_call&, std::size_t) { return 200u; });
  const std::string uri = cluster_store_uri(base_uri);
  const std::string type = "scale";

  auto a = start_instance(uri, "a");
  INFO(a->output_tail());
  http_client ca(a->port());
  auto p = ca.put("/v1/types/" + type, json{{"push_url", receiver.url()}, {"concurrency", 64}});
  REQUIRE_MESSAGE(p.status == 204, p.describe());
  auto b = start_instance(uri, "b");
  auto c = start_instance(uri, "c");
  // c is SIGSTOPped below: never leave it stopped when a check throws.
  struct resume_guard {
    std::unique_ptr<server_process>& p;
    ~resume_guard() {
      if (p) p->signal(SIGCONT);
    }
  } resume_c{c};
  std::optional<http_client> cb(std::in_place, b->port());
  http_client cc(c->port());
  // Balanced: each holds some, together all, none twice (the leases say so;
  // the sum says none is missing).
  REQUIRE(eventually([&] {
    const int x = shards_held(ca), y = shards_held(*cb), z = shards_held(cc);
    return x > 0 && y > 0 && z > 0 && x + y + z == shard_count;
  }));

  // 10,000 tasks through all three, in batches, delays over ~20 s.
  std::set<std::string> acked;
  http_client* clients[] = {&ca, &*cb, &cc};
  constexpr std::size_t batch = 500;
  for (std::size_t i = 0; i < task_count; i += batch) {
    json tasks = json::array();
    for (std::size_t k = i; k < i + batch; ++k)
      tasks.push_back({{"type", type},
                       {"payload", std::to_string(k)},
                       {"delay_ms", static_cast<std::int64_t>(k) * spread_ms / task_count}});
    auto r = clients[(i / batch) % 3]->post("/v1/tasks:batch", json{{"tasks", tasks}});
    REQUIRE_MESSAGE(r.status == 201, r.describe());
    for (const auto& id : r.body_json["ids"]) acked.insert(id.get<std::string>());
  }
  REQUIRE(acked.size() == task_count);

  // SIGKILL b a fifth of the way through; restart it (same name) later.
  REQUIRE(receiver.wait_for_calls(task_count / 5));
  b->kill_now();
  REQUIRE(receiver.wait_for_calls(task_count * 2 / 5));
  // Every call of the killed b was recorded before the new b starts: the
  // last of them was sent before the kill, a fifth of the run ago.
  const std::size_t b_restarted_at = receiver.calls().size();
  b = start_instance(uri, "b");
  cb.emplace(b->port());

  // SIGSTOP c past its lease: the others take all its shards; then SIGCONT.
  REQUIRE(receiver.wait_for_calls(task_count * 3 / 5));
  c->signal(SIGSTOP);
  REQUIRE(eventually([&] { return shards_held(ca) + shards_held(*cb) == shard_count; }));
  // Taken before SIGCONT: every later call of c was made after it resumed.
  const std::size_t c_resumed_at = receiver.calls().size();
  c->signal(SIGCONT);
  REQUIRE(eventually([&] { return shards_held(cc) > 0; }));

  // Every acknowledged task ran at least once.
  std::map<std::string, std::vector<push_call>> runs;
  REQUIRE(eventually([&] {
    runs.clear();
    for (auto& call : receiver.calls()) runs[call.task_id].push_back(call);
    return std::all_of(acked.begin(), acked.end(), [&](auto& id) { return runs.count(id); });
  }));
  // A task ran twice only if it was running on an instance when that
  // instance died or stalled. A run is "disturbed" when b made it before its
  // kill, or c before its stall; or when c made it under a lease it lost in
  // the stall: its fence token (X-Delayq-Fence) is lower than the one
  // another instance ran the task under. Since an attempt starts only while
  // its lease is surely valid, such a run of c started before the stall and
  // its push reached the receiver only after SIGCONT. Every task has at
  // most one undisturbed run, and never two under one lease.
  std::size_t twice = 0, extra_runs = 0;
  std::map<std::string, std::size_t> by_instance;
  std::size_t unfenced = 0, misrouted = 0;
  for (const auto& [id, list] : runs) {
    for (const auto& run : list) {
      ++by_instance[run.instance];
      if (run.fence.empty() || run.fence == "0") ++unfenced;
      if (run.shard != std::to_string(delayq::shard_of(id, shard_count))) ++misrouted;
    }
    if (list.size() < 2) continue;
    ++twice;
    extra_runs += list.size() - 1;
    std::string story;
    for (const auto& run : list)
      story += " [" + run.instance + " call " + std::to_string(run.index) + " shard " + run.shard +
               " fence " + run.fence + " attempt " + run.attempt + "]";
    INFO("task ", id, " ran ", list.size(), " times:", story, " (b restarted at call ",
         b_restarted_at, ", c resumed at call ", c_resumed_at, ")");
    const auto fence_of = [](const push_call& run) { return std::stoull(run.fence); };
    std::size_t undisturbed = 0;
    std::set<std::string> leases;
    for (const auto& run : list) {
      REQUIRE(!run.fence.empty());
      CHECK_MESSAGE(leases.insert(run.instance + "/" + run.fence).second,
                    "two runs under one lease");
      const bool stale = std::any_of(list.begin(), list.end(), [&](const push_call& other) {
        return other.instance != run.instance && fence_of(other) > fence_of(run);
      });
      const bool disturbed = (run.instance == "b" && run.index < b_restarted_at) ||
                             (run.instance == "c" && (run.index < c_resumed_at || stale));
      if (!disturbed) ++undisturbed;
    }
    CHECK_MESSAGE(undisturbed <= 1, undisturbed, " runs by undisturbed instances");
  }
  for (const auto& [name, n] : by_instance)
    CHECK_MESSAGE(!name.empty(), n, " calls without X-Delayq-Instance");
  CHECK_MESSAGE(unfenced == 0, unfenced, " calls without X-Delayq-Fence");
  CHECK_MESSAGE(misrouted == 0, misrouted, " calls whose X-Delayq-Shard is not the task's shard");
  MESSAGE("calls: ", receiver.calls().size(), ", tasks run more than once: ", twice,
          ", extra runs: ", extra_runs, ", calls by instance: a=", by_instance["a"],
          " b=", by_instance["b"], " c=", by_instance["c"]);
}

json schedule_now(http_client& c, const std::string& type, std::size_t n) {
  json tasks = json::array();
  for (std::size_t k = 0; k < n; ++k)
    tasks.push_back({{"type", type}, {"payload", std::to_string(k)}, {"delay_ms", 0}});
  auto r = c.post("/v1/tasks:batch", json{{"tasks", tasks}});
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  return r.body_json["ids"];
}

// A push target set, changed or removed on one running instance is used by
// the other at once after its notice: tasks its shards hold that were waiting
// for consumers are pushed, later ones too, and after a DELETE they wait for
// consumers again.
void run_shared_targets(const std::string& base_uri) {
  push_receiver receiver([](const push_call&, std::size_t) { return 200u; });
  const std::string uri = cluster_store_uri(base_uri);
  const std::string type = "shared";
  auto a = start_instance(uri, "a");
  auto b = start_instance(uri, "b");
  INFO(a->output_tail());
  INFO(b->output_tail());
  http_client ca(a->port());
  http_client cb(b->port());
  // Settled: each holds the shards rendezvous hashing gives it, so no shard
  // moves while the test counts who pushed what.
  REQUIRE(eventually([&] { return settled({"a", "b"}, {&ca, &cb}); }));

  // No target yet: due tasks wait for consumers on their shard's owner. Both
  // instances hold some of the 200 (the check says so).
  constexpr std::size_t n = 200;
  schedule_now(ca, type, n);
  REQUIRE(eventually([&] {
    return server_number(ca, "ready_for_consumers") + server_number(cb, "ready_for_consumers") ==
           static_cast<double>(n);
  }));
  const double waiting_on_b = server_number(cb, "ready_for_consumers");
  REQUIRE(waiting_on_b > 0);
  REQUIRE(server_number(ca, "ready_for_consumers") > 0);

  // Set on a: b learns it, and pushes what it held back and what comes next.
  auto p = ca.put("/v1/types/" + type, json{{"push_url", receiver.url()}, {"concurrency", 8}});
  REQUIRE_MESSAGE(p.status == 204, p.describe());
  REQUIRE(receiver.wait_for_calls(n));
  const auto pushed_by = [&](const std::string& who) {
    auto calls = receiver.calls();
    return std::count_if(calls.begin(), calls.end(),
                         [&](const push_call& c) { return c.instance == who; });
  };
  CHECK(static_cast<double>(pushed_by("b")) == waiting_on_b);
  schedule_now(cb, type, n);
  REQUIRE(receiver.wait_for_calls(2 * n));
  CHECK(static_cast<double>(pushed_by("b")) > waiting_on_b);
  CHECK(server_number(cb, "ready_for_consumers") == 0);

  // Changed on b: a reads the new limits.
  p = cb.put("/v1/types/" + type, json{{"push_url", receiver.url()}, {"concurrency", 3}});
  REQUIRE_MESSAGE(p.status == 204, p.describe());
  CHECK(eventually([&] {
    auto g = ca.get("/v1/types/" + type);
    return g.status == 200 && g.body_json["concurrency"] == 3;
  }));

  // Removed on b: a pulls the type again; nothing more is pushed.
  auto d = cb.del("/v1/types/" + type);
  REQUIRE_MESSAGE(d.status == 204, d.describe());
  REQUIRE(eventually([&] { return ca.get("/v1/types/" + type).status == 404; }));
  const std::size_t calls_before = receiver.calls().size();
  schedule_now(ca, type, n);
  REQUIRE(eventually([&] {
    return server_number(ca, "ready_for_consumers") + server_number(cb, "ready_for_consumers") ==
           static_cast<double>(n);
  }));
  CHECK(receiver.calls().size() == calls_before);
}

}  // namespace

TEST_CASE("scale-out: three instances on one Redis, one killed, one stalled") {
  run_three_instances(test_redis_uri());
}

TEST_CASE("scale-out: a push target set on one instance is used by the others") {
  run_shared_targets(test_redis_uri());
}

// The two below need DELAYQ_TEST_REDIS_CLUSTER: skipped unless run with
// --no-skip (the `cluster` label's add_tests in tests/server/CMakeLists.txt).
TEST_CASE("cluster: scale-out: a push target set on one instance is used by the others" *
          doctest::skip()) {
  run_shared_targets(redis_cluster_uri());
}

TEST_CASE("cluster: scale-out: three instances on a Redis Cluster, one killed, one stalled" *
          doctest::skip()) {
  run_three_instances(redis_cluster_uri());
}
