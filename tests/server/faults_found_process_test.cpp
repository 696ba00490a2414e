// delayq-server process tests: bugs the fault harness (tests/faults/,
// docs/faults.md) found, each kept as a regression test.
//
// 1. A ready task waits in the lease broker for a consumer. An instance that
// stalls (or is cut off from Redis) with such a task loses its shard to
// another instance, which runs the task and, once a consumer finished it,
// removes it. When the stalled instance came back, its broker still held
// the old attempt and handed it to the next consumer that reserved there: a
// task finished with a 204 was delivered again (the harness counted it as
// resurrected, under partition-redis). The broker now asks the engine
// whether the attempt still runs under its shard's lease before it leases
// a task (engine::attempt_current()).
//
// 3. A hand-over waits for the attempts running on the shard; a task ready
// for consumers is such an attempt. One that no consumer takes (a pull type
// nobody reserves now) held its shard's hand-over for ever, and with it
// every other task due on the shard (held back while the shard leaves) and
// every call on an id of it (421 not_owner). Ready tasks of a shard that
// leaves are now given back at once (engine_options::on_attempts_stale; the
// broker asks engine::attempt_current()), and the next owner offers them.
//
// 2. The system clock stepped after start (the harness's clock-ahead and
// clock-behind, libfaketime): the engine fires by its own clock (the system
// clock read at start, advanced by the steady clock), but two things still
// read the system clock: the shortcut that sends a task due "now" to the
// workers at once, and the server turning a delay into a due time. An
// instance whose clock jumped 5 s ahead ran tasks due in the next 5 s at
// once; one 5 s behind stored "in 3 s" as 2 s ago and ran it at once. Both
// now read engine::now().
#include <doctest/doctest.h>

#include <csignal>
#include <fstream>

#include "cluster_support.hpp"
#include "delayq/shard_leases.hpp"
#include "push_receiver.hpp"

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

namespace {

// Debian's libfaketime (package faketime), which the harness uses too.
constexpr const char* faketime_lib = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

void write_skew(const std::string& path, const std::string& spec) {
  std::ofstream f(path, std::ios::trunc);
  f << spec << "\n";
}

// delayq-server on memory: under libfaketime, listening: its system clock
// follows `skew_file` (read on every call), its steady clock is left alone.
std::unique_ptr<server_process> start_skewed(const std::string& skew_file,
                                             const std::vector<std::string>& extra = {}) {
  REQUIRE_MESSAGE(::access(faketime_lib, R_OK) == 0,
                  faketime_lib << " is missing: apt-get install faketime (scripts/common.sh "
                                  "installs it)");
  write_skew(skew_file, "+0");
  std::vector<std::string> args{
      "LD_PRELOAD=" + std::string(faketime_lib), "FAKETIME_TIMESTAMP_FILE=" + skew_file,
      "FAKETIME_NO_CACHE=1", "FAKETIME_DONT_FAKE_MONOTONIC=1",
      // ASan wants to be the first library loaded.
      "ASAN_OPTIONS=verify_asan_link_order=0", server_binary(), "--listen", "127.0.0.1:0",
      "--store", "memory:", "--token", test_token, "--tick", "10"};
  args.insert(args.end(), extra.begin(), extra.end());
  auto s = std::make_unique<server_process>(std::move(args), "/usr/bin/env");
  s->wait_listening();
  return s;
}

}  // namespace

TEST_CASE("faults: a system clock stepped after start makes no task early") {
  for (const std::string skew : {"+5s", "-5s"}) {
    CAPTURE(skew);
    temp_dir dir;
    const std::string skew_file = dir.path() + "/skew";
    auto sp = start_skewed(skew_file);
    server_process& s = *sp;
    INFO(s.output_tail());
    http_client c(s.port());
    write_skew(skew_file, skew);  // the clock steps, the server runs on

    const std::int64_t sent = now_ms();
    const std::int64_t due = sent + 3000;
    auto a = c.post("/v1/tasks", json{{"type", "clk"}, {"payload", "at"}, {"due_ms", due}});
    REQUIRE_MESSAGE(a.status == 201, a.describe());
    auto r = c.post("/v1/tasks", json{{"type", "clk"}, {"payload", "in"}, {"delay_ms", 3000}});
    REQUIRE_MESSAGE(r.status == 201, r.describe());

    // Each task reaches a consumer no earlier than it is due on the true
    // clock (this process's): "at" at due_ms, "in" 3 s after it was sent.
    std::map<std::string, std::int64_t> got;
    while (got.size() < 2) {
      auto res = c.post("/v1/reserve", json{{"types", {"clk"}}, {"max", 2}, {"wait_ms", 10000}});
      REQUIRE_MESSAGE(res.status == 200, res.describe());
      const std::int64_t at = now_ms();
      REQUIRE_MESSAGE(!res.body_json["tasks"].empty(), "a task did not come within 10 s");
      for (const auto& t : res.body_json["tasks"]) got[t["payload"].get<std::string>()] = at;
    }
    CHECK_MESSAGE(got["at"] >= due,
                  "the task due at due_ms ran " << due - got["at"] << " ms early");
    CHECK_MESSAGE(got["in"] >= sent + 3000,
                  "the task due in 3 s ran " << sent + 3000 - got["in"] << " ms early");
  }
}

