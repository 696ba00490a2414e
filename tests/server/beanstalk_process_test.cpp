// The beanstalk protocol of delayq-server as a client sees it: the real
// server binary on a free loopback port (--beanstalk-listen), a raw socket,
// and replies compared byte for byte where beanstalkd's protocol.txt fixes
// them. Stores: memory for the protocol, SQLite and Redis for durability.
// No sleeps: a test waits on a reply (a reserve waits for its job), on the
// server's output, or polls stats-tube where nothing else says it.
#include <doctest/doctest.h>

#include <poll.h>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/read_until.hpp>
#include <fstream>
#include <optional>
#include <regex>

#include "cluster_support.hpp"
#include "server_test_support.hpp"

namespace {

using namespace delayq::server_test;

/// A beanstalk client on a raw socket: sends bytes, reads reply lines and
/// bodies, each wait bounded by the hang guard.
template <class Protocol = tcp>
class basic_bs_client {
 public:
  explicit basic_bs_client(typename Protocol::endpoint at) : socket_(ioc_) { socket_.connect(at); }

  void send(std::string_view bytes) { asio::write(socket_, asio::buffer(bytes)); }

  /// One reply line, without its "\r\n"; "" when the server closed.
  std::string line() {
    boost::system::error_code ec;
    bool done = false;
    std::size_t n = 0;
    asio::async_read_until(socket_, asio::dynamic_buffer(buf_), "\r\n",
                           [&](boost::system::error_code e, std::size_t k) {
                             ec = e;
                             n = k;
                             done = true;
                           });
    wait(done);
    if (ec) return {};
    std::string l = buf_.substr(0, n - 2);
    buf_.erase(0, n);
    return l;
  }

  /// `n` bytes of a body and its "\r\n".
  std::string body(std::size_t n) {
    boost::system::error_code ec;
    bool done = false;
    if (buf_.size() < n + 2) {
      asio::async_read(socket_, asio::dynamic_buffer(buf_),
                       asio::transfer_at_least(n + 2 - buf_.size()),
                       [&](boost::system::error_code e, std::size_t) {
                         ec = e;
                         done = true;
                       });
      wait(done);
    }
    REQUIRE_MESSAGE(buf_.size() >= n + 2, "the body was cut short");
    CHECK(buf_.substr(n, 2) == "\r\n");
    std::string b = buf_.substr(0, n);
    buf_.erase(0, n + 2);
    return b;
  }

  /// Sends `command` + "\r\n" and returns the reply line.
  std::string cmd(std::string_view command) {
    send(std::string(command) + "\r\n");
    return line();
  }

  /// put: the reply line ("INSERTED <id>").
  std::string put(std::string_view data, unsigned pri = 0, unsigned delay = 0, unsigned ttr = 60) {
    send("put " + std::to_string(pri) + " " + std::to_string(delay) + " " + std::to_string(ttr) +
         " " + std::to_string(data.size()) + "\r\n" + std::string(data) + "\r\n");
    return line();
  }
  /// put, checked: the new job's id.
  std::uint64_t put_id(std::string_view data, unsigned pri = 0, unsigned delay = 0,
                       unsigned ttr = 60) {
    const std::string r = put(data, pri, delay, ttr);
    REQUIRE_MESSAGE(r.starts_with("INSERTED "), r);
    return std::stoull(r.substr(9));
  }

  /// A reply that carries a job ("RESERVED <id> <bytes>" or "FOUND ..."):
  /// the first word, the id and the body; {word, 0, ""} for any other.
  struct job {
    std::string word;
    std::uint64_t id = 0;
    std::string data;
  };
  job job_reply() {
    const std::string l = line();
    std::istringstream in(l);
    job j;
    std::size_t n = 0;
    in >> j.word;
    if (j.word != "RESERVED" && j.word != "FOUND") {
      j.word = l;
      return j;
    }
    in >> j.id >> n;
    j.data = body(n);
    return j;
  }
  job reserve(std::string_view command = "reserve") {
    send(std::string(command) + "\r\n");
    return job_reply();
  }

  /// An "OK <bytes>" reply's YAML document.
  std::string ok_body(std::string_view command) {
    const std::string l = cmd(command);
    REQUIRE_MESSAGE(l.starts_with("OK "), command << ": " << l);
    return body(std::stoull(l.substr(3)));
  }
  /// One field of a YAML stats document ("" when absent).
  std::string stat(std::string_view command, std::string_view key) {
    const std::string doc = ok_body(command);
    const std::string k = "\n" + std::string(key) + ": ";
    const auto at = doc.find(k);
    if (at == std::string::npos) return {};
    const auto end = doc.find('\n', at + k.size());
    return doc.substr(at + k.size(), end - at - k.size());
  }

  /// Whether the server closed the connection (reads until it does).
  bool closed_by_server() { return line().empty(); }

  asio::io_context& ioc() { return ioc_; }

