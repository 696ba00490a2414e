// bench_cli.hpp - what the delayq benchmark binaries share: their own flags
// (taken out of argv before Google Benchmark sees it), task ids and a fast,
// seeded random source.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace delayq::bench {

/// The flags of a benchmark binary, next to Google Benchmark's own.
struct cli {
  bool quick = false;               ///< --quick: tiny sizes, a few ms per benchmark (CI smoke)
  bool full = false;                ///< --full: add the largest size (1e7 in the micro benchmarks)
  std::vector<std::int64_t> sizes;  ///< --sizes=1000,100000: replaces the default sizes
};

/// Takes --quick, --full and --sizes=... out of argv; leaves the rest (for
/// benchmark::Initialize). Exits with a message on a malformed --sizes.
inline cli take_cli(int& argc, char** argv) {
  cli c;
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--quick") {
      c.quick = true;
    } else if (a == "--full") {
      c.full = true;
    } else if (a.substr(0, 8) == "--sizes=") {
      std::string list(a.substr(8));
      for (std::size_t p = 0; p < list.size();) {
        std::size_t q = list.find(',', p);
        if (q == std::string::npos) q = list.size();
        const std::string item = list.substr(p, q - p);
        char* end = nullptr;
        const double v = std::strtod(item.c_str(), &end);  // accepts 1e6
        if (item.empty() || *end != '\0' || v < 1) {
          std::fprintf(stderr, "bad --sizes entry '%s' (expected e.g. --sizes=1000,1e6)\n",
                       item.c_str());
          std::exit(2);
        }
        c.sizes.push_back(static_cast<std::int64_t>(v));
        p = q + 1;
      }
    } else {
      argv[out++] = argv[i];
    }
  }
  argc = out;
  argv[argc] = nullptr;
  return c;
}

/// A task id of exactly 12 characters: fits std::string's small buffer (15),
/// so copying or moving it never allocates.
inline std::string make_id(char prefix, std::uint64_t n) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%c%011llu", prefix,
                static_cast<unsigned long long>(n % 100'000'000'000ULL));
  return std::string(buf, 12);
}

/// splitmix64: fast, seeded, good enough to spread due times.
class rng {
 public:
  explicit rng(std::uint64_t seed) : s_(seed) {}
  std::uint64_t next() noexcept {
    std::uint64_t z = (s_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  /// Uniform in [lo, hi] (the tiny modulo bias does not matter here).
  std::uint64_t between(std::uint64_t lo, std::uint64_t hi) noexcept {
    return lo + next() % (hi - lo + 1);
  }

 private:
  std::uint64_t s_;
};

}  // namespace delayq::bench