TEST_CASE("faults: a retry comes after its backoff however far the system clock stepped") {
  // The retry of a failed attempt was due its backoff after the system
  // clock: on a clock stepped an hour ahead after start, an hour late.
  temp_dir dir;
  const std::string skew_file = dir.path() + "/skew";
  auto sp = start_skewed(skew_file, {"--retry-base", "100", "--retry-cap", "100"});
  server_process& s = *sp;
  INFO(s.output_tail());
  http_client c(s.port());
  write_skew(skew_file, "+1h");
  auto a = c.post("/v1/tasks", json{{"type", "retry"}, {"payload", "p"}, {"delay_ms", 0}});
  REQUIRE_MESSAGE(a.status == 201, a.describe());
  const auto reserve = [&] {
    json task;
    REQUIRE_MESSAGE(eventually([&] {
                      auto r = c.post("/v1/reserve", json{{"types", {"retry"}}, {"wait_ms", 2000}});
                      if (r.status != 200 || r.body_json["tasks"].empty()) return false;
                      task = r.body_json["tasks"][0];
                      return true;
                    }),
                    "the task never came to the consumer");
    return task;
  };
  const json first = reserve();
  auto f = c.post("/v1/tasks/" + first["id"].get<std::string>() + "/fail",
                  json{{"lease", first["lease"]}, {"error", "again"}});
  REQUIRE_MESSAGE(f.status == 204, f.describe());
  // Its backoff is at most 100 ms: it comes back (an hour on the stepped
  // system clock would outlast the wait).
  const json second = reserve();
  CHECK(second["id"] == first["id"]);
  CHECK(second["attempts"] == 1);
}

TEST_CASE("faults: a task no consumer takes does not hold up its shard's hand-over") {
  push_receiver receiver([](const push_call&, std::size_t) { return 200u; });
  const std::string uri = cluster_store_uri(test_redis_uri());
  auto a = start_instance(uri, "a");
  INFO(a->output_tail());
  http_client ca(a->port());
  REQUIRE(eventually([&] { return shards_held(ca) == shard_count; }));
  auto p = ca.put("/v1/types/pushed", json{{"push_url", receiver.url()}});
  REQUIRE_MESSAGE(p.status == 204, p.describe());
  // Two tasks of a shard b will own: one of a type nobody reserves, ready on
  // a at once; one pushed, due once b has joined and the shard is leaving a.
  const std::string waiting = id_owned_by("b", {"a", "b"});
  std::string pushed;
  for (int k = 0;; ++k) {
    pushed = waiting + "-p" + std::to_string(k);
    if (delayq::shard_of(pushed, shard_count) == delayq::shard_of(waiting, shard_count)) break;
  }
  auto w = ca.post("/v1/tasks",
                   json{{"type", "nobody"}, {"payload", "w"}, {"delay_ms", 0}, {"id", waiting}});
  REQUIRE_MESSAGE(w.status == 201, w.describe());
  REQUIRE(eventually([&] {
    auto g = ca.get("/v1/tasks/" + waiting);
    return g.status == 200 && g.body_json["state"] == "ready";
  }));
  const std::int64_t due = now_ms() + 10'000;
  auto q = ca.post("/v1/tasks",
                   json{{"type", "pushed"}, {"payload", "q"}, {"due_ms", due}, {"id", pushed}});
  REQUIRE_MESSAGE(q.status == 201, q.describe());

  auto b = start_instance(uri, "b");
  INFO(b->output_tail());
  http_client cb(b->port());
  // The shard moves to b (a gives the waiting task back, it no longer holds
  // the hand-over), and the pushed task runs when due.
  REQUIRE_MESSAGE(eventually([&] {
                    return settled({"a", "b"}, {&ca, &cb});
                  }),
                  "the shard never left a (shards leaving on a: "
                      << server_number(ca, "shards_leaving") << ")");
  REQUIRE(receiver.wait_for_calls(1));
  CHECK(receiver.calls().front().task_id == pushed);
  // The task nobody took waits on b now, for a consumer there.
  auto r = cb.post("/v1/reserve", json{{"types", {"nobody"}}, {"wait_ms", 10000}});
  REQUIRE_MESSAGE(r.status == 200, r.describe());
  REQUIRE(r.body_json["tasks"].size() == 1);
  CHECK(r.body_json["tasks"][0]["id"] == waiting);
}