 private:
  void wait(bool& done) {
    ioc_.restart();
    ioc_.run_for(hang_guard);
    if (!done) throw std::runtime_error("no beanstalk reply within the hang guard");
  }

  asio::io_context ioc_;
  typename Protocol::socket socket_;
  std::string buf_;
};
using bs_client = basic_bs_client<>;

/// delayq-server with a beanstalk listener on a free loopback port.
struct bs_server {
  // The server binds port 0 and says which port it got: a port picked here
  // and bound there could be taken in between by another test's server
  // (CI saw "Address already in use").
  std::uint16_t port = 0;
  std::unique_ptr<server_process> p;

  explicit bs_server(const std::string& store, std::vector<std::string> extra = {}) {
    std::vector<std::string> args{"--listen", "127.0.0.1:0",        "--store",    store, "--token",
                                  test_token, "--beanstalk-listen", "127.0.0.1:0"};
    if (std::find(extra.begin(), extra.end(), "--tick") == extra.end())
      args.insert(args.end(), {"--tick", "10"});
    args.insert(args.end(), extra.begin(), extra.end());
    p = std::make_unique<server_process>(std::move(args));
    p->wait_listening();
    const std::string at =
        p->wait_for_stdout_line("delayq-server beanstalk listening on 127.0.0.1:");
    port = static_cast<std::uint16_t>(std::stoul(at));
  }
  tcp::endpoint endpoint() const { return {asio::ip::make_address("127.0.0.1"), port}; }
  bs_client client() const { return bs_client(endpoint()); }
};

/// Waits until stats-tube of `tube` shows `n` ready jobs: jobs put with no
/// delay become ready once the engine fires them (a tick later), and the
/// order tests need them all ready before they reserve.
void wait_ready(bs_client& c, const std::string& tube, std::size_t n) {
  REQUIRE_MESSAGE(eventually([&] {
                    return c.stat("stats-tube " + tube, "current-jobs-ready") == std::to_string(n);
                  }),
                  "stats-tube " << tube << " never showed " << n << " ready jobs");
}

}  // namespace

TEST_CASE("beanstalk: put, reserve and delete, byte for byte, on a fresh store") {
  bs_server s("memory:");
  auto c = s.client();
  // Job ids start at 1 on a fresh store.
  CHECK(c.put("hello") == "INSERTED 1");
  CHECK(c.put(std::string("a\0b\r\nc", 6)) == "INSERTED 2");
  c.send("reserve\r\n");
  CHECK(c.line() == "RESERVED 1 5");
  CHECK(c.body(5) == "hello");
  auto j = c.reserve();
  CHECK(j.word == "RESERVED");
  CHECK(j.id == 2);
  CHECK(j.data == std::string("a\0b\r\nc", 6));  // any bytes
  CHECK(c.cmd("delete 1") == "DELETED");
  CHECK(c.cmd("delete 1") == "NOT_FOUND");
  CHECK(c.cmd("delete 2") == "DELETED");
  CHECK(c.cmd("reserve-with-timeout 0") == "TIMED_OUT");
  c.send("quit\r\n");
  CHECK(c.closed_by_server());
}

TEST_CASE("beanstalk: the lowest priority is reserved first, then the oldest") {
  bs_server s("memory:");
  auto c = s.client();
  // Put in a tube nobody watches, so all four are ready before the reserve.
  CHECK(c.cmd("use order") == "USING order");
  const auto a = c.put_id("a", 10), b = c.put_id("b", 5), d = c.put_id("c", 10),
             e = c.put_id("d", 5);
  wait_ready(c, "order", 4);
  CHECK(c.stat("stats-tube order", "current-jobs-urgent") == "4");
  CHECK(c.cmd("watch order") == "WATCHING 2");
  CHECK(c.cmd("ignore default") == "WATCHING 1");
  for (const auto want : {b, e, a, d}) {
    const auto j = c.reserve();
    CHECK(j.word == "RESERVED");
    CHECK(j.id == want);
  }
}

