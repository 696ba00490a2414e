// engine_bench.hpp - what the files of delayq-bench-engine share: the
// clock, die(), the shape of the task ids, and the scenarios each run in a
// child process (engine_scenarios.cpp), called by the hidden --child flag of
// engine_bench.cpp. See engine_bench.cpp for what each scenario measures.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace delayq::bench {

using clock_type = std::chrono::steady_clock;
using std::chrono::milliseconds;

[[noreturn]] inline void die(const char* what) {
  std::fprintf(stderr, "delayq-bench-engine: %s\n", what);
  std::fflush(stderr);
  std::_Exit(1);
}

inline double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// ------------------------------------------------------------------ ids

constexpr std::size_t id_len = 14;  // "order-" + 8 digits
constexpr std::size_t id_stride = 16;
constexpr std::string_view task_type = "bench";

// ------------------------------------------------------------------ threads

constexpr int max_threads = 4;
/// engine_options::tables of every engine the scenarios make; 0: the
/// engine's default (--engine-tables, which the parent passes on to its
/// children).
inline std::size_t engine_tables = 0;
constexpr std::size_t thread_ids = 16384;  // random ids each thread cycles through

// ------------------------------------------------------------------ the children

// The scenarios (engine_scenarios.cpp), each run in a child process; each
// prints its raw rows on stdout.
void child_ops(std::size_t pending, int rounds, std::size_t ops_per_round);
void child_threads(std::size_t pending, int rounds, double seconds);
void child_memory(const std::string& impl, std::size_t n);
void child_fill(const std::string& how, std::size_t n, int round);
void child_wheel(std::size_t n, int rounds);
void child_fire(std::size_t n, int round, double lead_s);
void child_precision(std::size_t n, int round, std::int64_t max_delay_ms);

}  // namespace delayq::bench
