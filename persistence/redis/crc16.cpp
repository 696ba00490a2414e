// persistence/redis/crc16.cpp - the Redis Cluster key hash: CRC16 (XMODEM)
// of the key's hash tag, modulo 16384 (see cluster_router.hpp).
#include <array>

#include "cluster_router.hpp"

namespace delayq::detail::redis {
namespace {

// The table of the polynomial 0x1021, built at compile time.
constexpr std::array<std::uint16_t, 256> make_table() {
  std::array<std::uint16_t, 256> t{};
  for (unsigned i = 0; i < 256; ++i) {
    auto crc = static_cast<std::uint16_t>(i << 8);
    for (int bit = 0; bit < 8; ++bit)
      crc = static_cast<std::uint16_t>((crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1);
    t[i] = crc;
  }
  return t;
}

constexpr std::array<std::uint16_t, 256> table = make_table();

}  // namespace

std::uint16_t crc16(std::string_view bytes) noexcept {
  std::uint16_t crc = 0;
  for (const char ch : bytes) {
    const auto b = static_cast<unsigned char>(ch);
    crc = static_cast<std::uint16_t>((crc << 8) ^ table[((crc >> 8) ^ b) & 0xff]);
  }
  return crc;
}

unsigned key_slot(std::string_view key) noexcept {
  // The spec's rule: the first '{', then the first '}' after it; a tag is
  // used only when it is not empty ("foo{}{bar}" hashes the whole key).
  const auto open = key.find('{');
  if (open != std::string_view::npos) {
    const auto close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1)
      key = key.substr(open + 1, close - open - 1);
  }
  return crc16(key) & (cluster_slots - 1);
}

}  // namespace delayq::detail::redis
