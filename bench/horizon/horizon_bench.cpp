// delayq-bench-horizon: an engine over a large stored set, with and without
// a horizon (engine_options::horizon).
//
//   delayq-bench-horizon [--uri=URI] [--tasks=10000000] [--days=30]
//                        [--horizon=60] [--window=30] [--probes=600]
//                        [--tick-ms=10] [--compare] [--quick] [--out=FILE]
//
// 1. A child process writes --tasks tasks straight to the store (pipelined
//    async_write() batches of 1000, no engine), due uniformly over --days
//    starting one hour after the load began, so none is due during the run;
//    then --probes tasks due over --window seconds that begin 3 s past the
//    horizon of an engine started then: each probe is read in by the pager,
//    not by start().
// 2. This process (its RSS not inflated by the load) starts an engine with
//    the horizon and measures: start() time, RSS after start, the peak RSS
//    while the probes fire, and each probe's lateness (run time - due).
// 3. --compare: fresh children start an engine with a one-hour horizon, and
//    one without a horizon (it loads every task), on the same store, and
//    report start() time and RSS after start.
// The store is left as it is: give it a throwaway one (the default, a fresh
// prefix on the private Redis of scripts/with-redis.sh, goes with it).

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <delayq/delayq.hpp>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "io_thread.hpp"

namespace {

using namespace std::chrono_literals;
using sys_clock = std::chrono::system_clock;
using steady = std::chrono::steady_clock;

struct args {
  std::string uri;
  std::size_t tasks = 10'000'000;
  double days = 30;
  long horizon_s = 60;
  long window_s = 30;
  std::size_t probes = 600;
  long tick_ms = 10;
  bool compare = false;
  bool quick = false;
  std::string out;
};

// VmRSS or VmHWM of this process, in bytes.
std::size_t proc_status_bytes(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string k = std::string(key) + ":";
  while (std::getline(in, line))
    if (line.rfind(k, 0) == 0) return std::stoull(line.substr(k.size())) * 1024;
  return 0;
}

std::int64_t epoch_ms(sys_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

// Writes `tasks` through async_write(), up to max_writes_in_flight() batches out.
void write_all(delayq::task_store& store, std::vector<delayq::task>& tasks) {
  constexpr std::size_t batch = 1000;
  std::mutex m;
  std::condition_variable cv;
  std::size_t out = 0;
  boost::system::error_code first;
  std::vector<std::vector<delayq::store_change>> changes;
  changes.reserve(tasks.size() / batch + 1);
  for (std::size_t i = 0; i < tasks.size(); i += batch) {
    std::vector<delayq::store_change> c;
    for (std::size_t j = i; j < std::min(tasks.size(), i + batch); ++j)
      c.push_back(delayq::store_change{delayq::change_kind::save, &tasks[j], {}, {}});
    changes.push_back(std::move(c));
  }
  const std::size_t limit = std::max<std::size_t>(1, store.max_writes_in_flight());
  for (auto& c : changes) {
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return out < limit; });
    ++out;
    lock.unlock();
    store.async_write(c, [&](boost::system::error_code ec) {
      std::lock_guard g(m);
      if (ec && !first) first = ec;
      --out;
      cv.notify_all();
    });
  }
  std::unique_lock lock(m);
  cv.wait(lock, [&] { return out == 0; });
  if (first) throw boost::system::system_error(first, "bench: store write");
}

