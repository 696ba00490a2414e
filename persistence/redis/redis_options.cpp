// redis_options: the redis:// and unix:// URIs, parsed and described.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <tuple>

#include "delayq/redis_store.hpp"

namespace delayq {
namespace {

// ---------------------------------------------------------------------------
// URI parsing

struct uri_error {
  std::string message;
};

constexpr std::string_view default_prefix = "delayq";

bool valid_prefix(std::string_view p) {
  if (p.empty() || p.size() > 64) return false;
  return std::all_of(p.begin(), p.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

// Echoes a piece of a URI in an error message only when it cannot be part of
// a misplaced password (a password holding '/', '?' or '@' unencoded splits
// the URI in odd places).
std::string shown(std::string_view v) {
  const bool plain = v.size() <= 32 && std::all_of(v.begin(), v.end(), [](char c) {
                       return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.';
                     });
  return plain ? "'" + std::string(v) + "'" : std::string("(not shown)");
}

std::string percent_decode(std::string_view s, const char* what) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out.push_back(s[i]);
      continue;
    }
    unsigned value = 0;
    if (i + 2 >= s.size()) throw uri_error{std::string("bad percent-encoding in ") + what};
    auto [p, e] = std::from_chars(s.data() + i + 1, s.data() + i + 3, value, 16);
    if (e != std::errc{} || p != s.data() + i + 3)
      throw uri_error{std::string("bad percent-encoding in ") + what};
    out.push_back(static_cast<char>(value));
    i += 2;
  }
  return out;
}

template <class Int>
Int parse_number(std::string_view s, Int min, Int max, const char* what) {
  Int value{};
  auto [p, e] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (s.empty() || e != std::errc{} || p != s.data() + s.size() || value < min || value > max)
    throw uri_error{std::string(what) + " must be a number from " + std::to_string(min) + " to " +
                    std::to_string(max) + ", not " + shown(s)};
  return value;
}

void parse_userinfo(std::string_view info, redis_options& o) {
  const auto colon = info.find(':');
  if (colon == std::string_view::npos)
    throw uri_error{"credentials must be ':PASSWORD@' or 'USER:PASSWORD@'"};
  o.user = percent_decode(info.substr(0, colon), "the user name");
  o.password = percent_decode(info.substr(colon + 1), "the password");
  if (o.password.empty()) throw uri_error{"empty password"};
}

void parse_query(std::string_view query, redis_options& o, bool allow_db) {
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view item = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    const auto eq = item.find('=');
    if (eq == std::string_view::npos) throw uri_error{"option " + shown(item) + " has no value"};
    const std::string_view key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "prefix") {
      if (!valid_prefix(value))
        throw uri_error{"prefix must be 1-64 characters from [A-Za-z0-9._-]"};
      o.prefix = std::string(value);
    } else if (key == "connect_timeout_ms") {
      o.connect_timeout = std::chrono::milliseconds{
          parse_number<std::int64_t>(value, 1, 3'600'000, "connect_timeout_ms")};
    } else if (key == "command_timeout_ms") {
      o.command_timeout = std::chrono::milliseconds{
          parse_number<std::int64_t>(value, 1, 3'600'000, "command_timeout_ms")};
    } else if (key == "link_check_ms") {
      o.link_check = std::chrono::milliseconds{
          parse_number<std::int64_t>(value, 0, 3'600'000, "link_check_ms")};
    } else if (key == "shards") {
      o.shards = parse_number<std::uint32_t>(value, 1, 16384, "shards");
    } else if (key == "db" && allow_db) {
      o.db = parse_number<int>(value, 0, 1'000'000, "db");
    } else {
      throw uri_error{"unknown option " + shown(key)};
    }
  }
}

std::pair<std::string, unsigned> parse_host_port(std::string_view authority);

