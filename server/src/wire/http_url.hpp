// wire/http_url.hpp - the URL syntax the server reads: an http:// URL split
// for a client (push targets, cluster peers), and the escapes and query
// string of a request's own target.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace delayq::server {

/// The parts of an http:// URL a client needs.
///
/// Thread safety: a plain value.
struct http_url {
  std::string host;    ///< Name or address, IPv6 without its brackets (what a resolver takes).
  std::string port;    ///< Decimal, "80" when the URL has none.
  std::string target;  ///< Path and query, at least "/".

  /// The Host header value: the host (bracketed when IPv6), plus ":port"
  /// unless it is the default 80.
  std::string host_header() const;

  friend bool operator==(const http_url&, const http_url&) = default;
};

/// Splits `http://host[:port][/path][?query]`.
///
/// The scheme is matched case-insensitively; an IPv6 literal is written in
/// brackets (`http://[::1]:8080/`). Refused, with a sentence in `why`: any
/// other scheme (https names the local-proxy workaround, since Boost 1.74 has
/// no TLS here without OpenSSL), userinfo (`user@host`), an empty host, a
/// port that is not 1-65535, a fragment, and spaces or control characters
/// anywhere (they would end up in the request line or the Host header).
///
/// Thread safety: a pure function.
std::optional<http_url> parse_http_url(std::string_view url, std::string& why);

/// Decodes %XX escapes of a path segment; false when one is malformed.
bool percent_decode(std::string_view in, std::string& out);

/// `in` as one path segment: RFC 3986's unreserved characters as they are,
/// every other byte as %XX (a task id in /v1/tasks/{id}).
std::string percent_encode(std::string_view in);

/// The value of `name` in a query string ("a=1&b=2"), percent-decoded.
std::optional<std::string> query_param(std::string_view query, std::string_view name);

}  // namespace delayq::server
