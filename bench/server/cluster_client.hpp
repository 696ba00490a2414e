// cluster_client.hpp - the calls delayq-bench-scaleout makes to the
// instances of a round, from the main thread: GET /v1/stats, the wait until
// the instances hold every shard between them, and scheduling tasks in
// batches over several connections. Each call runs the io_context it is
// given until the call ends (connection.hpp's HTTP client, C++20
// coroutines).
#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "scaleout_common.hpp"
#include "server_process.hpp"

namespace delayq::bench_server::scaleout {

/// GET /v1/stats of the instance on `port`; throws unless it answers 200.
json stats_of(boost::asio::io_context& io, std::uint16_t port);

/// Polls /v1/stats until the instances together hold every shard, each some;
/// returns the seconds it took. Throws when an instance exited or `guard`
/// passed first.
double wait_all_shards_held(boost::asio::io_context& io, const instances& in, int shards,
                            std::chrono::seconds guard);

struct schedule_result {
  double seconds = 0;
  std::vector<std::string> ids;
};

/// Schedules `count` tasks, task k due at due_of(k), in batches of `batch`
/// from `connections` connections, connection i on instance i % N.
/// Throws on the first failed call or when not every task was acknowledged.
schedule_result schedule_tasks(boost::asio::io_context& io, const instances& in, std::size_t count,
                               std::size_t batch, int connections,
                               std::function<std::int64_t(std::size_t)> due_of);

}  // namespace delayq::bench_server::scaleout
