// secure_random: bytes from the kernel's CSPRNG (getrandom(2)) for what a
// client must not guess: lease ids, an instance's incarnation. A generator
// seeded once (std::mt19937_64 from one std::random_device draw, as leases
// were made before) is as guessable as its seed, 32 bits, and its later
// outputs follow from a few observed ones.
#pragma once

#include <cstddef>
#include <string>

namespace delayq::server {

/// `bytes` random bytes from the kernel, as 2 * `bytes` lowercase hex
/// digits. Blocks only before the kernel's pool is first initialized (early
/// boot). Throws std::system_error when getrandom(2) fails.
/// Thread safety: safe from any thread.
std::string random_hex(std::size_t bytes);
/// random_hex(bytes) appended to `out` (no allocation when it has room).
/// Throws as random_hex() does; `out` may then hold part of the digits.
void append_random_hex(std::string& out, std::size_t bytes);

}  // namespace delayq::server
