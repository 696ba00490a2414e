// durable_internal.hpp - what the files of the `durable` scenario of
// delayq-bench share: durable_bench.cpp (flags, the scenario, the report),
// durable_baselines.cpp (the backends and their baselines (1) and (2)) and
// durable_engine.cpp (the engine measurements (3)-(7)). Not for
// e2e_bench.cpp, which sees durable_bench.hpp only.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "bench_cli.hpp"
#include "delayq/engine.hpp"
#include "delayq/sqlite_store.hpp"
#include "durable_bench.hpp"

namespace delayq::bench {

using std::chrono::milliseconds;
using std::chrono::steady_clock;
using std::chrono::system_clock;

inline task bench_task(char prefix, std::uint64_t n, system_clock::time_point due) {
  task t;
  t.id = make_id(prefix, n);
  t.type = "noop";
  t.due = due;
  return t;
}

// ------------------------------------------------------------ backends

// What a backend offers the scenario: the store under test, its baselines,
// and a way to count and clear what it holds.
struct backend {
  std::string name;
  std::string description;
  std::function<std::unique_ptr<task_store>()> open;
  std::function<void()> clear;
  std::function<std::uint64_t()> count;
  std::function<durable_rate(std::uint64_t, double)> one_at_a_time;  // (1)
  std::function<durable_rate(std::uint64_t, double)> limit;          // (2)
};

// Redis and SQLite with one synchronous level (durable_baselines.cpp).
backend redis_backend(const redis_options& server);
backend sqlite_backend(const std::string& dir, sqlite_options::synchronous_level level);

// ------------------------------------------------------------ engine runs

// (3)-(7), each on a fresh store, cleared after (durable_engine.cpp).
durable_rate run_blocking(const durable_config& c, const backend& b, int threads);
durable_rate run_async(const durable_config& c, const backend& b, std::uint64_t in_flight);
durable_rate run_many(const durable_config& c, const backend& b);
durable_removals run_removals(const durable_config& c, const backend& b);
durable_recovery run_recovery(const durable_config& c, const backend& b);

}  // namespace delayq::bench
