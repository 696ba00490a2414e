// server_bench.cpp - delayq-bench-server: delayq-server against beanstalkd,
// side by side in one run (docs/benchmarks.md, "delayq-server against
// beanstalkd"). scripts/bench-server.sh starts the servers and runs this.
//
//   delayq-bench-server --target beanstalkd-fsync=beanstalk://127.0.0.1:P1
//       --target delayq-sqlite=http://127.0.0.1:P2 ...
//       --pair delayq-sqlite=beanstalkd-fsync [--quick] [--out F.json] [--tables F.md]
//
// Scenarios, every target in each round, the targets' order rotated from
// round to round so no system always goes first:
//   put-1, put-32     puts with a 1 h delay (nothing fires), 1 and 32
//                     connections, each one request at a time: acknowledged
//                     puts per second over the window (median of the rounds)
//   cycle-1, cycle-32 put (delay 0) + reserve + delete/finish on one type:
//                     whole cycles per second (median of the rounds)
//   lateness          jobs due 1 s after their put, long-poll consumers:
//                     answer time - (put sent + 1 s), all rounds pooled

#include "connection.hpp"
#include "scenarios.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace bs = delayq::bench_server;
using json = nlohmann::json;

namespace {

struct options {
  std::vector<std::string> target_specs;
  std::vector<std::string> pair_specs;
  std::vector<std::string> pid_specs;
  std::string token;
  bool quick = false;
  int rounds = 3;
  double seconds = 2.0;
  double warmup = 0.3;
  std::vector<int> connections{1, 32};
  std::size_t payload = 100;
  int late_jobs = 400;
  double late_rate = 100;
  int late_producers = 2;
  int late_consumers = 4;
  int late_rounds = 2;
  std::vector<std::string> only;
  std::string out, tables, plot_data;
};

// One row of the table: a figure per target.
struct row {
  std::string key;    // put-1, cycle-32, lateness-p99, ...
  std::string label;  // what the table says
  std::string unit;
  bool higher_is_better = true;
  std::map<std::string, double> value;         // target -> median / pooled percentile
  std::map<std::string, double> server_cores;  // target -> median over the rounds (-1: unknown)
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string fmt_rate(double v) {
  char b[32];
  if (v >= 1e6) {
    std::snprintf(b, sizeof b, "%.2f M/s", v / 1e6);
  } else if (v >= 1e4) {
    std::snprintf(b, sizeof b, "%.1f k/s", v / 1e3);
  } else if (v >= 1e3) {
    std::snprintf(b, sizeof b, "%.2f k/s", v / 1e3);
  } else {
    std::snprintf(b, sizeof b, "%.0f /s", v);
  }
  return b;
}

std::string fmt_ms(double v) {
  char b[32];
  std::snprintf(b, sizeof b, v < 10 ? "%.2f ms" : "%.1f ms", v);
  return b;
}

std::string fmt(const row& r, double v) { return r.unit == "ms" ? fmt_ms(v) : fmt_rate(v); }

json latency_summary(std::vector<double> v) {
  json j;
  j["n"] = v.size();
  j["p50"] = bs::percentile(v, 50);
  j["p90"] = bs::percentile(v, 90);
  j["p99"] = bs::percentile(v, 99);
  j["max"] = bs::percentile(v, 100);
  return j;
}

// CPU seconds (user + system) a process has used so far, from
// /proc/PID/stat; -1 when it cannot be read.
double process_cpu_s(long pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(f, stat)) return -1;
  const std::size_t close = stat.rfind(')');  // the command name may hold spaces
  if (close == std::string::npos) return -1;
  std::istringstream rest(stat.substr(close + 2));
  std::string field;
  double utime = 0, stime = 0;
  // After the name: state(3) ... utime(14) stime(15), counted from 1.
  for (int k = 3; k <= 15 && rest >> field; ++k) {
    if (k == 14) utime = std::stod(field);
    if (k == 15) stime = std::stod(field);
  }
  return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double self_cpu_s() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// The CPU the client and the server under test used during one run, in
// cores (CPU seconds over wall seconds): tells whether a figure is bound by
// the server's CPU, the client's, or neither (waiting on fsync).
class cpu_meter {
 public:
  explicit cpu_meter(long server_pid)
      : pid_(server_pid),
        wall0_(bs::clock::now()),
        self0_(self_cpu_s()),
        server0_(pid_ > 0 ? process_cpu_s(pid_) : -1) {}
  json stop() const {
    const double wall = std::chrono::duration<double>(bs::clock::now() - wall0_).count();
    json j = {{"client_cores", (self_cpu_s() - self0_) / wall}};
    const double s1 = pid_ > 0 ? process_cpu_s(pid_) : -1;
    j["server_cores"] = (server0_ >= 0 && s1 >= 0) ? json((s1 - server0_) / wall) : json(nullptr);
    return j;
  }

