// scaleout_common.cpp - the shared helpers of scaleout_common.hpp.
#include "scaleout_common.hpp"

#include <unistd.h>

#include <algorithm>

namespace delayq::bench_server::scaleout {

std::string store_uri(const options& o, const std::string& prefix) {
  return o.redis + (o.redis.find('?') == std::string::npos ? "?" : "&") + "prefix=" + prefix +
         "&shards=" + std::to_string(o.shards);
}

std::string fresh_prefix(const std::string& what) {
  static int n = 0;
  return "scaleout-" + std::to_string(::getpid()) + "-" + what + "-" + std::to_string(++n);
}

std::int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

double seconds_between(steady::time_point a, steady::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace delayq::bench_server::scaleout
