// peer_forwarder_unit_test.cpp - the client that carries a call to the
// instance owning its task, against a real HTTP receiver (path_receiver.hpp):
// the request it sends, kept-alive connections, and what each failure says
// of whether the call may have reached the peer; and call_forwarder's
// answer when the owner is shutting down.
#include <doctest/doctest.h>
#include <poll.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/thread_pool.hpp>
#include <cerrno>
#include <chrono>
#include <delayq/open_store.hpp>
#include <functional>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "api/forward_call.hpp"
#include "cluster/peer_directory.hpp"
#include "cluster/peer_forwarder.hpp"
#include "http/connection_pool.hpp"
#include "path_receiver.hpp"
#include "stalled_peer.hpp"
#include "unit_support.hpp"

namespace {

using delayq::server::http_answer;
using delayq::server::http_request;
using delayq::server::peer_forwarder;
using delayq::server_test::path_receiver;
using delayq::server_test::wait_bound;
using namespace std::chrono_literals;
namespace bhttp = boost::beast::http;

struct result {
  http_answer answer;
  bool sent = false;
  boost::system::error_code ec;
};

// A forwarder on an io_context run by two threads, as the server's.
struct forwarder_fixture {
  forwarder_fixture() : work(io.get_executor()) {
    fwd.emplace(io.get_executor(), "a", marker);
    for (int i = 0; i < 2; ++i) threads.emplace_back([this] { io.run(); });
  }
  ~forwarder_fixture() {
    fwd.reset();
    work.reset();
    for (auto& t : threads) t.join();
  }

  // Forwards `method target` to `base` and waits for the outcome.
  result call(const std::string& base, bhttp::verb method, const std::string& target,
              std::chrono::milliseconds timeout = 30s) {
    http_request req{method, target, 11};
    req.set(bhttp::field::content_type, "application/json");
    req.set(bhttp::field::authorization, "Bearer secret");
    req.body() = R"({"n":1})";
    req.prepare_payload();
    std::promise<result> done;
    auto got = done.get_future();
    fwd->async_forward(base, req, peer_forwarder::clock::now() + timeout,
                       [&done](http_answer a, bool sent, boost::system::error_code ec) {
                         done.set_value(result{std::move(a), sent, ec});
                       });
    REQUIRE(got.wait_for(wait_bound) == std::future_status::ready);
    return got.get();
  }

  // Forwards `method target` to `base` and returns the outcome to come,
  // without waiting. The promise is shared: a failed REQUIRE may leave the
  // test while the call is still out.
  std::future<result> start(const std::string& base, bhttp::verb method, const std::string& target,
                            std::chrono::milliseconds timeout) {
    http_request req{method, target, 11};
    req.body() = "{}";
    req.prepare_payload();
    auto done = std::make_shared<std::promise<result>>();
    auto got = done->get_future();
    fwd->async_forward(base, req, peer_forwarder::clock::now() + timeout,
                       [done](http_answer a, bool sent, boost::system::error_code ec) {
                         done->set_value(result{std::move(a), sent, ec});
                       });
    return got;
  }

  delayq::server::forward_marker marker{"forwarder-test-key"};
  boost::asio::io_context io;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work;
  std::optional<peer_forwarder> fwd;
  std::vector<std::thread> threads;
};

std::string base_of(const path_receiver& rx) { return "http://" + rx.host(); }

}  // namespace

TEST_CASE("peer forwarder: the call arrives as made, marked forwarded, its answer comes back") {
  path_receiver rx;
  forwarder_fixture f;
  auto r = f.call(base_of(rx), bhttp::verb::post, "/fail?x=1");
  REQUIRE_FALSE(r.ec);
  CHECK(r.sent);
  CHECK(r.answer.status == 500);
  CHECK(r.answer.body == "no");
  CHECK(r.answer.content_type == "text/plain");
  const auto seen = rx.requests();
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].method == "POST");
  CHECK(seen[0].target == "/fail?x=1");
  CHECK(seen[0].body == R"({"n":1})");
  CHECK(seen[0].headers.at("Content-Type") == "application/json");
  CHECK(seen[0].headers.at("Authorization") == "Bearer secret");
  // The marker names the instance and verifies for the call as it arrived.
  const std::string marker = seen[0].headers.at("X-Delayq-Forwarded-By");
  CHECK(marker.starts_with("a "));
  http_request arrived{bhttp::verb::post, seen[0].target, 11};
  arrived.set("X-Delayq-Forwarded-By", marker);
  arrived.body() = seen[0].body;
  CHECK(f.marker.check(arrived, delayq::server::forward_marker::clock::now()) ==
        delayq::server::forward_marker::verdict::valid);
}