TEST_CASE("beanstalk: INSERTED, RELEASED and KICKED mean the job is ready for the next reserve") {
  // beanstalkd decides a put and the reserve after it on one loop. delayq
  // answers a put, a release without delay or a kick only once the job is
  // in the broker's ready order, so a reserve-with-timeout 0 sent after the
  // answer, on any connection, gets it, in priority order: with no wait in
  // between, on every store, and with --tick 10 (a job that waited for the
  // next tick boundary would be missed). "memory-2": memory: with a second
  // I/O thread (the default there is one), so that the two connections are
  // on two threads, as they are on the other stores.
  for (const std::string kind : {"memory", "memory-2", "sqlite", "redis"}) {
    CAPTURE(kind);
    std::optional<test_store> store;
    if (!kind.starts_with("memory"))
      store.emplace(kind == "sqlite" ? store_kind::sqlite : store_kind::redis);
    bs_server s(store ? store->uri() : "memory:",
                kind == "memory-2" ? std::vector<std::string>{"--io-threads", "2"}
                                   : std::vector<std::string>{});
    auto producer = s.client();
    auto worker = s.client();
    for (int round = 0; round < 50; ++round) {
      CAPTURE(round);
      const auto two = producer.put_id("two", 2);
      const auto one = producer.put_id("one", 1);
      auto j = worker.reserve("reserve-with-timeout 0");
      REQUIRE(j.word == "RESERVED");
      CHECK(j.id == one);
      // Released without delay: ready again, ahead of the priority-2 job.
      CHECK(worker.cmd("release " + std::to_string(one) + " 1 0") == "RELEASED");
      j = producer.reserve("reserve-with-timeout 0");
      REQUIRE(j.word == "RESERVED");
      CHECK(j.id == one);
      CHECK(producer.cmd("bury " + std::to_string(one) + " 1") == "BURIED");
      CHECK(worker.cmd("kick 1") == "KICKED 1");
      j = worker.reserve("reserve-with-timeout 0");
      REQUIRE(j.word == "RESERVED");
      CHECK(j.id == one);
      CHECK(worker.cmd("delete " + std::to_string(one)) == "DELETED");
      j = worker.reserve("reserve-with-timeout 0");
      REQUIRE(j.word == "RESERVED");
      CHECK(j.id == two);
      CHECK(worker.cmd("delete " + std::to_string(two)) == "DELETED");
    }
  }
}

TEST_CASE("beanstalk: a reserve whose timeout ends at or after a job's due time gets the job") {
  // beanstalkd decides both on one loop, and the job wins. Here the broker's
  // timer and the engine's tick are two clocks; with a 1 s tick the engine
  // alone would hand the job over up to a second late, and the reserve would
  // answer TIMED_OUT. Released with delay 1 before the reserve-with-timeout
  // 1 starts, the job is due no later than the reserve's deadline.
  bs_server s("memory:", {"--tick", "1000"});
  auto c = s.client();
  const auto id = c.put_id("j");
  for (int round = 0; round < 2; ++round) {
    CAPTURE(round);
    auto j = c.reserve("reserve-with-timeout 1");
    REQUIRE(j.word == "RESERVED");
    CHECK(j.id == id);
    CHECK(c.cmd("release " + std::to_string(id) + " 0 1") == "RELEASED");
    j = c.reserve("reserve-with-timeout 1");
    REQUIRE(j.word == "RESERVED");
    CHECK(j.id == id);
    CHECK(c.cmd("release " + std::to_string(id) + " 0 0") == "RELEASED");
  }
}

TEST_CASE("beanstalk: stats names the protocol level as a semantic version") {
  // Clients read `version` to decide which commands exist (kick-job came
  // with beanstalkd 1.8); a semver parser must accept it.
  bs_server s("memory:");
  auto c = s.client();
  std::string v = c.stat("stats", "version");
  REQUIRE(v.size() >= 2);
  REQUIRE(v.front() == '"');
  v = v.substr(1, v.size() - 2);
  static const std::regex semver(
      R"(^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$)");
  std::smatch m;
  REQUIRE_MESSAGE(std::regex_match(v, m, semver), v);
  CHECK(std::make_pair(std::stoi(m[1]), std::stoi(m[2])) >= std::make_pair(1, 13));
  CHECK(v.find("+delayq.") != std::string::npos);
}

TEST_CASE("beanstalk: every error reply") {
  bs_server s("memory:", {"--max-job-size", "10"});
  auto c = s.client();
  CHECK(c.cmd("frobnicate") == "UNKNOWN_COMMAND");
  CHECK(c.cmd("") == "UNKNOWN_COMMAND");
  CHECK(c.cmd("put x 0 1 1") == "BAD_FORMAT");
  CHECK(c.cmd("delete -1") == "BAD_FORMAT");
  CHECK(c.cmd("use -bad") == "BAD_FORMAT");
  CHECK(c.cmd("use " + std::string(201, 'a')) == "BAD_FORMAT");
  // A put body not followed by "\r\n".
  c.send("put 0 0 1 2\r\nabXY");
  CHECK(c.line() == "EXPECTED_CRLF");
  // Over --max-job-size: the body is skipped, and the connection reads on.
  c.send("put 0 0 1 11\r\n01234567890\r\n");
  CHECK(c.line() == "JOB_TOO_BIG");
  CHECK(c.put("0123456789") == "INSERTED 1");
  CHECK(c.cmd("delete 999") == "NOT_FOUND");
  CHECK(c.cmd("release 999 0 0") == "NOT_FOUND");
  CHECK(c.cmd("bury 999 0") == "NOT_FOUND");
  CHECK(c.cmd("touch 999") == "NOT_FOUND");
  CHECK(c.cmd("peek 999") == "NOT_FOUND");
  CHECK(c.cmd("kick-job 999") == "NOT_FOUND");
  CHECK(c.cmd("stats-job 999") == "NOT_FOUND");
  CHECK(c.cmd("stats-tube nosuchtube") == "NOT_FOUND");
  CHECK(c.cmd("pause-tube nosuchtube 1") == "NOT_FOUND");
  CHECK(c.cmd("ignore default") == "NOT_IGNORED");
  CHECK(c.cmd("reserve-with-timeout 600") == "RESERVED 1 10");
  CHECK(c.body(10) == "0123456789");
}