redis_options parse_uri(std::string_view uri) {
  redis_options o;
  std::string_view query;
  std::string_view rest;
  const bool is_unix = uri.starts_with("unix://");
  const bool is_cluster = uri.starts_with("redis-cluster://");
  if (uri.starts_with("redis://"))
    rest = uri.substr(8);
  else if (is_unix)
    rest = uri.substr(7);
  else if (is_cluster)
    rest = uri.substr(16);
  else
    throw uri_error{"not a redis://, unix:// or redis-cluster:// URI"};
  if (const auto q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }

  if (is_unix) {
    // unix://[userinfo@]/path
    const auto slash = rest.find('/');
    if (slash == std::string_view::npos) throw uri_error{"missing socket path"};
    const std::string_view before = rest.substr(0, slash);
    if (!before.empty()) {
      if (!before.ends_with('@')) throw uri_error{"the socket path must be absolute: unix:///PATH"};
      parse_userinfo(before.substr(0, before.size() - 1), o);
    }
    o.unix_socket = percent_decode(rest.substr(slash), "the socket path");
    if (o.unix_socket.size() < 2) throw uri_error{"missing socket path"};
    parse_query(query, o, true);
    return o;
  }

  // redis://[userinfo@]host[:port][/db]
  // redis-cluster://[userinfo@]host[:port][,host[:port]...]
  std::string_view authority = rest, path;
  if (const auto slash = rest.find('/'); slash != std::string_view::npos) {
    authority = rest.substr(0, slash);
    path = rest.substr(slash + 1);
  }
  if (const auto at = authority.rfind('@'); at != std::string_view::npos) {
    parse_userinfo(authority.substr(0, at), o);
    authority = authority.substr(at + 1);
  }
  if (is_cluster) {
    if (rest.find('/') != std::string_view::npos)
      throw uri_error{"a Redis Cluster has only database 0: drop the '/DB' path"};
    if (query.find("db=") == 0 || query.find("&db=") != std::string_view::npos)
      throw uri_error{"a Redis Cluster has only database 0: drop the db option"};
    o.cluster = true;
    while (true) {
      const auto comma = authority.find(',');
      o.seeds.push_back(parse_host_port(authority.substr(0, comma)));
      if (comma == std::string_view::npos) break;
      authority = authority.substr(comma + 1);
    }
    o.host = o.seeds.front().first;
    o.port = o.seeds.front().second;
    parse_query(query, o, false);
    return o;
  }
  std::tie(o.host, o.port) = parse_host_port(authority);
  if (!path.empty()) o.db = parse_number<int>(path, 0, 1'000'000, "the database number");
  parse_query(query, o, false);
  return o;
}

// host[:port], the host a name, an IPv4 address or a bracketed IPv6 one.
std::pair<std::string, unsigned> parse_host_port(std::string_view authority) {
  std::string_view host = authority, port;
  if (authority.starts_with('[')) {
    const auto close = authority.find(']');
    if (close == std::string_view::npos) throw uri_error{"unterminated '[' in the host"};
    host = authority.substr(1, close - 1);
    const std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') throw uri_error{"unexpected text after ']'"};
      port = after.substr(1);
      if (port.empty()) throw uri_error{"empty port"};
    }
  } else if (const auto colon = authority.find(':'); colon != std::string_view::npos) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
    if (port.empty()) throw uri_error{"empty port"};
  }
  if (host.empty()) throw uri_error{"missing host"};
  return {std::string(host),
          port.empty() ? 6379u : parse_number<unsigned>(port, 1, 65535, "the port")};
}

}  // namespace

// ---------------------------------------------------------------------------
// redis_options

redis_options redis_options::parse(std::string_view uri, boost::system::error_code& ec,
                                   std::string* message) {
  ec = {};
  try {
    return parse_uri(uri);
  } catch (const uri_error& e) {
    ec = make_error_code(errc::invalid_store_uri);
    if (message) *message = "invalid Redis URI: " + e.message;
    return {};
  }
}

redis_options redis_options::parse(std::string_view uri) {
  boost::system::error_code ec;
  std::string message;
  redis_options o = parse(uri, ec, &message);
  if (ec) throw boost::system::system_error(ec, "delayq: " + message);
  return o;
}

std::string redis_connection_options::address() const {
  if (!unix_socket.empty()) return unix_socket;
  const auto one = [](const std::string& h, unsigned p) {
    const bool v6 = h.find(':') != std::string::npos;
    return (v6 ? "[" + h + "]" : h) + ":" + std::to_string(p);
  };
  if (seeds.empty()) return one(host, port);
  std::string out;
  for (const auto& [h, p] : seeds) out += (out.empty() ? "" : ",") + one(h, p);
  return out;
}

std::string redis_options::describe() const {
  std::string who;
  if (!user.empty()) {
    static constexpr char hex[] = "0123456789ABCDEF";
    for (const char ch : user) {
      const auto c = static_cast<unsigned char>(ch);
      if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
        who.push_back(ch);
      } else {
        who.push_back('%');
        who.push_back(hex[c >> 4]);
        who.push_back(hex[c & 15]);
      }
    }
    who.push_back('@');
  }
  std::string out;
  if (!unix_socket.empty()) {
    out = "unix://" + who + unix_socket + "?db=" + std::to_string(db);
    if (prefix != default_prefix) out += "&prefix=" + prefix;
  } else if (cluster) {
    out = "redis-cluster://" + who + address();
    if (prefix != default_prefix) out += "?prefix=" + prefix;
  } else {
    out = "redis://" + who + address() + "/" + std::to_string(db);
    if (prefix != default_prefix) out += "?prefix=" + prefix;
  }
  if (shards != 0)
    out += (out.find('?') == std::string::npos ? "?shards=" : "&shards=") + std::to_string(shards);
  return out;
}

}  // namespace delayq
