#include "cluster/peer_forwarder.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <memory>

#include "push/push_target.hpp"

namespace delayq::server {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

// Answers of the API are small JSON documents (the largest, a dead-letter
// page, stays well under this).
constexpr std::size_t max_answer_body = 16 << 20;

// One forward: resolve, connect, write, read, each step's handler starting
// the next; the object lives as long as a step is pending.
struct exchange : std::enable_shared_from_this<exchange> {
  exchange(const asio::any_io_executor& ex, peer_forwarder::handler h)
      : resolver(ex), stream(ex), resolve_timer(ex), done(std::move(h)) {
    parser.body_limit(max_answer_body);
  }

  void start(const http_url& to, peer_forwarder::clock::time_point deadline) {
    // The stream's expiry bounds connect, write and read. A name lookup
    // cannot be interrupted (getaddrinfo runs to its end on Asio's resolver
    // thread), so at the deadline the timer answers for it, and the lookup's
    // late result is dropped.
    stream.expires_at(deadline);
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
    stream.async_connect(hosts, [self = shared_from_this()](boost::system::error_code e,
                                                            const tcp::endpoint&) {
      if (e) return self->finish(e);
      self->sent = true;
      bhttp::async_write(self->stream, self->out, [self](boost::system::error_code e, std::size_t) {
        if (e) return self->finish(e);
        bhttp::async_read(self->stream, self->buffer, self->parser,
                          [self](boost::system::error_code e, std::size_t) { self->finish(e); });
      });
    });
  }

  void finish(boost::system::error_code e) {
    if (e == beast::error::timeout) e = asio::error::timed_out;
    boost::system::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    http_answer a;
    if (!e) {
      auto& in = parser.get();
      a.status = in.result_int();
      a.body = std::move(in.body());
      if (const auto ct = in.find(bhttp::field::content_type); ct != in.end())
        a.content_type = std::string(ct->value());
      for (const auto field : {bhttp::field::retry_after, bhttp::field::location})
        if (const auto h = in.find(field); h != in.end())
          a.headers.emplace_back(std::string(h->name_string()), std::string(h->value()));
    }
    std::exchange(done, nullptr)(std::move(a), sent, e);
  }

  tcp::resolver resolver;
  beast::tcp_stream stream;
  asio::steady_timer resolve_timer;
  bool resolved = false;  // on the strand, as everything here
  beast::flat_buffer buffer;
  bhttp::request<bhttp::string_body> out;
  bhttp::response_parser<bhttp::string_body> parser;
  bool sent = false;
  peer_forwarder::handler done;
};

}  // namespace

peer_forwarder::peer_forwarder(boost::asio::any_io_executor ex, std::string instance)
    : ex_(std::move(ex)), instance_(std::move(instance)) {}

bool peer_forwarder::is_forwarded(const http_request& req) {
  return req.find(beast::string_view(forwarded_header.data(), forwarded_header.size())) !=
         req.end();
}

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
  // Its own strand: the timer's and the stream's handlers may otherwise run
  // at once on the server's several I/O threads.
  auto x = std::make_shared<exchange>(asio::make_strand(ex_), std::move(done));
  auto& out = x->out;
  out = {req.method(), req.target(), 11};
  out.set(bhttp::field::host, to->host_header());
  out.set(bhttp::field::user_agent, "delayq-server");
  if (const auto ct = req.find(bhttp::field::content_type); ct != req.end())
    out.set(bhttp::field::content_type, ct->value());
  if (const auto auth = req.find(bhttp::field::authorization); auth != req.end())
    out.set(bhttp::field::authorization, auth->value());
  out.set(beast::string_view(forwarded_header.data(), forwarded_header.size()), instance_);
  out.body() = req.body();
  out.prepare_payload();
  asio::post(x->stream.get_executor(), [x, to = *to, deadline] { x->start(to, deadline); });
}

}  // namespace delayq::server