TEST_CASE("beanstalk: a job a client holds in its last second ends its reserve: DEADLINE_SOON") {
  bs_server s("memory:");
  auto c = s.client();
  // A TTR of 1 s is all safety margin: the next reserve answers at once.
  const auto id = c.put_id("x", 0, 0, 1);
  const auto j = c.reserve();
  CHECK(j.id == id);
  CHECK(c.cmd("reserve") == "DEADLINE_SOON");
  CHECK(c.cmd("touch " + std::to_string(id)) == "TOUCHED");
  CHECK(c.cmd("delete " + std::to_string(id)) == "DELETED");
  // A longer TTR: the reserve waits, and DEADLINE_SOON ends the wait once
  // the job enters its last second.
  const auto id2 = c.put_id("y", 0, 0, 2);
  CHECK(c.reserve().id == id2);
  CHECK(c.cmd("reserve") == "DEADLINE_SOON");
}

TEST_CASE("beanstalk: a job whose time-to-run ends is ready again for another client") {
  bs_server s("memory:");
  auto a = s.client();
  auto b = s.client();
  const auto id = a.put_id("x", 0, 0, 1);
  CHECK(a.reserve().id == id);
  // b waits; the job comes back to it when a's TTR ends.
  const auto j = b.reserve("reserve-with-timeout 600");
  CHECK(j.word == "RESERVED");
  CHECK(j.id == id);
  // a no longer holds it.
  CHECK(a.cmd("delete " + std::to_string(id)) == "NOT_FOUND");
  CHECK(b.cmd("delete " + std::to_string(id)) == "DELETED");
}

TEST_CASE("beanstalk: a closed connection's reserved jobs are ready again at once") {
  bs_server s("memory:");
  std::uint64_t id = 0;
  {
    auto a = s.client();
    id = a.put_id("x", 0, 0, 600);
    CHECK(a.reserve().id == id);
  }
  auto b = s.client();
  const auto j = b.reserve("reserve-with-timeout 600");
  CHECK(j.id == id);
}

TEST_CASE("beanstalk: release, bury, kick and the peeks") {
  bs_server s("memory:");
  auto c = s.client();
  const auto id = c.put_id("job", 7);
  const std::string n = std::to_string(id);
  CHECK(c.reserve().id == id);
  CHECK(c.stat("stats-job " + n, "state") == "reserved");
  // Released with a new priority and a long delay: delayed.
  CHECK(c.cmd("release " + n + " 3 600") == "RELEASED");
  CHECK(c.stat("stats-job " + n, "state") == "delayed");
  CHECK(c.stat("stats-job " + n, "pri") == "3");
  auto p = c.reserve("peek-delayed");
  CHECK(p.word == "FOUND");
  CHECK(p.id == id);
  CHECK(c.cmd("peek-buried") == "NOT_FOUND");
  // kick with nothing buried kicks delayed jobs.
  CHECK(c.cmd("kick 10") == "KICKED 1");
  CHECK(c.reserve("reserve-with-timeout 600").id == id);
  CHECK(c.cmd("bury " + n + " 9") == "BURIED");
  CHECK(c.stat("stats-job " + n, "state") == "buried");
  CHECK(c.stat("stats-tube default", "current-jobs-buried") == "1");
  p = c.reserve("peek-buried");
  CHECK(p.id == id);
  CHECK(p.data == "job");
  p = c.reserve("peek " + n);
  CHECK(p.id == id);
  CHECK(c.cmd("kick-job " + n) == "KICKED");
  const auto r = c.reserve("reserve-with-timeout 600");
  CHECK(r.id == id);
  CHECK(c.stat("stats-job " + n, "pri") == "9");
  CHECK(c.cmd("bury " + n + " 1") == "BURIED");
  // A buried job is deleted from the dead letters.
  CHECK(c.cmd("delete " + n) == "DELETED");
  CHECK(c.cmd("peek " + n) == "NOT_FOUND");
}

