#include "wire/http_url.hpp"

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

std::string percent_encode(std::string_view in) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(in.size());
  for (const char ch : in) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += ch;
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

bool percent_decode(std::string_view in, std::string& out) {
  out.clear();
  out.reserve(in.size());
  const auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out += in[i];
      continue;
    }
    if (i + 2 >= in.size()) return false;
    const int hi = hex(in[i + 1]), lo = hex(in[i + 2]);
    if (hi < 0 || lo < 0) return false;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return true;
}

std::optional<std::string> query_param(std::string_view query, std::string_view name) {
  while (!query.empty()) {
    const std::size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    const std::size_t eq = pair.find('=');
    if (pair.substr(0, eq) != name) continue;
    std::string value;
    if (!percent_decode(eq == std::string_view::npos ? std::string_view{} : pair.substr(eq + 1),
                        value))
      return std::nullopt;
    return value;
  }
  return std::nullopt;
}

}  // namespace delayq::server
