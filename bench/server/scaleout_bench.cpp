// delayq-bench-scaleout: the scale-out benchmark of issue 14. Starts 1, 2
// and 3 delayq-server processes with --cluster on one Redis (a fresh key
// prefix per round) and measures
//   schedule  POST /v1/tasks:batch, spread round-robin over the instances
//             from several connections: tasks acknowledged per second;
//   firing    the same number of tasks, all due at one instant, pushed to a
//             receiver in this process that answers 200: distinct tasks
//             delivered per second from the first delivery to the last;
//   failover  3 instances, tasks due all the time on every shard; one
//             instance is SIGKILLed and the time from the kill to the first
//             push, by a survivor, of a task of a shard the dead one held is
//             measured (and to the last of its shards taken over).
// scripts/bench-scaleout.sh starts the Redis and runs this program; it
// starts and stops the delayq-servers itself (each round needs fresh ones,
// and the failover rounds kill one at a moment of their choosing).
//
// This file holds main(): the options, the order of the rounds, and the
// tables and JSON made of their results. The rounds are throughput_round.cpp
// and failover_round.cpp; what they run on is server_process (the servers),
// push_receiver (their pushes), cluster_client (the HTTP calls) and
// cpu_usage (where the cores went).

#include <CLI/CLI.hpp>
#include <algorithm>
#include <exception>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "push_receiver.hpp"
#include "scaleout_common.hpp"
#include "scaleout_rounds.hpp"

namespace {

using namespace delayq::bench_server::scaleout;

std::string fmt(double v, int prec = 0) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(prec);
  s << v;
  return s.str();
}