 private:
  long pid_;
  bs::clock::time_point wall0_;
  double self0_, server0_;
};

std::string cores_note(const json& cpu) {
  char b[96];
  if (cpu["server_cores"].is_null()) {
    std::snprintf(b, sizeof b, "client %.2f cores", cpu["client_cores"].get<double>());
  } else {
    std::snprintf(b, sizeof b, "server %.2f, client %.2f cores", cpu["server_cores"].get<double>(),
                  cpu["client_cores"].get<double>());
  }
  return b;
}

bool wanted(const options& o, const std::string& scenario) {
  return o.only.empty() || std::find(o.only.begin(), o.only.end(), scenario) != o.only.end();
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  CLI::App app{
      "delayq-bench-server: delayq-server against beanstalkd (put throughput, put + reserve + "
      "delete cycles, lateness of delayed jobs), side by side"};
  app.add_option("--target", o.target_specs,
                 "NAME=beanstalk://HOST:PORT or NAME=http://HOST:PORT (delayq-server); "
                 "repeatable, the table's columns in this order")
      ->required();
  app.add_option("--pair", o.pair_specs,
                 "CANDIDATE=BASELINE: a verdict row per measurement (repeatable)");
  app.add_option("--pid", o.pid_specs,
                 "NAME=PID: the target's server process, whose CPU use each run reports "
                 "(repeatable)");
  app.add_option("--token", o.token, "Bearer token for the http:// targets");
  app.add_flag("--quick", o.quick, "tiny sizes (a few seconds): checks that everything works");
  app.add_option("--rounds", o.rounds, "rounds of the throughput scenarios (median)")
      ->check(CLI::PositiveNumber);
  app.add_option("--seconds", o.seconds, "counted window of each throughput run, s")
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup", o.warmup, "uncounted start of each throughput run, s")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--connections", o.connections, "connection counts of put and cycle")
      ->delimiter(',');
  app.add_option("--payload", o.payload, "payload bytes (>= 20: the lateness stamp)")
      ->check(CLI::Range(20, 60000));
  app.add_option("--late-jobs", o.late_jobs, "lateness: jobs per round")
      ->check(CLI::PositiveNumber);
  app.add_option("--late-rate", o.late_rate, "lateness: puts per second (paced)")
      ->check(CLI::PositiveNumber);
  app.add_option("--late-producers", o.late_producers, "lateness: producer connections")
      ->check(CLI::PositiveNumber);
  app.add_option("--late-consumers", o.late_consumers, "lateness: consumer connections")
      ->check(CLI::PositiveNumber);
  app.add_option("--late-rounds", o.late_rounds, "lateness: rounds (pooled)")
      ->check(CLI::PositiveNumber);
  app.add_option("--only", o.only, "scenarios to run: put, cycle, lateness")
      ->delimiter(',')
      ->check(CLI::IsMember({"put", "cycle", "lateness"}));
  app.add_option("--out", o.out, "JSON results file");
  app.add_option("--tables", o.tables, "Markdown tables file (also printed)");
  app.add_option("--plot-data", o.plot_data, "gnuplot data file: throughput per target");
  CLI11_PARSE(app, argc, argv);

  if (o.quick) {
    o.rounds = 1;
    o.seconds = 0.2;
    o.warmup = 0.05;
    o.late_jobs = 20;
    o.late_rate = 100;
    o.late_rounds = 1;
  }

