#include "security/ip_block.hpp"

#include <algorithm>
#include <charconv>

namespace delayq::server {

namespace ip = boost::asio::ip;

ip::address plain_address(const ip::address& a) {
  if (!a.is_v6()) return a;
  const ip::address_v6 v6 = a.to_v6();
  if (v6.is_v4_mapped()) return ip::make_address_v4(ip::v4_mapped, v6);
  const auto b = v6.to_bytes();
  static constexpr unsigned char nat64[12] = {0x00, 0x64, 0xff, 0x9b};
  if (std::equal(b.begin(), b.begin() + 12, nat64))
    return ip::address_v4({b[12], b[13], b[14], b[15]});
  return a;
}

std::optional<ip_block> ip_block::parse(std::string_view text, std::string& why) {
  boost::system::error_code ec;
  if (const std::size_t slash = text.find('/'); slash != std::string_view::npos) {
    const auto base = ip::make_address(std::string(text.substr(0, slash)), ec);
    if (ec) {
      why = "not ADDRESS/PREFIX";
      return std::nullopt;
    }
    const std::string_view bits = text.substr(slash + 1);
    unsigned prefix = 0;
    const auto [end, err] = std::from_chars(bits.data(), bits.data() + bits.size(), prefix);
    const ip::address p = plain_address(base);
    if (err != std::errc{} || end != bits.data() + bits.size() || bits.empty() ||
        prefix > (p.is_v4() ? 32u : 128u)) {
      why = "the prefix must be 0-32 (IPv4) or 0-128 (IPv6)";
      return std::nullopt;
    }
    return ip_block{p, prefix};
  }
  if (text.size() > 2 && text.front() == '[' && text.back() == ']')
    text = text.substr(1, text.size() - 2);
  const auto a = ip::make_address(std::string(text), ec);
  if (ec) {
    why = "not a CIDR block or an address";
    return std::nullopt;
  }
  const ip::address p = plain_address(a);
  return ip_block{p, p.is_v4() ? 32u : 128u};
}

bool ip_block::contains(const ip::address& a) const {
  if (base.is_v4() != a.is_v4()) return false;
  if (a.is_v4()) {
    const std::uint32_t mask = prefix == 0 ? 0 : ~std::uint32_t{0} << (32 - prefix);
    return (a.to_v4().to_uint() & mask) == (base.to_v4().to_uint() & mask);
  }
  const auto x = a.to_v6().to_bytes(), y = base.to_v6().to_bytes();
  unsigned left = prefix;
  for (std::size_t i = 0; i < x.size() && left > 0; ++i) {
    const unsigned bits = std::min(left, 8u);
    const auto mask = static_cast<unsigned char>(0xff << (8 - bits));
    if ((x[i] & mask) != (y[i] & mask)) return false;
    left -= bits;
  }
  return true;
}

}  // namespace delayq::server
