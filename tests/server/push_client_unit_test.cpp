// push_client_unit_test.cpp - the push client against a real HTTP receiver.
//
// The receiver is a path_receiver (path_receiver.hpp).
// The client runs on two threads. Tests wait on events (condition variables,
// with a generous bound only so that a bug fails instead of hanging); no test
// sleeps or measures time.
#include <doctest/doctest.h>

#include <utility>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "path_receiver.hpp"
#include "push/push_client.hpp"
#include "stalled_peer.hpp"
#include "wire/dump_json.hpp"
#include "wire/task_json.hpp"

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using delayq::server::push_client;
using delayq::server::push_target;
using namespace std::chrono_literals;
using receiver = delayq::server_test::path_receiver;

namespace {

using delayq::server_test::wait_bound;

// What became of each delivery: the failures `done` was called with, and
// whether its last copy was destroyed without a call.
class outcomes {
 public:
  push_client::completion completion_for(const std::string& id) {
    // The token's destructor runs when the last copy of the completion goes:
    // that is how a dropped delivery shows.
    struct token {
      token(outcomes* o, std::string i) : owner(o), id(std::move(i)) {}
      token(const token&) = delete;
      token& operator=(const token&) = delete;
      ~token() {
        if (!called) owner->record_drop(id);
      }
      outcomes* owner;
      std::string id;
      bool called = false;
    };
    auto t = std::make_shared<token>(this, id);
    return [t](std::string failure) {
      t->called = true;
      t->owner->record_call(t->id, std::move(failure));
    };
  }

  bool wait_ended(std::size_t n) {
    std::unique_lock lock{mutex_};
    return cv_.wait_for(lock, wait_bound, [&] { return calls_ + drops_ >= n; });
  }
  std::vector<std::string> calls(const std::string& id) const {
    std::lock_guard lock{mutex_};
    const auto it = results_.find(id);
    return it == results_.end() ? std::vector<std::string>{} : it->second;
  }
  std::string only(const std::string& id) const {
    const auto c = calls(id);
    REQUIRE(c.size() == 1);
    return c.front();
  }
  std::size_t call_count() const {
    std::lock_guard lock{mutex_};
    return calls_;
  }
  std::size_t drop_count() const {
    std::lock_guard lock{mutex_};
    return drops_;
  }
  std::map<std::string, std::vector<std::string>> all() const {
    std::lock_guard lock{mutex_};
    return results_;
  }

 private:
  void record_call(const std::string& id, std::string failure) {
    {
      std::lock_guard lock{mutex_};
      results_[id].push_back(std::move(failure));
      ++calls_;
    }
    cv_.notify_all();
  }
  void record_drop(const std::string&) {
    {
      std::lock_guard lock{mutex_};
      ++drops_;
    }
    cv_.notify_all();
  }

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::map<std::string, std::vector<std::string>> results_;
  std::size_t calls_ = 0;
  std::size_t drops_ = 0;
};

// A push client on an io_context run by two threads.
struct client_fixture {
  explicit client_fixture(delayq::server::push_client_options options = {})
      : work(io.get_executor()) {
    client.emplace(io.get_executor(), std::move(options));
    for (int i = 0; i < 2; ++i) threads.emplace_back([this] { io.run(); });
  }
  ~client_fixture() { shutdown(); }

  // Destroys the client and lets its threads finish whatever remains.
  void shutdown() {
    client.reset();
    work.reset();
    for (auto& t : threads) {
      if (t.joinable()) t.join();
    }
  }

  delayq::task make_task(const std::string& id, std::uint32_t attempts = 0) {
    delayq::task t;
    t.id = id;
    t.type = "hook";
    t.payload = "payload of " + id;
    t.due = delayq::from_epoch_ms(1700000000000);
    t.attempts = attempts;
    return t;
  }
  void deliver(const push_target& target, const std::string& id, const std::string& type = "hook") {
    client->deliver(type, target, make_task(id), results.completion_for(id));
  }

