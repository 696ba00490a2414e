// delayq-server process tests: the marker of a forwarded call
// (X-Delayq-Forwarded-By, docs/scale-out.md "Calls on any instance") is
// authenticated. A member's marker makes an instance answer a call itself;
// one a client set, forged, made for another call or too old is ignored
// (the call is forwarded as a client's) and counted in /metrics. Members
// forward to each other under each key: --cluster-secret, the token, and,
// with neither, a key kept in the store. Each case fails when its defence
// is taken out.
#include <doctest/doctest.h>

#include "../support/prometheus_text.hpp"
#include "cluster_support.hpp"

namespace {

using namespace delayq::server_test;

const std::vector<std::string> marker_names{"a", "b"};
const std::string marker_header = "X-Delayq-Forwarded-By";

// The next id from `stem` whose shard rendezvous hashing gives to `owner`.
std::string marker_id_owned_by(const std::string& owner, const std::string& stem) {
  for (int i = 0;; ++i) {
    std::string id = stem + "-" + std::to_string(i);
    const std::uint32_t s = delayq::shard_of(id, shard_count);
    if (marker_names[delayq::rendezvous_owner(s, marker_names)] == owner) return id;
  }
}

// delayq_forward_marker_rejected_total of an instance; -1 when absent.
double marker_rejections(http_client& c) {
  const auto m = c.get("/metrics");
  REQUIRE_MESSAGE(m.status == 200, m.describe());
  const auto e = delayq_test::prom::parse(m.body);
  return e.value("delayq_forward_marker_rejected_total").value_or(-1);
}

std::string marker_answered_by(const http_response& r) {
  const auto it = r.headers.find("x-delayq-instance");
  return it == r.headers.end() ? std::string{} : it->second;
}

// A call with one extra header, the marker.
http_response marker_call(http_client& c, http::verb method, const std::string& target,
                          const std::optional<std::string>& body, const std::string& marker) {
  return c.request_text(method, target, body, std::nullopt, {{marker_header, marker}});
}

// An instance as start_instance() starts one, without a token.
std::unique_ptr<server_process> marker_start_open_instance(const std::string& uri,
                                                           const std::string& name) {
  auto p = std::make_unique<server_process>(std::vector<std::string>{
      "--listen", "127.0.0.1:0", "--store", uri, "--tick", "10", "--cluster", "--shards",
      std::to_string(shard_count), "--lease", "1s", "--instance", name});
  p->wait_listening();
  return p;
}

// A task of b's shards due now, added through a (forwarded to b), and
// reserved from b: its lease ends in @b.
std::pair<std::string, std::string> marker_lease_of_b(http_client& ca, http_client& cb,
                                                      const std::string& type,
                                                      const std::string& stem) {
  const std::string id = marker_id_owned_by("b", stem);
  auto r = add_task(ca, type, stem, 0, id);
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  CHECK(marker_answered_by(r) == "b");
  const auto task = reserve_one(cb, {type});
  REQUIRE(task.is_object());
  REQUIRE(task["id"] == id);
  const std::string lease = task["lease"].get<std::string>();
  REQUIRE(lease.ends_with("@b"));
  return {id, lease};
}

}  // namespace

TEST_CASE(
    "forwarding marker: a finish whose client set the marker itself still reaches the lease") {
  const std::string uri = cluster_store_uri(test_redis_uri());
  auto a = start_instance(uri, "a");  // --token: the token is the key
  auto b = start_instance(uri, "b");
  INFO(a->output_tail());
  INFO(b->output_tail());
  http_client ca(a->port());
  http_client cb(b->port());
  REQUIRE(eventually([&] { return settled(marker_names, {&ca, &cb}); }));

  // The case: b handed the lease out; the consumer's finish reaches
  // a with a marker it made up. Honoured, a would answer 409 stale_lease (it
  // holds no such lease) and the consumer would drop finished work.
  const auto held = marker_lease_of_b(ca, cb, "marker.client", "y");
  const std::string id = held.first, lease = held.second;
  const auto r = marker_call(ca, http::verb::post, task_path(id) + "/finish",
                             json{{"lease", lease}}.dump(), "b");
  CHECK_MESSAGE(r.status == 204, r.describe());
  CHECK(marker_answered_by(r) == "b");
  REQUIRE(eventually([&] { return cb.get(task_path(id)).status == 404; }));
  CHECK(marker_rejections(ca) == 1);
  // b took a's own markers (the add, the finish): members agree on the key.
  CHECK(marker_rejections(cb) == 0);
}