TEST_CASE("beanstalk: tubes: use, watch, ignore, the lists, stats-tube and pause-tube") {
  bs_server s("memory:");
  auto c = s.client();
  CHECK(c.cmd("list-tube-used") == "USING default");
  CHECK(c.cmd("use app/mail(high)") == "USING app/mail(high)");
  CHECK(c.ok_body("list-tubes-watched") == "---\n- default\n");
  CHECK(c.cmd("watch app/mail(high)") == "WATCHING 2");
  CHECK(c.cmd("watch app/mail(high)") == "WATCHING 2");
  CHECK(c.ok_body("list-tubes") == "---\n- app/mail(high)\n- default\n");
  const auto id = c.put_id("m");
  // The tube is the type app:2Fmail:28high:29 (docs/beanstalk.md).
  CHECK(c.stat("stats-job " + std::to_string(id), "tube") == "app/mail(high)");
  CHECK(c.stat("stats-tube app/mail(high)", "current-using") == "1");
  CHECK(c.stat("stats-tube app/mail(high)", "current-watching") == "1");
  wait_ready(c, "app/mail(high)", 1);
  // Paused: reserves skip the tube until the pause ends.
  CHECK(c.cmd("pause-tube app/mail(high) 600") == "PAUSED");
  CHECK(c.cmd("reserve-with-timeout 0") == "TIMED_OUT");
  CHECK(c.stat("stats-tube app/mail(high)", "cmd-pause-tube") == "1");
  // A pause of 0 ends the pause at once.
  CHECK(c.cmd("pause-tube app/mail(high) 0") == "PAUSED");
  CHECK(c.reserve("reserve-with-timeout 0").id == id);
  CHECK(c.cmd("ignore app/mail(high)") == "WATCHING 1");
  CHECK(c.stat("stats", "current-connections") == "1");
  CHECK(c.stat("stats", "max-job-size") == "65535");
  CHECK(c.stat("stats", "draining") == "false");
}

TEST_CASE("beanstalk: SIGUSR1 puts the server in drain mode: put answers DRAINING") {
  bs_server s("memory:");
  auto c = s.client();
  CHECK(c.put("before") == "INSERTED 1");
  s.p->signal(SIGUSR1);
  REQUIRE(s.p->wait_for_stderr("SIGUSR1"));
  CHECK(c.put("after") == "DRAINING");
  CHECK(c.stat("stats", "draining") == "true");
  CHECK(c.reserve().id == 1);  // everything else goes on
}

TEST_CASE("beanstalk: one queue, two protocols") {
  bs_server s("memory:");
  auto c = s.client();
  http_client h(s.p->port(), test_token);
  const auto id = c.put_id("from beanstalk", 12);
  // Over HTTP: the job is the task named by its number.
  auto r = h.get("/v1/tasks/" + std::to_string(id));
  REQUIRE_MESSAGE(r.status == 200, r.describe());
  CHECK(r.body_json["type"] == "default");
  CHECK(r.body_json["payload"] == "from beanstalk");
  CHECK(r.body_json["priority"] == 12);
  // A task put over HTTP with a string id reaches beanstalk clients under
  // an alias from 2^63.
  r = add_task(h, "default", "from http", 0, "order-42");
  REQUIRE_MESSAGE(r.status == 201, r.describe());
  // Priority 0 (an HTTP task's unless it names one) goes first.
  wait_ready(c, "default", 2);
  const auto j = c.reserve();
  CHECK(j.data == "from http");
  CHECK(j.id >= (std::uint64_t{1} << 63));
  CHECK(c.reserve().id == id);
  CHECK(c.cmd("delete " + std::to_string(j.id)) == "DELETED");
  CHECK(h.get("/v1/tasks/order-42").status == 404);
}

TEST_CASE("beanstalk: a unix socket, replacing a stale socket file") {
  temp_dir dir;
  const std::string path = dir.path() + "/bs.sock";
  {
    // A socket file nobody accepts on: what a killed server leaves.
    asio::io_context io;
    asio::local::stream_protocol::acceptor stale(io, asio::local::stream_protocol::endpoint(path));
  }
  REQUIRE(std::filesystem::exists(path));
  server_process p(
      {"--listen", "127.0.0.1:0", "--store", "memory:", "--beanstalk-listen", "unix:" + path});
  p.wait_listening();
  basic_bs_client<asio::local::stream_protocol> c{asio::local::stream_protocol::endpoint(path)};
  CHECK(c.put("over a unix socket") == "INSERTED 1");
}

TEST_CASE("beanstalk: no reachable address without a token, and a bad --beanstalk-allow") {
  {
    server_process p(
        {"--listen", "127.0.0.1:0", "--store", "memory:", "--beanstalk-listen", "0.0.0.0:0"});
    CHECK(WEXITSTATUS(p.wait()) == 2);
    CHECK(p.stderr_text().find("refusing to listen for beanstalk on 0.0.0.0:0") !=
          std::string::npos);
  }
  server_process p({"--listen", "127.0.0.1:0", "--store", "memory:", "--beanstalk-listen",
                    "127.0.0.1:0", "--beanstalk-allow", "10.0.0.0/33"});
  CHECK(WEXITSTATUS(p.wait()) == 2);
  CHECK(p.stderr_text().find("--beanstalk-allow") != std::string::npos);
}