  // Declared first, destroyed last: outlives every callback.
  outcomes results;
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work;
  std::optional<push_client> client;
  std::vector<std::thread> threads;
};

push_target target_of(std::string url, std::chrono::milliseconds timeout = 10s,
                      std::size_t concurrency = 64) {
  return push_target{std::move(url), timeout, concurrency};
}

// Delivers `ids` in order to a type with one slot, at a receiver that holds
// every call: the first is written and held, the others wait in the queue.
void deliver_one_at_a_time(client_fixture& f, receiver& rx,
                           std::initializer_list<const char*> ids) {
  const auto held = target_of(rx.url("/hold"), 600000ms, 1);
  for (const char* id : ids) f.deliver(held, id);
  REQUIRE(rx.wait_held_total(1));
}

// The X-Delayq-Task-Id of every request the receiver got, in order.
std::vector<std::string> received_ids(const receiver& rx) {
  std::vector<std::string> got;
  for (const auto& r : rx.requests()) got.push_back(r.headers.at("X-Delayq-Task-Id"));
  return got;
}

}  // namespace

TEST_CASE("push client: a 2xx answer is success, the request as documented") {
  receiver rx;
  client_fixture f;
  delayq::task t = f.make_task("task-1", 2);
  t.payload = std::string("caf\xc3\xa9 \xff", 7);
  f.client->deliver("hook", target_of(rx.url("/ok?from=test")), t,
                    f.results.completion_for("task-1"));
  REQUIRE(f.results.wait_ended(1));
  CHECK(f.results.only("task-1") == "");
  CHECK(f.client->sent() == 1);
  CHECK(f.client->failed() == 0);
  CHECK(f.client->in_flight() == 0);

  const auto reqs = rx.requests();
  REQUIRE(reqs.size() == 1);
  const auto& r = reqs[0];
  CHECK(r.method == "POST");
  CHECK(r.target == "/ok?from=test");
  CHECK(r.headers.at("Content-Type") == "application/json");
  CHECK(r.headers.at("X-Delayq-Task-Id") == "task-1");
  CHECK(r.headers.at("X-Delayq-Attempt") == "3");
  CHECK(r.headers.at("Host") == rx.host());
  CHECK(r.headers.at("User-Agent").rfind("delayq-server/", 0) == 0);
  CHECK(r.body == delayq::server::dump_json(delayq::server::task_json(t)));
  const auto body = nlohmann::json::parse(r.body);
  CHECK(body.at("payload") == "caf\xc3\xa9 \xef\xbf\xbd");
  CHECK(body.at("attempts") == 2);
  CHECK(body.at("due_ms") == 1700000000000);
}

TEST_CASE("push client: a non-2xx answer is a failure naming the status") {
  receiver rx;
  client_fixture f;
  f.deliver(target_of(rx.url("/fail")), "a");
  f.deliver(target_of(rx.url("/nowhere")), "b");
  REQUIRE(f.results.wait_ended(2));
  CHECK(f.results.only("a") == "push to " + rx.url("/fail") + ": HTTP 500");
  CHECK(f.results.only("b") == "push to " + rx.url("/nowhere") + ": HTTP 404");
  CHECK(f.client->failed() == 2);
  CHECK(f.client->sent() == 0);
}

TEST_CASE("push client: a target that does not answer times out") {
  receiver rx;
  client_fixture f;
  f.deliver(target_of(rx.url("/hang"), 200ms), "slow");
  REQUIRE(f.results.wait_ended(1));
  CHECK(f.results.only("slow") == "push to " + rx.url("/hang") + ": timed out after 200 ms");
  CHECK(f.client->failed() == 1);
}

TEST_CASE(
    "push client: a push that times out is withdrawn: what the target had not taken never "
    "arrives") {
  // A target that takes almost nothing (a receive buffer at the kernel's
  // minimum, never read): most of the request waits in the client's send
  // queue when the push times out, as behind a link that went down. A
  // gentle close would leave the kernel to send it on, and the target
  // would get the whole push once it reads again (the link back up), after
  // the push was counted failed and its task retried or replaced; the
  // client resets the connection, so the target reads a part, then the
  // reset.
  delayq::server_test::stalled_peer target;
  const std::string url = target.base() + "/x";
  client_fixture f;
  delayq::task t = f.make_task("stuck");
  t.payload = std::string(12 * 1024, 'x');  // within the client's first send buffer
  f.client->deliver("hook", target_of(url, 400ms), t, f.results.completion_for("stuck"));
  target.accept();
  REQUIRE(f.results.wait_ended(1));
  CHECK(f.results.only("stuck") == "push to " + url + ": timed out after 400 ms");
  const auto got = target.read_to_end();
  CHECK(got.error == ECONNRESET);  // not the end of a whole request
  CHECK(got.bytes < t.payload.size());
}

