#include "cluster/peer_forwarder.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <optional>

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

}  // namespace

peer_forwarder::peer_forwarder(std::string instance, std::chrono::milliseconds timeout)
    : instance_(std::move(instance)), timeout_(timeout) {}

bool peer_forwarder::is_forwarded(const http_request& req) {
  return req.find(beast::string_view(forwarded_header.data(), forwarded_header.size())) !=
         req.end();
}

http_answer peer_forwarder::forward(const std::string& url, const http_request& req, bool& sent,
                                    boost::system::error_code& ec) const {
  ec.clear();
  sent = false;
  std::string why;
  const auto to = parse_http_url(url, why);
  if (!to) {
    ec = make_error_code(boost::system::errc::invalid_argument);
    return {};
  }
  bhttp::request<bhttp::string_body> out{req.method(), req.target(), 11};
  out.set(bhttp::field::host, to->host_header());
  out.set(bhttp::field::user_agent, "delayq-server");
  if (const auto ct = req.find(bhttp::field::content_type); ct != req.end())
    out.set(bhttp::field::content_type, ct->value());
  if (const auto auth = req.find(bhttp::field::authorization); auth != req.end())
    out.set(bhttp::field::authorization, auth->value());
  out.set(beast::string_view(forwarded_header.data(), forwarded_header.size()), instance_);
  out.body() = req.body();
  out.prepare_payload();

  // Asynchronous operations on an io_context of our own, run here: the
  // stream's expiry then bounds connect, write and read together, which the
  // synchronous calls cannot.
  asio::io_context io;
  tcp::resolver resolver(io);
  beast::tcp_stream stream(io);
  beast::flat_buffer buffer;
  bhttp::response_parser<bhttp::string_body> parser;
  parser.body_limit(max_answer_body);
  const auto fail = [&](boost::system::error_code e) {
    ec = e == beast::error::timeout ? make_error_code(asio::error::timed_out) : e;
  };
  stream.expires_after(timeout_);
  resolver.async_resolve(
      to->host, to->port, [&](boost::system::error_code e, tcp::resolver::results_type hosts) {
        if (e) return fail(e);
        stream.async_connect(hosts, [&](boost::system::error_code e, const tcp::endpoint&) {
          if (e) return fail(e);
          sent = true;
          bhttp::async_write(stream, out, [&](boost::system::error_code e, std::size_t) {
            if (e) return fail(e);
            bhttp::async_read(stream, buffer, parser,
                              [&](boost::system::error_code e, std::size_t) {
                                if (e) return fail(e);
                              });
          });
        });
      });
  io.run();
  boost::system::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  if (ec) return {};

  auto& in = parser.get();
  http_answer a;
  a.status = in.result_int();
  a.body = std::move(in.body());
  if (const auto ct = in.find(bhttp::field::content_type); ct != in.end())
    a.content_type = std::string(ct->value());
  for (const auto field : {bhttp::field::retry_after, bhttp::field::location})
    if (const auto h = in.find(field); h != in.end())
      a.headers.emplace_back(std::string(h->name_string()), std::string(h->value()));
  return a;
}

}  // namespace delayq::server