TEST_CASE("beanstalk: jobs are durable: ids, priorities and reserved jobs survive a SIGKILL") {
  for (const store_kind kind : {store_kind::sqlite, store_kind::redis}) {
    CAPTURE(to_string(kind));
    test_store store(kind);
    std::uint16_t port = 0;  // each start's own: bs_server says why
    const auto start = [&] {
      auto p = std::make_unique<server_process>(
          std::vector<std::string>{"--listen", "127.0.0.1:0", "--store", store.uri(), "--tick",
                                   "10", "--beanstalk-listen", "127.0.0.1:0"});
      p->wait_listening();
      port = static_cast<std::uint16_t>(
          std::stoul(p->wait_for_stdout_line("delayq-server beanstalk listening on 127.0.0.1:")));
      return p;
    };
    auto p = start();
    std::set<std::uint64_t> ids;
    {
      bs_client c(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
      for (int i = 0; i < 3; ++i) ids.insert(c.put_id("job " + std::to_string(i), 100 + i));
      // Reserved, not deleted: the SIGKILL must lose none of them.
      for (int i = 0; i < 3; ++i) CHECK(ids.count(c.reserve().id) == 1);
      p->kill_now();
    }
    p = start();
    bs_client c(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    std::set<std::uint64_t> again;
    for (int i = 0; i < 3; ++i) {
      const auto j = c.reserve("reserve-with-timeout 600");
      REQUIRE(j.word == "RESERVED");
      again.insert(j.id);
      CHECK(c.stat("stats-job " + std::to_string(j.id), "pri") ==
            std::to_string(100 + (j.data.back() - '0')));
    }
    CHECK(again == ids);
    // Ids never repeat after a restart.
    CHECK(c.put_id("new") > *ids.rbegin());
  }
}

TEST_CASE("beanstalk: a client that hangs up while it waits in reserve is gone at once") {
  bs_server s("memory:");
  {
    std::vector<std::unique_ptr<bs_client>> waiting;
    for (int i = 0; i < 3; ++i) {
      waiting.push_back(std::make_unique<bs_client>(s.endpoint()));
      CHECK(waiting.back()->cmd("watch empty") == "WATCHING 2");
      waiting.back()->send("reserve\r\n");
    }
    auto c = s.client();
    REQUIRE(eventually([&] { return c.stat("stats", "current-waiting") == "3"; }));
  }
  // The three closed their sockets while waiting: their sessions end, and
  // their connection slots are free again.
  auto c = s.client();
  CHECK(eventually([&] {
    return c.stat("stats", "current-connections") == "1" &&
           c.stat("stats", "current-waiting") == "0";
  }));
}

TEST_CASE("beanstalk: DEADLINE_SOON only when no job is ready, and ignore of a tube not watched") {
  bs_server s("memory:");
  auto c = s.client();
  const auto a = c.put_id("a", 0, 0, 1);
  CHECK(c.reserve().id == a);
  const auto b = c.put_id("b");
  // a is in its last second, but b is ready: b comes first.
  CHECK(c.reserve("reserve-with-timeout 0").id == b);
  CHECK(c.cmd("reserve-with-timeout 0") == "DEADLINE_SOON");
  CHECK(c.cmd("ignore nosuchtube") == "WATCHING 1");
  CHECK(c.cmd("ignore default") == "NOT_IGNORED");
}

TEST_CASE("beanstalk: a deleted job is no time-out") {
  bs_server s("memory:");
  auto c = s.client();
  const auto id = c.put_id("x");
  CHECK(c.reserve().id == id);
  CHECK(c.cmd("delete " + std::to_string(id)) == "DELETED");
  CHECK(c.cmd("reserve-with-timeout 0") == "TIMED_OUT");
  CHECK(c.stat("stats", "job-timeouts") == "0");
}

namespace {

// The resident memory of process `pid`, in bytes (VmRSS).
std::size_t resident_bytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.starts_with("VmRSS:")) return std::stoull(line.substr(6)) * 1024;
  return 0;
}

}  // namespace

TEST_CASE("beanstalk: a client that never reads its replies cannot grow the server's memory") {
  bs_server s("memory:");
  auto c = s.client();
  const auto id = c.put_id(std::string(1000, 'x'));
  const std::size_t before = resident_bytes(s.p->pid());
  // 16 MB of pipelined peeks, never reading a reply (each would be 1 kB).
  // The server must stop reading once its unsent replies pass its bound;
  // then the kernel's buffers fill, and the sender blocks for good.
  const std::string peek = "peek " + std::to_string(id) + "\r\n";
  std::string chunk;
  while (chunk.size() < 64 * 1024) chunk += peek;
  tcp::socket raw(c.ioc());
  raw.connect(s.endpoint());
  raw.non_blocking(true);
  std::size_t sent = 0;
  bool blocked = false;
  while (sent < 16u << 20) {
    boost::system::error_code ec;
    sent += raw.write_some(asio::buffer(chunk), ec);
    if (!ec) continue;
    REQUIRE(ec == asio::error::would_block);
    // Still not writable after a while: the server has stopped reading (a
    // server that reads on slowly makes room again, and the loop goes on).
    pollfd p{raw.native_handle(), POLLOUT, 0};
    if (::poll(&p, 1, 2000) == 0) {
      blocked = true;
      break;
    }
  }
  CAPTURE(sent);
  CHECK(blocked);
  CHECK(resident_bytes(s.p->pid()) < before + 64 * 1024 * 1024);
}