TEST_CASE("peer forwarder: a marker the call arrived with is replaced by its own") {
  path_receiver rx;
  forwarder_fixture f;
  http_request req{bhttp::verb::delete_, "/v1/tasks/x", 11};
  req.set("X-Delayq-Forwarded-By", "mallory 0 " + std::string(64, '0'));
  std::promise<result> done;
  auto got = done.get_future();
  f.fwd->async_forward(base_of(rx), req, peer_forwarder::clock::now() + 30s,
                       [&done](http_answer a, bool sent, boost::system::error_code ec) {
                         done.set_value(result{std::move(a), sent, ec});
                       });
  REQUIRE(got.wait_for(wait_bound) == std::future_status::ready);
  REQUIRE_FALSE(got.get().ec);
  const auto seen = rx.requests();
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].headers.at("X-Delayq-Forwarded-By").starts_with("a "));
}

TEST_CASE("peer forwarder: calls to one peer share a kept-alive connection") {
  path_receiver rx;
  forwarder_fixture f;
  for (int i = 0; i < 5; ++i) {
    auto r = f.call(base_of(rx), i % 2 ? bhttp::verb::get : bhttp::verb::post, "/ok");
    REQUIRE_FALSE(r.ec);
    CHECK(r.answer.status == 200);
  }
  CHECK(rx.requests().size() == 5);
  CHECK(rx.connections() == 1);
}

TEST_CASE("peer forwarder: a pooled connection the peer closed does not fail the next call") {
  path_receiver rx;
  forwarder_fixture f;
  // Closed after an answer that announced keep-alive: the connection is back
  // in the pool, and dead (found so by the pool's peek, or, if the close
  // comes just after it, by the GET's second try).
  for (int i = 0; i < 2; ++i) {
    auto r = f.call(base_of(rx), bhttp::verb::get, "/ok-then-close");
    REQUIRE_FALSE(r.ec);
    CHECK(r.answer.status == 200);
  }
  CHECK(rx.requests().size() == 2);
  CHECK(rx.connections() == 2);
}

TEST_CASE("peer forwarder: a call dropped unanswered on a pooled connection: a GET goes again") {
  path_receiver rx;
  forwarder_fixture f;
  // The second call is written on the pooled connection, which the peer then
  // closes without an answer (as when its idle timeout fires just then, or
  // as when it read the call and died: the two cannot be told apart).
  SUBCASE("a GET changes nothing: sent once more on a fresh connection") {
    for (int i = 0; i < 2; ++i) {
      auto r = f.call(base_of(rx), bhttp::verb::get, "/ok-then-drop-next");
      REQUIRE_FALSE(r.ec);
      CHECK(r.answer.status == 200);
    }
    CHECK(rx.dropped() == 1);
    CHECK(rx.requests().size() == 2);
    CHECK(rx.connections() == 2);
  }
  SUBCASE("any other call may have been carried out: not sent twice, the outcome is unknown") {
    auto r = f.call(base_of(rx), bhttp::verb::post, "/ok-then-drop-next");
    REQUIRE_FALSE(r.ec);
    r = f.call(base_of(rx), bhttp::verb::post, "/ok-then-drop-next");
    CHECK(r.ec);
    CHECK(r.sent);
    CHECK(rx.dropped() == 1);
    CHECK(rx.connections() == 1);
  }
}

