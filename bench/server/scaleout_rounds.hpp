// scaleout_rounds.hpp - the two kinds of round delayq-bench-scaleout runs.
// Each starts fresh instances on a fresh key prefix, measures, and kills
// them on return; each returns its figures as the JSON object that goes into
// the "rounds" arrays of scaleout.json, and prints one line to stderr.
#pragma once

#include <random>

#include "push_receiver.hpp"
#include "scaleout_common.hpp"

namespace delayq::bench_server::scaleout {

/// One throughput round with `n` instances (throughput_round.cpp): the
/// schedule rate of o.tasks tasks due in a day, then the firing rate of as
/// many tasks due at one instant.
json throughput_round(const options& o, push_receiver& rx, int n, int round);

/// One failover round (failover_round.cpp): 3 instances, tasks due at
/// o.failover_rate per second over all shards; i2 is SIGKILLed once tasks
/// have been running for 2 s (plus a random part of a lease), and the time
/// until the survivors run the tasks of its shards is measured.
json failover_round(const options& o, push_receiver& rx, int lease_ms, int round,
                    std::mt19937_64& rng);

}  // namespace delayq::bench_server::scaleout
