// delayq-server process tests: GET /metrics after real work, parsed line by
// line by a strict parser (tests/support/prometheus_text.hpp), and the
// per-type "types" object of GET /v1/stats (docs/server.md, "Metrics").
#include <doctest/doctest.h>

#include "../support/prometheus_text.hpp"
#include "server_test_support.hpp"

namespace {

using namespace delayq::server_test;
namespace prom = delayq_test::prom;
using labels = std::map<std::string, std::string>;

http_response end_lease(http_client& c, const json& task, const char* verb) {
  json body{{"lease", task["lease"]}};
  if (std::string_view(verb) == "fail") body["error"] = "boom";
  return c.post(task_path(str(task, "id")) + "/" + verb, body);
}

double get(const prom::exposition& e, const std::string& name, const labels& l = {}) {
  const auto v = e.value(name, l);
  if (!v) FAIL_CHECK("no series ", name, " with the labels asked for");
  return v.value_or(-1);
}

// Scrapes /metrics without a token and parses it, failing on every error.
prom::exposition scrape(std::uint16_t port) {
  http_client anonymous(port, "");
  auto m = anonymous.get("/metrics");
  REQUIRE_MESSAGE(m.status == 200, m.describe());
  CHECK(m.header("content-type") == "text/plain; version=0.0.4");
  prom::exposition e = prom::parse(m.body);
  INFO("metrics:\n", m.body.substr(0, 12000));
  for (const std::string& err : e.errors) FAIL_CHECK(err);
  REQUIRE(!e.samples.empty());
  for (const auto& [name, f] : e.families) {
    INFO("family ", name);
    CHECK(name.starts_with("delayq_"));
    CHECK(f.has_help);
    CHECK(!f.type.empty());
    if (f.type == "counter") CHECK(name.ends_with("_total"));
  }
  return e;
}

}  // namespace

