// durable_bench.hpp - the `durable` scenario of delayq-bench (issue 11): the
// engine's durable write path at the store's speed, side by side for one
// redis-server (appendfsync always) and SQLite with synchronous FULL and
// NORMAL, each row against that store's own baselines measured in the same
// run. See durable_bench.cpp for what each figure is, and docs/benchmarks.md.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "delayq/redis_store.hpp"

namespace CLI {
class App;
}

namespace delayq::bench {

/// Sizes and switches of the durable scenario (flags --durable-*).
struct durable_config {
  bool quick = false;
  /// Which backends: some of redis, sqlite-full, sqlite-normal.
  std::vector<std::string> backends{"redis", "sqlite-full", "sqlite-normal"};
  std::uint64_t seeds_tasks = 2000;     ///< (1) one round trip per task
  std::uint64_t limit_tasks = 200'000;  ///< (2) raw batches of 1000
  std::uint64_t blocking_tasks = 4000;  ///< (3) per thread count, all threads together
  std::vector<int> blocking_threads{1, 8};
  std::vector<std::uint64_t> in_flight{100, 1000, 10'000, 100'000};  ///< (4)
  std::uint64_t async_tasks = 200'000;    ///< (4) per row; at least the row's in-flight count
  std::uint64_t many_tasks = 100'000;     ///< (5) in schedule_many calls of 1000
  std::uint64_t removal_tasks = 100'000;  ///< (6)
  std::chrono::milliseconds removal_window{10'000};  ///< (6) due within this
  std::chrono::milliseconds removal_lead{5'000};     ///< (6) first due time after scheduling began
  std::chrono::milliseconds removal_linger{
      1'000};                                ///< (6) store checked this long after the last run
  std::uint64_t recovery_tasks = 1'000'000;  ///< (7)
  /// Most seconds one measurement may issue work for; a row cut short says
  /// so and reports the rate of what completed.
  double max_seconds = 60;
  std::chrono::milliseconds tick{10};
  std::size_t workers = 2;
  std::string sqlite_dir;  ///< where the SQLite files go; empty: a temp dir

  /// Adds the --durable-* flags to `app`, which sets this config's fields.
  /// `app` must not outlive this config.
  void add_flags(CLI::App& app);
  /// Applies --quick defaults to every size `app` was not given.
  void apply_quick(const CLI::App& app);
};

/// One rate: tasks acknowledged per second, and whether the measurement was
/// cut at max_seconds.
struct durable_rate {
  std::string what;
  std::uint64_t tasks = 0;
  std::uint64_t failed = 0;
  double seconds = 0;
  bool capped = false;
  double per_s() const { return seconds > 0 ? static_cast<double>(tasks) / seconds : 0; }
};

/// (6): every task due within the window ran, and the store emptied.
struct durable_removals {
  std::uint64_t tasks = 0;
  std::uint64_t ran = 0;
  double schedule_s = 0;  ///< scheduling all of them (schedule_many of 1000)
  std::int64_t lateness_p50_us = 0, lateness_p99_us = 0, lateness_max_us = 0;
  std::uint64_t held_after_linger = 0;    ///< stored tasks removal_linger after the last ran
  std::optional<double> drained_after_s;  ///< last run -> store empty (nullopt: not within 10 s)
};

/// (7): start() over a filled store.
struct durable_recovery {
  std::uint64_t tasks = 0;
  std::uint64_t loaded = 0;
  double fill_s = 0;   ///< untimed: filling the store
  double list_s = 0;   ///< the store's list() alone (decoding, no engine), for comparison
  double start_s = 0;  ///< start() until it returned
  double rss_before_mb = 0, rss_peak_mb = 0, rss_after_mb = 0;
};

/// Everything measured for one backend.
struct durable_backend_result {
  std::string backend;  ///< redis, sqlite-full, sqlite-normal
  std::string store;    ///< a description of the server or file settings
  durable_rate seeds;   ///< (1)
  durable_rate limit;   ///< (2)
  std::vector<std::pair<int, durable_rate>> blocking;               ///< (3) threads -> rate
  std::vector<std::pair<std::uint64_t, durable_rate>> async_rates;  ///< (4) in flight -> rate
  durable_rate many;                                                ///< (5)
  std::optional<durable_removals> removals;                         ///< (6)
  std::optional<durable_recovery> recovery;                         ///< (7)
  std::vector<std::string> notes;
};

struct durable_report {
  std::vector<durable_backend_result> backends;
};

/// Runs the scenario. `redis` null skips the redis backend (noted).
durable_report run_durable(const durable_config& c, const redis_options* redis);

/// The Markdown tables (rates, then ratios against the targets).
std::string durable_tables(const durable_config& c, const durable_report& r);

/// The JSON value of the "durable" key.
nlohmann::ordered_json durable_json(const durable_config& c, const durable_report& r);

/// gnuplot input: "in_flight <backend>..." lines of async_schedule() rates
/// (tasks/s), then the limit of each backend as a comment line. Written to
/// <dir>/durable-async.dat by --plot-data; bench/report/e2e-plots.gp draws it.
std::string durable_plot_data(const durable_report& r);

}  // namespace delayq::bench
