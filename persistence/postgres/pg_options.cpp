// persistence/postgres/pg_options.cpp - postgres:// URIs, parsed and
// described (delayq/postgres_store.hpp).
#include <algorithm>
#include <cctype>
#include <charconv>

#include "delayq/postgres_store.hpp"
#include "pg_batch.hpp"
#include "pg_schema.hpp"

namespace delayq {
namespace {

struct uri_error {
  std::string message;
};

// Echoes a piece of a URI in an error only when it cannot be part of a
// misplaced password.
std::string shown(std::string_view v) {
  const bool plain = v.size() <= 32 && std::all_of(v.begin(), v.end(), [](char c) {
                       return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.';
                     });
  return plain ? "'" + std::string(v) + "'" : std::string("(not shown)");
}

std::string percent_decode(std::string_view s, const char* what) {
  std::string out;
  if (!detail::pg::percent_decode(s, out))
    throw uri_error{std::string("bad percent-encoding in ") + what};
  if (out.find('\0') != std::string::npos) throw uri_error{std::string("a NUL byte in ") + what};
  return out;
}

std::string percent_encode(std::string_view s) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
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

void parse_query(std::string_view query, postgres_options& o) {
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view item = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    const auto eq = item.find('=');
    if (eq == std::string_view::npos) throw uri_error{"option " + shown(item) + " has no value"};
    const std::string_view key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "schema") {
      if (!detail::pg::valid_schema_name(value))
        throw uri_error{
            "schema must be 1-48 characters from [A-Za-z0-9_], not starting with a digit or "
            "'pg_'"};
      o.layout.schema = std::string(value);
    } else if (key == "shards") {
      o.layout.shards = parse_number<std::uint32_t>(value, 1, 16384, "shards");
    } else if (key == "connect_timeout_ms") {
      o.connection.connect_timeout = std::chrono::milliseconds{
          parse_number<std::int64_t>(value, 1, 3'600'000, "connect_timeout_ms")};
    } else if (key == "command_timeout_ms") {
      o.connection.command_timeout = std::chrono::milliseconds{
          parse_number<std::int64_t>(value, 1, 3'600'000, "command_timeout_ms")};
    } else if (key == "pool") {
      o.connection.pool = parse_number<std::size_t>(value, 1, 64, "pool");
    } else if (key == "rotate") {
      if (value != "on" && value != "off") throw uri_error{"rotate must be on or off"};
      o.rotate = value == "on";
    } else if (key == "rotate_at") {
      o.rotate_at = parse_number<unsigned>(value, 10, 1000, "rotate_at");
    } else if (key == "sslmode") {
      static constexpr std::string_view modes[] = {"disable", "allow",     "prefer",
                                                   "require", "verify-ca", "verify-full"};
      if (std::find(std::begin(modes), std::end(modes), value) == std::end(modes))
        throw uri_error{
            "sslmode must be disable, allow, prefer, require, verify-ca or verify-full"};
      o.connection.sslmode = std::string(value);
    } else {
      throw uri_error{"unknown option " + shown(key)};
    }
  }
}

postgres_options parse_uri(std::string_view uri) {
  postgres_options o;
  std::string_view rest;
  if (uri.starts_with("postgres://"))
    rest = uri.substr(11);
  else if (uri.starts_with("postgresql://"))
    rest = uri.substr(13);
  else
    throw uri_error{"not a postgres:// or postgresql:// URI"};
  std::string_view query;
  if (const auto q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  std::string_view authority = rest, path;
  if (const auto slash = rest.find('/'); slash != std::string_view::npos) {
    authority = rest.substr(0, slash);
    path = rest.substr(slash + 1);
  }
  if (const auto at = authority.rfind('@'); at != std::string_view::npos) {
    const std::string_view info = authority.substr(0, at);
    authority = authority.substr(at + 1);
    const auto colon = info.find(':');
    o.connection.user = percent_decode(info.substr(0, colon), "the user name");
    if (colon != std::string_view::npos)
      o.connection.password = percent_decode(info.substr(colon + 1), "the password");
    if (o.connection.user.empty()) throw uri_error{"a password without a user name"};
  }
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
  if (host.find_first_of(",/") != std::string_view::npos)
    throw uri_error{"one host only (a list of hosts is not supported)"};
  o.connection.host = std::string(host);
  if (!port.empty()) o.connection.port = parse_number<unsigned>(port, 1, 65535, "the port");
  if (path.find('/') != std::string_view::npos)
    throw uri_error{"unexpected '/' after the database"};
  o.connection.database = percent_decode(path, "the database name");
  parse_query(query, o);
  return o;
}

}  // namespace

std::string postgres_connection_options::address() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

postgres_options postgres_options::parse(std::string_view uri, boost::system::error_code& ec,
                                         std::string* message) {
  ec = {};
  try {
    return parse_uri(uri);
  } catch (const uri_error& e) {
    ec = make_error_code(errc::invalid_store_uri);
    if (message) *message = "invalid PostgreSQL URI: " + e.message;
    return {};
  }
}

postgres_options postgres_options::parse(std::string_view uri) {
  boost::system::error_code ec;
  std::string message;
  postgres_options o = parse(uri, ec, &message);
  if (ec) throw boost::system::system_error(ec, "delayq: " + message);
  return o;
}

std::string postgres_options::describe() const {
  std::string out = "postgres://";
  if (!connection.user.empty()) out += percent_encode(connection.user) + "@";
  out += connection.address() + "/" + percent_encode(connection.database);
  std::string q;
  if (layout.schema != "delayq") q += "schema=" + layout.schema;
  if (layout.shards != 0)
    q += (q.empty() ? "" : "&") + std::string("shards=") + std::to_string(layout.shards);
  if (!q.empty()) out += "?" + q;
  return out;
}

}  // namespace delayq
