#include "cluster/peer_forwarder.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <memory>
#include <optional>

#include "http/connection_pool.hpp"
#include "wire/http_url.hpp"

namespace delayq::server {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

// Answers of the API are small JSON documents (the largest, a dead-letter
// page, stays well under this).
constexpr std::size_t max_answer_body = 16 << 20;

// Idle connections kept per peer, and for how long: less than the 10 s a
// delayq-server keeps an idle connection open (http_limits::header_timeout),
// so that the peer rarely closes one as a call is written on it.
constexpr std::size_t max_idle_per_peer = 64;
constexpr std::chrono::milliseconds max_idle{5000};

// An answer late by link_check makes the forward dial the peer on the side,
// bounded by link_check_timeout, and again after each further link_check
// while the answer is due. A dial that fails means the peer cannot be
// reached (its link is down, its address gone): the call ends at once with
// that error (the caller answers 503 outcome_unknown, since the request
// went), instead of holding its caller until the deadline (issue 33: 5 s
// under a partition). A peer that is only slow or paused still takes the
// dial (its kernel completes the handshake), and the call waits on. The
// same rule as the Redis store's link_check_ms (docs/persistence.md).
constexpr std::chrono::milliseconds link_check{250};
constexpr std::chrono::milliseconds link_check_timeout{1000};

// One forward: on a pooled connection, write and read; on a fresh one,
// resolve and connect first. Each step's handler starts the next, on the
// connection's strand; the object lives as long as a step is pending.
struct exchange : std::enable_shared_from_this<exchange> {
  exchange(std::shared_ptr<connection_pool> p, std::unique_ptr<pooled_connection> c,
           pooled_connection::strand_type s, peer_forwarder::handler h)
      : pool(std::move(p)),
        strand(std::move(s)),
        conn(std::move(c)),
        reused(conn != nullptr),
        resolver(asio::any_io_executor{strand}),
        resolve_timer(asio::any_io_executor{strand}),
        check_timer(asio::any_io_executor{strand}),
        probe(asio::any_io_executor{strand}),
        done(std::move(h)) {}

  void start() {
    if (conn) return send();
    resolve();
  }

  void resolve() {
    conn = std::make_unique<pooled_connection>(strand);
    // The stream's expiry bounds connect, write and read. A name lookup
    // cannot be interrupted (getaddrinfo runs to its end on Asio's resolver
    // thread), so at the deadline the timer answers for it, and the lookup's
    // late result is dropped.
    resolve_timer.expires_at(deadline);
    resolve_timer.async_wait([self = shared_from_this()](boost::system::error_code e) {
      if (e || self->resolved) return;
      self->resolver.cancel();
      self->finish(asio::error::timed_out);
    });
    resolver.async_resolve(to.host, to.port,
                           [self = shared_from_this()](boost::system::error_code e,
                                                       tcp::resolver::results_type hosts) {
                             if (!self->done) return;  // the deadline answered
                             self->resolved = true;
                             self->resolve_timer.cancel();
                             if (e) return self->finish(e);
                             self->connect(hosts);
                           });
  }

  void connect(const tcp::resolver::results_type& hosts) {
    conn->stream.expires_at(deadline);
    conn->stream.async_connect(
        hosts, [self = shared_from_this()](boost::system::error_code e, const tcp::endpoint&) {
          if (e) return self->finish(e);
          self->send();
        });
  }

  void send() {
    sent = true;
    // Until an answer comes, a close withdraws what the peer has not
    // received: it would be carried out after the caller was told the
    // outcome was unknown (a stale reschedule applied 7 s late to a new task
    // of the same id, docs/faults.md fix 16).
    conn->reset_on_close(true);
    conn->stream.expires_at(deadline);
    bhttp::async_write(conn->stream, out,
                       [self = shared_from_this()](boost::system::error_code e, std::size_t) {
                         // Closed before the request was whole: the peer cannot
                         // have acted on it.
                         if (e && self->reused && connection_pool::peer_closed(e))
                           return self->retry();
                         if (e) return self->finish(e);
                         self->read();
                       });
  }

  void read() {
    parser.emplace();
    parser->body_limit(max_answer_body);
    bhttp::async_read(conn->stream, conn->buffer, *parser,
                      [self = shared_from_this()](boost::system::error_code e, std::size_t) {
                        self->on_read(e);
                      });
    arm_link_check();
  }

  // See link_check above.
  void arm_link_check() {
    check_timer.expires_after(link_check);
    check_timer.async_wait([self = shared_from_this()](boost::system::error_code e) {
      if (e || !self->done) return;
      self->check_link();
    });
  }

  void check_link() {
    boost::system::error_code e;
    const auto peer = conn->stream.socket().remote_endpoint(e);
    if (e) return;  // the socket failed: the read reports it
    probe_timed_out = false;
    probe.open(peer.protocol(), e);
    if (e) return arm_link_check();  // out of sockets: no verdict, look again later
    check_timer.expires_after(link_check_timeout);
    check_timer.async_wait([self = shared_from_this()](boost::system::error_code e) {
      if (e || !self->done) return;
      self->probe_timed_out = true;
      boost::system::error_code ignored;
      self->probe.close(ignored);  // its handler runs with operation_aborted
    });
    probe.async_connect(peer, [self = shared_from_this()](boost::system::error_code e) {
      if (!self->done) return;
      boost::system::error_code ignored;
      self->probe.close(ignored);
      if (self->probe_timed_out) e = asio::error::timed_out;
      if (e) return self->finish(e);  // cannot be reached: the answer cannot come
      self->check_timer.cancel();
      self->arm_link_check();
    });
  }

