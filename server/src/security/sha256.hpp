// security/sha256.hpp - SHA-256 (FIPS 180-4), the hash under the HMAC that
// authenticates a call one instance of a cluster forwards to another
// (cluster/forward_marker.hpp). Written here rather than taken from a
// crypto library: the server links none, and one hash of a hundred lines,
// checked against the standard's test vectors
// (tests/server/hmac_sha256_unit_test.cpp), is less to ship and audit than
// a dependency. It is not built for speed: it hashes a request's body and a
// few blocks per forwarded call.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace delayq::server {

/// SHA-256, fed in pieces: update() any number of times, then finish().
///
/// Example:
/// \code
///   const sha256::digest d = sha256{}.update("ab").update("c").finish();
///   to_hex(d) == "ba7816bf...";  // sha256::of("abc") is the same
/// \endcode
///
/// Thread safety: one object is used by one thread at a time; distinct
/// objects are independent.
class sha256 {
 public:
  using digest = std::array<std::uint8_t, 32>;
  /// The size of the blocks the hash consumes (HMAC pads its key to it).
  static constexpr std::size_t block_size = 64;

  sha256() noexcept;

  /// Appends `bytes` to the message.
  sha256& update(std::string_view bytes) noexcept;
  /// The digest of everything update() was given; the object then starts
  /// over on an empty message.
  digest finish() noexcept;

  /// The digest of `bytes`.
  static digest of(std::string_view bytes) noexcept;

 private:
  void compress(const std::uint8_t* block) noexcept;
  void reset() noexcept;

  std::array<std::uint32_t, 8> state_{};
  std::array<std::uint8_t, block_size> buffer_{};
  std::size_t buffered_ = 0;  // bytes in buffer_, less than block_size
  std::uint64_t length_ = 0;  // bytes hashed so far; the padding records it in bits
};

/// `d` as 64 lowercase hex digits.
/// Thread safety: a pure function.
std::string to_hex(const sha256::digest& d);

}  // namespace delayq::server
