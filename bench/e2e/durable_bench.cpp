// The `durable` scenario of delayq-bench (issue 11). For each backend, in one
// run and on the same server or disk:
//
//   (1) baseline, one at a time: Redis: the seeds' producer (MULTI, HSET,
//       ZADD, EXEC: one round trip per task, one thread); SQLite: one
//       committed INSERT per task (raw SQLiteCpp, same table and pragmas).
//   (2) baseline, the store's limit: Redis: raw hiredis, MULTI batches of
//       1000 tasks (HSET + ZADD each, the store's own commands and record
//       bytes), 8 batches pipelined; SQLite: transactions of 1000 INSERTs.
//   (3) engine::schedule(), blocking, from 1 and from 8 threads.
//   (4) engine::async_schedule() from one thread with N in flight: the rate
//       is tasks / time until the last completion; every completion counted.
//   (5) engine::schedule_many() of 1000 tasks, one thread.
//   (6) removals keep up: N tasks due within a window all run; the store is
//       counted `linger` after the last ran (target: none left), with the
//       lateness of the runs.
//   (7) recovery: start() of an engine over N stored tasks, its time and the
//       peak RSS while loading (VmHWM, reset through /proc/self/clear_refs).
//
// Tasks of (3)-(5) are due in an hour, so nothing fires while they are
// measured; every measurement starts with an empty store. A measurement that
// would run past --durable-max-seconds stops issuing work, waits for what is
// in flight, and says "capped".
#include "durable_bench.hpp"

#include <SQLiteCpp/Database.h>
#include <SQLiteCpp/Statement.h>
#include <SQLiteCpp/Transaction.h>
#include <stdlib.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "bench_cli.hpp"
#include "delayq/engine.hpp"
#include "delayq/record_codec.hpp"
#include "delayq/sqlite_store.hpp"
#include "durable_internal.hpp"
#include "io_thread.hpp"
#include "measure.hpp"
#include "redis_client.hpp"
#include "seeds_queue.hpp"