// The child of step 1. Returns the process exit status.
int load(const args& a) {
  auto store = delayq::open_store(a.uri);
  const auto t0 = steady::now();
  const std::int64_t base = epoch_ms(sys_clock::now()) + 3'600'000;
  const auto span = static_cast<std::int64_t>(a.days * 86'400'000.0);
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<std::int64_t> due(base, base + span);
  constexpr std::size_t chunk = 200'000;  // tasks built at once
  for (std::size_t done = 0; done < a.tasks;) {
    std::vector<delayq::task> tasks;
    const std::size_t n = std::min(chunk, a.tasks - done);
    tasks.reserve(n);
    for (std::size_t i = 0; i < n; ++i, ++done)
      tasks.push_back(delayq::task{"t" + std::to_string(done), "bulk", "payload-0123456789",
                                   delayq::from_epoch_ms(due(rng)), 0});
    write_all(*store, tasks);
  }
  const double load_s = std::chrono::duration<double>(steady::now() - t0).count();
  const std::int64_t probes_from_ms = epoch_ms(sys_clock::now()) + a.horizon_s * 1000 + 3000;
  std::vector<delayq::task> probes;
  for (std::size_t i = 0; i < a.probes; ++i) {
    const std::int64_t at =
        probes_from_ms + static_cast<std::int64_t>(i) * a.window_s * 1000 /
                             static_cast<std::int64_t>(std::max<std::size_t>(a.probes, 1));
    probes.push_back(
        delayq::task{"probe" + std::to_string(i), "probe", "", delayq::from_epoch_ms(at), 0});
  }
  write_all(*store, probes);
  std::printf("load: %zu tasks in %.1f s (%.0f per second), %zu probes\n", a.tasks, load_s,
              static_cast<double>(a.tasks) / load_s, a.probes);
  return 0;
}

struct run_result {
  double start_s = 0;
  std::size_t rss_after_start = 0, rss_peak = 0, loaded = 0, paged = 0;
  std::vector<double> lateness_ms;
};

run_result run(const args& a, std::chrono::milliseconds horizon, bool wait_probes) {
  run_result r;
  delayq::bench::io_thread io;
  std::mutex m;
  std::condition_variable cv;
  std::vector<double> late;
  delayq::executor_factory f;
  f.add("probe", [&](const delayq::task& t) {
    const double ms = std::chrono::duration<double, std::milli>(sys_clock::now() - t.due).count();
    std::lock_guard lock(m);
    late.push_back(ms);
    cv.notify_all();
  });
  f.add("bulk", [](const delayq::task&) {});
  delayq::engine_options o;
  o.tick = std::chrono::milliseconds{a.tick_ms};
  o.slots = 4096;
  o.horizon = horizon;
  delayq::engine eng(io.io(), f, delayq::open_store(a.uri), o);
  const auto t0 = steady::now();
  eng.start();
  r.start_s = std::chrono::duration<double>(steady::now() - t0).count();
  r.rss_after_start = proc_status_bytes("VmRSS");
  if (wait_probes) {
    std::unique_lock lock(m);
    while (late.size() < a.probes) {
      cv.wait_for(lock, 200ms);
      r.rss_peak = std::max(r.rss_peak, proc_status_bytes("VmRSS"));
    }
    r.lateness_ms = late;
  }
  r.rss_peak = std::max({r.rss_peak, r.rss_after_start, proc_status_bytes("VmRSS")});
  const auto st = eng.stats();
  r.loaded = st.loaded;
  r.paged = st.paged;
  eng.stop(1s);
  return r;
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size())))];
}

nlohmann::json to_json(const run_result& r) {
  nlohmann::json j;
  j["start_s"] = r.start_s;
  j["rss_after_start_mb"] = static_cast<double>(r.rss_after_start) / 1048576.0;
  j["rss_peak_mb"] = static_cast<double>(r.rss_peak) / 1048576.0;
  j["loaded"] = r.loaded;
  j["paged"] = r.paged;
  if (!r.lateness_ms.empty()) {
    j["probes_run"] = r.lateness_ms.size();
    j["lateness_ms_p50"] = quantile(r.lateness_ms, 0.5);
    j["lateness_ms_p99"] = quantile(r.lateness_ms, 0.99);
    j["lateness_ms_max"] = quantile(r.lateness_ms, 1.0);
    j["lateness_ms_min"] = *std::min_element(r.lateness_ms.begin(), r.lateness_ms.end());
  }
  return j;
}

