#include "security/secure_random.hpp"

#include <sys/random.h>

#include <cerrno>
#include <system_error>
#include <vector>

namespace delayq::server {

std::string random_hex(std::size_t bytes) {
  std::vector<unsigned char> raw(bytes);
  std::size_t got = 0;
  while (got < bytes) {
    // getrandom() may return fewer bytes than asked (over 256) or be
    // interrupted by a signal; neither is an error.
    const ssize_t n = ::getrandom(raw.data() + got, bytes - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::system_error(errno, std::generic_category(), "getrandom");
    }
    got += static_cast<std::size_t>(n);
  }
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes);
  for (const unsigned char b : raw) {
    out += digits[b >> 4];
    out += digits[b & 0xf];
  }
  return out;
}

}  // namespace delayq::server
