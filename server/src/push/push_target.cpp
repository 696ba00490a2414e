#include "push/push_target.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace delayq::server {
namespace {

bool iequals_prefix(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  return std::equal(prefix.begin(), prefix.end(), s.begin(), [](char a, char b) {
    return std::tolower(static_cast<unsigned char>(a)) ==
           std::tolower(static_cast<unsigned char>(b));
  });
}

bool host_char(char c) {
  const auto u = static_cast<unsigned char>(c);
  return std::isalnum(u) || c == '-' || c == '.' || c == '_';
}

bool ipv6_char(char c) {
  return std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.';
}

}  // namespace

std::string http_url::host_header() const {
  std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  if (port != "80") h += ":" + port;
  return h;
}

std::optional<http_url> parse_http_url(std::string_view url, std::string& why) {
  // Whatever is here ends up in a request line and a Host header: anything
  // that could split or bend them is refused up front.
  for (char c : url) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u == 0x7f) {
      why = "the push URL contains a space or a control character";
      return std::nullopt;
    }
  }
  if (iequals_prefix(url, "https://")) {
    why = "only http:// push targets are supported; put a local proxy in front for https";
    return std::nullopt;
  }
  if (!iequals_prefix(url, "http://")) {
    why = "the push URL must start with http:// (only http:// push targets are supported)";
    return std::nullopt;
  }
  std::string_view rest = url.substr(7);
  if (rest.find('#') != std::string_view::npos) {
    why = "the push URL has a fragment (#...), which is never sent to a server";
    return std::nullopt;
  }
  const auto authority_end = rest.find_first_of("/?");
  std::string_view authority = rest.substr(0, authority_end);
  std::string_view target =
      authority_end == std::string_view::npos ? std::string_view{} : rest.substr(authority_end);
  if (authority.find('@') != std::string_view::npos) {
    why = "the push URL has user information (user@host), which is not supported";
    return std::nullopt;
  }

  http_url out;
  std::string_view port;
  if (!authority.empty() && authority.front() == '[') {
    const auto close = authority.find(']');
    if (close == std::string_view::npos) {
      why = "the push URL has an IPv6 address without its closing ']'";
      return std::nullopt;
    }
    const std::string_view v6 = authority.substr(1, close - 1);
    if (v6.empty() || !std::all_of(v6.begin(), v6.end(), ipv6_char) ||
        v6.find(':') == std::string_view::npos) {
      why = "the push URL has an invalid IPv6 address";
      return std::nullopt;
    }
    out.host = std::string(v6);
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') {
        why = "the push URL has characters after its IPv6 address";
        return std::nullopt;
      }
      port = after.substr(1);
      if (port.empty()) {
        why = "the push URL has an empty port";
        return std::nullopt;
      }
    }
  } else {
    const auto colon = authority.find(':');
    const std::string_view host = authority.substr(0, colon);
    if (host.empty()) {
      why = "the push URL has no host";
      return std::nullopt;
    }
    if (!std::all_of(host.begin(), host.end(), host_char)) {
      why = "the push URL has an invalid host name";
      return std::nullopt;
    }
    out.host = std::string(host);
    if (colon != std::string_view::npos) {
      port = authority.substr(colon + 1);
      if (port.empty()) {
        why = "the push URL has an empty port";
        return std::nullopt;
      }
    }
  }
  if (port.empty()) {
    out.port = "80";
  } else {
    unsigned value = 0;
    const auto [end, err] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (err != std::errc{} || end != port.data() + port.size() || value < 1 || value > 65535 ||
        !std::isdigit(static_cast<unsigned char>(port.front()))) {
      why = "the push URL has an invalid port (expected 1-65535)";
      return std::nullopt;
    }
    out.port = std::to_string(value);
  }
  out.target =
      target.empty() || target.front() == '?' ? "/" + std::string(target) : std::string(target);
  return out;
}

nlohmann::json to_json(const push_target& t) {
  return nlohmann::json{{"push_url", t.url},
                        {"timeout_ms", static_cast<std::int64_t>(t.timeout.count())},
                        {"concurrency", t.concurrency}};
}

namespace {

// Reads an integer field within [lo, hi]; a float such as 1.5 (or 10.0) is a
// wrong type, not something to round silently.
bool read_int(const nlohmann::json& v, std::string_view name, std::int64_t lo, std::int64_t hi,
              std::int64_t& out, std::string& why) {
  if (!v.is_number_integer()) {
    why = std::string(name) + ": must be an integer";
    return false;
  }
  bool in_range = false;
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    in_range = u <= static_cast<std::uint64_t>(hi) && static_cast<std::int64_t>(u) >= lo;
    if (in_range) out = static_cast<std::int64_t>(u);
  } else {
    const auto s = v.get<std::int64_t>();
    in_range = s >= lo && s <= hi;
    if (in_range) out = s;
  }
  if (!in_range) {
    why = std::string(name) + ": must be between " + std::to_string(lo) + " and " +
          std::to_string(hi);
    return false;
  }
  return true;
}

}  // namespace

std::optional<push_target> push_target_from_json(const nlohmann::json& j, std::string& why) {
  if (!j.is_object()) {
    why = "the push target must be a JSON object";
    return std::nullopt;
  }
  push_target t;
  bool have_url = false;
  for (const auto& [key, value] : j.items()) {
    if (key == "push_url") {
      if (!value.is_string()) {
        why = "push_url: must be a string";
        return std::nullopt;
      }
      t.url = value.get<std::string>();
      std::string url_why;
      if (!parse_http_url(t.url, url_why)) {
        why = "push_url: " + url_why;
        return std::nullopt;
      }
      have_url = true;
    } else if (key == "timeout_ms") {
      std::int64_t ms = 0;
      if (!read_int(value, key, min_push_timeout_ms, max_push_timeout_ms, ms, why)) {
        return std::nullopt;
      }
      t.timeout = std::chrono::milliseconds{ms};
    } else if (key == "concurrency") {
      std::int64_t n = 0;
      if (!read_int(value, key, static_cast<std::int64_t>(min_push_concurrency),
                    static_cast<std::int64_t>(max_push_concurrency), n, why)) {
        return std::nullopt;
      }
      t.concurrency = static_cast<std::size_t>(n);
    } else {
      why = "unknown field \"" + key + "\"";
      return std::nullopt;
    }
  }
  if (!have_url) {
    why = "push_url: required";
    return std::nullopt;
  }
  return t;
}

}  // namespace delayq::server