  std::vector<bs::target> targets;
  try {
    for (const auto& spec : o.target_specs) {
      targets.push_back(bs::parse_target(spec));
      targets.back().token = o.token;
    }
  } catch (const std::exception& e) {
    std::cerr << "--target: " << e.what() << "\n";
    return 2;
  }
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const auto& spec : o.pair_specs) {
    const auto eq = spec.find('=');
    auto known = [&](const std::string& n) {
      return std::any_of(targets.begin(), targets.end(), [&](auto& t) { return t.name == n; });
    };
    if (eq == std::string::npos || !known(spec.substr(0, eq)) || !known(spec.substr(eq + 1))) {
      std::cerr << "--pair " << spec << ": expected CANDIDATE=BASELINE, both --target names\n";
      return 2;
    }
    pairs.emplace_back(spec.substr(0, eq), spec.substr(eq + 1));
  }

  std::map<std::string, long> server_pid;
  for (const auto& spec : o.pid_specs) {
    const auto eq = spec.find('=');
    if (eq == std::string::npos) {
      std::cerr << "--pid " << spec << ": expected NAME=PID\n";
      return 2;
    }
    server_pid[spec.substr(0, eq)] = std::stol(spec.substr(eq + 1));
  }
  const auto pid_of = [&](const bs::target& t) {
    const auto it = server_pid.find(t.name);
    return it == server_pid.end() ? -1L : it->second;
  };

  boost::asio::io_context io;
  const auto secs = [](double s) {
    return std::chrono::duration_cast<bs::clock::duration>(std::chrono::duration<double>(s));
  };
  json results = json::object();
  std::vector<row> rows;
  bool failed = false;
  const auto report_errors = [&](const std::string& what, const bs::target& t,
                                 const bs::error_log& e) {
    if (e.count == 0) return;
    failed = true;
    std::cerr << "ERROR " << what << " on " << t.name << ": " << e.count
              << " error(s), first: " << e.first << "\n";
  };
  // Round r visits the targets starting at r % size: each goes first in turn.
  const auto in_order = [&](int r) {
    std::vector<const bs::target*> v;
    for (std::size_t k = 0; k < targets.size(); ++k) {
      v.push_back(&targets[(k + static_cast<std::size_t>(r)) % targets.size()]);
    }
    return v;
  };

  for (const std::string scenario : {"put", "cycle"}) {
    if (!wanted(o, scenario)) continue;
    for (const int conns : o.connections) {
      const std::string key = scenario + "-" + std::to_string(conns);
      row rw{key,
             (scenario == "put" ? "puts/s (1 h delay), " : "put+reserve+delete cycles/s, ") +
                 std::to_string(conns) + (conns == 1 ? " connection" : " connections"),
             "/s",
             true,
             {}};
      std::map<std::string, std::vector<double>> per_round, lat, cores;
      std::map<std::string, json> round_json;
      for (int r = 0; r < o.rounds; ++r) {
        for (const bs::target* t : in_order(r)) {
          bs::throughput_config cfg;
          cfg.connections = conns;
          cfg.warmup = secs(o.warmup);
          cfg.window = secs(o.seconds);
          cfg.payload_bytes = o.payload;
          if (scenario == "put") {
            cfg.type = "benchput";
            cfg.delay_ms = 3'600'000;
          } else {
            cfg.type = "benchcycle" + std::to_string(conns) + "r" + std::to_string(r);
          }
          const cpu_meter meter(pid_of(*t));
          bs::throughput_result res =
              scenario == "put" ? bs::run_puts(io, *t, cfg) : bs::run_cycles(io, *t, cfg);
          const json cpu = meter.stop();
          report_errors(key, *t, res.errors);
          std::printf("  %-10s round %d  %-18s %10.0f /s  (p50 %.0f us, p99 %.0f us; %s)%s\n",
                      key.c_str(), r + 1, t->name.c_str(), res.per_s,
                      bs::percentile(res.latency_us, 50), bs::percentile(res.latency_us, 99),
                      cores_note(cpu).c_str(), res.errors.count ? "  ERRORS" : "");
          std::fflush(stdout);
          per_round[t->name].push_back(res.per_s);
          cores[t->name].push_back(
              cpu["server_cores"].is_null() ? -1.0 : cpu["server_cores"].get<double>());
          lat[t->name].insert(lat[t->name].end(), res.latency_us.begin(), res.latency_us.end());
          round_json[t->name].push_back({{"per_s", res.per_s},
                                         {"ops", res.ops},
                                         {"empty_reserves", res.empty_reserves},
                                         {"errors", res.errors.count},
                                         {"first_error", res.errors.first},
                                         {"cpu", cpu}});
        }
      }
      json jrow = {{"label", rw.label}, {"unit", "per_s"}, {"by_target", json::object()}};
      for (const auto& t : targets) {
        rw.value[t.name] = median(per_round[t.name]);
        rw.server_cores[t.name] = median(cores[t.name]);
        jrow["by_target"][t.name] = {{"median_per_s", rw.value[t.name]},
                                     {"rounds", round_json[t.name]},
                                     {"latency_us", latency_summary(lat[t.name])}};
      }
      results[key] = jrow;
      rows.push_back(rw);
    }
  }

