#include "security/secure_random.hpp"

#include <string.h>  // explicit_bzero
#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>

namespace delayq::server {

namespace {

// The kernel's random bytes, read 256 at a time (getrandom() never returns
// fewer for up to 256): a lease id is drawn on every reserve, and a system
// call for each 16 bytes was one in three of the beanstalk cycle's. Each
// byte is handed out once, and wiped as it is.
struct random_pool {
  unsigned char bytes[256];
  std::size_t used = sizeof bytes;

  void take(unsigned char* out, std::size_t n) {
    while (n > 0) {
      if (used == sizeof bytes) refill();
      const std::size_t k = std::min(n, sizeof bytes - used);
      std::memcpy(out, bytes + used, k);
      std::memset(bytes + used, 0, k);
      used += k;
      out += k;
      n -= k;
    }
  }
  void refill() {
    std::size_t got = 0;
    while (got < sizeof bytes) {
      // Interrupted by a signal: not an error.
      const ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
      if (n < 0) {
        if (errno == EINTR) continue;
        throw std::system_error(errno, std::generic_category(), "getrandom");
      }
      got += static_cast<std::size_t>(n);
    }
    used = 0;
  }
};

thread_local random_pool pool;

}  // namespace

void append_random_hex(std::string& out, std::size_t bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  unsigned char raw[64];
  while (bytes > 0) {
    const std::size_t n = std::min(bytes, sizeof raw);
    pool.take(raw, n);
    const std::size_t at = out.size();
    out.resize(at + 2 * n);
    char* hex = out.data() + at;
    for (std::size_t i = 0; i < n; ++i) {
      hex[2 * i] = digits[raw[i] >> 4];
      hex[2 * i + 1] = digits[raw[i] & 0xf];
    }
    bytes -= n;
  }
  explicit_bzero(raw, sizeof raw);  // as the pool wipes what it hands out
}

std::string random_hex(std::size_t bytes) {
  std::string out;
  out.reserve(2 * bytes);
  append_random_hex(out, bytes);
  return out;
}

}  // namespace delayq::server