namespace delayq::bench {
namespace {

std::string make_temp_dir(const std::string& base_in) {
  std::string base = base_in;
  if (base.empty()) {
    const char* t = std::getenv("TMPDIR");
    base = (t != nullptr && *t != '\0') ? t : "/tmp";
  }
  std::filesystem::create_directories(base);
  std::string tmpl = base + "/delayq-durable.XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr)
    throw std::runtime_error("cannot create a temp dir under " + base);
  return tmpl;
}

// ------------------------------------------------------------ output

// A figure rounded to `prec` decimals, as the tables print it: the rest is noise.
double fixed(double v, int prec) { return std::strtod(fmt(v, prec).c_str(), nullptr); }

nlohmann::ordered_json json_rate(const durable_rate& r) {
  return {{"what", r.what},
          {"tasks", r.tasks},
          {"failed", r.failed},
          {"seconds", fixed(r.seconds, 4)},
          {"per_s", fixed(r.per_s(), 1)},
          {"capped", r.capped}};
}

std::string rate_cell(const durable_rate& r) {
  if (r.tasks == 0 && r.seconds == 0) return "n/a";
  std::string s = fmt_count(r.per_s()) + "/s";
  if (r.capped) s += " (capped)";
  if (r.failed) s += " (" + std::to_string(r.failed) + " failed)";
  return s;
}

// A ratio row: value, target, met.
std::string ratio_row(const std::string& what, double value, double target, bool as_percent) {
  const bool met = value >= target;
  std::string v = as_percent ? fmt(value * 100, 1) + "%" : fmt(value, 2) + "x";
  std::string t = as_percent ? fmt(target * 100, 0) + "%" : fmt(target, 0) + "x";
  return "| " + what + " | " + v + " | >= " + t + " | " + (met ? "yes" : "**no**") + " |\n";
}

double best_async(const durable_backend_result& b) {
  double best = 0;
  for (const auto& [n, r] : b.async_rates) best = std::max(best, r.per_s());
  return best;
}

double blocking_at(const durable_backend_result& b, int threads) {
  for (const auto& [n, r] : b.blocking)
    if (n == threads) return r.per_s();
  return 0;
}

}  // namespace

// ------------------------------------------------------------ config

void durable_config::apply_quick(const CLI::App& app) {
  quick = true;
  auto unset = [&](const char* f) { return app.count(f) == 0; };
  if (unset("--durable-seeds-tasks")) seeds_tasks = 50;
  if (unset("--durable-limit-tasks")) limit_tasks = 5000;
  if (unset("--durable-blocking-tasks")) blocking_tasks = 80;
  if (unset("--durable-in-flight")) in_flight = {100, 1000};
  if (unset("--durable-async-tasks")) async_tasks = 2000;
  if (unset("--durable-many-tasks")) many_tasks = 2000;
  if (unset("--durable-removal-tasks")) removal_tasks = 1000;
  if (unset("--durable-removal-window-ms")) removal_window = milliseconds(500);
  if (unset("--durable-removal-lead-ms")) removal_lead = milliseconds(300);
  if (unset("--durable-linger-ms")) removal_linger = milliseconds(200);
  if (unset("--durable-recovery-tasks")) recovery_tasks = 2000;
  if (unset("--durable-max-seconds")) max_seconds = 5;
}

void durable_config::add_flags(CLI::App& app) {
  const std::string group = "durable (the store's speed, issue 11; sizes default / --quick)";
  const auto count = [&](const char* flag, std::uint64_t& into, const char* help) {
    add_count_option(
        app, flag, [&into](std::uint64_t v) { into = v; }, help)
        ->group(group);
  };
  const auto ms = [&](const char* flag, milliseconds& into, const char* help) {
    add_count_option(
        app, flag, [&into](std::uint64_t v) { into = milliseconds(v); }, help)
        ->group(group);
  };
  app.add_option("--durable-backends", backends,
                 "some of redis, sqlite-full, sqlite-normal (default all)")
      ->delimiter(',')
      ->allow_extra_args(false)
      ->check(CLI::IsMember({"redis", "sqlite-full", "sqlite-normal"}))
      ->group(group);
  count("--durable-seeds-tasks", seeds_tasks, "(1) one round trip or commit per task (2000 / 50)");
  count("--durable-limit-tasks", limit_tasks, "(2) raw batches of 1000 (2e5 / 5000)");
  count("--durable-blocking-tasks", blocking_tasks, "(3) schedule() per thread count (4000 / 80)");
  add_count_list_option(
      app, "--durable-blocking-threads",
      [this](std::vector<std::uint64_t> v) { blocking_threads.assign(v.begin(), v.end()); },
      "(3) thread counts (1,8)")
      ->group(group);
  add_count_list_option(
      app, "--durable-in-flight",
      [this](std::vector<std::uint64_t> v) { in_flight = std::move(v); },
      "(4) async_schedule() window (100,1000,10000,100000 / 100,1000)")
      ->group(group);
  count("--durable-async-tasks", async_tasks,
        "(4) tasks per window, at least the window (2e5 / 2000)");
  count("--durable-many-tasks", many_tasks, "(5) schedule_many() of 1000 (1e5 / 2000)");
  count("--durable-removal-tasks", removal_tasks, "(6) tasks due within the window (1e5 / 1000)");
  ms("--durable-removal-window-ms", removal_window, "(6) (10000 / 500)");
  ms("--durable-removal-lead-ms", removal_lead,
     "(6) first due time after scheduling began (5000 / 300)");
  ms("--durable-linger-ms", removal_linger,
     "(6) store counted this long after the last run (1000 / 200)");
  count("--durable-recovery-tasks", recovery_tasks, "(7) stored tasks start() loads (1e6 / 2000)");
  add_count_option(
      app, "--durable-max-seconds",
      [this](std::uint64_t v) { max_seconds = static_cast<double>(v); },
      "most seconds one measurement issues work (60 / 5)")
      ->group(group);
}

// ------------------------------------------------------------ scenario

durable_report run_durable(const durable_config& c, const redis_options* redis) {
  durable_report rep;
  const std::string dir = make_temp_dir(c.sqlite_dir);
  for (const std::string& name : c.backends) {
    durable_backend_result res;
    res.backend = name;
    if (name == "redis" && redis == nullptr) {
      res.notes.push_back("skipped: no Redis (--redis or $DELAYQ_BENCH_REDIS)");
      rep.backends.push_back(res);
      continue;
    }
    const backend b = name == "redis"
                          ? redis_backend(*redis)
                          : sqlite_backend(dir, name == "sqlite-full"
                                                    ? sqlite_options::synchronous_level::full
                                                    : sqlite_options::synchronous_level::normal);
    res.store = b.description;
    std::fprintf(stderr, "== durable %s (%s)\n", name.c_str(), b.description.c_str());
    auto show = [&](const durable_rate& r) {
      std::fprintf(stderr, "  %-70s %s\n", r.what.c_str(), rate_cell(r).c_str());
    };
    b.clear();
    res.seeds = b.one_at_a_time(c.seeds_tasks, c.max_seconds);
    show(res.seeds);
    b.clear();
    res.limit = b.limit(c.limit_tasks, c.max_seconds);
    show(res.limit);
    b.clear();
    for (int threads : c.blocking_threads) {
      res.blocking.emplace_back(threads, run_blocking(c, b, threads));
      show(res.blocking.back().second);
    }
    for (std::uint64_t n : c.in_flight) {
      res.async_rates.emplace_back(n, run_async(c, b, n));
      show(res.async_rates.back().second);
    }
    res.many = run_many(c, b);
    show(res.many);
    res.removals = run_removals(c, b);
    std::fprintf(stderr,
                 "  removals: %llu/%llu ran, p99 lateness %.1f ms, %llu left after %lld ms\n",
                 static_cast<unsigned long long>(res.removals->ran),
                 static_cast<unsigned long long>(res.removals->tasks),
                 static_cast<double>(res.removals->lateness_p99_us) / 1000.0,
                 static_cast<unsigned long long>(res.removals->held_after_linger),
                 static_cast<long long>(c.removal_linger.count()));
    res.recovery = run_recovery(c, b);
    std::fprintf(stderr,
                 "  recovery: %llu tasks in %.2f s (list() alone %.2f s), peak RSS +%.0f MiB\n",
                 static_cast<unsigned long long>(res.recovery->loaded), res.recovery->start_s,
                 res.recovery->list_s, res.recovery->rss_peak_mb - res.recovery->rss_before_mb);
    if (res.recovery->loaded != res.recovery->tasks)
      res.notes.push_back("recovery loaded " + std::to_string(res.recovery->loaded) + " of " +
                          std::to_string(res.recovery->tasks));
    rep.backends.push_back(std::move(res));
  }
  std::filesystem::remove_all(dir);
  return rep;
}

std::string durable_tables(const durable_config& c, const durable_report& r) {
  std::ostringstream o;
  o << "\n### Durable path: acknowledged schedules per second, side by side\n\n"
    << "Tasks of (3)-(5) are due in an hour (nothing fires while measured); each row starts "
       "with an empty store. Engine tick "
    << c.tick.count() << " ms, " << c.workers << " workers.\n\n| measurement |";
  for (const auto& b : r.backends) o << " " << b.backend << " |";
  o << "\n|---|";
  for (std::size_t i = 0; i < r.backends.size(); ++i) o << "---:|";
  o << "\n";
  auto row = [&](const std::string& label,
                 const std::function<std::string(const durable_backend_result&)>& cell) {
    o << "| " << label << " |";
    for (const auto& b : r.backends) o << " " << (b.store.empty() ? "skipped" : cell(b)) << " |";
    o << "\n";
  };
  row("(1) one at a time: seeds' producer (Redis) / one commit per task (SQLite)",
      [](const auto& b) { return rate_cell(b.seeds); });
  row("(2) limit: pipelined MULTI batches of 1000 (Redis) / transactions of 1000 (SQLite)",
      [](const auto& b) { return rate_cell(b.limit); });
  for (int t : c.blocking_threads)
    row("(3) schedule(), " + std::to_string(t) + " thread" + (t == 1 ? "" : "s"),
        [t](const auto& b) {
          for (const auto& [n, rate] : b.blocking)
            if (n == t) return rate_cell(rate);
          return std::string("n/a");
        });
  for (std::uint64_t n : c.in_flight)
    row("(4) async_schedule(), " + std::to_string(n) + " in flight", [n](const auto& b) {
      for (const auto& [k, rate] : b.async_rates)
        if (k == n) return rate_cell(rate);
      return std::string("n/a");
    });
  row("(5) schedule_many() of 1000", [](const auto& b) { return rate_cell(b.many); });
  row("(6) removals: ran / due within " + fmt(c.removal_window.count() / 1000.0, 1) + " s",
      [](const auto& b) {
        return b.removals
                   ? std::to_string(b.removals->ran) + " / " + std::to_string(b.removals->tasks)
                   : std::string("n/a");
      });
  row("(6) removals: stored " + std::to_string(c.removal_linger.count()) +
          " ms after the last ran (target 0)",
      [](const auto& b) {
        if (!b.removals) return std::string("n/a");
        std::string s = std::to_string(b.removals->held_after_linger);
        if (b.removals->drained_after_s)
          s += " (empty after " + fmt(*b.removals->drained_after_s, 2) + " s)";
        return s;
      });
  row("(6) removals: lateness p50 / p99 / max, ms", [](const auto& b) {
    if (!b.removals) return std::string("n/a");
    return fmt(static_cast<double>(b.removals->lateness_p50_us) / 1000.0, 1) + " / " +
           fmt(static_cast<double>(b.removals->lateness_p99_us) / 1000.0, 1) + " / " +
           fmt(static_cast<double>(b.removals->lateness_max_us) / 1000.0, 1);
  });
  row("(6) removals: scheduling them took, s",
      [](const auto& b) { return b.removals ? fmt(b.removals->schedule_s, 2) : "n/a"; });
  row("(7) recovery: start() of " + std::to_string(c.recovery_tasks) + " stored tasks, s",
      [](const auto& b) {
        return b.recovery ? fmt(b.recovery->start_s, 2) + " (" +
                                fmt_count(b.recovery->start_s > 0
                                              ? static_cast<double>(b.recovery->loaded) /
                                                    b.recovery->start_s
                                              : 0) +
                                "/s)"
                          : std::string("n/a");
      });
  row("(7) recovery: the store's list() alone, s",
      [](const auto& b) { return b.recovery ? fmt(b.recovery->list_s, 2) : std::string("n/a"); });
  row("(7) recovery: RSS before / peak / after start(), MiB", [](const auto& b) {
    if (!b.recovery) return std::string("n/a");
    return fmt(b.recovery->rss_before_mb, 0) + " / " + fmt(b.recovery->rss_peak_mb, 0) + " / " +
           fmt(b.recovery->rss_after_mb, 0);
  });

  o << "\n### Durable path: the issue's targets (ratios of this run)\n\n"
    << "| backend: ratio | value | target | met |\n|---|---:|---:|---|\n";
  for (const auto& b : r.backends) {
    if (b.store.empty()) continue;
    const double async = best_async(b);
    const std::string p = b.backend + ": ";
    if (b.limit.per_s() > 0) {
      o << ratio_row(p + "async_schedule (best window) / limit", async / b.limit.per_s(), 0.25,
                     true);
      o << ratio_row(p + "schedule_many of 1000 / limit", b.many.per_s() / b.limit.per_s(), 0.5,
                     true);
    }
    if (b.seeds.per_s() > 0) {
      o << ratio_row(p + "async_schedule (best window) / one at a time", async / b.seeds.per_s(),
                     10, false);
      o << ratio_row(p + "schedule() 1 thread / one at a time", blocking_at(b, 1) / b.seeds.per_s(),
                     1, false);
    }
    if (blocking_at(b, 1) > 0 && blocking_at(b, 8) > 0)
      o << ratio_row(p + "schedule() 8 threads / 1 thread", blocking_at(b, 8) / blocking_at(b, 1),
                     4, false);
    if (b.backend == "sqlite-normal")
      o << "| " << p << "async_schedule (best window), tasks/s | " << fmt_count(async)
        << "/s | >= 200 k/s | " << (async >= 200'000 ? "yes" : "**no**") << " |\n";
    if (b.removals)
      o << "| " << p << "stored after the linger | " << b.removals->held_after_linger << " | 0 | "
        << (b.removals->held_after_linger == 0 ? "yes" : "**no**") << " |\n";
    if (b.recovery && b.recovery->tasks > 0) {
      // The target is for 1e6 tasks; smaller runs are scaled to it.
      const double per_million = b.recovery->start_s * 1e6 / static_cast<double>(b.recovery->tasks);
      o << "| " << p << "recovery, s per 1e6 stored tasks (" << b.recovery->tasks << " measured) | "
        << fmt(per_million, 2) << " | <= 2 | " << (per_million <= 2.0 ? "yes" : "**no**") << " |\n";
    }
  }
  for (const auto& b : r.backends)
    for (const auto& n : b.notes) o << "\nNote (" << b.backend << "): " << n << "\n";
  if (c.quick) o << "\n(--quick: tiny sizes; the figures show only that it runs.)\n";
  return o.str();
}

nlohmann::ordered_json durable_json(const durable_config& c, const durable_report& r) {
  using json = nlohmann::ordered_json;
  json backends = json::array();
  for (const auto& b : r.backends) {
    json j = {{"backend", b.backend}, {"store", b.store}};
    if (b.store.empty()) {
      j["skipped"] = true;
      backends.push_back(std::move(j));
      continue;
    }
    j["one_at_a_time"] = json_rate(b.seeds);
    j["limit"] = json_rate(b.limit);
    j["blocking"] = json::array();
    for (const auto& [threads, rate] : b.blocking)
      j["blocking"].push_back({{"threads", threads}, {"rate", json_rate(rate)}});
    j["async"] = json::array();
    for (const auto& [in_flight, rate] : b.async_rates)
      j["async"].push_back({{"in_flight", in_flight}, {"rate", json_rate(rate)}});
    j["schedule_many"] = json_rate(b.many);
    if (b.removals) {
      const auto& m = *b.removals;
      j["removals"] = {{"tasks", m.tasks},
                       {"ran", m.ran},
                       {"schedule_s", fixed(m.schedule_s, 4)},
                       {"lateness_p50_us", m.lateness_p50_us},
                       {"lateness_p99_us", m.lateness_p99_us},
                       {"lateness_max_us", m.lateness_max_us},
                       {"linger_ms", c.removal_linger.count()},
                       {"held_after_linger", m.held_after_linger},
                       {"drained_after_s",
                        m.drained_after_s ? json(fixed(*m.drained_after_s, 4)) : json(nullptr)}};
    }
    if (b.recovery) {
      const auto& v = *b.recovery;
      j["recovery"] = {{"tasks", v.tasks},
                       {"loaded", v.loaded},
                       {"fill_s", fixed(v.fill_s, 3)},
                       {"list_s", fixed(v.list_s, 4)},
                       {"start_s", fixed(v.start_s, 4)},
                       {"rss_before_mb", fixed(v.rss_before_mb, 1)},
                       {"rss_peak_mb", fixed(v.rss_peak_mb, 1)},
                       {"rss_after_mb", fixed(v.rss_after_mb, 1)}};
    }
    backends.push_back(std::move(j));
  }
  return {{"quick", c.quick}, {"backends", std::move(backends)}};
}

std::string durable_plot_data(const durable_report& r) {
  std::ostringstream o;
  std::vector<const durable_backend_result*> shown;
  for (const auto& b : r.backends)
    if (!b.async_rates.empty()) shown.push_back(&b);
  o << "in_flight";
  for (const auto* b : shown) o << " " << b->backend;
  o << "\n";
  if (shown.empty()) return o.str();
  for (std::size_t i = 0; i < shown.front()->async_rates.size(); ++i) {
    o << shown.front()->async_rates[i].first;
    for (const auto* b : shown)
      o << " " << (i < b->async_rates.size() ? fmt(b->async_rates[i].second.per_s(), 1) : "NaN");
    o << "\n";
  }
  o << "# limit";
  for (const auto* b : shown) o << " " << fmt(b->limit.per_s(), 1);
  o << "\n";
  return o.str();
}

}  // namespace delayq::bench
