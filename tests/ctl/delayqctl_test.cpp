// delayqctl against a real delayq-server: each TEST_CASE starts a server
// (memory store, free loopback port, token) and runs the delayqctl binary as
// a child process, checking its output and exit status. The first cases test
// the formatting helpers directly; the last ones ("shard layout: ...") run
// servers on the Redis server of $DELAYQ_TEST_REDIS, with and without
// --cluster, and `delayqctl migrate-shards` between them.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ctl_format.hpp"
#include "process.hpp"

using ctl_test::run;
using ctl_test::run_result;
using ctl_test::server_process;
using nlohmann::json;

namespace {

const std::string token = "s3cret";

// delayqctl with --server and --token for `s`, then `args`.
run_result ctl(const server_process& s, std::vector<std::string> args,
               const std::string& tok = token) {
  std::vector<std::string> all = {DELAYQCTL_PATH, "--server", s.url(), "--token", tok};
  for (auto& a : args) all.push_back(std::move(a));
  return run(all);
}

// delayqctl with exactly `args` (no --server, no --token).
run_result ctl_bare(std::vector<std::string> args, const std::vector<std::string>& env = {}) {
  std::vector<std::string> all = {DELAYQCTL_PATH};
  for (auto& a : args) all.push_back(std::move(a));
  return run(all, env);
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

json parse(const run_result& r) {
  INFO("stdout: " << r.out << "stderr: " << r.err);
  json j = json::parse(r.out, nullptr, false);
  REQUIRE_FALSE(j.is_discarded());
  return j;
}

std::string show(const run_result& r) {
  return "exit " + std::to_string(r.exit_code) + "\nstdout: " + r.out + "\nstderr: " + r.err;
}

}  // namespace

// ------------------------------------------------------------------ helpers

TEST_CASE("delayqctl format: durations") {
  using delayq::ctl::parse_duration_ms;
  CHECK(parse_duration_ms("500ms") == 500);
  CHECK(parse_duration_ms("30s") == 30'000);
  CHECK(parse_duration_ms("5m") == 300'000);
  CHECK(parse_duration_ms("2h") == 7'200'000);
  CHECK(parse_duration_ms("1d") == 86'400'000);
  CHECK(parse_duration_ms("250") == 250);
  CHECK(parse_duration_ms("0s") == 0);
  for (const char* bad : {"", "s", "5x", "-5s", "1.5s", " 5s", "5s ", "5 s", "5S", "1m30s",
                          "99999999999999999999", "9999999999999999d"}) {
    INFO(bad);
    CHECK_FALSE(parse_duration_ms(bad).has_value());
  }
}

TEST_CASE("delayqctl format: percent-encoding keeps only unreserved bytes") {
  using delayq::ctl::percent_encode;
  CHECK(percent_encode("abc-XYZ_0.9~") == "abc-XYZ_0.9~");
  CHECK(percent_encode("a/b?c%d#e f+g&h=i") == "a%2Fb%3Fc%25d%23e%20f%2Bg%26h%3Di");
  CHECK(percent_encode("\xc3\xa9") == "%C3%A9");
  CHECK(percent_encode(std::string("\0", 1)) == "%00");
}

TEST_CASE("delayqctl format: times and spans") {
  using namespace delayq::ctl;
  CHECK(iso8601_utc(0) == "1970-01-01T00:00:00.000Z");
  CHECK(iso8601_utc(1'764'120'600'250) == "2025-11-26T01:30:00.250Z");
  CHECK(iso8601_utc(-1) == "1969-12-31T23:59:59.999Z");
  CHECK(compact_span(270'000) == "4m30s");
  CHECK(compact_span(7'500'000) == "2h5m");
  CHECK(compact_span(97'200'000) == "1d3h");
  CHECK(compact_span(3'600'000) == "1h");
  CHECK(compact_span(250) == "250ms");
  CHECK(relative_time(10'000 + 270'000, 10'000) == "in 4m30s");
  CHECK(relative_time(10'000 - 5'000, 10'000) == "5s ago");
  CHECK(relative_time(10'500, 10'000) == "now");
}

TEST_CASE("delayqctl format: payloads are escaped and truncated") {
  using delayq::ctl::printable;
  CHECK(printable("hello") == "hello");
  CHECK(printable(std::string("a\0b\n\t\\", 6)) == "a\\x00b\\n\\t\\\\");
  CHECK(printable("caf\xc3\xa9") == "caf\xc3\xa9");    // valid UTF-8 kept
  CHECK(printable("bad\xff\xc3") == "bad\\xff\\xc3");  // invalid bytes escaped
  CHECK(printable("\xc2\x85") == "\\xc2\\x85");        // C1 control escaped
  CHECK(printable(std::string(50, 'x'), 40) == std::string(39, 'x') + "\xe2\x80\xa6");
  CHECK(printable(std::string(40, 'x'), 40) == std::string(40, 'x'));
  // An escape is never cut in half.
  CHECK(printable(std::string(38, 'x') + std::string("\0\0", 2), 40) ==
        std::string(38, 'x') + "\xe2\x80\xa6");
}

TEST_CASE("delayqctl format: tables align on display width") {
  const std::string t =
      delayq::ctl::render_table({{"ID", "TYPE"}, {"caf\xc3\xa9", "x"}, {"a", "y"}});
  CHECK(t == "ID    TYPE\ncaf\xc3\xa9  x\na     y\n");
}

// ------------------------------------------------------------------ against a server

TEST_CASE("delayqctl: add then get shows the task") {
  server_process s(DELAYQ_SERVER_PATH, token);
  // An id with every kind of reserved character: it must survive the path.
  const std::string id = "job/1?x=%41#frag&y+z";
  auto added = ctl(s, {"add", "email", "hello\nworld", "--in", "1h", "--id", id});
  INFO(show(added));
  REQUIRE(added.exit_code == 0);
  CHECK(added.out == id + "\n");

  auto got = ctl(s, {"get", id});
  INFO(show(got));
  REQUIRE(got.exit_code == 0);
  CHECK(has(got.out, id));
  CHECK(has(got.out, "email"));
  CHECK(has(got.out, "delayed"));
  CHECK(has(got.out, "hello\\nworld"));  // escaped, on one line
  CHECK(has(got.out, "Z (in "));         // ISO-8601 UTC, then how far away

  // --json is the server's body: the global option may follow the verb.
  auto as_json = ctl(s, {"get", id, "--json"});
  REQUIRE(as_json.exit_code == 0);
  const json j = parse(as_json);
  CHECK(j["id"] == id);
  CHECK(j["payload"] == "hello\nworld");
  CHECK(j["state"] == "delayed");
}

TEST_CASE("delayqctl: add --json then upcoming lists it") {
  server_process s(DELAYQ_SERVER_PATH, token);
  auto added = ctl(s, {"--json", "add", "report", std::string(60, 'p'), "--in", "10m"});
  INFO(show(added));
  REQUIRE(added.exit_code == 0);
  const std::string id = parse(added)["id"].get<std::string>();
  REQUIRE_FALSE(id.empty());
  REQUIRE(ctl(s, {"add", "other", "x", "--in", "20m", "--id", "later"}).exit_code == 0);

  auto up = ctl(s, {"upcoming"});
  INFO(show(up));
  REQUIRE(up.exit_code == 0);
  CHECK(has(up.out, "ID"));
  CHECK(has(up.out, id));
  CHECK(has(up.out, "later"));
  CHECK(has(up.out, std::string(39, 'p') + "\xe2\x80\xa6"));  // payload truncated
  CHECK_FALSE(has(up.out, std::string(41, 'p')));
  CHECK(up.out.find(id) < up.out.find("later"));  // earliest due first

  auto typed = ctl(s, {"--json", "upcoming", "--type", "report", "--limit", "5"});
  REQUIRE(typed.exit_code == 0);
  const json tasks = parse(typed)["tasks"];
  REQUIRE(tasks.size() == 1);
  CHECK(tasks[0]["id"] == id);

  auto none = ctl(s, {"upcoming", "--type", "nothing"});
  REQUIRE(none.exit_code == 0);
  CHECK(has(none.out, "no upcoming tasks"));
}

TEST_CASE("delayqctl: reschedule moves the due time") {
  server_process s(DELAYQ_SERVER_PATH, token);
  // A day from now (the server refuses due times past its max_delay).
  const std::int64_t day_later = std::chrono::duration_cast<std::chrono::milliseconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count() +
                                 86'400'000;
  auto added = ctl(s, {"add", "t", "p", "--at", std::to_string(day_later), "--id", "r1"});
  INFO(show(added));
  REQUIRE(added.exit_code == 0);
  auto before = parse(ctl(s, {"--json", "get", "r1"}));
  CHECK(before["due_ms"] == day_later);

  auto moved = ctl(s, {"reschedule", "r1", "--in", "5m"});
  INFO(show(moved));
  REQUIRE(moved.exit_code == 0);
  CHECK(moved.out == "rescheduled r1\n");
  auto after = parse(ctl(s, {"--json", "get", "r1"}));
  CHECK(after["due_ms"].get<std::int64_t>() < day_later);

  auto at = ctl(s, {"reschedule", "r1", "--at", std::to_string(day_later + 1)});
  REQUIRE(at.exit_code == 0);
  CHECK(parse(ctl(s, {"--json", "get", "r1"}))["due_ms"] == day_later + 1);

  auto missing = ctl(s, {"reschedule", "nope", "--in", "1s"});
  CHECK(missing.exit_code == 3);
  CHECK(has(missing.err, "error: not_found: "));
}

TEST_CASE("delayqctl: cancel then get is not found") {
  server_process s(DELAYQ_SERVER_PATH, token);
  REQUIRE(ctl(s, {"add", "t", "p", "--in", "1h", "--id", "c1"}).exit_code == 0);
  auto cancelled = ctl(s, {"cancel", "c1"});
  INFO(show(cancelled));
  REQUIRE(cancelled.exit_code == 0);
  CHECK(cancelled.out == "cancelled c1\n");

  auto got = ctl(s, {"get", "c1"});
  INFO(show(got));
  CHECK(got.exit_code == 3);
  CHECK(got.out.empty());
  CHECK(has(got.err, "error: not_found: "));
  CHECK(ctl(s, {"cancel", "c1"}).exit_code == 3);
}

TEST_CASE("delayqctl: a duplicate id is a conflict unless told otherwise") {
  server_process s(DELAYQ_SERVER_PATH, token);
  REQUIRE(ctl(s, {"add", "t", "one", "--in", "1h", "--id", "d1"}).exit_code == 0);
  auto again = ctl(s, {"add", "t", "two", "--in", "1h", "--id", "d1"});
  CHECK(again.exit_code == 4);
  CHECK(has(again.err, "error: duplicate_id: "));
  CHECK(ctl(s, {"add", "t", "two", "--in", "1h", "--id", "d1", "--conflict", "keep"}).exit_code ==
        0);
  CHECK(parse(ctl(s, {"--json", "get", "d1"}))["payload"] == "one");
  CHECK(ctl(s, {"add", "t", "three", "--in", "1h", "--id", "d1", "--conflict", "replace"})
            .exit_code == 0);
  CHECK(parse(ctl(s, {"--json", "get", "d1"}))["payload"] == "three");
}

TEST_CASE("delayqctl: a wrong or missing token is exit 6") {
  server_process s(DELAYQ_SERVER_PATH, token);
  auto wrong = ctl(s, {"stats"}, "not-the-token");
  INFO(show(wrong));
  CHECK(wrong.exit_code == 6);
  CHECK(has(wrong.err, "error: unauthorized: "));
  CHECK(ctl_bare({"--server", s.url(), "stats"}).exit_code == 6);
  // $DELAYQ_TOKEN and $DELAYQ_SERVER are the defaults.
  auto from_env = ctl_bare({"stats"}, {"DELAYQ_TOKEN=" + token, "DELAYQ_SERVER=" + s.url()});
  INFO(show(from_env));
  CHECK(from_env.exit_code == 0);
  CHECK(has(from_env.out, "pending"));
  // health needs no token.
  auto health = ctl_bare({"--server", s.url(), "health"});
  CHECK(health.exit_code == 0);
  CHECK(health.out == "ok\n");
}

TEST_CASE("delayqctl: a server that is not listening is exit 5") {
  ctl_test::closed_port closed;
  const std::string url = "http://127.0.0.1:" + std::to_string(closed.port());
  for (const char* verb : {"stats", "health"}) {
    auto r = ctl_bare({"--server", url, "--token", token, verb});
    INFO(verb << ": " << show(r));
    CHECK(r.exit_code == 5);
    CHECK(has(r.err, "error: unreachable: "));
    CHECK(r.out.empty());
  }
}

TEST_CASE("delayqctl: a server that never answers is a timeout, exit 5") {
  ctl_test::closed_port silent(true);
  const std::string url = "http://127.0.0.1:" + std::to_string(silent.port());
  auto r = ctl_bare({"--server", url, "--token", token, "--timeout", "200", "stats"});
  INFO(show(r));
  CHECK(r.exit_code == 5);
  CHECK(has(r.err, "error: timeout: "));
  CHECK(r.out.empty());
}

TEST_CASE(
    "delayqctl: a call that times out is withdrawn: what the server had not taken never arrives") {
  // A server that takes almost nothing (a receive buffer at the kernel's
  // minimum, never read): most of the add waits in delayqctl's send queue
  // when its timeout ends it, as behind a link that went down. Closed
  // gently (or by the process's exit), the kernel would send it on, and
  // the server would get the whole call once it reads again, after the
  // user was told it timed out; delayqctl resets the connection instead.
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  const int smallest = 1;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &smallest, sizeof smallest);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  REQUIRE(listen(fd, 4) == 0);
  const std::string url = "http://127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  const std::string payload(12 * 1024, 'x');  // within the client's first send buffer
  auto r = ctl_bare(
      {"--server", url, "--token", token, "--timeout", "300", "add", "t", payload, "--in", "1h"});
  INFO(show(r));
  REQUIRE(r.exit_code == 5);  // it connected and timed out: its connection waits to be taken
  CHECK(has(r.err, "error: timeout: "));
  // The process has exited: what its kernel still held is sent now or never.
  pollfd ready{fd, POLLIN, 0};
  REQUIRE(poll(&ready, 1, 20'000) == 1);  // a failure's bound, not a timing
  const int peer = accept(fd, nullptr, nullptr);
  REQUIRE(peer >= 0);
  const timeval bound{20, 0};  // a failure's bound: the reset or the end comes at once
  setsockopt(peer, SOL_SOCKET, SO_RCVTIMEO, &bound, sizeof bound);
  std::size_t read_bytes = 0;
  char buf[4096];
  ssize_t n = 0;
  while ((n = recv(peer, buf, sizeof buf, 0)) > 0) read_bytes += static_cast<std::size_t>(n);
  const int why = n < 0 ? errno : 0;
  close(peer);
  close(fd);
  CHECK(why == ECONNRESET);  // the reset, not the end of a whole request
  CHECK(read_bytes < payload.size());
}

TEST_CASE("delayqctl: usage errors are exit 2") {
  ctl_test::closed_port closed;  // never reached: every case fails before any request
  const std::string url = "http://127.0.0.1:" + std::to_string(closed.port());
  const std::vector<std::vector<std::string>> cases = {
      {"add", "t", "p", "--in", "5x"},
      {"add", "t", "p", "--in", "-5s"},
      {"add", "t", "p"},                                // neither --in nor --at
      {"add", "t", "p", "--in", "1s", "--at", "1000"},  // both
      {"add", "t", "p", "--in", "1s", "--conflict", "merge"},
      {"reschedule", "x", "--in", "soon"},
      {"dead", "requeue", "x", "--in", "1y"},
      {"get"},
      {"frobnicate"},
      {},
      {"dead"},
      {"type", "set", "t"},
      {"upcoming", "--limit", "5000"},
      {"--timeout", "0", "stats"},
      {"--server", "https://example.com", "stats"},
      {"--server", "http://:80", "stats"},
  };
  for (const auto& args : cases) {
    std::vector<std::string> all = {"--server", url, "--token", token};
    all.insert(all.end(), args.begin(), args.end());
    auto r = ctl_bare(all);
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    INFO(joined << "-> " << show(r));
    CHECK(r.exit_code == 2);
    CHECK_FALSE(r.err.empty());
  }
}

TEST_CASE("delayqctl: --help on every verb and --version") {
  auto top = ctl_bare({"--help"});
  REQUIRE(top.exit_code == 0);
  for (const char* verb : {"stats", "get", "add", "cancel", "reschedule", "upcoming", "dead",
                           "types", "type", "health", "signal", "migrate-shards", "Exit status",
                           "6 unauthorized", "7 the task type is full"}) {
    INFO(verb);
    CHECK(has(top.out, verb));
  }
  const std::vector<std::vector<std::string>> verbs = {{"stats"},
                                                       {"get"},
                                                       {"add"},
                                                       {"cancel"},
                                                       {"reschedule"},
                                                       {"upcoming"},
                                                       {"dead"},
                                                       {"dead", "list"},
                                                       {"dead", "requeue"},
                                                       {"dead", "purge"},
                                                       {"types"},
                                                       {"type"},
                                                       {"type", "set"},
                                                       {"type", "rm"},
                                                       {"health"},
                                                       {"signal"},
                                                       {"migrate-shards"},
                                                       {"schedules"},
                                                       {"schedules", "list"},
                                                       {"schedules", "get"},
                                                       {"schedules", "put"},
                                                       {"schedules", "rm"}};
  for (auto v : verbs) {
    v.push_back("--help");
    auto r = ctl_bare(v);
    INFO(v[0] << " " << v[1] << ": " << show(r));
    CHECK(r.exit_code == 0);
    CHECK(has(r.out, "Exit status"));
  }
  CHECK(has(ctl_bare({"add", "--help"}).out, "--in"));
  auto version = ctl_bare({"--version"});
  CHECK(version.exit_code == 0);
  CHECK(has(version.out, "delayqctl "));
}

TEST_CASE("delayqctl: stats and health") {
  server_process s(DELAYQ_SERVER_PATH, token);
  REQUIRE(ctl(s, {"add", "t", "p", "--in", "1h"}).exit_code == 0);
  auto stats = ctl(s, {"stats"});
  INFO(show(stats));
  REQUIRE(stats.exit_code == 0);
  CHECK(has(stats.out, "pending"));
  CHECK(has(stats.out, "server.reserved"));
  const json j = parse(ctl(s, {"stats", "--json"}));
  CHECK(j["pending"] == 1);
  CHECK(j["scheduled"] == 1);

  auto health = ctl(s, {"--json", "health"});
  REQUIRE(health.exit_code == 0);
  CHECK(parse(health)["status"] == "ok");
  // And the server drains and exits cleanly on SIGTERM after serving them.
  CHECK(s.stop() == 0);
}

TEST_CASE("delayqctl: dead letters") {
  SUBCASE("an empty list") {
    server_process s(DELAYQ_SERVER_PATH, token);
    auto list = ctl(s, {"dead", "list"});
    INFO(show(list));
    REQUIRE(list.exit_code == 0);
    CHECK(has(list.out, "no dead letters"));
    const json j = parse(ctl(s, {"--json", "dead", "list", "--offset", "0", "--limit", "10"}));
    CHECK(j["dead"].empty());
    CHECK(j["total"] == 0);
    CHECK(ctl(s, {"dead", "requeue", "nope"}).exit_code == 3);
    CHECK(ctl(s, {"dead", "purge", "nope"}).exit_code == 3);
  }
  SUBCASE("requeue and purge") {
    // A push target nobody listens on and one attempt: a due task dies at once.
    ctl_test::closed_port closed;
    server_process s(DELAYQ_SERVER_PATH, token, {"--retry-max", "1"});
    const std::string hook = "http://127.0.0.1:" + std::to_string(closed.port()) + "/hook";
    REQUIRE(ctl(s, {"type", "set", "doomed", hook, "--timeout-ms", "1000"}).exit_code == 0);
    REQUIRE(ctl(s, {"add", "doomed", "a", "--in", "0s", "--id", "dead/1"}).exit_code == 0);
    REQUIRE(ctl(s, {"add", "doomed", "b", "--in", "0s", "--id", "dead/2"}).exit_code == 0);
    // Nothing to wait on from outside: ask until both are dead letters (the
    // test's CTest timeout bounds this).
    json j;
    do {
      auto r = ctl(s, {"--json", "dead", "list"});
      REQUIRE(r.exit_code == 0);
      j = parse(r);
    } while (j["total"] != 2);
    auto list = ctl(s, {"dead", "list"});
    INFO(show(list));
    CHECK(has(list.out, "dead/1"));
    CHECK(has(list.out, "dead/2"));
    CHECK(has(list.out, "2 shown of 2 dead letters"));

    auto requeued = ctl(s, {"dead", "requeue", "dead/1", "--in", "1h"});
    INFO(show(requeued));
    REQUIRE(requeued.exit_code == 0);
    auto got = parse(ctl(s, {"--json", "get", "dead/1"}));
    CHECK(got["state"] == "delayed");
    CHECK(got["attempts"] == 0);

    REQUIRE(ctl(s, {"dead", "purge", "dead/2"}).exit_code == 0);
    CHECK(ctl(s, {"dead", "purge", "dead/2"}).exit_code == 3);
    CHECK(parse(ctl(s, {"--json", "dead", "list"}))["total"] == 0);
  }
}

TEST_CASE("delayqctl: types, type set and type rm") {
  server_process s(DELAYQ_SERVER_PATH, token);
  auto empty = ctl(s, {"types"});
  REQUIRE(empty.exit_code == 0);
  CHECK(has(empty.out, "no push targets"));

  auto set = ctl(s, {"type", "set", "mail", "http://127.0.0.1:9/hook", "--timeout-ms", "500",
                     "--concurrency", "3"});
  INFO(show(set));
  REQUIRE(set.exit_code == 0);
  auto types = ctl(s, {"types"});
  REQUIRE(types.exit_code == 0);
  CHECK(has(types.out, "PUSH_URL"));
  CHECK(has(types.out, "mail"));
  CHECK(has(types.out, "http://127.0.0.1:9/hook"));
  const json j = parse(ctl(s, {"--json", "types"}));
  CHECK(j["types"]["mail"]["push_url"] == "http://127.0.0.1:9/hook");
  CHECK(j["types"]["mail"]["timeout_ms"] == 500);
  CHECK(j["types"]["mail"]["concurrency"] == 3);

  // The server refuses https (400): exit 1 with its message.
  auto bad = ctl(s, {"type", "set", "mail", "https://example.com/"});
  CHECK(bad.exit_code == 1);
  CHECK(has(bad.err, "error: bad_request: "));

  auto rm = ctl(s, {"type", "rm", "mail"});
  REQUIRE(rm.exit_code == 0);
  CHECK(ctl(s, {"type", "rm", "mail"}).exit_code == 3);
  CHECK(has(ctl(s, {"types"}).out, "no push targets"));
}

TEST_CASE("delayqctl: schedules list, get, put and rm") {
  server_process s(DELAYQ_SERVER_PATH, token);
  auto none = ctl(s, {"schedules", "list"});
  REQUIRE(none.exit_code == 0);
  CHECK(has(none.out, "no schedules"));

  auto put = ctl(s, {"schedules", "put", "nightly", "report", "--cron", "0 3 * * MON-FRI", "--tz",
                     "Europe/Berlin", "--payload", "all of it", "--missed", "once", "--ttr", "1m"});
  INFO(show(put));
  REQUIRE(put.exit_code == 0);
  CHECK(has(put.out, "schedule nightly stored; next run "));
  REQUIRE(ctl(s, {"schedules", "put", "beat", "tick", "--every", "5s"}).exit_code == 0);

  auto list = ctl(s, {"schedules", "list"});
  REQUIRE(list.exit_code == 0);
  CHECK(has(list.out, "NEXT RUN"));
  CHECK(has(list.out, "0 3 * * MON-FRI (Europe/Berlin)"));
  CHECK(has(list.out, "every 5s"));
  CHECK(has(list.out, "2 shown of 2 schedules"));

  auto get = ctl(s, {"schedules", "get", "nightly", "--next", "3"});
  REQUIRE(get.exit_code == 0);
  CHECK(has(get.out, "next runs"));
  CHECK(has(get.out, "all of it"));
  const json j = parse(ctl(s, {"--json", "schedules", "get", "nightly", "--next", "2"}));
  CHECK(j["timezone"] == "Europe/Berlin");
  CHECK(j["missed"] == "once");
  CHECK(j["ttr_ms"] == 60000);
  CHECK(j["next_due_ms"].size() == 2);

  // The server's 400 names the field: exit 1.
  auto bad = ctl(s, {"schedules", "put", "bad", "x", "--cron", "0 25 * * *"});
  CHECK(bad.exit_code == 1);
  CHECK(has(bad.err, "error: invalid_schedule: cron: hour field '25'"));
  // Both, or neither, of --cron and --every: a usage error.
  CHECK(ctl(s, {"schedules", "put", "bad", "x", "--cron", "@daily", "--every", "1s"}).exit_code ==
        2);
  CHECK(ctl(s, {"schedules", "put", "bad", "x"}).exit_code == 2);
  CHECK(ctl(s, {"schedules", "put", "bad", "x", "--every", "1s", "--missed", "twice"}).exit_code ==
        2);

  REQUIRE(ctl(s, {"schedules", "rm", "beat"}).exit_code == 0);
  CHECK(ctl(s, {"schedules", "rm", "beat"}).exit_code == 3);
  CHECK(ctl(s, {"schedules", "get", "beat"}).exit_code == 3);
  CHECK(has(ctl(s, {"schedules", "list"}).out, "1 shown of 1 schedules"));
}

TEST_CASE("delayqctl: signal counts a count-triggered task, exit codes for unknown and fired") {
  server_process s(DELAYQ_SERVER_PATH, token);
  auto added = ctl(s, {"add", "join", "p", "--in", "1h", "--id", "j1", "--trigger", "3"});
  INFO(show(added));
  REQUIRE(added.exit_code == 0);
  auto got = ctl(s, {"get", "j1"});
  CHECK(has(got.out, "0 of 3"));

  auto one = ctl(s, {"signal", "j1"});
  INFO(show(one));
  REQUIRE(one.exit_code == 0);
  CHECK(one.out == "j1: 1 of 3 signals\n");
  CHECK(has(ctl(s, {"get", "j1"}).out, "1 of 3"));

  auto as_json = ctl(s, {"signal", "j1", "--n", "2", "--json"});
  INFO(show(as_json));
  REQUIRE(as_json.exit_code == 0);
  const json j = parse(as_json);
  CHECK(j["signals"] == 3);
  CHECK(j["trigger_count"] == 3);
  CHECK(j["triggered"] == true);

  // Fired (or gone once its attempt ended): 409 exit 4, or 404 exit 3.
  auto late = ctl(s, {"signal", "j1"});
  INFO(show(late));
  CHECK((late.exit_code == 4 || late.exit_code == 3));
  auto unknown = ctl(s, {"signal", "nobody"});
  CHECK(unknown.exit_code == 3);
  CHECK(has(unknown.err, "error: not_found: "));
  REQUIRE(ctl(s, {"add", "t", "", "--in", "1h", "--id", "plain"}).exit_code == 0);
  auto plain = ctl(s, {"signal", "plain"});
  CHECK(plain.exit_code == 4);
  CHECK(has(plain.err, "error: not_count_triggered: "));
  // Usage errors: exit 2.
  CHECK(ctl(s, {"signal", "j1", "--n", "0"}).exit_code == 2);
  CHECK(ctl(s, {"signal"}).exit_code == 2);
  CHECK(ctl(s, {"add", "t", "", "--in", "1h", "--trigger", "0"}).exit_code == 2);
}

TEST_CASE("delayqctl: a full type (--capacity) is exit 7") {
  server_process s(DELAYQ_SERVER_PATH, token, {"--capacity", "topic=1"});
  REQUIRE(ctl(s, {"add", "topic", "", "--in", "1h"}).exit_code == 0);
  auto full = ctl(s, {"add", "topic", "", "--in", "1h"});
  INFO(show(full));
  CHECK(full.exit_code == 7);
  CHECK(has(full.err, "error: type_full: "));
}

// ------------------------------------------------------------------ shard layouts on Redis
//
// `delayq-server --cluster` on a plain Redis URI, and `delayqctl
// migrate-shards` (docs/scale-out.md, "Moving a store to the sharded
// layout"), on the Redis server of $DELAYQ_TEST_REDIS (scripts/with-redis.sh)
// under a key prefix of each case's own. An unsharded store is made the way
// users make one: by a server without --cluster, with tasks added through it,
// one of them dead (pushed to a port nobody listens on, one attempt allowed).

namespace {

std::string test_redis() {
  const char* base = std::getenv("DELAYQ_TEST_REDIS");
  REQUIRE_MESSAGE((base != nullptr && *base != '\0'),
                  "DELAYQ_TEST_REDIS is not set: run the tests through scripts/with-redis.sh "
                  "(scripts/with-redis.sh ctest -L ctl), which starts a private redis-server");
  return base;
}

std::string fresh_prefix() {
  static int counter = 0;
  return "ctl-" + std::to_string(getpid()) + "-" + std::to_string(counter++) + "-" +
         std::to_string(std::chrono::steady_clock::now().time_since_epoch().count() % 1'000'000);
}

std::string with_prefix(const std::string& base, const std::string& prefix) {
  return base + (base.find('?') == std::string::npos ? "?" : "&") + "prefix=" + prefix;
}

// A delayq-server run that must end by itself (a refusal to start). One that
// starts instead is killed after a minute: exit 137, and the checks fail.
run_result server_refusal(std::vector<std::string> args) {
  std::vector<std::string> all = {DELAYQ_SERVER_PATH, "--listen", "127.0.0.1:0", "--token", token,
                                  "--tick",           "10"};
  for (auto& a : args) all.push_back(std::move(a));
  return run(all, {}, 60'000);
}

// redis-cli on the test Redis (its path from $PATH).
run_result redis_cli(std::vector<std::string> args) {
  std::string path;
  const char* env_path = std::getenv("PATH");
  std::string dirs = env_path ? env_path : "/usr/bin:/bin";
  for (std::size_t at = 0; at <= dirs.size();) {
    const std::size_t colon = std::min(dirs.find(':', at), dirs.size());
    const std::string candidate = dirs.substr(at, colon - at) + "/redis-cli";
    if (access(candidate.c_str(), X_OK) == 0) {
      path = candidate;
      break;
    }
    at = colon + 1;
  }
  REQUIRE_MESSAGE(!path.empty(), "redis-cli is not on PATH (Debian: redis-tools)");
  std::vector<std::string> all = {path, "-u", test_redis()};
  for (auto& a : args) all.push_back(std::move(a));
  return run(all, {}, 60'000);
}

// The first line of redis-cli's answer.
std::string redis_answer(std::vector<std::string> args) {
  const run_result r = redis_cli(std::move(args));
  REQUIRE_MESSAGE(r.exit_code == 0, show(r));
  return r.out.substr(0, r.out.find('\n'));
}

// What seed_unsharded() put in a store.
struct seeded_store {
  std::vector<std::string> ids;  // live tasks, payload "p-" + id
  std::string dead_id = "doomed/1";
  std::string hook;  // the push target of type "doomed"
};

// `tasks` tasks due in an hour and one dead letter, written by a server
// without --cluster; its push target stays in the store's settings.
seeded_store seed_unsharded(const std::string& uri, int tasks = 3) {
  seeded_store seeded;
  ctl_test::closed_port closed;
  seeded.hook = "http://127.0.0.1:" + std::to_string(closed.port()) + "/hook";
  server_process s(DELAYQ_SERVER_PATH, token, {"--retry-max", "1"}, uri);
  REQUIRE(ctl(s, {"type", "set", "doomed", seeded.hook, "--timeout-ms", "1000"}).exit_code == 0);
  for (int k = 0; k < tasks; ++k) {
    const std::string id = "keep/" + std::to_string(k);
    auto r = ctl(s, {"add", "keep", "p-" + id, "--in", "1h", "--id", id});
    REQUIRE_MESSAGE(r.exit_code == 0, show(r));
    seeded.ids.push_back(id);
  }
  REQUIRE(ctl(s, {"add", "doomed", "x", "--in", "0s", "--id", seeded.dead_id}).exit_code == 0);
  // Nothing to wait on from outside: ask until it is a dead letter (the
  // test's CTest timeout bounds this).
  json j;
  do {
    auto r = ctl(s, {"--json", "dead", "list"});
    REQUIRE(r.exit_code == 0);
    j = parse(r);
  } while (j["total"] != 1);
  REQUIRE(s.stop() == 0);
  return seeded;
}

// Every task, the dead letter and the push target of `seeded`, through `s`.
void check_seeded(const server_process& s, const seeded_store& seeded) {
  for (const std::string& id : seeded.ids) {
    auto r = ctl(s, {"--json", "get", id});
    INFO(id << ": " << show(r));
    REQUIRE(r.exit_code == 0);
    CHECK(parse(r)["payload"] == "p-" + id);
  }
  const json dead = parse(ctl(s, {"--json", "dead", "list"}));
  CHECK(dead["total"] == 1);
  REQUIRE(dead["dead"].size() == 1);
  CHECK(dead["dead"][0]["id"] == seeded.dead_id);
  const json types = parse(ctl(s, {"--json", "types"}));
  CHECK(types["types"]["doomed"]["push_url"] == seeded.hook);
}

// The arguments of the `delayqctl migrate-shards --store 'URI' --shards N`
// a refusal names, without "delayqctl"; fails the test when there is none.
std::vector<std::string> named_migration(const std::string& text) {
  const std::string head = "delayqctl migrate-shards --store '";
  const auto at = text.find(head);
  REQUIRE_MESSAGE(at != std::string::npos, "no migration command in: " << text);
  const auto uri_end = text.find('\'', at + head.size());
  REQUIRE(uri_end != std::string::npos);
  const std::string uri = text.substr(at + head.size(), uri_end - at - head.size());
  const std::string flag = " --shards ";
  REQUIRE(text.compare(uri_end + 1, flag.size(), flag) == 0);
  std::size_t digits = uri_end + 1 + flag.size(), end = digits;
  while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
  REQUIRE(end > digits);
  return {"migrate-shards", "--store", uri, "--shards", text.substr(digits, end - digits)};
}

// The unsharded keys of `prefix` that hold records: none after a migration.
std::string unsharded_records(const std::string& prefix) {
  const std::string tag = "{" + prefix + "}:";
  return redis_answer({"EXISTS", tag + "tasks", tag + "due", tag + "dead", tag + "dead:by_time"});
}

}  // namespace

TEST_CASE("shard layout: --cluster on an empty store and a plain redis:// URI starts and serves") {
  const std::string prefix = fresh_prefix();
  const std::string uri = with_prefix(test_redis(), prefix);
  {
    // No shard count at all: --shards' default (64) is the store's.
    server_process s(DELAYQ_SERVER_PATH, token, {"--cluster"}, uri);
    auto added = ctl(s, {"add", "mail", "hello", "--in", "1h", "--id", "first"});
    INFO(show(added));
    REQUIRE(added.exit_code == 0);
    auto got = ctl(s, {"--json", "get", "first"});
    INFO(show(got));
    REQUIRE(got.exit_code == 0);
    CHECK(parse(got)["payload"] == "hello");
    CHECK(s.stop() == 0);
  }
  CHECK(redis_answer({"HGET", "{" + prefix + "}:meta", "shards"}) == "64");
  CHECK(unsharded_records(prefix) == "0");
  // The task is in the sharded layout: a server without --cluster would see
  // none of it, and says so instead of starting.
  auto plain = server_refusal({"--store", uri});
  INFO(show(plain));
  CHECK(plain.exit_code == 1);
  CHECK(has(plain.err, "holds a sharded task set (64 shards"));
  CHECK(has(plain.err, "Start it with --cluster --shards 64"));
  // And a cluster restarted on it finds the task.
  server_process again(DELAYQ_SERVER_PATH, token, {"--cluster", "--shards", "64"}, uri);
  CHECK(parse(ctl(again, {"--json", "get", "first"}))["payload"] == "hello");
}

TEST_CASE("shard layout: an unsharded store is refused with the command that moves it") {
  const std::string prefix = fresh_prefix();
  const std::string uri = with_prefix(test_redis(), prefix);
  const seeded_store seeded = seed_unsharded(uri);

  auto refused = server_refusal({"--store", uri, "--cluster", "--shards", "8"});
  INFO(show(refused));
  CHECK(refused.exit_code == 1);
  CHECK(has(refused.err, "holds an unsharded task set (3 tasks and 1 dead letter"));
  // Refused before anything was written: the store is as the seed left it.
  CHECK(redis_answer({"HGET", "{" + prefix + "}:meta", "shards"}).empty());

  // The command the refusal names moves everything.
  const auto command = named_migration(refused.err);
  CHECK(command[4] == "8");
  auto moved = ctl_bare(command);
  INFO(show(moved));
  REQUIRE(moved.exit_code == 0);
  CHECK(has(moved.out, "moved 3 tasks and 1 dead letter of "));
  CHECK(unsharded_records(prefix) == "0");
  CHECK(redis_answer({"HGET", "{" + prefix + "}:meta", "shards"}) == "8");

  {
    server_process s(DELAYQ_SERVER_PATH, token, {"--cluster", "--shards", "8"}, uri);
    check_seeded(s, seeded);
  }
  // Run again on a finished store: nothing to do, and it says so.
  auto again = ctl_bare({"--json", "migrate-shards", "--store", uri, "--shards", "8"});
  INFO(show(again));
  REQUIRE(again.exit_code == 0);
  const json j = parse(again);
  CHECK(j["tasks"] == 0);
  CHECK(j["dead_letters"] == 0);
  CHECK(j["shards"] == 8);
}

TEST_CASE(
    "shard layout: a half-converted store is refused, and the migration run again finishes it") {
  const std::string prefix = fresh_prefix();
  const std::string uri = with_prefix(test_redis(), prefix);
  const std::string tag = "{" + prefix + "}:";
  const seeded_store seeded = seed_unsharded(uri);
  SUBCASE("stopped after recording the shard count") {
    // What the migration does first, alone: the tasks are all unsharded.
    REQUIRE(redis_answer({"HSET", tag + "meta", "shards", "8"}) == "1");
  }
  SUBCASE("stopped after the copy, before the removal") {
    auto moved = ctl_bare({"migrate-shards", "--store", uri, "--shards", "8"});
    REQUIRE_MESSAGE(moved.exit_code == 0, show(moved));
    // Put the records back where they were: both layouts hold them.
    const char* copy_back = R"lua(
      local n = 0
      for s = 0, tonumber(ARGV[2]) - 1 do
        local from = '{' .. ARGV[1] .. ':' .. s .. '}:'
        local to = '{' .. ARGV[1] .. '}:'
        for _, pair in ipairs({{'tasks', 'due'}, {'dead', 'dead:by_time'}}) do
          local records = redis.call('HGETALL', from .. pair[1])
          for i = 1, #records, 2 do
            redis.call('HSET', to .. pair[1], records[i], records[i + 1])
            n = n + 1
          end
          local index = redis.call('ZRANGE', from .. pair[2], 0, -1, 'WITHSCORES')
          for i = 1, #index, 2 do redis.call('ZADD', to .. pair[2], index[i + 1], index[i]) end
        end
      end
      return n)lua";
    REQUIRE(redis_answer({"EVAL", copy_back, "0", prefix, "8"}) == "4");
  }
  auto refused = server_refusal({"--store", uri, "--cluster", "--shards", "8"});
  INFO(show(refused));
  CHECK(refused.exit_code == 1);
  CHECK(has(refused.err, "is half converted to the sharded layout"));
  CHECK(has(refused.err, "3 tasks and 1 dead letter are still in the unsharded layout"));
  const auto command = named_migration(refused.err);
  CHECK(command[4] == "8");

  auto finished = ctl_bare(command);
  INFO(show(finished));
  REQUIRE(finished.exit_code == 0);
  CHECK(has(finished.out, "moved 3 tasks and 1 dead letter of "));
  CHECK(unsharded_records(prefix) == "0");
  server_process s(DELAYQ_SERVER_PATH, token, {"--cluster", "--shards", "8"}, uri);
  check_seeded(s, seeded);
}

TEST_CASE("shard layout: the shard count is given once, and counts that differ are errors") {
  const std::string prefix = fresh_prefix();
  const std::string uri = with_prefix(test_redis(), prefix);

  SUBCASE("--shards and the URI's shards= differ: a usage error naming both") {
    auto r = server_refusal({"--store", uri + "&shards=16", "--cluster", "--shards", "8"});
    INFO(show(r));
    CHECK(r.exit_code == 2);
    CHECK(has(r.err, "--shards 8 and the store URI's shards=16 differ"));
    // Nothing was created.
    CHECK(redis_answer({"EXISTS", "{" + prefix + "}:meta"}) == "0");
  }
  SUBCASE("the URI's count alone; then instances given another count are refused") {
    {
      server_process s(DELAYQ_SERVER_PATH, token, {"--cluster"}, uri + "&shards=16");
      REQUIRE(ctl(s, {"add", "t", "x", "--in", "1h", "--id", "u1"}).exit_code == 0);
      CHECK(parse(ctl(s, {"--json", "get", "u1"}))["payload"] == "x");
    }
    CHECK(redis_answer({"HGET", "{" + prefix + "}:meta", "shards"}) == "16");
    // The same count given on both sides is fine.
    { server_process same(DELAYQ_SERVER_PATH, token, {"--cluster", "--shards", "16"}, uri); }
    for (const std::vector<std::string>& flags :
         {std::vector<std::string>{"--cluster", "--shards", "8"},
          std::vector<std::string>{"--cluster"}}) {
      std::vector<std::string> args = {"--store", uri};
      args.insert(args.end(), flags.begin(), flags.end());
      auto r = server_refusal(args);
      INFO(show(r));
      CHECK(r.exit_code == 1);
      CHECK(has(r.err, "is sharded with 16 shards, not the " +
                           std::string(flags.size() == 3 ? "8" : "64")));
      CHECK(has(r.err, "start every instance with --shards 16"));
    }
    // The migration too refuses another count, and one given twice.
    auto other = ctl_bare({"migrate-shards", "--store", uri, "--shards", "8"});
    INFO(show(other));
    CHECK(other.exit_code == 4);
    CHECK(has(other.err, "error: shard_mismatch: "));
    CHECK(has(other.err, "is sharded with 16 shards already, not 8"));
    auto twice = ctl_bare({"migrate-shards", "--store", uri + "&shards=16", "--shards", "8"});
    INFO(show(twice));
    CHECK(twice.exit_code == 4);
    CHECK(has(twice.err, "shards=16"));
  }
  SUBCASE("migrate-shards needs a count, and a Redis store") {
    auto none = ctl_bare({"migrate-shards", "--store", uri});
    INFO(show(none));
    CHECK(none.exit_code == 2);
    CHECK(has(none.err, "--shards N"));
    auto sqlite = ctl_bare({"migrate-shards", "--store", "sqlite:x.db", "--shards", "8"});
    INFO(show(sqlite));
    CHECK(sqlite.exit_code == 2);
    CHECK(has(sqlite.err, "error: invalid_store_uri: "));
  }
  SUBCASE("--cluster on a store the instances cannot share: a usage error") {
    auto r = server_refusal({"--store", "memory:", "--cluster"});
    INFO(show(r));
    CHECK(r.exit_code == 2);
    CHECK(has(r.err, "--cluster needs a store the instances share"));
  }
}

namespace {

// The Redis Cluster cases: an empty store, then an unsharded one moved.
void run_on_redis_cluster(const std::string& base) {
  const std::string empty_uri = with_prefix(base, fresh_prefix());
  {
    server_process s(DELAYQ_SERVER_PATH, token, {"--cluster", "--shards", "8"}, empty_uri);
    REQUIRE(ctl(s, {"add", "mail", "hello", "--in", "1h", "--id", "first"}).exit_code == 0);
    CHECK(parse(ctl(s, {"--json", "get", "first"}))["payload"] == "hello");
  }
  const std::string uri = with_prefix(base, fresh_prefix());
  const seeded_store seeded = seed_unsharded(uri);
  auto refused = server_refusal({"--store", uri, "--cluster", "--shards", "8"});
  INFO(show(refused));
  CHECK(refused.exit_code == 1);
  CHECK(has(refused.err, "holds an unsharded task set (3 tasks and 1 dead letter"));
  auto moved = ctl_bare(named_migration(refused.err));
  INFO(show(moved));
  REQUIRE(moved.exit_code == 0);
  CHECK(has(moved.out, "moved 3 tasks and 1 dead letter of redis-cluster://"));
  server_process s(DELAYQ_SERVER_PATH, token, {"--cluster", "--shards", "8"}, uri);
  check_seeded(s, seeded);
}

}  // namespace

// Needs DELAYQ_TEST_REDIS_CLUSTER (scripts/with-redis-cluster.sh): skipped
// unless run with --no-skip.
TEST_CASE("cluster: shard layout: --cluster and migrate-shards on a Redis Cluster" *
          doctest::skip()) {
  const char* base = std::getenv("DELAYQ_TEST_REDIS_CLUSTER");
  REQUIRE_MESSAGE((base != nullptr && *base != '\0'),
                  "DELAYQ_TEST_REDIS_CLUSTER is not set: run through "
                  "scripts/with-redis-cluster.sh");
  run_on_redis_cluster(base);
}