TEST_CASE(
    "beanstalk: under --cluster, jobs are put on any instance, reserved where they live, and "
    "deleted or kicked from any") {
  const std::string uri = cluster_store_uri(test_redis_uri());
  const auto at = [](std::uint16_t port) {
    return tcp::endpoint(asio::ip::make_address("127.0.0.1"), port);
  };
  // Port 0, and the port each got (bs_server says why).
  const auto bs_port = [](server_process& p) {
    return static_cast<std::uint16_t>(
        std::stoul(p.wait_for_stdout_line("delayq-server beanstalk listening on 127.0.0.1:")));
  };
  auto a = start_instance(uri, "a", "2s", {"--beanstalk-listen", "127.0.0.1:0"});
  auto b = start_instance(uri, "b", "2s", {"--beanstalk-listen", "127.0.0.1:0"});
  const std::uint16_t pa = bs_port(*a), pb = bs_port(*b);
  INFO(a->output_tail());
  INFO(b->output_tail());
  http_client ca(a->port());
  http_client cb(b->port());
  const std::vector<std::string> names{"a", "b"};
  REQUIRE(eventually([&] { return settled(names, {&ca, &cb}); }));
  bs_client ba(at(pa)), bb(at(pb));

  // Puts on both instances: the ids are unique across the cluster (one
  // sequence in the store), each job on a shard of the instance it was put on.
  std::set<std::uint64_t> put_a, put_b;
  for (int i = 0; i < 10; ++i) put_a.insert(ba.put_id("a" + std::to_string(i)));
  for (int i = 0; i < 10; ++i) put_b.insert(bb.put_id("b" + std::to_string(i)));
  CHECK(put_a.size() == 10);
  CHECK(put_b.size() == 10);
  for (const auto id : put_a) CHECK(put_b.count(id) == 0);
  // A consumer on each instance: between them they drain the queue.
  const auto drain = [](bs_client& c) {
    std::set<std::uint64_t> got;
    for (;;) {
      const auto j = c.reserve("reserve-with-timeout 0");
      if (j.word != "RESERVED") break;
      got.insert(j.id);
      CHECK(c.cmd("delete " + std::to_string(j.id)) == "DELETED");
    }
    return got;
  };
  CHECK(drain(ba) == put_a);
  CHECK(drain(bb) == put_b);

  // A job of a's, seen and kicked from b: peek and stats-job read the
  // store; kick-job is sent to a over HTTP.
  const auto x = ba.put_id("x", 5, 600);
  const std::string n = std::to_string(x);
  const auto p = bb.reserve("peek " + n);
  CHECK(p.word == "FOUND");
  CHECK(p.data == "x");
  CHECK(bb.stat("stats-job " + n, "state") == "delayed");
  CHECK(bb.cmd("reserve-job " + n) == "NOT_FOUND");  // leased only where it lives
  CHECK(bb.cmd("kick-job " + n) == "KICKED");
  CHECK(ba.reserve("reserve-with-timeout 600").id == x);
  CHECK(ba.cmd("bury " + n + " 5") == "BURIED");
  CHECK(bb.cmd("kick-job " + n) == "KICKED");  // a buried one: requeued there
  CHECK(ba.reserve("reserve-with-timeout 600").id == x);
  CHECK(ba.cmd("release " + n + " 5 600") == "RELEASED");
  // Deleted from b: cancelled on a.
  CHECK(bb.cmd("delete " + n) == "DELETED");
  CHECK(ba.cmd("peek " + n) == "NOT_FOUND");
  CHECK(bb.cmd("delete " + n) == "NOT_FOUND");
}

// Clients that hold connections (issue 33, docs/beanstalk.md "Connections"):
// a deadline for a command once begun, an optional idle timeout, and room
// made at --max-connections by closing the longest-idle connection.

namespace {

// A counter of GET /metrics, summed over its samples that carry `label`
// ("" : all of them); -1 when absent.
double metric(http_client& h, const std::string& name, const std::string& label = "") {
  auto m = h.get("/metrics");
  REQUIRE(m.status == 200);
  std::istringstream in(m.body);
  std::string line;
  double sum = -1;
  while (std::getline(in, line)) {
    if (!line.starts_with(name) || line.size() <= name.size()) continue;
    const char next = line[name.size()];
    if (next != ' ' && next != '{') continue;
    if (!label.empty() && line.find(label) == std::string::npos) continue;
    sum = (sum < 0 ? 0 : sum) + std::stod(line.substr(line.rfind(' ') + 1));
  }
  return sum;
}

}  // namespace