// Runs `body` in a child process; returns its exit status.
template <class F>
int in_child(F body) {
  std::fflush(stdout);
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    int rc = 1;
    try {
      rc = body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
    }
    std::fflush(stdout);
    ::_exit(rc);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

int main(int argc, char** argv) {
  args a;
  if (const char* env = std::getenv("DELAYQ_TEST_REDIS"))
    a.uri = std::string(env) + "/0?prefix=horizon-bench-" + std::to_string(::getpid());
  CLI::App app("An engine over a large stored set, with and without a horizon.",
               "delayq-bench-horizon");
  app.add_option("--uri", a.uri,
                 "the store (default: a fresh prefix on $DELAYQ_TEST_REDIS); it is deleted after")
      ->type_name("URI");
  app.add_option("--tasks", a.tasks, "tasks stored, due over --days")->capture_default_str();
  app.add_option("--days", a.days, "the span of their due times")->capture_default_str();
  app.add_option("--horizon", a.horizon_s, "the engine's horizon, seconds")->capture_default_str();
  app.add_option("--window", a.window_s, "seconds over which the probes are due")
      ->capture_default_str();
  app.add_option("--probes", a.probes, "tasks due in the window (their lateness is measured)")
      ->capture_default_str();
  app.add_option("--tick-ms", a.tick_ms, "the engine's tick")->capture_default_str();
  app.add_flag("--compare", a.compare, "also start an engine without a horizon (loads every task)");
  app.add_flag("--quick", a.quick, "tiny sizes (the CI smoke run)");
  app.add_option("--out", a.out, "write the figures as JSON here");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (a.uri.empty()) {
    std::fprintf(stderr, "delayq-bench-horizon: no --uri and no $DELAYQ_TEST_REDIS\n");
    return 2;
  }
  if (a.quick) {
    a.tasks = 20'000;
    a.horizon_s = 1;
    a.window_s = 1;
    a.probes = 50;
  }
  const std::chrono::milliseconds horizon{a.horizon_s * 1000};
  nlohmann::json report;
  report["config"] = {{"uri", a.uri},           {"tasks", a.tasks},
                      {"days", a.days},         {"horizon_s", a.horizon_s},
                      {"window_s", a.window_s}, {"probes", a.probes},
                      {"tick_ms", a.tick_ms}};
  int rc = 0;
  try {
    if (in_child([&] { return load(a); }) != 0) throw std::runtime_error("load failed");
    const auto with = run(a, horizon, true);
    report["horizon"] = to_json(with);
    std::printf(
        "horizon %lds: start %.3f s, RSS after start %.1f MB, peak %.1f MB, loaded %zu, "
        "paged %zu; probe lateness p50 %.1f ms, p99 %.1f ms, max %.1f ms (tick %ld ms)\n",
        a.horizon_s, with.start_s, static_cast<double>(with.rss_after_start) / 1048576.0,
        static_cast<double>(with.rss_peak) / 1048576.0, with.loaded, with.paged,
        quantile(with.lateness_ms, 0.5), quantile(with.lateness_ms, 0.99),
        quantile(with.lateness_ms, 1.0), a.tick_ms);
    if (a.compare) {
      // Each in a fresh process: its RSS is its own.
      const std::pair<const char*, std::chrono::milliseconds> others[] = {
          {"horizon_1h", std::chrono::hours{1}}, {"no_horizon", 0ms}};
      for (const auto& [name, h] : others) {
        const std::string file =
            (a.out.empty() ? std::string("/tmp/delayq-bench-horizon") : a.out) + "." + name + "." +
            std::to_string(::getpid());
        const std::string label = name;
        const auto horizon_of_run = h;
        in_child([&] {
          const auto r = run(a, horizon_of_run, false);
          std::printf("%s: start %.3f s, RSS after start %.1f MB, loaded %zu\n", label.c_str(),
                      r.start_s, static_cast<double>(r.rss_after_start) / 1048576.0, r.loaded);
          std::ofstream(file) << to_json(r).dump(2) << "\n";
          return 0;
        });
        std::ifstream in(file);
        if (in) report[name] = nlohmann::json::parse(in, nullptr, false);
        std::remove(file.c_str());
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "delayq-bench-horizon: %s\n", e.what());
    rc = 1;
  }
  if (!a.out.empty()) std::ofstream(a.out) << report.dump(2) << "\n";
  return rc;
}
