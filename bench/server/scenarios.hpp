// scenarios.hpp - what delayq-bench-server measures against one system:
// put throughput, put + reserve + delete cycles, lateness of delayed jobs.
// Each call opens its connections, measures, closes them, and runs the given
// io_context (one thread: the caller's) until it is done.
#pragma once

#include "connection.hpp"

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace delayq::bench_server {

using clock = std::chrono::steady_clock;

/// Errors of one run: counted, the first kept word for word.
struct error_log {
  std::uint64_t count = 0;
  std::string first;
  void add(const std::string& what) {
    if (count++ == 0) first = what;
  }
};

/// Closed-loop throughput: `connections` connections, each sending its next
/// request when the last was answered, for `warmup` (not counted) and then
/// `window` (counted: operations acknowledged inside it).
struct throughput_config {
  int connections = 1;
  clock::duration warmup = std::chrono::milliseconds(300);
  clock::duration window = std::chrono::seconds(2);
  std::string type;           ///< delayq type / beanstalkd tube
  std::int64_t delay_ms = 0;  ///< puts only: the jobs' delay
  std::size_t payload_bytes = 100;
  clock::duration timeout = std::chrono::seconds(30);  ///< beyond warmup + window
};

struct throughput_result {
  double per_s = 0;                  ///< operations (puts, or whole cycles) per second
  std::uint64_t ops = 0;             ///< counted in the window
  std::uint64_t empty_reserves = 0;  ///< cycles: a reserve that found nothing (should be 0)
  std::vector<double> latency_us;    ///< per counted operation
  error_log errors;
};

/// Puts of `payload_bytes` with `delay_ms` (large: nothing fires).
throughput_result run_puts(boost::asio::io_context& io, const target& t,
                           const throughput_config& cfg);

/// Cycles of put (delay 0), reserve (waiting up to 1 s), delete/finish, all
/// connections on one type.
throughput_result run_cycles(boost::asio::io_context& io, const target& t,
                             const throughput_config& cfg);

/// `jobs` delayed jobs put at `rate` per second (paced, spread over the
/// producers), each due `delay_ms` later; `consumers` connections long-poll
/// reserve (1 s) and delete/finish. Lateness = when the reserve answer
/// arrived - (when the put was sent + delay_ms).
struct lateness_config {
  int producers = 2;
  int consumers = 4;
  int jobs = 1000;
  double rate = 500;
  std::int64_t delay_ms = 1000;
  std::string type;
  std::size_t payload_bytes = 100;
  clock::duration timeout = std::chrono::seconds(15);  ///< beyond the last due time
};

struct lateness_result {
  std::vector<double> lateness_ms;
  std::vector<double> put_us;  ///< latency of the puts
  std::uint64_t sent = 0;
  std::uint64_t received = 0;
  std::uint64_t foreign = 0;  ///< received jobs with a payload this run did not send
  error_log errors;
};

lateness_result run_lateness(boost::asio::io_context& io, const target& t,
                             const lateness_config& cfg);

/// The q-th percentile (0-100, nearest rank) of `v`; sorts `v`. 0 when empty.
double percentile(std::vector<double>& v, double q);

}  // namespace delayq::bench_server