TEST_CASE("peer forwarder: whether a failed call may have reached the peer") {
  forwarder_fixture f;
  SUBCASE("refused: not sent") {
    boost::asio::io_context scratch;
    boost::asio::ip::tcp::acceptor probe(
        scratch, {boost::asio::ip::make_address("127.0.0.1"), 0});  // a port nobody listens on
    const auto port = probe.local_endpoint().port();
    probe.close();
    auto r = f.call("http://127.0.0.1:" + std::to_string(port), bhttp::verb::delete_, "/x");
    CHECK(r.ec);
    CHECK_FALSE(r.sent);
  }
  SUBCASE("closed without an answer: sent") {
    path_receiver rx;
    auto r = f.call(base_of(rx), bhttp::verb::post, "/close");
    CHECK(r.ec);
    CHECK(r.sent);
    CHECK(rx.requests().size() == 1);
  }
  SUBCASE("no answer by the deadline: sent, timed out") {
    path_receiver rx;
    auto r = f.call(base_of(rx), bhttp::verb::post, "/hang", 2s);
    CHECK(r.ec == boost::asio::error::timed_out);
    CHECK(r.sent);
  }
  SUBCASE("the peer can no longer be reached while the answer is due: sent, ended at once") {
    // The link check: the answer is late, a side dial of the peer is
    // refused, so the call ends then, long before its deadline of two
    // minutes (without the check, it would outlast wait_bound and fail).
    path_receiver rx;
    auto got = f.start(base_of(rx), bhttp::verb::post, "/hold", 120s);
    REQUIRE(rx.wait_held_total(1));
    rx.stop_listening();
    REQUIRE(got.wait_for(wait_bound) == std::future_status::ready);
    auto r = got.get();
    CHECK(r.ec == boost::asio::error::connection_refused);
    CHECK(r.sent);
    rx.release_held();
  }
  SUBCASE("a peer that only answers late is waited for") {
    path_receiver rx;
    auto got = f.start(base_of(rx), bhttp::verb::post, "/hold", 120s);
    REQUIRE(rx.wait_held_total(1));
    // Two link checks (their dials are connections the receiver accepts,
    // besides the call's own), each dial taken: the call waits on.
    const auto until = std::chrono::steady_clock::now() + wait_bound;
    while (rx.connections() < 3 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(10ms);
    REQUIRE(rx.connections() >= 3);
    rx.release_held();
    REQUIRE(got.wait_for(wait_bound) == std::future_status::ready);
    auto r = got.get();
    REQUIRE_FALSE(r.ec);
    CHECK(r.answer.status == 200);
  }
  SUBCASE("a call that ends unanswered is withdrawn: what the peer had not taken never arrives") {
    // A peer that takes almost nothing (a receive buffer at the kernel's
    // minimum, never read): most of the request waits in the forwarder's
    // send queue when the deadline ends the call, as behind a link that
    // went down. A gentle close would leave the kernel to send it on, and
    // a peer that reads again (the link back up) would get the whole call
    // and carry it out long after its caller was answered; the forward
    // resets the connection instead, so the peer reads a part, then the
    // reset.
    delayq::server_test::stalled_peer peer;
    http_request req{bhttp::verb::post, "/v1/tasks/x:reschedule", 11};
    req.body() = std::string(12 * 1024, 'x');  // within the sender's first send buffer
    req.prepare_payload();
    auto done = std::make_shared<std::promise<result>>();
    auto got = done->get_future();
    f.fwd->async_forward(peer.base(), req, peer_forwarder::clock::now() + 400ms,
                         [done](http_answer a, bool sent, boost::system::error_code ec) {
                           done->set_value(result{std::move(a), sent, ec});
                         });
    peer.accept();
    REQUIRE(got.wait_for(wait_bound) == std::future_status::ready);
    auto r = got.get();
    CHECK(r.ec == boost::asio::error::timed_out);
    CHECK(r.sent);
    const auto in = peer.read_to_end();
    CHECK(in.error == ECONNRESET);        // not the end of a whole request
    CHECK(in.bytes < req.body().size());  // the body alone is more than came
  }
  SUBCASE("a URL it cannot use") {
    auto r = f.call("ftp://h", bhttp::verb::get, "/x");
    CHECK(r.ec == boost::system::errc::invalid_argument);
    CHECK_FALSE(r.sent);
  }
}

TEST_CASE("connection pool: hands out an open idle connection, not a closed or stale one") {
  namespace asio = boost::asio;
  using tcp = asio::ip::tcp;
  asio::io_context io;
  tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
  // A connection to the acceptor, pooled as `key`; returns the peer's end.
  const auto pooled = [&](delayq::server::connection_pool& pool, const std::string& key,
                          int* fd = nullptr) {
    auto c = std::make_unique<delayq::server::pooled_connection>(asio::make_strand(io));
    c->stream.connect(acceptor.local_endpoint());
    if (fd) *fd = c->stream.socket().native_handle();
    tcp::socket peer = acceptor.accept();
    pool.put(key, std::move(c));
    return peer;
  };
  delayq::server::connection_pool pool(4, std::chrono::hours(1));
  CHECK(pool.take("h:1") == nullptr);
  {
    tcp::socket peer = pooled(pool, "h:1");
    auto c = pool.take("h:1");
    REQUIRE(c != nullptr);
    CHECK(c->stream.socket().remote_endpoint() == acceptor.local_endpoint());
    CHECK(pool.take("h:1") == nullptr);  // taken: not handed out twice
    CHECK(pool.take("h:2") == nullptr);  // another host's
  }
  {
    int fd = -1;
    tcp::socket peer = pooled(pool, "h:1", &fd);
    peer.close();  // the peer's idle timeout
    // Its end of stream has arrived (the kernel may handle it after close()
    // returns).
    pollfd p{fd, POLLIN | POLLRDHUP, 0};
    REQUIRE(::poll(&p, 1, 60'000) == 1);
    CHECK(pool.take("h:1") == nullptr);
  }
  {
    delayq::server::connection_pool stale_pool(4, std::chrono::milliseconds(0));
    tcp::socket peer = pooled(stale_pool, "h:1");
    CHECK(stale_pool.take("h:1") == nullptr);
  }
  io.run();  // the closes posted to the connections' strands
}

TEST_CASE(
    "call forwarder: an owner shutting down did nothing: owner_unreachable, a GET reads here") {
  delayq::server_test::scratch_dir dir;
  auto store = delayq::open_store("sqlite:" + (dir.path / "peers.db").string());
  delayq::server::peer_directory peers{*store};
  path_receiver rx;
  boost::system::error_code ec;
  peers.announce("b", base_of(rx), ec);
  REQUIRE_FALSE(ec);
  // The pool outlives the fixture's I/O threads: an answer is posted to it
  // from one of them, and that post() may still be returning when the
  // promise it fulfils wakes this thread (ThreadSanitizer saw the pool
  // destroyed under it when the pool was declared second).
  boost::asio::thread_pool blocking{2};
  forwarder_fixture f;
  delayq::server::call_forwarder calls{peers, *f.fwd, blocking, {}};
  // Forwards `method` /draining (b answers 503 draining) and waits.
  const auto forward = [&](bhttp::verb method, std::function<http_answer()> local) {
    http_request req{method, "/draining", 11};
    std::promise<http_answer> done;
    auto got = done.get_future();
    calls.forward(
        "b", req, "x", [&done](http_answer a) { done.set_value(std::move(a)); }, std::move(local));
    REQUIRE(got.wait_for(wait_bound) == std::future_status::ready);
    return got.get();
  };
  auto a = forward(bhttp::verb::delete_, nullptr);
  CHECK(a.status == 503);
  CHECK(a.body.find("\"owner_unreachable\"") != std::string::npos);
  // docs/server.md, "Errors": owner_unreachable comes with Retry-After: 1.
  int retry_after = 0;
  for (const auto& [name, value] : a.headers)
    if (name == "Retry-After") {
      ++retry_after;
      CHECK(value == "1");
    }
  CHECK(retry_after == 1);
  a = forward(bhttp::verb::get, [] {
    http_answer local;
    local.body = "from the store";
    return local;
  });
  CHECK(a.status == 200);
  CHECK(a.body == "from the store");
  CHECK(rx.requests().size() == 2);
}
