// scaleout_common.hpp - what every part of delayq-bench-scaleout shares: the
// command-line options, the task type and token the servers are started
// with, the key prefix and store URI of a round, and small time and
// statistics helpers.
//
// The program's parts live in delayq::bench_server::scaleout, inside the
// namespace of connection.hpp, whose HTTP client they use.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace delayq::bench_server::scaleout {

using json = nlohmann::json;
using steady = std::chrono::steady_clock;

/// The task type every server pushes to the receiver, and the bearer token
/// every server is started with and every call sends.
inline constexpr const char* task_type = "scaleout";
inline constexpr const char* token = "bench-scaleout-token";

/// The command line (main() in scaleout_bench.cpp parses it; --quick
/// replaces the sizes there).
struct options {
  std::string server_bin;
  std::string redis;  // redis://127.0.0.1:PORT
  std::string log_dir = "/tmp";
  std::string out, tables;
  bool quick = false;
  int shards = 64;
  int lease_ms = 2000;
  std::vector<int> instance_counts{1, 2, 3};
  int rounds = 5;
  std::size_t tasks = 50000;
  std::size_t batch = 500;
  int connections = 6;
  int failover_rounds = 5;
  std::vector<int> failover_leases_ms{2000, 1000};
  int failover_rate = 2000;  // tasks due per second over all shards
  pid_t redis_pid = 0;       // for its CPU time; 0: not measured
};

/// The Redis store URI of the servers of one round: --redis with the key
/// prefix and the shard count appended.
std::string store_uri(const options& o, const std::string& prefix);

/// A key prefix no other round of this run uses (a counter; the pid keeps
/// concurrent runs apart), so a round never sees what another left in Redis.
/// Not thread-safe.
std::string fresh_prefix(const std::string& what);

std::int64_t wall_ms();
double seconds_between(steady::time_point a, steady::time_point b);
double median(std::vector<double> v);

}  // namespace delayq::bench_server::scaleout