  if (wanted(o, "lateness")) {
    std::map<std::string, std::vector<double>> late, put_lat;
    std::map<std::string, json> round_json;
    for (int r = 0; r < o.late_rounds; ++r) {
      for (const bs::target* t : in_order(r)) {
        bs::lateness_config cfg;
        cfg.producers = o.late_producers;
        cfg.consumers = o.late_consumers;
        cfg.jobs = o.late_jobs;
        cfg.rate = o.late_rate;
        cfg.delay_ms = 1000;  // whole seconds: beanstalkd's unit
        cfg.payload_bytes = o.payload;
        cfg.type = "benchlate" + std::to_string(r);
        const cpu_meter meter(pid_of(*t));
        bs::lateness_result res = bs::run_lateness(io, *t, cfg);
        const json cpu = meter.stop();
        report_errors("lateness", *t, res.errors);
        std::printf(
            "  lateness   round %d  %-18s p50 %7.2f  p99 %7.2f  max %7.2f ms  (%llu/%llu)%s\n",
            r + 1, t->name.c_str(), bs::percentile(res.lateness_ms, 50),
            bs::percentile(res.lateness_ms, 99), bs::percentile(res.lateness_ms, 100),
            static_cast<unsigned long long>(res.received),
            static_cast<unsigned long long>(res.sent), res.errors.count ? "  ERRORS" : "");
        std::fflush(stdout);
        late[t->name].insert(late[t->name].end(), res.lateness_ms.begin(), res.lateness_ms.end());
        put_lat[t->name].insert(put_lat[t->name].end(), res.put_us.begin(), res.put_us.end());
        round_json[t->name].push_back({{"sent", res.sent},
                                       {"received", res.received},
                                       {"foreign", res.foreign},
                                       {"errors", res.errors.count},
                                       {"first_error", res.errors.first},
                                       {"cpu", cpu},
                                       {"lateness_ms", latency_summary(res.lateness_ms)}});
      }
    }
    json jl = {{"label", "lateness of jobs due 1 s after their put, ms (all rounds pooled)"},
               {"by_target", json::object()}};
    for (const double q : {50.0, 90.0, 99.0, 100.0}) {
      const std::string name = q == 100.0 ? "max" : "p" + std::to_string(static_cast<int>(q));
      row rw{"lateness-" + name, "lateness " + name + ", ms", "ms", false, {}};
      for (const auto& t : targets) rw.value[t.name] = bs::percentile(late[t.name], q);
      rows.push_back(rw);
    }
    for (const auto& t : targets) {
      jl["by_target"][t.name] = {{"lateness_ms", latency_summary(late[t.name])},
                                 {"put_latency_us", latency_summary(put_lat[t.name])},
                                 {"rounds", round_json[t.name]}};
    }
    results["lateness"] = jl;
  }

