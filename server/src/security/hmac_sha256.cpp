#include "security/hmac_sha256.hpp"

#include <array>

namespace delayq::server {

sha256::digest hmac_sha256(std::string_view key, std::string_view message) noexcept {
  // K0: the key, hashed when longer than a block, padded with zeros to one.
  std::array<char, sha256::block_size> k0{};
  if (key.size() > sha256::block_size) {
    const sha256::digest hashed = sha256::of(key);
    for (std::size_t i = 0; i < hashed.size(); ++i) k0[i] = static_cast<char>(hashed[i]);
  } else {
    for (std::size_t i = 0; i < key.size(); ++i) k0[i] = key[i];
  }
  std::array<char, sha256::block_size> ipad{}, opad{};
  for (std::size_t i = 0; i < k0.size(); ++i) {
    ipad[i] = static_cast<char>(k0[i] ^ 0x36);
    opad[i] = static_cast<char>(k0[i] ^ 0x5c);
  }
  const sha256::digest inner =
      sha256{}.update(std::string_view(ipad.data(), ipad.size())).update(message).finish();
  return sha256{}
      .update(std::string_view(opad.data(), opad.size()))
      .update(std::string_view(reinterpret_cast<const char*>(inner.data()), inner.size()))
      .finish();
}

bool constant_time_equal(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  // Every byte is looked at, and the differences are only ORed together:
  // no branch on the data. volatile keeps the compiler from stopping the
  // loop at the first difference.
  volatile unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff = diff | static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace delayq::server