TEST_CASE("server: /metrics and /v1/stats count per type what consumers did") {
  DELAYQ_FOR_EACH_STORE(kind);
  test_store store(kind);
  auto server = server_process::start(store, {"--retry-base", "50", "--retry-cap", "50"});
  INFO(server->output_tail());
  http_client c(server->port());
  const std::string ok = unique_name("mx.ok");
  const std::string dead = unique_name("mx.dead");
  const std::string gone = unique_name("mx.gone");
  const std::string late = unique_name("mx.late");

  // ok: two done, one waiting an hour.
  for (int i = 0; i < 2; ++i) REQUIRE(add_task(c, ok, "p", 0).status == 201);
  REQUIRE(add_task(c, ok, "p", 3600000).status == 201);
  for (int i = 0; i < 2; ++i) {
    auto t = reserve_one(c, {ok});
    REQUIRE(t.is_object());
    REQUIRE(end_lease(c, t, "finish").status == 204);
  }
  // dead: failed three times (the default --retry-max), a dead letter.
  REQUIRE(add_task(c, dead, "p", 0).status == 201);
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto t = reserve_one(c, {dead});
    REQUIRE(t.is_object());
    REQUIRE(t["attempts"] == attempt);
    REQUIRE(end_lease(c, t, "fail").status == 204);
  }
  // gone: cancelled while waiting.
  const std::string gone_id = id_of(add_task(c, gone, "p", 3600000));
  REQUIRE(!gone_id.empty());
  REQUIRE(c.del(task_path(gone_id)).status == 204);
  // late: a lease that expires (1 s), then the retry is finished; one more
  // task of the type stays reserved.
  REQUIRE(add_task(c, late, "p", 0).status == 201);
  auto first = reserve_one(c, {late}, 1000);
  REQUIRE(first.is_object());
  auto second = reserve_one(c, {late});  // after the expiry and the retry's backoff
  REQUIRE(second.is_object());
  REQUIRE(second["attempts"] == 1);
  REQUIRE(end_lease(c, second, "finish").status == 204);
  REQUIRE(add_task(c, late, "held", 0).status == 201);
  auto held = reserve_one(c, {late}, 600000);
  REQUIRE(held.is_object());

  const prom::exposition e = scrape(server->port());
  const auto t = [](const std::string& type) { return labels{{"type", type}}; };
  CHECK(get(e, "delayq_tasks_scheduled_total", t(ok)) == 3);
  CHECK(get(e, "delayq_tasks_fired_total", t(ok)) == 2);
  CHECK(get(e, "delayq_tasks_succeeded_total", t(ok)) == 2);
  CHECK(get(e, "delayq_tasks_failed_total", t(ok)) == 0);
  CHECK(get(e, "delayq_tasks_pending", t(ok)) == 1);
  CHECK(get(e, "delayq_tasks_ready", t(ok)) == 0);
  CHECK(get(e, "delayq_tasks_running", t(ok)) == 0);
  CHECK(get(e, "delayq_task_lateness_seconds_count", t(ok)) == 2);
  CHECK(get(e, "delayq_task_execution_seconds_count", t(ok)) == 2);

  CHECK(get(e, "delayq_tasks_scheduled_total", t(dead)) == 1);
  CHECK(get(e, "delayq_tasks_fired_total", t(dead)) == 3);
  CHECK(get(e, "delayq_tasks_failed_total", t(dead)) == 3);
  CHECK(get(e, "delayq_tasks_retried_total", t(dead)) == 2);
  CHECK(get(e, "delayq_tasks_died_total", t(dead)) == 1);
  CHECK(get(e, "delayq_tasks_pending", t(dead)) == 0);

  CHECK(get(e, "delayq_tasks_scheduled_total", t(gone)) == 1);
  CHECK(get(e, "delayq_tasks_cancelled_total", t(gone)) == 1);
  CHECK(get(e, "delayq_tasks_fired_total", t(gone)) == 0);
  CHECK(get(e, "delayq_tasks_pending", t(gone)) == 0);
  CHECK(get(e, "delayq_tasks_cancelled_total", t(ok)) == 0);

  CHECK(get(e, "delayq_tasks_scheduled_total", t(late)) == 2);
  CHECK(get(e, "delayq_tasks_fired_total", t(late)) == 3);
  CHECK(get(e, "delayq_tasks_failed_total", t(late)) == 1);  // the expired lease
  CHECK(get(e, "delayq_tasks_retried_total", t(late)) == 1);
  CHECK(get(e, "delayq_tasks_succeeded_total", t(late)) == 1);
  CHECK(get(e, "delayq_tasks_running", t(late)) == 1);
  CHECK(get(e, "delayq_consumer_tasks_reserved", t(late)) == 1);
  CHECK(get(e, "delayq_consumer_tasks_ready", t(late)) == 0);
  CHECK(get(e, "delayq_leases_expired_total", t(late)) == 1);
  CHECK(get(e, "delayq_leases_expired_total", t(ok)) == 0);
  CHECK(get(e, "delayq_leases_granted_total", t(late)) == 3);
  CHECK(get(e, "delayq_leases_granted_total", t(dead)) == 3);
  CHECK(get(e, "delayq_consumer_tasks_reserved", t(ok)) == 0);

  CHECK(get(e, "delayq_dead_letters") == 1);
  CHECK(get(e, "delayq_leases_finished_total") == 3);
  CHECK(get(e, "delayq_leases_failed_total") == 3);
  CHECK(get(e, "delayq_consumers_waiting") == 0);
  CHECK(get(e, "delayq_store_outage") == 0);
  CHECK(get(e, "delayq_store_write_errors_total") == 0);
  CHECK(get(e, "delayq_store_write_seconds_count") >= 1);
  CHECK(get(e, "delayq_store_write_batch_size_count") ==
        get(e, "delayq_store_write_seconds_count"));
  CHECK(get(e, "delayq_http_responses_total", {{"class", "2xx"}}) >= 20);
  CHECK(get(e, "delayq_http_responses_total", {{"class", "5xx"}}) == 0);

  // The same per type in /v1/stats, exactly these keys.
  auto s = c.get("/v1/stats");
  REQUIRE_MESSAGE(s.status == 200, s.describe());
  INFO("stats: ", s.body);
  REQUIRE(s.body_json.contains("types"));
  const json& types = s.body_json["types"];
  REQUIRE(types.is_object());
  for (const std::string& type : {ok, dead, gone, late}) {
    INFO("type ", type);
    REQUIRE(types.contains(type));
    std::set<std::string> keys;
    for (const auto& [k, v] : types[type].items()) {
      keys.insert(k);
      CHECK(v.is_number_unsigned());
    }
    CHECK(keys == std::set<std::string>{"pending", "ready", "running", "reserved", "scheduled",
                                        "fired", "succeeded", "failed", "retried", "died",
                                        "cancelled"});
  }
  CHECK(types[ok]["pending"] == 1);
  CHECK(types[ok]["succeeded"] == 2);
  CHECK(types[ok]["reserved"] == 0);
  CHECK(types[dead]["died"] == 1);
  CHECK(types[dead]["retried"] == 2);
  CHECK(types[dead]["failed"] == 3);
  CHECK(types[gone]["cancelled"] == 1);
  CHECK(types[gone]["reserved"] == 0);  // never offered to a consumer
  CHECK(types[late]["reserved"] == 1);
  CHECK(types[late]["running"] == 1);
  CHECK(types[late]["fired"] == 3);
  CHECK(types[late]["scheduled"] == 2);
  // The old fields stay.
  CHECK(find_number(s.body_json, "scheduled") == std::optional<double>(7));
  CHECK(find_number(s.body_json, "leases_expired") == std::optional<double>(1));

  REQUIRE(end_lease(c, held, "finish").status == 204);
}

TEST_CASE("server: --io-threads auto runs one I/O thread on memory: and two on a store") {
  // /metrics says how many the server started (delayq_io_threads).
  const auto threads_of = [](std::vector<std::string> args, std::vector<std::string> env = {}) {
    args.insert(args.begin(), {"--listen", "127.0.0.1:0", "--token", test_token, "--tick", "10"});
    server_process p(std::move(args), server_binary(), std::move(env));
    return get(scrape(p.wait_listening()), "delayq_io_threads");
  };
  temp_dir dir;
  CHECK(threads_of({"--store", "memory:"}) == 1);
  CHECK(threads_of({}, {"DELAYQ_STORE=memory:"}) == 1);  // the store from the environment
  CHECK(threads_of({"--store", "memory:", "--io-threads", "auto"}) == 1);
  CHECK(threads_of({"--store", "sqlite:" + dir.path() + "/a.db"}) == 2);
  CHECK(threads_of({"--store", "memory:", "--io-threads", "3"}) == 3);
}
