// security/hmac_sha256.hpp - HMAC-SHA-256 (RFC 2104, with security/sha256)
// and a comparison whose time does not depend on where two strings differ:
// what authenticates a call one instance of a cluster forwards to another
// (cluster/forward_marker.hpp). Checked against RFC 4231's test vectors in
// tests/server/hmac_sha256_unit_test.cpp.
#pragma once

#include <string_view>

#include "security/sha256.hpp"

namespace delayq::server {

/// The HMAC-SHA-256 of `message` under `key` (any length: a key longer than
/// a block is hashed first, as RFC 2104 says).
/// Thread safety: a pure function.
sha256::digest hmac_sha256(std::string_view key, std::string_view message) noexcept;

/// Whether `a` and `b` are equal, taking the same time wherever they differ
/// (a MAC or a token compared byte by byte with an early exit tells an
/// attacker, by timing, how many leading bytes of a guess were right). The
/// lengths are not secret: strings of different lengths answer false at
/// once.
/// Thread safety: a pure function.
bool constant_time_equal(std::string_view a, std::string_view b) noexcept;

}  // namespace delayq::server
