// delayq-bench - the end-to-end benchmark: delayq as a user runs it, against
// the Redis sorted-set queue the seed documents describe, on one real
// redis-server. See docs/benchmarks.md for method and results;
// scripts/bench-e2e.sh runs it full size, scripts/bench-smoke.sh with --quick.
//
// Scenarios (all by default):
//   memory    delayq with a memory_store: N tasks (1M) with delays spread over
//             10 s, 10 ms tick, no-op executors. Schedule throughput, lateness,
//             CPU.
//   durable   the durable write path at the store's speed (issue 11), side by
//             side for Redis (appendfsync always) and SQLite FULL and NORMAL,
//             against each store's one-at-a-time and pipelined baselines:
//             blocking, async and batched schedules, removals, recovery.
//             In durable_bench.cpp.
//   lateness  side by side on one redis-server: delayq + redis_store, delayq +
//             sqlite_store, the seeds' queue polling every 1000 ms and every
//             10 ms; each from 1 and from 8 scheduling threads. Schedule
//             throughput, lateness, CPU of this process and of redis-server,
//             Redis commands per task.
//   recovery  start() -> wheel rebuilt with N stored tasks, per backend.
//   idle      wake-ups and CPU per minute: an empty engine, an engine holding
//             N tasks due in an hour, and the seeds' poller on an empty queue.
//
// Lateness is execution start minus due time (system_clock), recorded by the
// executor into a buffer per thread. CPU: getrusage() of this process and
// /proc/<pid>/stat of redis-server (its pid from INFO server). Redis commands:
// total_commands_processed deltas (INFO stats) minus this program's own INFO
// calls; commands run by a Lua script count one each, as Redis counts them.

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_cli.hpp"
#include "delayq/engine.hpp"
#include "delayq/log.hpp"
#include "delayq/memory_store.hpp"
#include "delayq/redis_store.hpp"
#include "delayq/sqlite_store.hpp"
#include "durable_bench.hpp"
#include "io_thread.hpp"
#include "measure.hpp"
#include "redis_client.hpp"
#include "seeds_queue.hpp"