TEST_CASE("push client: a refused connection is a failure") {
  // A port that was just free: bound, then closed, so nothing listens on it.
  asio::io_context scratch;
  tcp::acceptor a{scratch, tcp::endpoint{asio::ip::make_address("127.0.0.1"), 0}};
  const auto port = a.local_endpoint().port();
  a.close();
  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/x";

  client_fixture f;
  f.deliver(target_of(url), "r");
  REQUIRE(f.results.wait_ended(1));
  CHECK(f.results.only("r") == "push to " + url + ": connect: Connection refused");
}

TEST_CASE("push client: a connection closed without an answer is a failure, not retried") {
  receiver rx;
  client_fixture f;
  f.deliver(target_of(rx.url("/close")), "c");
  REQUIRE(f.results.wait_ended(1));
  CHECK(f.results.only("c") ==
        "push to " + rx.url("/close") + ": read: connection closed before a response");
  // A fresh connection is not retried: the target saw one request.
  CHECK(rx.requests().size() == 1);
}

TEST_CASE("push client: a URL it cannot use fails the delivery") {
  client_fixture f;
  f.deliver(target_of("https://example.com/hook"), "tls");
  REQUIRE(f.results.wait_ended(1));
  CHECK(f.results.only("tls") ==
        "push to https://example.com/hook: only http:// push targets are supported; put a "
        "local proxy in front for https");
}

TEST_CASE("push client: a response body over the limit is not read, its status counts") {
  receiver rx;
  client_fixture f;
  f.deliver(target_of(rx.url("/big")), "big");
  REQUIRE(f.results.wait_ended(1));
  CHECK(f.results.only("big") == "");
  // The connection with the unread rest is not reused.
  f.deliver(target_of(rx.url("/ok")), "after");
  REQUIRE(f.results.wait_ended(2));
  CHECK(f.results.only("after") == "");
  CHECK(rx.connections() == 2);
}

TEST_CASE("push client: keep-alive connections are reused") {
  receiver rx;
  client_fixture f;
  for (int i = 0; i < 5; ++i) {
    f.deliver(target_of(rx.url(i % 2 ? "/fail" : "/ok")), "k" + std::to_string(i));
    REQUIRE(f.results.wait_ended(static_cast<std::size_t>(i) + 1));
  }
  CHECK(rx.requests().size() == 5);
  CHECK(rx.connections() == 1);
  CHECK(f.client->sent() == 3);
  CHECK(f.client->failed() == 2);
}

TEST_CASE("push client: a pooled connection the peer closed does not fail the next push") {
  receiver rx;
  client_fixture f;
  // The receiver answers with keep-alive and then closes: the client pools a
  // connection that is dead by the time the next request comes.
  f.deliver(target_of(rx.url("/ok-then-close")), "first");
  REQUIRE(f.results.wait_ended(1));
  f.deliver(target_of(rx.url("/ok-then-close")), "second");
  REQUIRE(f.results.wait_ended(2));
  CHECK(f.results.only("first") == "");
  CHECK(f.results.only("second") == "");
  CHECK(rx.connections() == 2);
  CHECK(rx.requests().size() == 2);
}

TEST_CASE("push client: a request the peer drops unread on a pooled connection goes again") {
  receiver rx;
  client_fixture f;
  // The second request is written on the pooled connection, open when it was
  // taken, which the peer then closes without reading it.
  f.deliver(target_of(rx.url("/ok-then-drop-next")), "first");
  REQUIRE(f.results.wait_ended(1));
  f.deliver(target_of(rx.url("/ok-then-drop-next")), "second");
  REQUIRE(f.results.wait_ended(2));
  CHECK(f.results.only("first") == "");
  CHECK(f.results.only("second") == "");
  CHECK(rx.dropped() == 1);
  CHECK(rx.connections() == 2);
}