TEST_CASE("forwarding marker: a forged, moved or stale marker is ignored and counted") {
  const std::string uri = cluster_store_uri(test_redis_uri());
  const std::string secret = "marker-test-secret-0123456789";
  const std::vector<std::string> keyed{"--cluster-secret", secret};
  auto a = start_instance(uri, "a", "1s", keyed);
  auto b = start_instance(uri, "b", "1s", keyed);
  INFO(a->output_tail());
  INFO(b->output_tail());
  http_client ca(a->port());
  http_client cb(b->port());
  REQUIRE(eventually([&] { return settled(marker_names, {&ca, &cb}); }));
  const std::string type = "marker.forged";
  std::vector<std::string> ids;  // tasks of b's shards, each added through a
  for (const std::string stem : {"t", "u", "v", "w", "x", "p", "q"}) {
    const std::string id = marker_id_owned_by("b", stem);
    const auto r = add_task(ca, type, stem, 600000, id);
    REQUIRE_MESSAGE(r.status == 201, r.describe());
    CHECK(marker_answered_by(r) == "b");
    ids.push_back(id);
  }
  const auto del = [&](const std::string& id, const std::string& marker) {
    return marker_call(ca, http::verb::delete_, task_path(id), std::nullopt, marker);
  };
  // Each ignored marker: the DELETE went to b (204), b cancelled the task.
  const auto forwarded = [&](const http_response& reply, const std::string& id) {
    CHECK_MESSAGE(reply.status == 204, reply.describe());
    CHECK(marker_answered_by(reply) == "b");
    CHECK(cb.get(task_path(id)).status == 404);
  };

  // A member's marker, made with the secret for this call: a answers it
  // itself (421, it does not own the task) and sends nothing on.
  const std::string t = ids[0];
  auto r = del(t, forwarding_marker(secret, "b", now_ms(), "DELETE", task_path(t)));
  CHECK_MESSAGE(r.status == 421, r.describe());
  CHECK(r.error() == "not_owner");
  CHECK(cb.get(task_path(t)).status == 200);
  CHECK(marker_rejections(ca) == 0);

  // Each of these is ignored, counted, and the call forwarded to b.
  double rejected = 0;
  const auto ignored = [&](const http_response& reply, const std::string& id) {
    forwarded(reply, id);
    CHECK(marker_rejections(ca) == ++rejected);
  };
  // Made for another target (moved from the call above).
  ignored(del(ids[1], forwarding_marker(secret, "b", now_ms(), "DELETE", task_path(t))), ids[1]);
  // Made for another method.
  ignored(del(ids[2], forwarding_marker(secret, "b", now_ms(), "GET", task_path(ids[2]))), ids[2]);
  // Made with another key.
  ignored(del(ids[3], forwarding_marker("not-the-cluster-secret", "b", now_ms(), "DELETE",
                                        task_path(ids[3]))),
          ids[3]);
  // Made two minutes ago (the window is one minute either way).
  ignored(
      del(ids[4], forwarding_marker(secret, "b", now_ms() - 120'000, "DELETE", task_path(ids[4]))),
      ids[4]);
  // A name alone, or a value of the right shape.
  ignored(del(ids[5], "b"), ids[5]);
  ignored(del(ids[6], "b " + std::to_string(now_ms()) + " " + std::string(64, '0')), ids[6]);

  // Made for another body: a finish of b's lease with a marker made for
  // another lease's finish. Made for this very body it is honoured: a
  // answers 409, holding no such lease.
  const auto held = marker_lease_of_b(ca, cb, "marker.body", "y");
  const std::string id = held.first, lease = held.second;
  const std::string target = task_path(id) + "/finish";
  const std::string body = json{{"lease", lease}}.dump();
  r = marker_call(ca, http::verb::post, target, body,
                  forwarding_marker(secret, "b", now_ms(), "POST", target, body));
  CHECK_MESSAGE(r.status == 409, r.describe());
  CHECK(marker_rejections(ca) == rejected);
  r = marker_call(
      ca, http::verb::post, target, body,
      forwarding_marker(secret, "b", now_ms(), "POST", target, json{{"lease", "x@b"}}.dump()));
  CHECK_MESSAGE(r.status == 204, r.describe());
  CHECK(marker_answered_by(r) == "b");
  CHECK(marker_rejections(ca) == ++rejected);
  REQUIRE(eventually([&] { return cb.get(task_path(id)).status == 404; }));
  // b only ever got a's own markers, and took them.
  CHECK(marker_rejections(cb) == 0);
}

TEST_CASE("forwarding marker: members without a secret or a token share a key kept in the store") {
  const std::string uri = cluster_store_uri(test_redis_uri());
  auto a = marker_start_open_instance(uri, "a");
  auto b = marker_start_open_instance(uri, "b");
  INFO(a->output_tail());
  INFO(b->output_tail());
  http_client ca(a->port(), "");
  http_client cb(b->port(), "");
  REQUIRE(eventually([&] { return settled(marker_names, {&ca, &cb}); }));

  const auto held = marker_lease_of_b(ca, cb, "marker.open", "y");
  const std::string id = held.first, lease = held.second;
  const auto r = marker_call(ca, http::verb::post, task_path(id) + "/finish",
                             json{{"lease", lease}}.dump(), "b");
  CHECK_MESSAGE(r.status == 204, r.describe());
  CHECK(marker_answered_by(r) == "b");
  CHECK(marker_rejections(ca) == 1);
  // a's markers verified at b: both use the key a created and b found.
  CHECK(marker_rejections(cb) == 0);
  // No API shows the key: GET /v1/types lists push targets only.
  for (http_client* c : {&ca, &cb}) {
    const auto types = c->get("/v1/types");
    REQUIRE_MESSAGE(types.status == 200, types.describe());
    CHECK(types.body_json == json{{"types", json::object()}});
  }
}
