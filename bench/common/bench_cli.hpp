// bench_cli.hpp - what the delayq benchmark binaries share: CLI11 options of
// the forms they all take (counts such as 1e6, lists of them), the flags of
// the Google Benchmark binaries (taken out of argv before Google Benchmark
// sees it), task ids and a fast, seeded random source.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

namespace delayq::bench {

/// The flags of a benchmark binary, next to Google Benchmark's own.
struct cli {
  bool quick = false;               ///< --quick: tiny sizes, a few ms per benchmark (CI smoke)
  bool full = false;                ///< --full: add the largest size (1e7 in the micro benchmarks)
  std::vector<std::int64_t> sizes;  ///< --sizes=1000,100000: replaces the default sizes
};

/// A CLI11 check: a number, in any floating-point form (1e6), of at least `least`.
inline CLI::Validator at_least(double least) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", least);
  const std::string bound = text;
  return CLI::Validator(
      [least, bound](const std::string& s) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (s.empty() || *end != '\0' || !(v >= least))
          return "'" + s + "' is not a number >= " + bound;
        return {};
      },
      ">= " + bound);
}

/// Adds --sizes=LIST to `app`: comma-separated, repeatable, each at least
/// `least`, in any floating-point form (1e6); each is truncated to an integer.
inline CLI::Option* add_sizes_option(CLI::App& app, std::vector<double>& into, double least) {
  return app.add_option("--sizes", into, "replaces the default sizes, e.g. --sizes=1000,1e6")
      ->delimiter(',')
      ->allow_extra_args(false)  // one list per --sizes: never the arguments after it
      ->check(at_least(least))
      ->type_name("LIST");
}

/// Adds an option `name` N: a count of at least 1 in any floating-point form
/// (1e6), truncated, handed to `set`.
inline CLI::Option* add_count_option(CLI::App& app, const std::string& name,
                                     std::function<void(std::uint64_t)> set,
                                     const std::string& help) {
  return app
      .add_option_function<double>(
          name, [set](const double& v) { set(static_cast<std::uint64_t>(v)); }, help)
      ->check(at_least(1))
      ->type_name("N");
}

/// Adds an option `name` LIST: comma-separated counts, as add_count_option.
inline CLI::Option* add_count_list_option(CLI::App& app, const std::string& name,
                                          std::function<void(std::vector<std::uint64_t>)> set,
                                          const std::string& help) {
  return app
      .add_option_function<std::vector<double>>(
          name,
          [set](const std::vector<double>& list) {
            std::vector<std::uint64_t> counts;
            for (const double v : list) counts.push_back(static_cast<std::uint64_t>(v));
            set(std::move(counts));
          },
          help)
      ->delimiter(',')
      ->allow_extra_args(false)
      ->check(at_least(1))
      ->type_name("LIST");
}

/// Takes --quick, --full and --sizes=... out of argv; leaves the rest (for
/// benchmark::Initialize). --help prints these flags, then calls
/// `more_help` (benchmark::PrintDefaultHelp for Google Benchmark's). Exits
/// with a message on a malformed flag.
inline cli take_cli(int& argc, char** argv, const std::string& description, void (*more_help)()) {
  cli c;
  CLI::App app(description);
  app.allow_extras();  // Google Benchmark's flags
  app.add_flag("--quick", c.quick, "tiny sizes, a few ms per benchmark (the CI smoke run)");
  app.add_flag("--full", c.full, "add the largest size");
  std::vector<double> sizes;
  add_sizes_option(app, sizes, 1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help() << "Google Benchmark's flags:\n";
    more_help();
    std::exit(0);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e) == 0 ? 0 : 2);
  }
  for (const double v : sizes) c.sizes.push_back(static_cast<std::int64_t>(v));
  // The extras keep their order and their original text: keep those argv
  // entries, in place.
  const std::vector<std::string> rest = app.remaining();
  int out = 1;
  std::size_t k = 0;
  for (int i = 1; i < argc && k < rest.size(); ++i)
    if (rest[k] == argv[i]) {
      argv[out++] = argv[i];
      ++k;
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