int run(const options& o) {
  push_receiver rx;
  json results{{"config",
                {{"shards", o.shards},
                 {"lease_ms", o.lease_ms},
                 {"tick_ms", 1},
                 {"rounds", o.rounds},
                 {"tasks", o.tasks},
                 {"batch", o.batch},
                 {"connections", o.connections},
                 {"failover_rounds", o.failover_rounds},
                 {"failover_leases_ms", o.failover_leases_ms},
                 {"failover_rate_per_s", o.failover_rate},
                 {"quick", o.quick}}}};
  // Rounds outermost, instance counts inside: a slow spell of the shared
  // machine then hits every N alike instead of one of them.
  std::map<int, std::vector<json>> by_n;
  for (int round = 1; round <= o.rounds; ++round) {
    for (const int n : o.instance_counts) by_n[n].push_back(throughput_round(o, rx, n, round));
  }
  std::map<int, std::vector<json>> by_lease;
  std::mt19937_64 rng(std::random_device{}());
  for (int round = 1; round <= o.failover_rounds; ++round) {
    for (const int l : o.failover_leases_ms) {
      by_lease[l].push_back(failover_round(o, rx, l, round, rng));
    }
  }

  std::ostringstream md;
  md << "### Scale-out: throughput (" << o.tasks << " tasks per figure, " << o.shards
     << " shards, lease " << o.lease_ms << " ms, median of " << o.rounds << " rounds)\n\n"
     << "| instances | schedule (tasks/s) | vs 1 | busy cores: servers + redis + bench | firing "
        "(tasks/s) | vs 1 | busy cores: servers + redis + bench | duplicates | held before due "
        "|\n|---|---|---|---|---|---|---|---|---|\n";
  json summary = json::array();
  double sched1 = 0, fire1 = 0;
  for (const int n : o.instance_counts) {
    std::vector<double> s, f;
    std::map<std::string, std::vector<double>> sc, fc;  // busy cores per part
    std::size_t dups = 0, held = 0;
    for (const auto& r : by_n[n]) {
      s.push_back(r["schedule_per_s"]);
      f.push_back(r["fired_per_s"]);
      for (const char* part : {"servers", "redis", "bench"}) {
        sc[part].push_back(r["schedule_busy_cores"].value(part, 0.0));
        fc[part].push_back(r["firing_busy_cores"].value(part, 0.0));
      }
      dups += r["duplicates"].get<std::size_t>();
      held += r["held_before_due"].get<bool>() ? 1 : 0;
    }
    const double sm = median(s), fm = median(f);
    if (n == 1) sched1 = sm, fire1 = fm;
    const double sr = sched1 > 0 ? sm / sched1 : 0, fr = fire1 > 0 ? fm / fire1 : 0;
    const auto cores = [](auto& m) {
      return fmt(median(m["servers"]), 2) + " + " + fmt(median(m["redis"]), 2) + " + " +
             fmt(median(m["bench"]), 2);
    };
    md << "| " << n << " | " << fmt(sm) << " | " << (sched1 > 0 ? fmt(sr, 2) : "-") << " | "
       << cores(sc) << " | " << fmt(fm) << " | " << (fire1 > 0 ? fmt(fr, 2) : "-") << " | "
       << cores(fc) << " | " << dups << " | " << held << "/" << by_n[n].size() << " |\n";
    summary.push_back({{"instances", n},
                       {"schedule_per_s_median", sm},
                       {"fired_per_s_median", fm},
                       {"schedule_vs_1", sr},
                       {"fired_vs_1", fr},
                       {"rounds", by_n[n]}});
  }
  results["throughput"] = summary;

  md << "\n### Scale-out: failover (3 instances, " << o.shards << " shards, one SIGKILLed, "
     << o.failover_rounds << " rounds; tasks due " << o.failover_rate << "/s, so one every "
     << fmt(1000.0 * o.shards / o.failover_rate, 0) << " ms per shard)\n\n"
     << "| lease | kill to first task of a taken-over shard, median | max | kill to the last "
        "shard's first task, median | max | under 2 leases |\n|---|---|---|---|---|---|\n";
  json fo = json::array();
  for (const int l : o.failover_leases_ms) {
    std::vector<double> first, last;
    bool all = true;
    for (const auto& r : by_lease[l]) {
      first.push_back(r["first_s"]);
      last.push_back(r["last_s"]);
      all = all && r["all_taken_over"].get<bool>();
    }
    const double fmax = *std::max_element(first.begin(), first.end());
    const double lmax = *std::max_element(last.begin(), last.end());
    const bool under = all && lmax < 2.0 * l / 1000;
    md << "| " << fmt(l / 1000.0, 1) << " s | " << fmt(median(first), 2) << " s | " << fmt(fmax, 2)
       << " s | " << fmt(median(last), 2) << " s | " << fmt(lmax, 2) << " s | "
       << (under ? "yes" : "no") << " (2 leases = " << fmt(2.0 * l / 1000, 1) << " s) |\n";
    fo.push_back({{"lease_ms", l},
                  {"first_s_median", median(first)},
                  {"first_s_max", fmax},
                  {"last_s_median", median(last)},
                  {"last_s_max", lmax},
                  {"all_rounds_all_taken_over", all},
                  {"under_two_leases", under},
                  {"rounds", by_lease[l]}});
  }
  results["failover"] = fo;

  std::cout << md.str();
  if (!o.out.empty()) std::ofstream(o.out) << results.dump(2) << '\n';
  if (!o.tables.empty()) std::ofstream(o.tables) << md.str();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  CLI::App app{
      "delayq-bench-scaleout: delayq-server --cluster with 1, 2, 3 instances on one "
      "Redis (issue 14)"};
  app.add_option("--server-bin", o.server_bin, "delayq-server to start")->required();
  app.add_option("--redis", o.redis, "redis://HOST:PORT of the Redis to use")->required();
  app.add_option("--log-dir", o.log_dir, "where the servers' logs go");
  app.add_option("--out", o.out, "JSON results");
  app.add_option("--tables", o.tables, "markdown tables");
  app.add_flag("--quick", o.quick, "tiny sizes, one round: checks the pipeline");
  app.add_option("--shards", o.shards, "--shards of every instance");
  app.add_option("--lease-ms", o.lease_ms, "--lease of the throughput rounds, in ms");
  app.add_option("--rounds", o.rounds, "throughput rounds per instance count");
  app.add_option("--tasks", o.tasks, "tasks per schedule and per firing figure");
  app.add_option("--batch", o.batch, "tasks per POST /v1/tasks:batch");
  app.add_option("--connections", o.connections, "client connections for scheduling");
  app.add_option("--failover-rounds", o.failover_rounds, "failover rounds per lease");
  app.add_option("--failover-leases-ms", o.failover_leases_ms, "leases of the failover rounds");
  app.add_option("--failover-rate", o.failover_rate, "tasks due per second in a failover round");
  app.add_option("--redis-pid", o.redis_pid, "redis-server's pid, for its CPU time");
  CLI11_PARSE(app, argc, argv);
  if (o.quick) {
    o.shards = 16;
    o.rounds = 1;
    o.tasks = 2000;
    o.batch = 200;
    o.connections = 3;
    o.failover_rounds = 1;
    o.failover_leases_ms = {1000};
    o.failover_rate = 200;
  }
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::cerr << "delayq-bench-scaleout: " << e.what() << '\n';
    return 1;
  }
}
