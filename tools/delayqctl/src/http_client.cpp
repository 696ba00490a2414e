
#include "http_client.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <limits>
#include <memory>

namespace delayq::ctl {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

std::optional<server_url> server_url::parse(std::string_view url, std::string& why) {
  constexpr std::string_view scheme = "http://";
  if (url.substr(0, scheme.size()) != scheme) {
    why = "the server URL must start with http:// (put a TLS proxy in front for https)";
    return std::nullopt;
  }
  url.remove_prefix(scheme.size());
  const auto slash = url.find('/');
  std::string_view authority = url.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view{} : url.substr(slash);
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  if (path.find_first_of("?#") != std::string_view::npos) {
    why = "the server URL may have a path prefix but no query or fragment";
    return std::nullopt;
  }
  server_url out;
  out.prefix = std::string(path);
  if (authority.find('@') != std::string_view::npos) {
    why = "the server URL must not carry credentials (use --token)";
    return std::nullopt;
  }
  std::string_view port;
  if (!authority.empty() && authority.front() == '[') {  // [::1]:7700
    const auto close = authority.find(']');
    if (close == std::string_view::npos) {
      why = "the server URL has an unterminated IPv6 address";
      return std::nullopt;
    }
    out.host = std::string(authority.substr(1, close - 1));
    const auto rest = authority.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') {
        why = "the server URL has junk after its IPv6 address";
        return std::nullopt;
      }
      port = rest.substr(1);
    }
  } else {
    const auto colon = authority.rfind(':');
    out.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port = authority.substr(colon + 1);
  }
  if (out.host.empty()) {
    why = "the server URL has no host";
    return std::nullopt;
  }
  if (!port.empty() || authority.back() == ':') {
    unsigned long value = 0;
    bool ok = !port.empty() && port.size() <= 5;
    for (char ch : port) {
      if (!std::isdigit(static_cast<unsigned char>(ch))) ok = false;
      value = value * 10 + static_cast<unsigned long>(ch - '0');
    }
    if (!ok || value == 0 || value > 65535) {
      why = "the server URL has an invalid port (expected 1-65535)";
      return std::nullopt;
    }
    out.port = std::to_string(value);
  }
  return out;
}

namespace {

// One exchange as a chain of asynchronous steps, so that io_context::run_for
// can bound all of it (name resolution included) with a single timeout.
struct exchange : std::enable_shared_from_this<exchange> {
  exchange(asio::io_context& io, http_result& out) : resolver(io), stream(io), result(out) {}

  tcp::resolver resolver;
  beast::tcp_stream stream;
  beast::flat_buffer buffer;
  http::request<http::string_body> request;
  http::response_parser<http::string_body> parser;
  http_result& result;

  void fail(const char* step, const beast::error_code& ec) {
    result.failure = std::string(step) + ": " + ec.message();
  }

  void start(const server_url& server) {
    resolver.async_resolve(server.host, server.port,
                           [self = shared_from_this()](const beast::error_code& ec,
                                                       const tcp::resolver::results_type& r) {
                             if (ec) return self->fail("resolve", ec);
                             self->connect(r);
                           });
  }

  void connect(const tcp::resolver::results_type& endpoints) {
    stream.async_connect(
        endpoints, [self = shared_from_this()](const beast::error_code& ec, const tcp::endpoint&) {
          if (ec) return self->fail("connect", ec);
          http::async_write(self->stream, self->request,
                            [self](const beast::error_code& wec, std::size_t) {
                              if (wec) return self->fail("write", wec);
                              self->read();
                            });
        });
  }

  void read() {
    // Dead-letter pages can be large (1000 payloads of up to 1 MiB): no cap
    // beyond what the server chose to send.
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    http::async_read(stream, buffer, parser,
                     [self = shared_from_this()](const beast::error_code& ec, std::size_t) {
                       if (ec) return self->fail("read", ec);
                       self->result.reached = true;
                       self->result.status = self->parser.get().result_int();
                       self->result.body = std::move(self->parser.get().body());
                       beast::error_code ignored;
                       self->stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
                     });
  }
};

}  // namespace

http_result http_request(const server_url& server, std::string_view method,
                         const std::string& target, const std::string& token,
                         const std::optional<std::string>& json_body,
                         std::chrono::milliseconds timeout) {
  http_result result;
  asio::io_context io;
  auto x = std::make_shared<exchange>(io, result);
  auto& req = x->request;
  req.method(http::string_to_verb(beast::string_view(method.data(), method.size())));
  req.target(server.prefix + target);
  req.version(11);
  const bool default_port = server.port == "80";
  const bool v6 = server.host.find(':') != std::string::npos;
  std::string host = v6 ? "[" + server.host + "]" : server.host;
  if (!default_port) host += ":" + server.port;
  req.set(http::field::host, host);
  req.set(http::field::user_agent, std::string("delayqctl"));
  req.set(http::field::accept, "application/json");
  if (!token.empty()) req.set(http::field::authorization, "Bearer " + token);
  if (json_body) {
    req.set(http::field::content_type, "application/json");
    req.body() = *json_body;
  }
  req.keep_alive(false);
  req.prepare_payload();

  x->start(server);
  io.run_for(timeout);
  if (!io.stopped()) {
    // Still resolving, connecting, writing or reading: give up on it. The
    // socket is closed with a reset: a gentle close (or this process's exit)
    // would leave the kernel to send what the server has not received yet,
    // and a cancel or reschedule stuck behind a partition would be carried
    // out once the link is back, after the user was told it timed out
    // (docs/faults.md, fix 16).
    beast::error_code ignored;
    x->stream.socket().set_option(tcp::socket::linger(true, 0), ignored);
    x->stream.socket().close(ignored);
    result = http_result{};
    result.timed_out = true;
    result.failure = "no answer within " + std::to_string(timeout.count()) + " ms";
    io.stop();
  }
  return result;
}

}  // namespace delayq::ctl