  // The tables.
  std::ostringstream md;
  md << "| measurement |";
  for (const auto& t : targets) md << " " << t.name << " |";
  md << "\n|---|";
  for (std::size_t k = 0; k < targets.size(); ++k) md << "---:|";
  md << "\n";
  for (const auto& rw : rows) {
    md << "| " << rw.label << " |";
    for (const auto& t : targets) md << " " << fmt(rw, rw.value.at(t.name)) << " |";
    md << "\n";
  }
  if (!server_pid.empty() && std::any_of(rows.begin(), rows.end(),
                                         [](const row& rw) { return !rw.server_cores.empty(); })) {
    md << "\nServer CPU during those runs, in cores (CPU seconds / wall seconds, median of the "
          "rounds; the machine has "
       << sysconf(_SC_NPROCESSORS_ONLN) << "; redis-server's own CPU is not counted):\n\n";
    md << "| measurement |";
    for (const auto& t : targets) md << " " << t.name << " |";
    md << "\n|---|";
    for (std::size_t k = 0; k < targets.size(); ++k) md << "---:|";
    md << "\n";
    for (const auto& rw : rows) {
      if (rw.server_cores.empty()) continue;
      md << "| " << rw.label << " |";
      for (const auto& t : targets) {
        const double c = rw.server_cores.at(t.name);
        char b[32];
        std::snprintf(b, sizeof b, c < 0 ? "?" : "%.2f", c);
        md << " " << b << " |";
      }
      md << "\n";
    }
  }
  json verdicts = json::array();
  if (!pairs.empty()) {
    md << "\n| measurement |";
    for (const auto& [c, b] : pairs) md << " " << c << " against " << b << " |";
    md << "\n|---|";
    for (std::size_t k = 0; k < pairs.size(); ++k) md << "---|";
    md << "\n";
    for (const auto& rw : rows) {
      md << "| " << rw.label << " |";
      for (const auto& [c, b] : pairs) {
        const double cv = rw.value.at(c), bv = rw.value.at(b);
        // The candidate's advantage: > 1 is ahead, whichever way the unit points.
        const double adv = rw.higher_is_better ? (bv > 0 ? cv / bv : 0) : (cv > 0 ? bv / cv : 0);
        const bool ahead = rw.higher_is_better ? cv > bv : cv < bv;
        char b2[96];
        std::snprintf(b2, sizeof b2, "%s (%.2fx)", ahead ? "ahead" : "**MISSED**", adv);
        md << " " << b2 << " |";
        verdicts.push_back({{"measurement", rw.key},
                            {"candidate", c},
                            {"baseline", b},
                            {"candidate_value", cv},
                            {"baseline_value", bv},
                            {"advantage", adv},
                            {"ahead", ahead}});
      }
      md << "\n";
    }
  }
  std::cout << "\n" << md.str();

  if (!o.tables.empty()) std::ofstream(o.tables) << md.str();
  if (!o.plot_data.empty()) {
    std::ofstream pd(o.plot_data);
    pd << "measurement";
    for (const auto& t : targets) pd << "\t" << t.name;
    pd << "\n";
    for (const auto& rw : rows) {
      if (rw.unit == "ms") continue;
      pd << rw.key;
      for (const auto& t : targets) pd << "\t" << rw.value.at(t.name);
      pd << "\n";
    }
  }
  if (!o.out.empty()) {
    json doc;
    json jt = json::array();
    for (const auto& t : targets) {
      jt.push_back({{"name", t.name},
                    {"protocol", t.proto == bs::target::protocol::beanstalk ? "beanstalk" : "http"},
                    {"host", t.host},
                    {"port", t.port}});
    }
    doc["config"] = {{"quick", o.quick},
                     {"rounds", o.rounds},
                     {"seconds", o.seconds},
                     {"warmup", o.warmup},
                     {"connections", o.connections},
                     {"payload_bytes", o.payload},
                     {"put_delay_ms", 3'600'000},
                     {"late_jobs", o.late_jobs},
                     {"late_rate", o.late_rate},
                     {"late_producers", o.late_producers},
                     {"late_consumers", o.late_consumers},
                     {"late_rounds", o.late_rounds},
                     {"late_delay_ms", 1000}};
    doc["targets"] = jt;
    doc["results"] = results;
    doc["verdicts"] = verdicts;
    doc["errors"] = failed;
    std::ofstream(o.out) << doc.dump(2) << "\n";
  }
  return failed ? 1 : 0;
}