namespace delayq::bench {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;
using std::chrono::system_clock;

// ------------------------------------------------------------ configuration

struct config {
  bool quick = false;
  std::vector<std::string> scenarios;  // empty: all
  std::string redis_uri;
  std::string out_json;
  std::string out_tables;
  std::string plot_dir;
  std::string sqlite_dir;
  std::uint64_t memory_tasks = 1'000'000;
  milliseconds memory_spread{10'000};
  std::uint64_t durable_tasks = 10'000;
  milliseconds durable_lead{
      500};  // shortest delay: the write is acknowledged before the task is due
  milliseconds durable_spread{5'000};
  std::vector<int> threads{1, 8};
  std::vector<std::string> designs;  // lateness: empty means all four
  std::uint64_t recovery_tasks = 1'000'000;
  std::uint64_t idle_tasks = 1'000'000;
  double idle_seconds = 30;
  milliseconds tick{10};
  std::size_t workers = 2;
  durable_config durable;  // the durable scenario's own sizes (--durable-*)

  bool wants_design(const std::string& d) const {
    return designs.empty() || std::find(designs.begin(), designs.end(), d) != designs.end();
  }
  bool wants(const std::string& s) const {
    return scenarios.empty() || std::find(scenarios.begin(), scenarios.end(), s) != scenarios.end();
  }
};

config parse_args(int argc, char** argv) {
  config c;
  CLI::App app(
      "End-to-end benchmark of delayq against the seeds' Redis sorted-set queue.\n"
      "Long runs show a progress line on stderr (plain lines when it is not a\n"
      "terminal). The tables go to stdout at the end.",
      "delayq-bench");
  app.add_option("scenario", c.scenarios,
                 "memory, durable, lateness, recovery, idle (default: all five)")
      ->check(CLI::IsMember({"memory", "durable", "lateness", "recovery", "idle"}));
  app.add_flag("--quick", c.quick, "tiny sizes, a few seconds per scenario (the CI smoke run)");
  app.add_option("--redis", c.redis_uri,
                 "the redis-server to use (redis://HOST:PORT[/DB]); default\n"
                 "$DELAYQ_BENCH_REDIS, else $DELAYQ_TEST_REDIS. lateness needs it,\n"
                 "durable and recovery use it; scripts/with-redis.sh starts a private one")
      ->type_name("URI");
  app.add_option("--out", c.out_json, "write every figure and the lateness distributions")
      ->type_name("FILE.json");
  app.add_option("--tables", c.out_tables, "write the result tables (Markdown; also printed)")
      ->type_name("FILE.md");
  app.add_option("--plot-data", c.plot_dir, "write gnuplot inputs (lateness CDFs, throughput)")
      ->type_name("DIR");
  app.add_option("--sqlite-dir", c.sqlite_dir,
                 "where the SQLite files go (default: a fresh temp dir)")
      ->type_name("DIR");
  add_count_option(
      app, "--tasks", [&c](std::uint64_t v) { c.memory_tasks = v; },
      "memory: tasks (default 1e6; quick 2000)");
  add_count_option(
      app, "--spread-ms", [&c](std::uint64_t v) { c.memory_spread = milliseconds(v); },
      "memory: delays spread over [0, MS] (default 10000; quick 500)");
  add_count_option(
      app, "--durable-tasks", [&c](std::uint64_t v) { c.durable_tasks = v; },
      "lateness: tasks per design and thread count (default 1e4; quick 200)");
  add_count_list_option(
      app, "--threads",
      [&c](std::vector<std::uint64_t> v) { c.threads.assign(v.begin(), v.end()); },
      "lateness: scheduling thread counts (default 1,8)");
  app.add_option("--designs", c.designs,
                 "lateness: some of delayq-redis, delayq-sqlite, seeds-P1000,\n"
                 "seeds-P10 (default all)")
      ->delimiter(',')
      ->allow_extra_args(false)
      ->check(CLI::IsMember({"delayq-redis", "delayq-sqlite", "seeds-P1000", "seeds-P10"}));
  add_count_option(
      app, "--durable-lead-ms", [&c](std::uint64_t v) { c.durable_lead = milliseconds(v); },
      "lateness: shortest delay (default 500; quick 100)");
  add_count_option(
      app, "--durable-spread-ms", [&c](std::uint64_t v) { c.durable_spread = milliseconds(v); },
      "lateness: delays in [lead, lead + MS] (default 5000; quick 400)");
  add_count_option(
      app, "--recovery-tasks", [&c](std::uint64_t v) { c.recovery_tasks = v; },
      "recovery: stored tasks (default 1e6; quick 2000)");
  add_count_option(
      app, "--idle-tasks", [&c](std::uint64_t v) { c.idle_tasks = v; },
      "idle: tasks due in an hour (default 1e6; quick 2000)");
  add_count_option(
      app, "--idle-seconds", [&c](std::uint64_t v) { c.idle_seconds = static_cast<double>(v); },
      "idle: length of each measuring window (default 30; quick 1)");
  add_count_option(
      app, "--tick-ms", [&c](std::uint64_t v) { c.tick = milliseconds(v); },
      "the engine's tick (default 10)");
  c.durable.add_flags(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e) == 0 ? 0 : 2);
  }
  const auto unset = [&](const char* flag) { return app.count(flag) == 0; };
  if (c.quick) {  // explicit sizes still win
    if (unset("--tasks")) c.memory_tasks = 2000;
    if (unset("--spread-ms")) c.memory_spread = milliseconds(500);
    if (unset("--durable-tasks")) c.durable_tasks = 200;
    if (unset("--durable-lead-ms")) c.durable_lead = milliseconds(100);
    if (unset("--durable-spread-ms")) c.durable_spread = milliseconds(400);
    if (unset("--recovery-tasks")) c.recovery_tasks = 2000;
    if (unset("--idle-tasks")) c.idle_tasks = 2000;
    if (unset("--idle-seconds")) c.idle_seconds = 1;
    c.durable.apply_quick(app);
  }
  c.durable.tick = c.tick;
  c.durable.workers = c.workers;
  c.durable.sqlite_dir = c.sqlite_dir;
  if (c.redis_uri.empty()) {
    for (const char* env : {"DELAYQ_BENCH_REDIS", "DELAYQ_TEST_REDIS"}) {
      const char* v = std::getenv(env);
      if (v != nullptr && *v != '\0') {
        c.redis_uri = v;
        break;
      }
    }
  }
  return c;
}

// ------------------------------------------------------------ redis-server

// What the benchmark reads from the server before and after a run.
struct server_snapshot {
  std::uint64_t commands = 0;
  std::map<std::string, std::uint64_t> by_command;
  std::optional<double> cpu_s;
};

// A connection of the benchmark's own, apart from the code under test.
class server_monitor {
 public:
  explicit server_monitor(const redis_options& o) : conn_(o) {
    const auto info = parse_info(text(conn_.command({"INFO", "server"})));
    if (auto it = info.find("redis_version"); it != info.end()) version_ = it->second;
    if (auto it = info.find("process_id"); it != info.end()) {
      const long pid = std::strtol(it->second.c_str(), nullptr, 10);
      // Only a redis-server on this host can be measured through /proc: a pid
      // from another host might name some unrelated local process.
      std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
      std::string name;
      if (comm && std::getline(comm, name) && name.rfind("redis-server", 0) == 0) pid_ = pid;
    }
    for (const char* key : {"appendonly", "appendfsync", "save"}) {
      const redis_reply r = conn_.command({"CONFIG", "GET", key});
      if (r->elements == 2) config_[key] = text(r->element[1]);
    }
  }

  server_snapshot snapshot() {
    server_snapshot s;
    s.commands = std::strtoull(
        parse_info(text(conn_.command({"INFO", "stats"})))["total_commands_processed"].c_str(),
        nullptr, 10);
    s.by_command = parse_commandstats(text(conn_.command({"INFO", "commandstats"})));
    s.cpu_s = pid_ ? pid_cpu_seconds(*pid_) : std::nullopt;
    return s;
  }

  // Commands others sent between two snapshots: the delta minus ours (the
  // later snapshot's INFO calls are counted only after they ran).
  std::uint64_t commands_between(const server_snapshot& a, const server_snapshot& b,
                                 std::uint64_t ours_between) const {
    const std::uint64_t delta = b.commands - a.commands;
    return delta > ours_between ? delta - ours_between : 0;
  }
  std::uint64_t sent() const noexcept { return conn_.sent(); }
  redis_client& conn() noexcept { return conn_; }
  const std::string& version() const noexcept { return version_; }
  const std::map<std::string, std::string>& server_config() const noexcept { return config_; }
  std::optional<long> pid() const noexcept { return pid_; }