TEST_CASE("beanstalk: a command begun and not finished within its deadline closes the connection") {
  bs_server s("memory:", {"--beanstalk-command-timeout", "1s"});
  http_client h(s.p->port(), test_token);
  auto idle = s.client();  // says nothing: no command begun, never closed for it
  auto body = s.client();
  body.send("put 0 0 10 100\r\nabc");  // the body never finishes
  auto line = s.client();
  line.send("reserv");  // the line never ends
  CHECK(body.closed_by_server());
  CHECK(line.closed_by_server());
  CHECK(idle.cmd("list-tube-used") == "USING default");
  // A command that arrives whole, however slowly the client types between
  // commands, is not cut.
  CHECK(idle.put("x").starts_with("INSERTED "));
  CHECK(metric(h, "delayq_beanstalk_connections_closed_total", "reason=\"command_timeout\"") == 2);
  CHECK(metric(h, "delayq_beanstalk_connections") == 1);
}

TEST_CASE("beanstalk: at --max-connections the longest-idle connection makes room for a new one") {
  bs_server s("memory:", {"--max-connections", "4"});
  http_client h(s.p->port(), test_token);
  auto oldest = s.client();
  CHECK(oldest.cmd("use t") == "USING t");
  // A command begun and left unfinished holds nothing: idle since its last
  // byte (else a client could hold the cap with stalled commands).
  oldest.send("put 0 0 10 100\r\nabc");
  auto holder = s.client();  // holds a reservation: never closed to make room
  CHECK(holder.cmd("use held") == "USING held");
  CHECK(holder.put("job", 0, 0, 120).starts_with("INSERTED "));
  CHECK(holder.cmd("watch held") == "WATCHING 2");
  const auto held = holder.reserve();
  REQUIRE(held.word == "RESERVED");
  auto waiter = s.client();  // waits in a reserve: never closed to make room
  CHECK(waiter.cmd("watch w") == "WATCHING 2");
  waiter.send("reserve\r\n");
  auto younger = s.client();
  CHECK(younger.cmd("list-tube-used") == "USING default");
  // Four open: the fifth gets room, and the oldest idle one goes.
  auto fifth = s.client();
  CHECK(fifth.cmd("list-tube-used") == "USING default");
  CHECK(oldest.closed_by_server());
  CHECK(younger.cmd("list-tube-used") == "USING default");
  CHECK(holder.cmd("touch " + std::to_string(held.id)) == "TOUCHED");
  CHECK(fifth.cmd("use w") == "USING w");
  CHECK(fifth.put("for the waiter").starts_with("INSERTED "));
  CHECK(waiter.job_reply().data == "for the waiter");
  CHECK(metric(h, "delayq_beanstalk_connections_closed_total", "reason=\"evicted\"") == 1);

  // When every connection holds a reservation or waits in a reserve, none
  // is closed for a newcomer: it is refused, as before.
  waiter.send("reserve\r\n");
  younger.send("reserve\r\n");
  fifth.send("reserve\r\n");
  REQUIRE(eventually([&] { return metric(h, "delayq_beanstalk_connections_waiting") == 3; }));
  auto refused = s.client();
  CHECK(refused.closed_by_server());
  CHECK(metric(h, "delayq_beanstalk_connections_closed_total", "reason=\"refused\"") == 1);
  CHECK(metric(h, "delayq_beanstalk_connections") == 4);
}

TEST_CASE("beanstalk: --beanstalk-idle-timeout closes connections that hold nothing, only those") {
  bs_server s("memory:", {"--beanstalk-idle-timeout", "1s"});
  http_client h(s.p->port(), test_token);
  auto holder = s.client();
  CHECK(holder.put("job", 0, 0, 120).starts_with("INSERTED "));
  const auto held = holder.reserve();
  REQUIRE(held.word == "RESERVED");
  auto waiter = s.client();
  CHECK(waiter.cmd("watch w") == "WATCHING 2");
  waiter.send("reserve-with-timeout 60\r\n");
  auto idle = s.client();
  CHECK(idle.cmd("list-tube-used") == "USING default");
  CHECK(idle.closed_by_server());
  // The two others are still served.
  CHECK(holder.cmd("touch " + std::to_string(held.id)) == "TOUCHED");
  CHECK(holder.cmd("use w") == "USING w");
  CHECK(holder.put("for the waiter").starts_with("INSERTED "));
  CHECK(waiter.job_reply().data == "for the waiter");
  CHECK(metric(h, "delayq_beanstalk_connections_closed_total", "reason=\"idle_timeout\"") == 1);
}

TEST_CASE("beanstalk: bad connection deadlines stop the server at start") {
  for (const auto& [flag, value] :
       std::vector<std::pair<std::string, std::string>>{{"--beanstalk-command-timeout", "0s"},
                                                        {"--beanstalk-command-timeout", "2h"},
                                                        {"--beanstalk-idle-timeout", "-1s"},
                                                        {"--beanstalk-idle-timeout", "soon"}}) {
    CAPTURE(flag);
    CAPTURE(value);
    server_process p({"--listen", "127.0.0.1:0", "--store", "memory:", "--beanstalk-listen",
                      "127.0.0.1:0", flag, value});
    const int status = p.wait();
    CHECK(status != 0);
    // Both pipes read to their end: the message may follow the exit status.
    CHECK(p.stderr_after_exit().find(flag) != std::string::npos);
  }
}
