// push/push_policy.hpp - which addresses the server may push tasks to
// (--push-allow; docs/server.md, "Security"). A push target is a URL a
// client chose: without a policy, a client could make the server POST to
// cloud metadata (169.254.169.254) or to any internal host, and read from
// the dead letters' failure reasons which ports answer.
#pragma once

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "security/ip_block.hpp"
#include "wire/http_url.hpp"

namespace delayq::server {

/// Thread safety: const members are safe from any thread.
class push_policy {
 public:
  /// `allow`: the --push-allow values, each `ADDRESS/PREFIX` (a CIDR block),
  /// an address, or `HOST[:PORT]` (a name, matched without case). Empty:
  /// loopback addresses only. `self`: where the server listens, never a
  /// target unless a rule names it. Throws std::invalid_argument naming a
  /// malformed rule.
  push_policy(const std::vector<std::string>& allow, boost::asio::ip::tcp::endpoint self);

  /// Whether a push to `host`:`port` (as the URL names them) may connect to
  /// `addr`, which `host` resolved to. Refused, with a sentence in `why`:
  /// an address no rule allows, and, unless a rule names it alone (a /32 or
  /// /128 block inside it, or its literal address), an address of 0.0.0.0/8
  /// or ::, a link-local one (169.254.0.0/16, where cloud metadata answers,
  /// and fe80::/10), the other metadata addresses (100.100.100.200,
  /// 192.0.0.192, fd00:ec2::254), or the server's own listen address. An
  /// IPv4-mapped or NAT64 (64:ff9b::/96) address is checked as its IPv4
  /// one. A HOST rule allows whatever its name resolves to but those.
  bool allows(std::string_view host, std::uint16_t port, const boost::asio::ip::address& addr,
              std::string& why) const;

  /// The check at registration: resolves `url`'s host (blocking) and
  /// returns why a push there is refused, or "" when every address it
  /// resolves to is allowed. A name that does not resolve is refused too
  /// (and `*unresolved`, when given, says that was why).
  std::string check(const http_url& url, bool* unresolved = nullptr) const;

 private:
  struct name_rule {
    std::string host;  // lower case
    std::string port;  // "" for any
  };
  bool named_alone(const boost::asio::ip::address& a) const;

  std::vector<ip_block> blocks_;
  std::vector<name_rule> names_;
  boost::asio::ip::tcp::endpoint self_;
};

}  // namespace delayq::server