 private:
  static std::string text(const redisReply* r) {
    return r->str != nullptr ? std::string(r->str, r->len) : std::string();
  }
  static std::string text(const redis_reply& r) { return text(r.get()); }
  redis_client conn_;
  std::string version_;
  std::map<std::string, std::string> config_;
  std::optional<long> pid_;
};

// Server-side cost of one measured stretch.
struct server_cost {
  bool measured = false;
  std::uint64_t commands = 0;
  std::map<std::string, std::uint64_t> by_command;  // without the monitor's INFO
  std::optional<double> cpu_s;
};

class server_window {
 public:
  explicit server_window(server_monitor* m) : m_(m) {
    if (m_ == nullptr) return;
    sent0_ = m_->sent();
    before_ = m_->snapshot();
    sent1_ = m_->sent();
  }
  server_cost close() {
    server_cost c;
    if (m_ == nullptr) return c;
    const std::uint64_t sent_before_close = m_->sent();
    const server_snapshot after = m_->snapshot();
    // Ours in between: the opening snapshot's calls (counted after they ran)
    // and anything sent on the monitor since.
    const std::uint64_t ours = (sent1_ - sent0_) + (sent_before_close - sent1_);
    c.measured = true;
    c.commands = m_->commands_between(before_, after, ours);
    for (const auto& [cmd, calls] : after.by_command) {
      if (cmd == "info") continue;
      auto it = before_.by_command.find(cmd);
      const std::uint64_t d = calls - (it == before_.by_command.end() ? 0 : it->second);
      if (d > 0) c.by_command[cmd] = d;
    }
    if (after.cpu_s && before_.cpu_s) c.cpu_s = *after.cpu_s - *before_.cpu_s;
    return c;
  }

 private:
  server_monitor* m_;
  std::uint64_t sent0_ = 0, sent1_ = 0;
  server_snapshot before_;
};

// ------------------------------------------------------------ helpers

// Runs `body(thread_index, first, count)` on `threads` threads that share
// `total` items; shows progress through `counter` (the body adds to it) and
// returns the wall seconds until every thread finished. The first exception
// of any thread is rethrown here.
double run_threads(int threads, std::uint64_t total, completion& counter, const std::string& label,
                   const std::function<void(int, std::uint64_t, std::uint64_t)>& body) {
  std::vector<std::thread> pool;
  std::mutex error_mutex;
  std::exception_ptr error;
  progress bar(label, total);
  const auto t0 = steady_clock::now();
  std::uint64_t first = 0;
  for (int t = 0; t < threads; ++t) {
    const std::uint64_t count =
        total / static_cast<std::uint64_t>(threads) +
        (static_cast<std::uint64_t>(t) < total % static_cast<std::uint64_t>(threads) ? 1 : 0);
    pool.emplace_back([&, t, first, count] {
      try {
        body(t, first, count);
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!error) error = std::current_exception();
        counter.add(total);  // end the wait below at once
      }
    });
    first += count;
  }
  counter.wait(std::chrono::hours(1), [&](std::uint64_t d) { bar.show(d); });
  for (auto& th : pool) th.join();
  const double secs = seconds_since(t0);
  bar.finish(std::min(counter.done(), total));
  if (error) std::rethrow_exception(error);
  return secs;
}

void wait_fired(completion& fired, const std::string& label, std::chrono::seconds limit) {
  progress bar(label, fired.target());
  if (!fired.wait(limit, [&](std::uint64_t d) { bar.show(d); }))
    throw std::runtime_error(label + ": only " + std::to_string(fired.done()) + " of " +
                             std::to_string(fired.target()) + " tasks ran within " +
                             std::to_string(limit.count()) + " s");
  bar.finish(fired.done());
}

std::string temp_dir(const config& c) {
  std::string base = c.sqlite_dir;
  if (base.empty()) {
    const char* t = std::getenv("TMPDIR");
    base = (t != nullptr && *t != '\0') ? t : "/tmp";
  }
  std::filesystem::create_directories(base);
  std::string tmpl = base + "/delayq-bench.XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr)
    throw std::runtime_error("cannot create a temp dir under " + base);
  return tmpl;
}

redis_options with_prefix(redis_options o, const std::string& prefix) {
  o.prefix = prefix;
  return o;
}

// Every key a redis_store with this prefix may have written.
void clear_delayq_keys(redis_client& conn, const std::string& prefix) {
  std::vector<std::string> keys;
  for (const char* k : {"tasks", "due", "meta", "quarantine", "quarantine:reason", "dead",
                        "dead:by_time", "dead:quarantine", "dead:quarantine:reason"})
    keys.push_back("{" + prefix + "}:" + k);
  std::vector<std::string_view> cmd{"UNLINK"};
  for (const auto& k : keys) cmd.emplace_back(k);
  conn.command(cmd);
}

std::string fmt_ms(std::int64_t us) { return fmt(static_cast<double>(us) / 1000.0, 1); }

// ------------------------------------------------------------ results

struct run_result {
  std::string design;
  std::string store;
  int threads = 1;
  std::uint64_t tasks = 0;
  double schedule_s = 0;
  double wall_s = 0;   // from before the engine or queue existed to after it was gone
  double cpu_s = 0;    // this process over wall_s
  server_cost server;  // redis-server over wall_s
  distribution lateness;
  // delayq only: the engine's own counters.
  std::optional<engine_stats> engine;
  std::uint64_t polls = 0;  // seeds only
  double schedule_rate() const {
    return schedule_s > 0 ? static_cast<double>(tasks) / schedule_s : 0;
  }
};

struct recovery_result {
  std::string backend;
  std::uint64_t tasks = 0;
  double fill_s = 0;
  double start_s = 0;
  double cpu_s = 0;
  std::optional<double> server_cpu_s;
  std::uint64_t loaded = 0;
  std::size_t pending = 0;
};

struct idle_result {
  std::string what;
  std::uint64_t pending = 0;
  double window_s = 0;
  std::uint64_t wakeups = 0;  // engine timer firings, or seeds polls
  double cpu_s = 0;
  server_cost server;
  double per_minute(double v) const { return window_s > 0 ? v * 60.0 / window_s : 0; }
};

struct report {
  std::optional<run_result> memory;
  std::vector<run_result> durable;  // the lateness scenario's rows
  std::optional<durable_report> durable_path;
  std::vector<recovery_result> recovery;
  std::vector<idle_result> idle;
  std::vector<std::string> skipped;
};

