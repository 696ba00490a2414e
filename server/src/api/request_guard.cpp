#include "api/request_guard.hpp"

#include <algorithm>
#include <boost/beast/http/field.hpp>
#include <cctype>

#include "http/ascii.hpp"
#include "security/hmac_sha256.hpp"

namespace delayq::server {
namespace {

namespace bhttp = boost::beast::http;

std::string_view guard_trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string_view value_of(const http_request_header& h, bhttp::field f) {
  const auto v = h[f];
  return {v.data(), v.size()};
}

// A body is coming: a Content-Length above zero, or any Transfer-Encoding.
bool has_body(const http_request_header& h) {
  if (h.find(bhttp::field::transfer_encoding) != h.end()) return true;
  const std::string_view length = guard_trim(value_of(h, bhttp::field::content_length));
  return !length.empty() && length.find_first_not_of('0') != std::string_view::npos;
}

// application/json, with parameters or not (charset=utf-8), in any case.
bool is_json(std::string_view content_type) {
  std::string_view media = content_type.substr(0, content_type.find(';'));
  return ascii_lower(guard_trim(media)) == "application/json";
}

}  // namespace

request_guard::request_guard(guard_options options) : options_(std::move(options)) {
  for (auto& h : options_.allowed_hosts) h = ascii_lower(h);
}

bool request_guard::needs_token(std::string_view path) {
  // Deny by default, on the path as sent: the open ones are named exactly,
  // so "/%76%31/tasks" (which the router decodes to /v1/tasks) needs the
  // token too.
  if (path == "/" || path == "/healthz" || path == "/metrics") return false;
  if (path.starts_with("/ui/")) {
    const std::string_view file = path.substr(4);
    return file.empty() || file.find('/') != std::string_view::npos;
  }
  return true;
}

std::string request_guard::host_of(std::string_view value) {
  value = guard_trim(value);
  std::string_view host;
  if (value.starts_with('[')) {  // [::1]:7700
    const std::size_t close = value.find(']');
    if (close == std::string_view::npos) return {};
    const std::string_view rest = value.substr(close + 1);
    if (!rest.empty() && !rest.starts_with(':')) return {};
    host = value.substr(1, close - 1);
  } else {
    const std::size_t colon = value.find(':');
    host = value.substr(0, colon);
    // A second colon is an IPv6 literal without brackets: not a Host value.
    if (colon != std::string_view::npos && value.find(':', colon + 1) != std::string_view::npos)
      return {};
  }
  if (host.empty()) return {};
  for (const char c : host)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == ':' ||
          c == '_'))
      return {};
  std::string out = ascii_lower(host);
  if (out.back() == '.') out.pop_back();  // "localhost." names localhost
  return out;
}

bool request_guard::host_allowed(std::string_view value) const {
  const std::string host = host_of(value);
  if (host.empty()) return false;
  if (host == "localhost") return true;
  boost::system::error_code ec;
  const auto addr = boost::asio::ip::make_address(host, ec);
  if (!ec) {
    // The address it listens on, or any loopback address when that is one
    // (127.0.0.1 listening is reached as 127.0.0.1, never through a name a
    // page controls; "localhost" may resolve to ::1).
    if (addr == options_.listen) return true;
    if (options_.listen.is_loopback() && addr.is_loopback()) return true;
  }
  return std::find(options_.allowed_hosts.begin(), options_.allowed_hosts.end(), host) !=
         options_.allowed_hosts.end();
}

bool request_guard::origin_allowed(std::string_view origin) const {
  // scheme://host[:port], nothing after; "null" (a sandboxed or file: page)
  // names no host and is refused.
  const std::size_t sep = origin.find("://");
  if (sep == std::string_view::npos) return false;
  const std::string_view authority = origin.substr(sep + 3);
  if (authority.find('/') != std::string_view::npos) return false;
  return host_allowed(authority);
}

bool request_guard::authorized(const http_request_header& h) const {
  if (options_.token.empty()) return true;
  const std::string_view auth = value_of(h, bhttp::field::authorization);
  constexpr std::string_view bearer = "Bearer ";
  return auth.starts_with(bearer) &&
         constant_time_equal(auth.substr(bearer.size()), options_.token);
}

std::optional<api_error> request_guard::check(const http_request_header& h) const {
  // Without a token, the Host header is all that tells a page on another
  // site that rebound its name to this address from the operator's own
  // tools: a browser sends the page's host name. With a token, a page
  // cannot send it (it never has it), and any host name may reach us.
  if (options_.token.empty() && !host_allowed(value_of(h, bhttp::field::host)))
    return api_error{403, "forbidden_host",
                     "the Host header must name this server (its listen address or localhost); "
                     "name others with --allowed-host, or give the server a --token"};
  // A browser names the page behind every request it sends on a page's
  // behalf but a plain GET (a form, fetch(), even with no body): without a
  // token, only pages of this server (the dashboard) may send them. Tools
  // (curl, the clients) send no Origin.
  if (options_.token.empty()) {
    if (const auto origin = h.find(bhttp::field::origin);
        origin != h.end() && !origin_allowed({origin->value().data(), origin->value().size()}))
      return api_error{403, "forbidden_origin",
                       "a request from a page of another site (its Origin header) is refused; "
                       "name the site with --allowed-host, or give the server a --token"};
  }
  const std::string_view target(h.target().data(), h.target().size());
  if (needs_token(target.substr(0, target.find('?'))) && !authorized(h))
    return api_error{401, "unauthorized", "missing or wrong Authorization: Bearer token"};
  // A page may send a cross-site POST without asking first (a "simple"
  // request) only with text/plain, a form type or none: requiring JSON's
  // type makes the browser ask (CORS preflight), which this server never
  // grants.
  if (has_body(h) && !is_json(value_of(h, bhttp::field::content_type)))
    return api_error{415, "unsupported_media_type",
                     "a request body must be sent as Content-Type: application/json"};
  return std::nullopt;
}

}  // namespace delayq::server
