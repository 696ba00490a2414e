// request_guard: what the headers of a request decide before its body is
// read (docs/server.md, "Security"): the bearer token of /v1/, the Host
// header of a server without a token (DNS rebinding), and the media type of
// a body (cross-site pages). A refused request is answered without reading
// its body, so an unauthenticated client cannot make the server read 8 MiB.
#pragma once

#include <boost/asio/ip/address.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "http/http_server.hpp"
#include "wire/api_error.hpp"

namespace delayq::server {

struct guard_options {
  /// The bearer token every /v1/ request must carry. Empty: none, and then
  /// the Host header is checked instead.
  std::string token;
  /// The address the server listens on: a Host naming it is accepted.
  boost::asio::ip::address listen;
  /// Host names (no port) accepted besides the listen address and
  /// localhost, from --allowed-host. Compared without case.
  std::vector<std::string> allowed_hosts;
};

/// Thread safety: const members are safe from any thread.
class request_guard {
 public:
  explicit request_guard(guard_options options);

  /// The refusal of a request by its headers, or nullopt to read its body
  /// and route it: 403 forbidden_host for a Host that is not this server's,
  /// 403 forbidden_origin for an Origin (a page) of another site (both
  /// without a token), 401 unauthorized for an API path without the token,
  /// 415 unsupported_media_type for a body that is not application/json.
  std::optional<api_error> check(const http_request_header& h) const;

  /// Whether the request carries the token (true when there is none).
  bool authorized(const http_request_header& h) const;

  /// Whether `path` (the target without its query, as sent) needs the
  /// token: every path but the dashboard's files (/ and /ui/FILE), /healthz
  /// and /metrics.
  static bool needs_token(std::string_view path);

  /// The host part of a Host header value, lower-cased, without the port
  /// and the brackets of an IPv6 literal; empty when malformed.
  static std::string host_of(std::string_view host_header);

 private:
  bool host_allowed(std::string_view host_header) const;
  bool origin_allowed(std::string_view origin) const;

  guard_options options_;
};

}  // namespace delayq::server