// ------------------------------------------------------------ delayq runs

engine_options engine_opts(const config& c) {
  engine_options o;
  o.tick = c.tick;
  o.workers = c.workers;
  return o;
}

// One delayq run: a fresh engine on `store`, `tasks` scheduled from `threads`
// threads with delays uniform in [lead, lead + spread], then every task run.
run_result run_delayq(const config& c, const std::string& design, const std::string& store_name,
                      const std::function<std::unique_ptr<task_store>()>& make_store, int threads,
                      std::uint64_t tasks, milliseconds lead, milliseconds spread,
                      server_monitor* monitor) {
  run_result r;
  r.design = design;
  r.store = store_name;
  r.threads = threads;
  r.tasks = tasks;
  lateness_recorder late;
  completion fired(tasks);
  executor_factory executors;
  executors.add("noop", [&](const task& t) {
    late.record(system_clock::now() - t.due);
    fired.add();
  });

  server_window server(monitor);
  const double cpu0 = process_cpu_seconds();
  const auto t0 = steady_clock::now();
  {
    io_thread io;
    auto eng = std::make_unique<engine>(io.io(), executors, make_store(), engine_opts(c));
    eng->start();
    completion scheduled(tasks);
    const char prefix = static_cast<char>('a' + (threads % 26));
    r.schedule_s = run_threads(
        threads, tasks, scheduled, design + " t" + std::to_string(threads) + " schedule",
        [&](int t, std::uint64_t first, std::uint64_t count) {
          rng random(0x5eed + static_cast<std::uint64_t>(t));
          schedule_options so;
          for (std::uint64_t i = first; i < first + count; ++i) {
            so.id = make_id(prefix, i);
            const milliseconds delay(lead.count() +
                                     static_cast<std::int64_t>(random.between(
                                         0, static_cast<std::uint64_t>(spread.count()))));
            eng->schedule("noop", std::string(), delay, so);
            scheduled.add();
          }
        });
    wait_fired(fired, design + " t" + std::to_string(threads) + " run", std::chrono::seconds(600));
    r.engine = eng->stats();
    // Destroying the engine joins its workers, so the removals that follow
    // each success have reached the store before the counters are read.
    eng.reset();
  }
  r.wall_s = seconds_since(t0);
  r.cpu_s = process_cpu_seconds() - cpu0;
  r.server = server.close();
  r.lateness = summarize(late.take());
  return r;
}

// The seeds' design: producers write hash + sorted set, a poller every P ms.
run_result run_seeds(const config& c, const redis_options& server_opts, milliseconds period,
                     int threads, std::uint64_t tasks, server_monitor& monitor) {
  run_result r;
  r.design = "seeds-P" + std::to_string(period.count());
  r.store = "redis (hash + zset, Lua poller)";
  r.threads = threads;
  r.tasks = tasks;
  lateness_recorder late;
  completion fired(tasks);
  seeds_queue::options so;
  so.prefix = "e2e-seeds";
  so.period = period;
  so.workers = c.workers;
  seeds_queue::clear(monitor.conn(), so);

  server_window server(&monitor);
  const double cpu0 = process_cpu_seconds();
  const auto t0 = steady_clock::now();
  {
    seeds_queue q(
        server_opts, so,
        [&](std::string_view, std::int64_t due_ms) {
          late.record(system_clock::now() - from_epoch_ms(due_ms));
        },
        [&](std::size_t n) { fired.add(n); });
    q.start();
    completion scheduled(tasks);
    const char prefix = static_cast<char>('a' + (threads % 26));
    r.schedule_s = run_threads(
        threads, tasks, scheduled, r.design + " t" + std::to_string(threads) + " schedule",
        [&](int t, std::uint64_t first, std::uint64_t count) {
          seeds_queue::producer producer(server_opts, so);
          rng random(0x5eed + static_cast<std::uint64_t>(t));
          for (std::uint64_t i = first; i < first + count; ++i) {
            const std::string id = make_id(prefix, i);
            const std::int64_t delay =
                c.durable_lead.count() +
                static_cast<std::int64_t>(
                    random.between(0, static_cast<std::uint64_t>(c.durable_spread.count())));
            producer.add(id, "noop", "", to_epoch_ms(system_clock::now()) + delay);
            scheduled.add();
          }
        });
    wait_fired(fired, r.design + " t" + std::to_string(threads) + " run",
               std::chrono::seconds(600));
    r.polls = q.polls();
    q.stop();
  }
  r.wall_s = seconds_since(t0);
  r.cpu_s = process_cpu_seconds() - cpu0;
  r.server = server.close();
  r.lateness = summarize(late.take());
  seeds_queue::clear(monitor.conn(), so);
  return r;
}

// ------------------------------------------------------------ scenarios

void scenario_memory(const config& c, report& rep) {
  std::fprintf(stderr, "== memory: %llu tasks, delays over %lld ms, tick %lld ms\n",
               static_cast<unsigned long long>(c.memory_tasks),
               static_cast<long long>(c.memory_spread.count()),
               static_cast<long long>(c.tick.count()));
  rep.memory = run_delayq(
      c, "delayq-memory", "memory:", [] { return std::make_unique<memory_store>(); }, 1,
      c.memory_tasks, milliseconds(0), c.memory_spread, nullptr);
}

