// cpu_usage.hpp - the CPU the processes of a round use, from /proc: the
// instances, redis-server and this process (the load generator and the push
// receiver). The figures show where the two cores went: with every process
// on them, a sum near 2 busy cores means the machine, not delayq's design,
// set the pace.
#pragma once

#include <sys/types.h>

#include "scaleout_common.hpp"
#include "server_process.hpp"

namespace delayq::bench_server::scaleout {

/// CPU seconds (user + system) a process has used so far, from
/// /proc/PID/stat; 0 when it is gone.
double cpu_seconds(pid_t pid);

/// CPU seconds of the servers, Redis and this process (the load generator
/// and the push receiver) at one moment.
struct cpu_snapshot {
  steady::time_point at;
  double servers = 0, redis = 0, bench = 0;
};

/// `redis_pid` 0: Redis is not measured (0 seconds).
cpu_snapshot cpu_now(const instances& in, pid_t redis_pid);

/// Busy cores between two snapshots: CPU seconds over wall seconds, per
/// part and in total; an empty object when no time passed.
json busy_cores(const cpu_snapshot& a, const cpu_snapshot& b);

}  // namespace delayq::bench_server::scaleout
