#include "push/push_policy.hpp"

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <cctype>
#include <charconv>
#include <stdexcept>

#include "http/ascii.hpp"
#include "security/ip_block.hpp"

namespace delayq::server {
namespace {

namespace ip = boost::asio::ip;

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

push_policy::push_policy(const std::vector<std::string>& allow, ip::tcp::endpoint self)
    : self_(self) {
  for (const std::string& rule : allow) {
    const auto bad = [&](const std::string& why) {
      return std::invalid_argument("--push-allow \"" + rule + "\": " + why);
    };
    if (rule.empty()) throw bad("empty");
    // A CIDR block, or an address alone (a block of one).
    std::string why;
    if (auto b = ip_block::parse(rule, why)) {
      blocks_.push_back(*b);
      continue;
    }
    if (rule.find('/') != std::string::npos) throw bad(why);
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
  self_ = ip::tcp::endpoint(plain_address(self.address()), self.port());
}

bool push_policy::named_alone(const ip::address& a) const {
  return std::any_of(blocks_.begin(), blocks_.end(),
                     [&](const ip_block& b) { return b.single() && b.contains(a); });
}

bool push_policy::allows(std::string_view host, std::uint16_t port, const ip::address& raw,
                         std::string& why) const {
  const ip::address a = plain_address(raw);
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
  if (std::any_of(blocks_.begin(), blocks_.end(), [&](const ip_block& b) { return b.contains(a); }))
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
