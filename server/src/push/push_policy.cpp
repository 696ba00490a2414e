#include "push/push_policy.hpp"

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <cctype>
#include <charconv>
#include <stdexcept>

#include "http/ascii.hpp"

namespace delayq::server {
namespace {

namespace ip = boost::asio::ip;

// ::ffff:a.b.c.d and the NAT64 64:ff9b::a.b.c.d reach a.b.c.d: the v4
// checks must apply to them.
ip::address plain(const ip::address& a) {
  if (!a.is_v6()) return a;
  const ip::address_v6 v6 = a.to_v6();
  if (v6.is_v4_mapped()) return ip::make_address_v4(ip::v4_mapped, v6);
  const auto b = v6.to_bytes();
  static constexpr unsigned char nat64[12] = {0x00, 0x64, 0xff, 0x9b};
  if (std::equal(b.begin(), b.begin() + 12, nat64))
    return ip::address_v4({b[12], b[13], b[14], b[15]});
  return a;
}

// Addresses no broad rule opens, or "" for any other: where cloud metadata
// answers (link-local, and the few providers that use another address),
// and "this network" (0.0.0.0/8).
std::string special(const ip::address& a) {
  if (a.is_v4()) {
    const std::uint32_t v = a.to_v4().to_uint();
    if ((v & 0xff000000u) == 0) return "an address of \"this network\" (0.0.0.0/8)";
    if ((v & 0xffff0000u) == 0xa9fe0000u)
      return "a link-local address (cloud metadata answers there)";
    if (v == 0x646464c8u || v == 0xc00000c0u)  // 100.100.100.200, 192.0.0.192
      return "a cloud metadata address";
    return {};
  }
  const ip::address_v6 v6 = a.to_v6();
  if (v6.is_unspecified()) return "an unspecified address";
  if (v6.is_link_local()) return "a link-local address (cloud metadata answers there)";
  if (v6 == ip::make_address_v6("fd00:ec2::254")) return "a cloud metadata address";
  return {};
}

}  // namespace

bool push_policy::contains(const block& b, const ip::address& a) {
  if (b.base.is_v4() != a.is_v4()) return false;
  if (a.is_v4()) {
    const std::uint32_t mask = b.prefix == 0 ? 0 : ~std::uint32_t{0} << (32 - b.prefix);
    return (a.to_v4().to_uint() & mask) == (b.base.to_v4().to_uint() & mask);
  }
  const auto x = a.to_v6().to_bytes(), y = b.base.to_v6().to_bytes();
  unsigned left = b.prefix;
  for (std::size_t i = 0; i < x.size() && left > 0; ++i) {
    const unsigned bits = std::min(left, 8u);
    const auto mask = static_cast<unsigned char>(0xff << (8 - bits));
    if ((x[i] & mask) != (y[i] & mask)) return false;
    left -= bits;
  }
  return true;
}

push_policy::push_policy(const std::vector<std::string>& allow, ip::tcp::endpoint self)
    : self_(self) {
  for (const std::string& rule : allow) {
    const auto bad = [&](const std::string& why) {
      return std::invalid_argument("--push-allow \"" + rule + "\": " + why);
    };
    if (rule.empty()) throw bad("empty");
    boost::system::error_code ec;
    if (const std::size_t slash = rule.find('/'); slash != std::string::npos) {
      const auto base = ip::make_address(rule.substr(0, slash), ec);
      if (ec) throw bad("not ADDRESS/PREFIX");
      const std::string_view bits = std::string_view(rule).substr(slash + 1);
      unsigned prefix = 0;
      const auto [end, err] = std::from_chars(bits.data(), bits.data() + bits.size(), prefix);
      const ip::address p = plain(base);
      if (err != std::errc{} || end != bits.data() + bits.size() || bits.empty() ||
          prefix > (p.is_v4() ? 32u : 128u))
        throw bad("the prefix must be 0-32 (IPv4) or 0-128 (IPv6)");
      blocks_.push_back({p, prefix});
      continue;
    }
    // An address alone is a block of one.
    std::string_view text = rule;
    if (text.size() > 2 && text.front() == '[' && text.back() == ']')
      text = text.substr(1, text.size() - 2);
    if (const auto a = ip::make_address(std::string(text), ec); !ec) {
      const ip::address p = plain(a);
      blocks_.push_back({p, p.is_v4() ? 32u : 128u});
      continue;
    }
    // HOST or HOST:PORT.
    name_rule n;
    const std::size_t colon = rule.rfind(':');
    n.host = ascii_lower(rule.substr(0, colon));
    if (colon != std::string::npos) {
      n.port = rule.substr(colon + 1);
      unsigned port = 0;
      const auto [end, err] = std::from_chars(n.port.data(), n.port.data() + n.port.size(), port);
      if (err != std::errc{} || end != n.port.data() + n.port.size() || port == 0 || port > 65535)
        throw bad("the port must be 1-65535");
    }
    if (n.host.empty() ||
        n.host.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789.-_") != std::string::npos)
      throw bad("not a CIDR block, an address or HOST[:PORT]");
    names_.push_back(std::move(n));
  }
  self_ = ip::tcp::endpoint(plain(self.address()), self.port());
}

bool push_policy::named_alone(const ip::address& a) const {
  return std::any_of(blocks_.begin(), blocks_.end(), [&](const block& b) {
    return b.prefix == (b.base.is_v4() ? 32u : 128u) && contains(b, a);
  });
}

bool push_policy::allows(std::string_view host, std::uint16_t port, const ip::address& raw,
                         std::string& why) const {
  const ip::address a = plain(raw);
  const std::string where = std::string(host) + ":" + std::to_string(port);
  const std::string said = a.to_string() == host ? where : where + " (" + a.to_string() + ")";
  // Never by a broad rule: only a rule that names the address itself.
  const bool own = port == self_.port() &&
                   (a == self_.address() || (self_.address().is_unspecified() && a.is_loopback()) ||
                    (self_.address().is_loopback() && a.is_loopback()));
  const std::string kind = own ? std::string("it is this server") : special(a);
  if (!kind.empty() && !named_alone(a)) {
    why = "push target " + said + " refused: " + kind + "; only --push-allow " + a.to_string() +
          " would allow it";
    return false;
  }
  if (blocks_.empty() && names_.empty()) {
    if (a.is_loopback()) return true;
    why = "push target " + said +
          " refused: without --push-allow only loopback addresses are targets; allow others "
          "with --push-allow CIDR|HOST[:PORT]";
    return false;
  }
  if (std::any_of(blocks_.begin(), blocks_.end(), [&](const block& b) { return contains(b, a); }))
    return true;
  const std::string h = ascii_lower(host), p = std::to_string(port);
  if (std::any_of(names_.begin(), names_.end(), [&](const name_rule& n) {
        return n.host == h && (n.port.empty() || n.port == p);
      }))
    return true;
  why = "push target " + said + " refused: no --push-allow names it";
  return false;
}

std::string push_policy::check(const http_url& url, bool* unresolved) const {
  if (unresolved != nullptr) *unresolved = false;
  unsigned port = 0;
  std::from_chars(url.port.data(), url.port.data() + url.port.size(), port);
  boost::asio::io_context io;
  ip::tcp::resolver resolver(io);
  boost::system::error_code ec;
  const auto results = resolver.resolve(url.host, url.port, ec);
  if (ec) {
    if (unresolved != nullptr) *unresolved = true;
    return "push target " + url.host + " does not resolve: " + ec.message();
  }
  for (const auto& r : results) {
    std::string why;
    if (!allows(url.host, static_cast<std::uint16_t>(port), r.endpoint().address(), why))
      return why;
  }
  return {};
}

}  // namespace delayq::server