TEST_CASE("push client: at most `concurrency` requests per type in flight, FIFO") {
  receiver rx;
  client_fixture f;
  const auto held = target_of(rx.url("/hold"), 600000ms, 2);
  for (int i = 0; i < 6; ++i) f.deliver(held, "h" + std::to_string(i));
  // Another type is not held up by this one's queue.
  f.deliver(target_of(rx.url("/ok"), 10s, 1), "other", "other-type");
  for (std::size_t round = 0; round < 3; ++round) {
    REQUIRE(rx.wait_held_total(2 * (round + 1)));
    // The two in flight are the ones the receiver holds; the others wait.
    // (`other` may still be counted in flight until its answer is read.)
    CHECK(f.client->queued() == 6 - 2 * (round + 1));
    if (round == 0) {
      REQUIRE(f.results.wait_ended(1));
      CHECK(f.results.only("other") == "");
    }
    CHECK(f.client->in_flight() == 2);
    rx.release_held();
  }
  REQUIRE(f.results.wait_ended(7));
  CHECK(rx.max_held() == 2);
  CHECK(f.client->in_flight() == 0);
  CHECK(f.client->queued() == 0);
  // FIFO: the holds arrived in the order they were delivered.
  std::vector<std::string> order;
  for (const auto& r : rx.requests()) {
    if (r.target == "/hold") order.push_back(r.headers.at("X-Delayq-Task-Id"));
  }
  REQUIRE(order.size() == 6);
  // Within a round the two requests race each other; across rounds the order holds.
  for (std::size_t round = 0; round < 3; ++round) {
    std::vector<std::string> got{order[2 * round], order[2 * round + 1]};
    std::sort(got.begin(), got.end());
    CHECK(got == std::vector<std::string>{"h" + std::to_string(2 * round),
                                          "h" + std::to_string(2 * round + 1)});
  }
}

TEST_CASE("push client: stop() drops queued and in-flight deliveries without calling them") {
  receiver rx;
  client_fixture f;
  deliver_one_at_a_time(f, rx, {"in-flight", "queued-1", "queued-2"});
  CHECK(f.client->in_flight() == 1);
  CHECK(f.client->queued() == 2);

  f.client->stop();
  REQUIRE(f.results.wait_ended(3));
  CHECK(f.results.drop_count() == 3);
  CHECK(f.results.call_count() == 0);
  CHECK(f.client->queued() == 0);
  CHECK(f.client->in_flight() == 0);

  // After stop(), a delivery is dropped too.
  f.deliver(target_of(rx.url("/ok")), "late");
  REQUIRE(f.results.wait_ended(4));
  CHECK(f.results.drop_count() == 4);
  CHECK(f.results.call_count() == 0);
  CHECK(f.client->sent() == 0);
  CHECK(f.client->failed() == 0);
}

TEST_CASE("push client: drain() drops queued deliveries, and those in flight still report") {
  receiver rx;
  client_fixture f;
  deliver_one_at_a_time(f, rx, {"in-flight", "queued-1", "queued-2"});

  f.client->drain();
  REQUIRE(f.results.wait_ended(2));
  CHECK(f.results.drop_count() == 2);
  CHECK(f.client->queued() == 0);
  CHECK(f.client->in_flight() == 1);
  // A delivery after drain() is dropped, not started.
  f.deliver(target_of(rx.url("/ok")), "late");
  REQUIRE(f.results.wait_ended(3));
  CHECK(f.results.drop_count() == 3);

  // The request in flight is answered: its 2xx reaches `done`.
  rx.release_held();
  REQUIRE(f.results.wait_ended(4));
  CHECK(f.results.only("in-flight") == "");
  CHECK(f.results.call_count() == 1);
  CHECK(f.client->sent() == 1);
  CHECK(f.client->in_flight() == 0);
  // Nothing queued was started once the slot was free.
  CHECK(rx.requests().size() == 1);
}

TEST_CASE("push client: a delivery whose attempt is no longer current is withdrawn unsent") {
  // Stands for engine::attempt_current(): the ids whose shard lease lapsed.
  std::mutex stale_mutex;
  std::set<std::string> stale;
  delayq::server::push_client_options options;
  options.attempt_current = [&](const delayq::task& t) {
    std::lock_guard lock{stale_mutex};
    return stale.count(t.id) == 0;
  };
  receiver rx;
  client_fixture f{std::move(options)};
  deliver_one_at_a_time(f, rx, {"a", "b", "c"});
  // "b" waits for the slot while its lease lapses: when its turn comes it
  // is not written, and its completion is destroyed uncalled (the engine
  // gives the task back); "c" goes next.
  {
    std::lock_guard lock{stale_mutex};
    stale.insert("b");
  }
  rx.release_held();
  REQUIRE(rx.wait_held_total(2));
  rx.release_held();
  REQUIRE(f.results.wait_ended(3));
  CHECK(f.results.only("a") == "");
  CHECK(f.results.only("c") == "");
  CHECK(f.results.calls("b").empty());
  CHECK(f.results.drop_count() == 1);
  CHECK(f.client->withdrawn() == 1);
  CHECK(f.client->sent() == 2);
  CHECK(f.client->failed() == 0);
  CHECK(received_ids(rx) == std::vector<std::string>{"a", "c"});
  CHECK(f.client->in_flight() == 0);
}

