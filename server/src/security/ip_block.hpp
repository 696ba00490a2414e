// security/ip_block.hpp - a CIDR block of addresses, as --push-allow and
// --beanstalk-allow name them, and the unmapping that makes an IPv6 form of
// an IPv4 address match IPv4 blocks (a check that missed it could be passed
// by writing ::ffff:10.0.0.1 for 10.0.0.1).
#pragma once

#include <boost/asio/ip/address.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace delayq::server {

/// `a` as the address it reaches: the IPv4 address of an IPv4-mapped
/// (::ffff:a.b.c.d) or NAT64 (64:ff9b::a.b.c.d) one, else `a` itself.
boost::asio::ip::address plain_address(const boost::asio::ip::address& a);

/// An `ADDRESS/PREFIX` block, or an address alone (a block of one).
///
/// Thread safety: a plain value.
struct ip_block {
  boost::asio::ip::address base;  ///< v4, or v6 (v4-mapped ones are kept as v4)
  unsigned prefix = 0;

  /// Parses `ADDRESS/PREFIX` or an address (IPv6 may be in brackets);
  /// nullopt with a reason in `why` for anything else.
  static std::optional<ip_block> parse(std::string_view text, std::string& why);
  /// Whether `a` (as plain_address() gives it) is inside.
  bool contains(const boost::asio::ip::address& a) const;
  /// A block of exactly one address.
  bool single() const { return prefix == (base.is_v4() ? 32u : 128u); }
};

}  // namespace delayq::server