void scenario_lateness(const config& c, report& rep, const redis_options& server,
                       server_monitor& monitor) {
  std::fprintf(stderr, "== lateness: %llu tasks per design and thread count\n",
               static_cast<unsigned long long>(c.durable_tasks));
  const std::string dir = temp_dir(c);
  const std::string redis_prefix = "e2e-delayq";
  for (int threads : c.threads) {
    if (c.wants_design("delayq-redis")) {
      clear_delayq_keys(monitor.conn(), redis_prefix);
      rep.durable.push_back(run_delayq(
          c, "delayq-redis", "redis_store",
          [&] { return std::make_unique<redis_store>(with_prefix(server, redis_prefix)); }, threads,
          c.durable_tasks, c.durable_lead, c.durable_spread, &monitor));
      clear_delayq_keys(monitor.conn(), redis_prefix);
    }
    if (c.wants_design("delayq-sqlite")) {
      const std::string db = dir + "/durable-" + std::to_string(threads) + ".db";
      rep.durable.push_back(run_delayq(
          c, "delayq-sqlite", "sqlite_store (synchronous=full)",
          [&] { return std::make_unique<sqlite_store>(db); }, threads, c.durable_tasks,
          c.durable_lead, c.durable_spread, &monitor));
      remove_sqlite_files(db);
    }
    for (milliseconds period : {milliseconds(1000), milliseconds(10)})
      if (c.wants_design("seeds-P" + std::to_string(period.count())))
        rep.durable.push_back(run_seeds(c, server, period, threads, c.durable_tasks, monitor));
  }
  std::filesystem::remove_all(dir);
}