TEST_CASE("push client: withdraw(id) ends that task's unwritten deliveries, not those written") {
  receiver rx;
  client_fixture f;
  deliver_one_at_a_time(f, rx, {"a", "b", "c"});
  // "a" is written and held by the receiver: it goes on. "b" waits for
  // the slot: it ends at once, its completion destroyed uncalled.
  CHECK(f.client->withdraw("a") == 0);
  CHECK(f.client->withdraw("b") == 1);
  REQUIRE(f.results.wait_ended(1));
  CHECK(f.results.drop_count() == 1);
  CHECK(f.client->queued() == 1);
  rx.release_held();
  REQUIRE(rx.wait_held_total(2));
  rx.release_held();
  REQUIRE(f.results.wait_ended(3));
  CHECK(f.results.only("a") == "");
  CHECK(f.results.only("c") == "");
  CHECK(f.results.calls("b").empty());
  CHECK(f.client->withdrawn() == 1);
  CHECK(received_ids(rx) == std::vector<std::string>{"a", "c"});
}

TEST_CASE("push client: withdraw(id) reaches a delivery on its way to be written, but the spared") {
  // attempt_current() is asked in send(), just before the write: here it
  // holds the delivery of "x" there until the test lets it go.
  std::mutex m;
  std::condition_variable cv;
  bool entered = false, go = false;
  delayq::server::push_client_options options;
  options.attempt_current = [&](const delayq::task& t) {
    if (t.id != "x") return true;
    std::unique_lock lock{m};
    entered = true;
    cv.notify_all();
    cv.wait(lock, [&] { return go; });
    return true;
  };
  receiver rx;
  client_fixture f{std::move(options)};
  const auto target = target_of(rx.url("/ok"));
  const auto hold_at_send = [&](const std::string& payload, const std::string& key) {
    delayq::task t = f.make_task("x");
    t.payload = payload;
    {
      std::lock_guard lock{m};
      entered = go = false;
    }
    f.client->deliver("hook", target, t, f.results.completion_for(key));
    std::unique_lock lock{m};
    return cv.wait_for(lock, wait_bound, [&] { return entered; });
  };
  const auto let_go = [&] {
    {
      std::lock_guard lock{m};
      go = true;
    }
    cv.notify_all();
  };
  delayq::task spared = f.make_task("x");
  spared.payload = "new";

  // An older version, started: it is not written.
  REQUIRE(hold_at_send("old", "old"));
  CHECK(f.client->withdraw("x", &spared) == 0);
  let_go();
  REQUIRE(f.results.wait_ended(1));
  CHECK(f.results.drop_count() == 1);
  CHECK(f.client->withdrawn() == 1);

  // The version spared goes on.
  REQUIRE(hold_at_send("new", "new"));
  CHECK(f.client->withdraw("x", &spared) == 0);
  let_go();
  REQUIRE(f.results.wait_ended(2));
  CHECK(f.results.only("new") == "");
  CHECK(f.client->withdrawn() == 1);
  const auto got = rx.requests();
  REQUIRE(got.size() == 1);
  CHECK(got[0].body.find("\"new\"") != std::string::npos);
}

TEST_CASE("push client: done is called exactly once for every delivery") {
  receiver rx;
  client_fixture f;
  const std::vector<std::pair<std::string, std::string>> paths{
      {"/ok", ""},
      {"/fail", ": HTTP 500"},
      {"/close", ": read: connection closed before a response"},
      {"/hang", ": timed out after 200 ms"},
      {"/ok-then-close", ""}};
  constexpr std::size_t n = 60;
  std::map<std::string, std::vector<std::string>> expected;
  for (std::size_t i = 0; i < n; ++i) {
    const auto& [path, suffix] = paths[i % paths.size()];
    const std::string id = "e" + std::to_string(i);
    expected[id] = {suffix.empty() ? "" : "push to " + rx.url(path) + suffix};
    f.deliver(target_of(rx.url(path), 200ms, 3), id, i % 2 ? "odd" : "even");
  }
  REQUIRE(f.results.wait_ended(n));
  CHECK(f.client->sent() + f.client->failed() == n);
  // Everything has ended: tearing the client and its threads down must not
  // bring a late second call, nor a drop.
  f.shutdown();
  CHECK(f.results.drop_count() == 0);
  CHECK(f.results.call_count() == n);
  CHECK(f.results.all() == expected);
}
