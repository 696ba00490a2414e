// cpu_usage.cpp - /proc/PID/stat read and the busy-core arithmetic.
#include "cpu_usage.hpp"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

namespace delayq::bench_server::scaleout {

double cpu_seconds(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(f, stat)) return 0;
  // Fields after the command name (which may hold spaces) in parentheses.
  std::istringstream rest(stat.substr(stat.rfind(')') + 2));
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stod(field);
    if (i == 15) stime = std::stod(field);
  }
  return (utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

cpu_snapshot cpu_now(const instances& in, pid_t redis_pid) {
  cpu_snapshot c{steady::now()};
  for (const auto& s : in) c.servers += cpu_seconds(s->pid());
  c.redis = redis_pid > 0 ? cpu_seconds(redis_pid) : 0;
  c.bench = cpu_seconds(::getpid());
  return c;
}

json busy_cores(const cpu_snapshot& a, const cpu_snapshot& b) {
  const double wall = seconds_between(a.at, b.at);
  if (wall <= 0) return json::object();
  return json{{"servers", (b.servers - a.servers) / wall},
              {"redis", (b.redis - a.redis) / wall},
              {"bench", (b.bench - a.bench) / wall},
              {"total", (b.servers - a.servers + b.redis - a.redis + b.bench - a.bench) / wall}};
}

}  // namespace delayq::bench_server::scaleout