  void on_read(boost::system::error_code e) {
    // Closed with no answer after the whole request went: the peer may have
    // closed it idle just then, or read the call and died. Only a GET, which
    // changes nothing, goes again; any other call may have been carried out
    // (outcome unknown), and must not be carried out twice.
    if (e && reused && !parser->got_some() && conn->buffer.size() == 0 &&
        connection_pool::peer_closed(e) && out.method() == bhttp::verb::get)
      return retry();
    finish(e);
  }

  // Once, on a fresh connection, after a pooled one failed in a way that
  // left the call without effect (see the callers): what happens now is
  // reported as if the first try had never been made.
  void retry() {
    reused = false;
    sent = false;
    check_timer.cancel();
    boost::system::error_code ignored;
    probe.close(ignored);
    conn->stream.socket().close(ignored);
    conn.reset();
    if (peer_forwarder::clock::now() >= deadline) return finish(asio::error::timed_out);
    resolve();
  }

  void finish(boost::system::error_code e) {
    if (!done) return;
    if (e == beast::error::timeout) e = asio::error::timed_out;
    check_timer.cancel();
    boost::system::error_code ignored;
    probe.close(ignored);
    http_answer a;
    bool keep = false;
    if (!e) {
      auto& in = parser->get();
      keep = in.keep_alive() && conn->buffer.size() == 0;
      a.status = in.result_int();
      a.body = std::move(in.body());
      if (const auto ct = in.find(bhttp::field::content_type); ct != in.end())
        a.content_type = std::string(ct->value());
      for (const auto field : {bhttp::field::retry_after, bhttp::field::location})
        if (const auto h = in.find(field); h != in.end())
          a.headers.emplace_back(std::string(h->name_string()), std::string(h->value()));
    }
    if (conn && keep) {
      pool->put(key, std::move(conn));
    } else if (conn) {
      // An exchange that ended whole closes gently; any other, with the
      // reset set in send().
      if (!e) {
        conn->reset_on_close(false);
        conn->stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
      }
      conn->stream.close();
    }
    std::exchange(done, nullptr)(std::move(a), sent, e);
  }

  const std::shared_ptr<connection_pool> pool;
  const pooled_connection::strand_type strand;
  std::unique_ptr<pooled_connection> conn;
  bool reused;
  http_url to;
  std::string key;  // the pool's: host:port
  peer_forwarder::clock::time_point deadline{};
  tcp::resolver resolver;
  asio::steady_timer resolve_timer;
  bool resolved = false;           // on the strand, as everything here
  asio::steady_timer check_timer;  // the next link check, or a probe's bound
  tcp::socket probe;               // the link check's side dial
  bool probe_timed_out = false;
  bhttp::request<bhttp::string_body> out;
  std::optional<bhttp::response_parser<bhttp::string_body>> parser;
  bool sent = false;
  peer_forwarder::handler done;
};

}  // namespace

peer_forwarder::peer_forwarder(boost::asio::any_io_executor ex, std::string instance,
                               const forward_marker& marker)
    : ex_(std::move(ex)),
      instance_(std::move(instance)),
      marker_(marker),
      pool_(std::make_shared<connection_pool>(max_idle_per_peer, max_idle)) {}

peer_forwarder::~peer_forwarder() { pool_->close_all(); }

void peer_forwarder::async_forward(const std::string& url, const http_request& req,
                                   clock::time_point deadline, handler done) const {
  std::string why;
  const auto to = parse_http_url(url, why);
  if (!to) {
    asio::post(ex_, [done = std::move(done)] {
      done({}, false, make_error_code(boost::system::errc::invalid_argument));
    });
    return;
  }
  // A pooled connection's strand, or a strand of its own: the timer's and
  // the stream's handlers may otherwise run at once on the server's several
  // I/O threads.
  std::string key = to->host + ":" + to->port;
  auto conn = pool_->take(key);
  auto strand = conn ? conn->strand : asio::make_strand(ex_);
  auto x = std::make_shared<exchange>(pool_, std::move(conn), strand, std::move(done));
  x->to = *to;
  x->key = std::move(key);
  x->deadline = deadline;
  auto& out = x->out;
  out = {req.method(), req.target(), 11};
  out.set(bhttp::field::host, to->host_header());
  out.set(bhttp::field::user_agent, "delayq-server");
  if (const auto ct = req.find(bhttp::field::content_type); ct != req.end())
    out.set(bhttp::field::content_type, ct->value());
  if (const auto auth = req.find(bhttp::field::authorization); auth != req.end())
    out.set(bhttp::field::authorization, auth->value());
  out.body() = req.body();
  // Made for what is sent: its method, target and body.
  const auto method = out.method_string();
  const auto target = out.target();
  out.set(beast::string_view(forward_marker::header.data(), forward_marker::header.size()),
          marker_.make(instance_, std::string_view(method.data(), method.size()),
                       std::string_view(target.data(), target.size()), out.body(),
                       forward_marker::clock::now()));
  out.prepare_payload();
  asio::post(strand, [x] { x->start(); });
}

}  // namespace delayq::server