// Fills a store with `n` tasks due in about an hour, in batches, untimed.
void fill_store(task_store& store, std::uint64_t n, const std::string& label) {
  constexpr std::uint64_t batch = 10'000;
  completion saved(n);
  progress bar(label + " fill", n);
  std::vector<task> tasks;
  const auto base = std::chrono::floor<milliseconds>(system_clock::now() + std::chrono::hours(1));
  for (std::uint64_t i = 0; i < n; i += batch) {
    tasks.clear();
    for (std::uint64_t k = i; k < std::min(n, i + batch); ++k) {
      task t;
      t.id = make_id('r', k);
      t.type = "noop";
      t.due = base + milliseconds(k % 60'000);  // spread over a minute, an hour out
      tasks.push_back(std::move(t));
    }
    store.save(tasks);
    saved.add(tasks.size());
    bar.show(saved.done());
  }
  bar.finish(saved.done());
}

void scenario_recovery(const config& c, report& rep, const redis_options* server,
                       server_monitor* monitor) {
  std::fprintf(stderr, "== recovery: start() with %llu stored tasks\n",
               static_cast<unsigned long long>(c.recovery_tasks));
  const std::string dir = temp_dir(c);
  const std::string redis_prefix = "e2e-recovery";
  const std::string db = dir + "/recovery.db";

  struct backend {
    std::string name;
    std::function<std::unique_ptr<task_store>()> open;
    std::function<void()> clear;
  };
  std::vector<backend> backends;
  std::shared_ptr<memory_store> kept_memory;  // a memory store must outlive its first "open"
  if (server != nullptr)
    backends.push_back(
        {"redis", [&] { return std::make_unique<redis_store>(with_prefix(*server, redis_prefix)); },
         [&] { clear_delayq_keys(monitor->conn(), redis_prefix); }});
  backends.push_back({"sqlite", [&] { return std::make_unique<sqlite_store>(db); },
                      [&] { remove_sqlite_files(db); }});

  for (const backend& b : backends) {
    b.clear();
    recovery_result r;
    r.backend = b.name;
    r.tasks = c.recovery_tasks;
    {
      auto store = b.open();
      const auto f0 = steady_clock::now();
      fill_store(*store, c.recovery_tasks, "recovery " + b.name);
      r.fill_s = seconds_since(f0);
    }
    executor_factory executors;
    executors.add("noop", [](const task&) {});
    {
      io_thread io;
      // The store is opened (connected) before the clock starts: the figure
      // is start() alone, which lists the store into the wheel and returns
      // once every task is armed.
      auto eng = std::make_unique<engine>(io.io(), executors, b.open(), engine_opts(c));
      server_window sw(monitor);
      const double cpu0 = process_cpu_seconds();
      const auto t0 = steady_clock::now();
      eng->start();
      r.start_s = seconds_since(t0);
      r.cpu_s = process_cpu_seconds() - cpu0;
      r.server_cpu_s = sw.close().cpu_s;
      const engine_stats s = eng->stats();
      r.loaded = s.loaded;
      r.pending = s.pending;
      if (r.loaded != c.recovery_tasks || r.pending != c.recovery_tasks)
        throw std::runtime_error("recovery " + b.name + ": start() loaded " +
                                 std::to_string(r.loaded) + " tasks (pending " +
                                 std::to_string(r.pending) + "), expected " +
                                 std::to_string(c.recovery_tasks));
      std::fprintf(stderr, "  recovery %s: %llu tasks rebuilt in %.2f s\n", b.name.c_str(),
                   static_cast<unsigned long long>(r.loaded), r.start_s);
    }
    b.clear();
    rep.recovery.push_back(r);
  }
  std::filesystem::remove_all(dir);
}

// Sleeps through one measuring window, showing progress.
void idle_window(double seconds, const std::string& label) {
  const auto total = static_cast<std::uint64_t>(seconds * 10);
  progress bar(label, total);
  const auto t0 = steady_clock::now();
  const auto end = t0 + std::chrono::duration_cast<steady_clock::duration>(
                            std::chrono::duration<double>(seconds));
  // Waiting is the measurement: nothing should run meanwhile. Sleep in steps
  // only to keep the progress line alive.
  while (steady_clock::now() < end) {
    std::this_thread::sleep_for(std::min<steady_clock::duration>(end - steady_clock::now(),
                                                                 std::chrono::milliseconds(500)));
    bar.show(static_cast<std::uint64_t>(seconds_since(t0) * 10));
  }
  bar.finish(total);
}

void scenario_idle(const config& c, report& rep, const redis_options* server,
                   server_monitor* monitor) {
  std::fprintf(stderr, "== idle: %.0f s windows\n", c.idle_seconds);
  for (const std::uint64_t n : {std::uint64_t{0}, c.idle_tasks}) {
    idle_result r;
    r.what = n == 0 ? "delayq, empty" : "delayq, tasks due in 1 h";
    r.pending = n;
    auto store = std::make_unique<memory_store>();
    if (n > 0) fill_store(*store, n, "idle");
    executor_factory executors;
    executors.add("noop", [](const task&) {});
    io_thread io;
    auto eng = std::make_unique<engine>(io.io(), executors, std::move(store), engine_opts(c));
    eng->start();
    const std::uint64_t w0 = eng->stats().wakeups;
    const double cpu0 = process_cpu_seconds();
    const auto t0 = steady_clock::now();
    idle_window(c.idle_seconds, r.what);
    r.window_s = seconds_since(t0);
    r.cpu_s = process_cpu_seconds() - cpu0;
    r.wakeups = eng->stats().wakeups - w0;
    eng.reset();
    rep.idle.push_back(r);
  }
  if (server == nullptr) return;
  for (milliseconds period : {milliseconds(1000), milliseconds(10)}) {
    idle_result r;
    r.what = "seeds-P" + std::to_string(period.count()) + ", empty";
    seeds_queue::options so;
    so.prefix = "e2e-seeds-idle";
    so.period = period;
    so.workers = c.workers;
    seeds_queue::clear(monitor->conn(), so);
    seeds_queue q(
        *server, so, [](std::string_view, std::int64_t) {}, [](std::size_t) {});
    q.start();
    const std::uint64_t p0 = q.polls();
    server_window sw(monitor);
    const double cpu0 = process_cpu_seconds();
    const auto t0 = steady_clock::now();
    idle_window(c.idle_seconds, r.what);
    r.window_s = seconds_since(t0);
    r.cpu_s = process_cpu_seconds() - cpu0;
    r.server = sw.close();
    r.wakeups = q.polls() - p0;
    q.stop();
    rep.idle.push_back(r);
  }
}

// ------------------------------------------------------------ output

using json = nlohmann::ordered_json;

// Six significant digits: the rest is noise. NaN becomes null.
json json_num(double v) {
  if (!(v == v)) return nullptr;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return std::strtod(buf, nullptr);
}
json json_opt(const std::optional<double>& v) { return v ? json_num(*v) : json(nullptr); }

json json_distribution(const distribution& d) {
  return {{"count", d.count},
          {"mean_us", json_num(d.mean_us)},
          {"min_us", d.min_us},
          {"p50_us", d.p50_us},
          {"p90_us", d.p90_us},
          {"p99_us", d.p99_us},
          {"p999_us", d.p999_us},
          {"max_us", d.max_us},
          {"percentiles_us", d.percentiles_us}};
}

json json_server(const server_cost& s, std::uint64_t tasks) {
  if (!s.measured) return nullptr;
  json by_command = json::object();
  for (const auto& [cmd, n] : s.by_command) by_command[cmd] = n;
  return {{"commands", s.commands},
          {"commands_per_task",
           json_num(tasks ? static_cast<double>(s.commands) / static_cast<double>(tasks) : 0)},
          {"cpu_s", json_opt(s.cpu_s)},
          {"by_command", std::move(by_command)}};
}

json json_run(const run_result& r) {
  json j = {{"design", r.design},
            {"store", r.store},
            {"threads", r.threads},
            {"tasks", r.tasks},
            {"schedule_s", json_num(r.schedule_s)},
            {"schedule_per_s", json_num(r.schedule_rate())},
            {"wall_s", json_num(r.wall_s)},
            {"cpu_s", json_num(r.cpu_s)},
            {"redis", json_server(r.server, r.tasks)}};
  if (r.engine)
    j["engine"] = {{"wakeups", r.engine->wakeups},
                   {"fired", r.engine->fired},
                   {"succeeded", r.engine->succeeded},
                   {"lateness_p50_us", r.engine->lateness_p50.count()},
                   {"lateness_p99_us", r.engine->lateness_p99.count()},
                   {"lateness_max_us", r.engine->lateness_max.count()}};
  else
    j["polls"] = r.polls;
  j["lateness"] = json_distribution(r.lateness);
  return j;
}

std::string iso_now() {
  char buf[64];
  const std::time_t t = std::time(nullptr);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

json to_json(const config& c, const report& rep, const server_monitor* m, double total_s) {
  utsname u{};
  uname(&u);
  json doc = {
      {"schema", "delayq-bench-e2e/2"},
      {"date", iso_now()},
      {"total_s", json_num(total_s)},
      {"machine",
       {{"nproc", std::thread::hardware_concurrency()},
        {"kernel", std::string(u.sysname) + " " + u.release}}},
      {"config",
       {{"quick", c.quick},
        {"tick_ms", c.tick.count()},
        {"workers", c.workers},
        {"memory_tasks", c.memory_tasks},
        {"memory_spread_ms", c.memory_spread.count()},
        {"durable_tasks", c.durable_tasks},
        {"durable_delay_ms", {c.durable_lead.count(), (c.durable_lead + c.durable_spread).count()}},
        {"threads", c.threads},
        {"recovery_tasks", c.recovery_tasks},
        {"idle_tasks", c.idle_tasks},
        {"idle_seconds", json_num(c.idle_seconds)},
        {"why_sizes",
         "memory and recovery and idle at the sizes the issue asks for (1e6); lateness at "
         "--durable-tasks per design and thread count: Redis here fsyncs every write "
         "(appendfsync always), so one scheduling thread manages a few thousand schedules "
         "per second, and 8 runs must fit the ~10 minute budget of a shared 2-core machine"}}}};
  if (m != nullptr) {
    json redis = {{"version", m->version()}, {"pid_measured", m->pid().has_value()}};
    for (const auto& [k, v] : m->server_config()) redis[k] = v;
    doc["redis"] = std::move(redis);
  } else {
    doc["redis"] = nullptr;
  }
  doc["skipped"] = rep.skipped;
  doc["memory"] = rep.memory ? json_run(*rep.memory) : json(nullptr);
  doc["lateness"] = json::array();
  for (const auto& r : rep.durable) doc["lateness"].push_back(json_run(r));
  doc["durable"] = rep.durable_path ? durable_json(c.durable, *rep.durable_path) : json(nullptr);
  doc["recovery"] = json::array();
  for (const auto& r : rep.recovery)
    doc["recovery"].push_back(
        {{"backend", r.backend},
         {"tasks", r.tasks},
         {"fill_s", json_num(r.fill_s)},
         {"start_s", json_num(r.start_s)},
         {"tasks_per_s", json_num(r.start_s > 0 ? static_cast<double>(r.tasks) / r.start_s : 0)},
         {"cpu_s", json_num(r.cpu_s)},
         {"redis_cpu_s", json_opt(r.server_cpu_s)},
         {"loaded", r.loaded},
         {"pending", r.pending}});
  doc["idle"] = json::array();
  for (const auto& r : rep.idle)
    doc["idle"].push_back(
        {{"what", r.what},
         {"pending", r.pending},
         {"window_s", json_num(r.window_s)},
         {"wakeups", r.wakeups},
         {"wakeups_per_min", json_num(r.per_minute(static_cast<double>(r.wakeups)))},
         {"cpu_s", json_num(r.cpu_s)},
         {"cpu_s_per_min", json_num(r.per_minute(r.cpu_s))},
         {"redis", json_server(r.server, 0)},
         {"redis_cpu_s_per_min",
          r.server.cpu_s ? json_num(r.per_minute(*r.server.cpu_s)) : json(nullptr)},
         {"redis_commands_per_min",
          r.server.measured ? json_num(r.per_minute(static_cast<double>(r.server.commands)))
                            : json(nullptr)}});
  return doc;
}

std::string opt_cell(const std::optional<double>& v, int prec) { return v ? fmt(*v, prec) : "n/a"; }

std::string to_tables(const config& c, const report& rep, const server_monitor* m) {
  std::ostringstream o;
  o << "Engine tick " << c.tick.count() << " ms, " << c.workers
    << " worker threads (delayq and the seeds' queue alike), no-op executors.";
  if (m != nullptr) {
    o << " redis-server " << m->version();
    for (const auto& [k, v] : m->server_config()) o << ", " << k << " " << (v.empty() ? "''" : v);
    o << ".";
  }
  o << "\n";
  if (rep.memory) {
    const auto& r = *rep.memory;
    o << "\n### In memory: " << fmt_count(static_cast<double>(r.tasks))
      << " tasks, delays uniform over " << c.memory_spread.count() / 1000.0
      << " s, 1 scheduling thread\n\n"
      << "| tasks | schedule/s | lateness p50 | p99 | max | CPU s | wall s | timer wake-ups |\n"
      << "|---:|---:|---:|---:|---:|---:|---:|---:|\n"
      << "| " << r.tasks << " | " << fmt_count(r.schedule_rate()) << " | "
      << fmt_ms(r.lateness.p50_us) << " ms | " << fmt_ms(r.lateness.p99_us) << " ms | "
      << fmt_ms(r.lateness.max_us) << " ms | " << fmt(r.cpu_s) << " | " << fmt(r.wall_s) << " | "
      << (r.engine ? std::to_string(r.engine->wakeups) : "") << " |\n";
  }
  if (!rep.durable.empty()) {
    o << "\n### Lateness per design, durable, one redis-server: " << c.durable_tasks
      << " tasks per row, delays uniform in [" << c.durable_lead.count() << ", "
      << (c.durable_lead + c.durable_spread).count() << "] ms\n\n"
      << "| design | sched. threads | schedule/s | lateness p50 | p99 | max | CPU s (bench) | "
         "CPU s (redis) | Redis cmds/task |\n"
      << "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    for (const auto& r : rep.durable) {
      o << "| " << r.design << " | " << r.threads << " | " << fmt_count(r.schedule_rate()) << " | "
        << fmt_ms(r.lateness.p50_us) << " ms | " << fmt_ms(r.lateness.p99_us) << " ms | "
        << fmt_ms(r.lateness.max_us) << " ms | " << fmt(r.cpu_s) << " | "
        << opt_cell(r.server.cpu_s, 2) << " | "
        << fmt(static_cast<double>(r.server.commands) / static_cast<double>(r.tasks), 2) << " |\n";
    }
  }
  if (!rep.recovery.empty()) {
    o << "\n### Recovery: start() until the wheel holds every stored task\n\n"
      << "| backend | stored tasks | start() s | tasks/s | CPU s (bench) | CPU s (redis) | "
         "fill s (untimed) |\n"
      << "|---|---:|---:|---:|---:|---:|---:|\n";
    for (const auto& r : rep.recovery)
      o << "| " << r.backend << " | " << r.tasks << " | " << fmt(r.start_s) << " | "
        << fmt_count(r.start_s > 0 ? static_cast<double>(r.tasks) / r.start_s : 0) << " | "
        << fmt(r.cpu_s) << " | " << opt_cell(r.server_cpu_s, 2) << " | " << fmt(r.fill_s, 1)
        << " |\n";
  }
  if (!rep.idle.empty()) {
    o << "\n### Idle cost, per minute (windows of " << fmt(c.idle_seconds, 0) << " s, scaled)\n\n"
      << "| what | pending | wake-ups or polls /min | CPU ms/min (bench) | CPU ms/min (redis) | "
         "Redis cmds/min |\n"
      << "|---|---:|---:|---:|---:|---:|\n";
    for (const auto& r : rep.idle)
      o << "| " << r.what << " | " << r.pending << " | "
        << fmt(r.per_minute(static_cast<double>(r.wakeups)), 0) << " | "
        << fmt(r.per_minute(r.cpu_s) * 1000, 1) << " | "
        << (r.server.cpu_s ? fmt(r.per_minute(*r.server.cpu_s) * 1000, 1) : "n/a") << " | "
        << (r.server.measured ? fmt(r.per_minute(static_cast<double>(r.server.commands)), 0)
                              : "n/a")
        << " |\n";
  }
  if (rep.durable_path) o << durable_tables(c.durable, *rep.durable_path);
  for (const auto& s : rep.skipped) o << "\nSkipped: " << s << "\n";
  return o.str();
}

// gnuplot inputs: one CDF per run (lateness ms, percent) and the throughputs.
void write_plot_data(const std::string& dir, const report& rep) {
  std::filesystem::create_directories(dir);
  auto cdf = [&](const run_result& r) {
    std::ofstream f(dir + "/lateness." + r.design + ".t" + std::to_string(r.threads) + ".dat");
    f << "# lateness_ms percent  (" << r.design << ", " << r.threads << " scheduling threads, "
      << r.tasks << " tasks)\n";
    f << static_cast<double>(r.lateness.min_us) / 1000.0 << " 0\n";
    for (std::size_t k = 0; k < r.lateness.percentiles_us.size(); ++k) {
      if (k == 99) f << static_cast<double>(r.lateness.p999_us) / 1000.0 << " 99.9\n";
      f << static_cast<double>(r.lateness.percentiles_us[k]) / 1000.0 << " " << k + 1 << "\n";
    }
  };
  if (rep.memory) cdf(*rep.memory);
  for (const auto& r : rep.durable) cdf(r);
  // throughput.dat: design, then schedule/s for each thread count, in order.
  std::ofstream t(dir + "/throughput.dat");
  std::vector<int> threads;
  for (const auto& r : rep.durable)
    if (std::find(threads.begin(), threads.end(), r.threads) == threads.end())
      threads.push_back(r.threads);
  t << "design";
  for (int n : threads) t << " threads=" << n;
  t << "\n";
  std::vector<std::string> designs;
  for (const auto& r : rep.durable)
    if (std::find(designs.begin(), designs.end(), r.design) == designs.end())
      designs.push_back(r.design);
  for (const auto& d : designs) {
    t << d;
    for (int n : threads) {
      double v = 0;
      for (const auto& r : rep.durable)
        if (r.design == d && r.threads == n) v = r.schedule_rate();
      t << " " << fmt(v, 1);
    }
    t << "\n";
  }
}

int run(int argc, char** argv) {
  const config c = parse_args(argc, argv);
  // Keep the engine's info lines (one per start) off the progress line;
  // warnings and errors still show.
  set_log_function([](log_level level, std::string_view msg) {
    if (level >= log_level::warning)
      std::fprintf(stderr, "delayq: %.*s\n", static_cast<int>(msg.size()), msg.data());
  });

  std::optional<redis_options> server;
  std::unique_ptr<server_monitor> monitor;
  report rep;
  const bool need_redis = c.wants("lateness") || c.wants("recovery") || c.wants("durable");
  if (!c.redis_uri.empty()) {
    server = redis_options::parse(c.redis_uri);
    monitor = std::make_unique<server_monitor>(*server);
  } else if (need_redis) {
    const char* msg =
        "no Redis: the lateness scenario and the Redis parts of durable, recovery and idle "
        "need a redis-server. Pass --redis redis://HOST:PORT or set DELAYQ_BENCH_REDIS, or run "
        "through scripts/with-redis.sh, which starts a private one";
    std::fprintf(stderr, "delayq-bench: %s\n", msg);
    if (c.wants("lateness") && !c.scenarios.empty() &&
        std::find(c.scenarios.begin(), c.scenarios.end(), "lateness") != c.scenarios.end())
      return 1;  // asked for explicitly: nothing useful to do
    rep.skipped.push_back(msg);
  }

  const auto t0 = steady_clock::now();
  if (c.wants("memory")) scenario_memory(c, rep);
  if (c.wants("durable")) rep.durable_path = run_durable(c.durable, server ? &*server : nullptr);
  if (c.wants("lateness") && server) scenario_lateness(c, rep, *server, *monitor);
  if (c.wants("recovery")) scenario_recovery(c, rep, server ? &*server : nullptr, monitor.get());
  if (c.wants("idle")) scenario_idle(c, rep, server ? &*server : nullptr, monitor.get());
  const double total = seconds_since(t0);

  const std::string tables = to_tables(c, rep, monitor.get());
  std::printf("\n%s\ntotal %.1f s\n", tables.c_str(), total);
  if (!c.out_tables.empty()) std::ofstream(c.out_tables) << tables;
  // Strings from the server (its version, its settings) are not ours to vouch
  // for: invalid UTF-8 is replaced rather than thrown on.
  if (!c.out_json.empty())
    std::ofstream(c.out_json)
        << to_json(c, rep, monitor.get(), total).dump(2, ' ', false, json::error_handler_t::replace)
        << '\n';
  if (!c.plot_dir.empty()) {
    write_plot_data(c.plot_dir, rep);
    if (rep.durable_path)
      std::ofstream(c.plot_dir + "/durable-async.dat") << durable_plot_data(*rep.durable_path);
  }
  return 0;
}

}  // namespace
}  // namespace delayq::bench

int main(int argc, char** argv) {
  try {
    return delayq::bench::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "delayq-bench: %s\n", e.what());
    return 1;
  }
}
