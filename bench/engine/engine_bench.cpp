// delayq-bench-engine - the engine's public API against one Asio steady_timer
// per task, side by side in one run, as issue 10 asks; a plain program (not
// Google Benchmark), because memory must be measured in fresh processes.
//
//   delayq-bench-engine [--quick | --full] [--sizes=1e3,1e6] [--rounds N]
//                       [--scenarios ops,fill,threads,memory,wheel,fire,precision]
//                       [--out engine.json] [--tsv engine.tsv] [--tables engine.md]
//                       [--engine-tables N]
//
// --engine-tables sets engine_options::tables of every engine the scenarios
// make (default: the engine's own, 32), to compare table counts in one
// binary.
// Every scenario runs in child processes (this binary again, with the hidden
// flag --child), so each starts from a fresh heap; a child prints raw rows
// (one per round) on its stdout and the parent takes medians, prints the
// tables and the target check, and writes the files.
//
// The engine side is delayq::engine with default options and a memory_store,
// started, its io_context run by a thread of its own; the calling thread is a
// user thread. Ids are given by the caller, like "order-00123456" (14 bytes),
// type "bench", empty payload. The Asio side is one steady_timer per task on
// an io_context run by another thread, armed with expires_after() +
// async_wait(no-op) from the user thread (the io_context's timer queue takes
// its lock; the aborted handler of a cancel runs on the io_context's thread).
// The Asio side gets its timer by index: it pays no lookup by id, which
// favours it (a user with ids would add a hash map).
//
//   ops      At P pending (1e3, 1e5, 1e6; 1e7 with --full), both sides filled
//            with the same P tasks due in 1-2 h (nothing fires). A round is
//            `ops_per_round` operations of each kind, in batches of
//            B = clamp(P/10, 10, ops_per_round): schedule B new ids, cancel B
//            random pending ids, reschedule B random pending ids to a new
//            delay. Each batch runs on both sides, the side going first
//            alternating by round; ids are formatted before the clock starts.
//            Reported: ns per op, median of the rounds; asio ÷ engine.
//   fill     Issue 32's shape: a fresh engine takes N = 1e6 tasks from one
//            user thread (ids "order-N", delays uniform over [120 s, 3600 s],
//            no warm-up) through schedule(), or schedule_many() of 1,000 a
//            call; Asio makes a steady_timer per task and arms it. A fresh
//            process per side and round. Reported: ns per task.
//   threads  P = 1e6 pending (1e3 with --quick). T user threads (1, then 4)
//            each own a slice of the ids and repeat, for `seconds`, a pair:
//            cancel a random id of their slice, then schedule it again with a
//            new delay (Asio: cancel(), expires_after(), async_wait()).
//            Reported: pairs per second, all threads together. A third
//            side, "engines", runs the same pairs from T threads on T
//            engines, each holding only its thread's slice: threads that
//            share nothing of delayq's, the most sharing one engine can
//            reach on this machine (engines ÷ engine 1 thread is its bound
//            for the 4 ÷ 1 target).
//   memory   A fresh process per side: RSS growth (VmRSS) from the started
//            engine (or the running io_context) with nothing pending to N =
//            1e6 pending, over N; for the engine also minus the id, type and
//            payload bytes (14 + 5 + 0).
//   wheel    timer_wheel alone: N = 1e6 records due over 100 ticks, then
//            advance() tick by tick; the sink either keeps the handle (the
//            raw hand-out rate) or erases the record. Reported: tasks per s.
//   fire     The engine with default options (tick 1 ms, 2 workers): 1e6
//            no-op tasks scheduled with schedule_at() due at
//            T0 + uniform [0, 1 s), T0 far enough ahead that scheduling ends
//            first. Lateness = system_clock::now() at the executor's start
//            minus the task's due time. Reported: p50, p99, max lateness and
//            when the last task ran (after T0), median over the rounds (one
//            fresh process each).
//   precision  The engine with default options: 10,000 no-op tasks
//            scheduled with schedule() at delays uniform in [1 ms, 10 s]
//            (--quick: 500 in [1, 300 ms]), then waited for. Lateness as in
//            fire. Reported: p50, p99, max, and the timer's wake-ups, median
//            over the rounds (one fresh process each).
//
// Scaling (per-op cost at the largest P against 1e3) comes from `ops`.

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_cli.hpp"
#include "delayq/engine_options.hpp"
#include "engine_bench.hpp"

namespace delayq::bench {
namespace {

// ------------------------------------------------------------------ the parent

struct row {
  std::string section, op, impl;
  std::size_t pending = 0;
  int threads = 1;
  int round = 0;
  double value = 0;
};

using key = std::tuple<std::string, std::string, std::string, std::size_t, int>;

struct summary {
  double median = NAN, min = NAN, max = NAN;
  int rounds = 0;
};

class results {
 public:
  void add(row r) { rows_.push_back(std::move(r)); }
  const std::vector<row>& rows() const noexcept { return rows_; }

  summary get(const std::string& section, const std::string& op, const std::string& impl,
              std::size_t pending, int threads) const {
    std::vector<double> v;
    for (const auto& r : rows_)
      if (r.section == section && r.op == op && r.impl == impl && r.pending == pending &&
          r.threads == threads)
        v.push_back(r.value);
    summary s;
    if (v.empty()) return s;
    std::sort(v.begin(), v.end());
    const std::size_t m = v.size() / 2;
    s.median = v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
    s.min = v.front();
    s.max = v.back();
    s.rounds = static_cast<int>(v.size());
    return s;
  }
  double median(const std::string& section, const std::string& op, const std::string& impl,
                std::size_t pending, int threads = 1) const {
    return get(section, op, impl, pending, threads).median;
  }
  std::vector<key> keys() const {
    std::vector<key> k;
    for (const auto& r : rows_) {
      key x{r.section, r.op, r.impl, r.pending, r.threads};
      if (std::find(k.begin(), k.end(), x) == k.end()) k.push_back(x);
    }
    return k;
  }

 private:
  std::vector<row> rows_;
};

// Runs this binary with `args` (after --child) and parses the rows it prints.
void run_child(const std::vector<std::string>& args, results& into) {
  // --engine-tables goes before --child, which takes every value after it.
  std::vector<std::string> full = {"delayq-bench-engine"};
  if (engine_tables != 0)
    full.insert(full.end(), {"--engine-tables", std::to_string(engine_tables)});
  full.push_back("--child");
  full.insert(full.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : full) argv.push_back(a.data());
  argv.push_back(nullptr);
  int fds[2];
  if (pipe(fds) != 0) die("pipe failed");
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) die("fork failed");
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    execv("/proc/self/exe", argv.data());
    std::_Exit(127);
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t k = read(fds[0], buf, sizeof buf);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    out.append(buf, static_cast<std::size_t>(k));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string what = "child failed:";
    for (const auto& a : args) what += " " + a;
    die(what.c_str());
  }
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    row r;
    std::string pending, threads, round, value;
    if (!std::getline(f, r.section, '\t') || !std::getline(f, r.op, '\t') ||
        !std::getline(f, r.impl, '\t') || !std::getline(f, pending, '\t') ||
        !std::getline(f, threads, '\t') || !std::getline(f, round, '\t') || !std::getline(f, value))
      continue;
    r.pending = std::stoull(pending);
    r.threads = std::stoi(threads);
    r.round = std::stoi(round);
    r.value = std::stod(value);
    into.add(std::move(r));
  }
}

struct config {
  bool quick = false;
  bool full = false;
  std::vector<std::size_t> sizes;
  int rounds = 0;
  std::size_t ops_per_round = 0;
  std::size_t thread_pending = 0;
  int thread_rounds = 0;
  double thread_seconds = 0;
  std::size_t memory_n = 0;
  std::size_t fill_n = 0;
  int fill_rounds = 0;
  std::size_t wheel_n = 0;
  int wheel_rounds = 0;
  std::size_t fire_n = 0;
  int fire_rounds = 0;
  double fire_lead_s = 0;
  std::size_t precision_n = 0;
  int precision_rounds = 0;
  std::int64_t precision_max_ms = 0;
  std::vector<std::string> scenarios = {"ops",   "fill", "threads",  "memory",
                                        "wheel", "fire", "precision"};
  std::string out_json, out_tsv, out_tables;
  bool wants(const std::string& s) const {
    return std::find(scenarios.begin(), scenarios.end(), s) != scenarios.end();
  }
};

std::string fmt(double x) {
  char b[64];
  if (std::isnan(x)) return "n/a";
  const double a = std::fabs(x);
  if (a >= 1e6)
    std::snprintf(b, sizeof b, "%.2fM", x / 1e6);
  else if (a >= 1e4)
    std::snprintf(b, sizeof b, "%.0fk", x / 1e3);
  else if (a >= 100)
    std::snprintf(b, sizeof b, "%.0f", x);
  else if (a >= 10)
    std::snprintf(b, sizeof b, "%.1f", x);
  else
    std::snprintf(b, sizeof b, "%.2f", x);
  return b;
}
std::string fmtn(std::size_t n) {
  std::size_t p = 10;
  for (int e = 1; e <= 12; ++e, p *= 10)
    if (n == p && n >= 1000) return "1e" + std::to_string(e);
  return std::to_string(n);
}
std::string ratio(double a, double b) {
  if (std::isnan(a) || std::isnan(b) || b == 0) return "n/a";
  char s[32];
  std::snprintf(s, sizeof s, "%.2fx", a / b);
  return s;
}
std::string spread(const summary& s) {
  if (s.rounds < 2) return "";
  return " (" + fmt(s.min) + "–" + fmt(s.max) + ")";
}

struct target {
  bool measured = false;
  bool met = false;
  std::string text;
};

const char* status(const target& t) {
  return !t.measured ? "not measured" : t.met ? "met" : "MISSED";
}

std::string tables(const config& c, const results& res, std::vector<target>& targets) {
  std::ostringstream o;
  const std::size_t head = std::find(c.sizes.begin(), c.sizes.end(), 1'000'000) != c.sizes.end()
                               ? 1'000'000
                               : (c.sizes.empty() ? 0 : c.sizes.back());
  const char* ops[3] = {"schedule", "cancel", "reschedule"};
  if (c.wants("ops")) {
    o << "\n#### engine API against Asio timers: ns per op (median of " << c.rounds
      << " rounds, min–max)\n\n"
      << "One user thread. Engine: `schedule(type, \"\", delay, {.id})`, `cancel(id)`, "
         "`reschedule(id, due)`; Asio: a `steady_timer` per task, `expires_after` + "
         "`async_wait`, `cancel()`, `expires_after` + `async_wait` (timer in hand, no id "
         "lookup).\n\n"
      << "| op | pending | engine ns/op | asio ns/op | asio ÷ engine |\n"
      << "|---|---:|---:|---:|---:|\n";
    for (const char* op : ops)
      for (std::size_t p : c.sizes) {
        const summary e = res.get("ops", op, "engine", p, 1);
        const summary a = res.get("ops", op, "asio", p, 1);
        o << "| " << op << " | " << fmtn(p) << " | " << fmt(e.median) << spread(e) << " | "
          << fmt(a.median) << spread(a) << " | " << ratio(a.median, e.median) << " |\n";
      }
    for (const char* op : {"schedule", "cancel"}) {
      const double e = res.median("ops", op, "engine", head);
      const double a = res.median("ops", op, "asio", head);
      target t{!std::isnan(e) && !std::isnan(a), a >= 3 * e,
               std::string("engine ") + op + " ≥ 3x faster than an Asio timer per task at " +
                   fmtn(head) + " pending: " + fmt(e) + " ns vs " + fmt(a) +
                   " ns = " + ratio(a, e)};
      targets.push_back(t);
    }
    o << "\n#### scaling: ns per op at the largest size against 1e3 (medians)\n\n"
      << "| op | side | 1e3 | " << fmtn(c.sizes.back()) << " | ratio |\n"
      << "|---|---|---:|---:|---:|\n";
    for (const char* op : ops)
      for (const char* side : {"engine", "asio"}) {
        const double a = res.median("ops", op, side, 1000);
        const double b = res.median("ops", op, side, c.sizes.back());
        o << "| " << op << " | " << side << " | " << fmt(a) << " | " << fmt(b) << " | "
          << ratio(b, a) << " |\n";
        if (std::string(side) == "engine") {
          const bool at_1e7 = c.sizes.back() == 10'000'000;
          targets.push_back(
              {at_1e7 && !std::isnan(a) && !std::isnan(b), b <= 3 * a,
               std::string("engine ") + op + " at 1e7 ≤ 3x 1e3: " +
                   (at_1e7 ? ""
                           : "(largest size here " + fmtn(c.sizes.back()) + ", run with --full) ") +
                   fmt(b) + " ns vs " + fmt(a) + " ns = " + ratio(b, a)});
        }
      }
  }
  if (c.wants("fill")) {
    const std::size_t n = c.fill_n;
    const summary one = res.get("fill", "ns_per_task", "schedule", n, 1);
    const summary many = res.get("fill", "ns_per_task", "schedule_many", n, 1);
    const summary asio = res.get("fill", "ns_per_task", "asio", n, 1);
    o << "\n#### a fresh engine takes " << fmtn(n)
      << " tasks, issue 32's shape: ns per task (median of " << c.fill_rounds
      << " rounds, a fresh process each, min–max)\n\n"
      << "One user thread, ids `order-N`, delays uniform over [120 s, 3600 s], no warm-up. "
         "Asio: a `steady_timer` made, `expires_after` + `async_wait` per task.\n\n"
      << "| call | ns per task | asio ns per task | asio ÷ engine |\n|---|---:|---:|---:|\n"
      << "| `schedule`, one call a task | " << fmt(one.median) << spread(one) << " | "
      << fmt(asio.median) << spread(asio) << " | " << ratio(asio.median, one.median) << " |\n"
      << "| `schedule_many`, 1,000 a call | " << fmt(many.median) << spread(many) << " | "
      << fmt(asio.median) << spread(asio) << " | " << ratio(asio.median, many.median) << " |\n";
    const summary mem_one = res.get("fill", "rss_bytes_per_task", "schedule", n, 1);
    const summary mem_many = res.get("fill", "rss_bytes_per_task", "schedule_many", n, 1);
    const summary mem_asio = res.get("fill", "rss_bytes_per_task", "asio", n, 1);
    o << "\nResident memory growth per task, the same runs (RSS after the fill less after the "
         "engine was started, or the io_context's thread): `schedule` "
      << fmt(mem_one.median) << " B, `schedule_many` " << fmt(mem_many.median) << " B, Asio "
      << fmt(mem_asio.median) << " B (ids " << id_len << " B and type " << task_type.size()
      << " B included).\n";
    targets.push_back({!std::isnan(mem_one.median), mem_one.median <= 128,
                       "engine memory per task ≤ 128 B, a fresh engine taking " + fmtn(n) +
                           " (issue 32): " + fmt(mem_one.median) + " B (resident growth)"});
    targets.push_back({!std::isnan(one.median) && !std::isnan(asio.median),
                       asio.median >= one.median,
                       "engine schedule ≥ 1.0x an Asio timer per task, a fresh engine taking " +
                           fmtn(n) + " (issue 32): " + fmt(one.median) + " ns vs " +
                           fmt(asio.median) + " ns = " + ratio(asio.median, one.median)});
    targets.push_back({!std::isnan(many.median) && !std::isnan(asio.median),
                       asio.median >= 3 * many.median,
                       "engine schedule_many ≥ 3x an Asio timer per task, a fresh engine taking " +
                           fmtn(n) + " (issue 32): " + fmt(many.median) + " ns vs " +
                           fmt(asio.median) + " ns = " + ratio(asio.median, many.median)});
  }
  if (c.wants("threads")) {
    const std::size_t p = c.thread_pending;
    o << "\n#### schedule + cancel pairs from 1 and " << max_threads << " user threads at "
      << fmtn(p) << " pending (pairs/s, all threads together, median of " << c.thread_rounds
      << " rounds of " << c.thread_seconds << " s)\n\n"
      << "| side | 1 thread | " << max_threads << " threads | " << max_threads
      << " ÷ 1 |\n|---|---:|---:|---:|\n";
    for (const char* side : {"engine", "asio"}) {
      const summary one = res.get("threads", "pairs_per_s", side, p, 1);
      const summary four = res.get("threads", "pairs_per_s", side, p, max_threads);
      o << "| " << side << " | " << fmt(one.median) << spread(one) << " | " << fmt(four.median)
        << spread(four) << " | " << ratio(four.median, one.median) << " |\n";
    }
    const summary sep = res.get("threads", "pairs_per_s", "engines", p, max_threads);
    const double e1 = res.median("threads", "pairs_per_s", "engine", p, 1);
    const double e4 = res.median("threads", "pairs_per_s", "engine", p, max_threads);
    const double a4 = res.median("threads", "pairs_per_s", "asio", p, max_threads);
    o << "| " << max_threads << " engines, one per thread (nothing shared) | | " << fmt(sep.median)
      << spread(sep) << " | " << ratio(sep.median, e1)
      << " (÷ the engine from 1 thread: the bound) |\n";
    o << "\nengine ÷ asio from " << max_threads << " threads: " << ratio(e4, a4) << "\n";
    o << "engine ÷ " << max_threads << " separate engines from " << max_threads
      << " threads (what sharing one engine costs): " << ratio(e4, sep.median) << "\n";
    targets.push_back({!std::isnan(e1) && !std::isnan(e4), e4 >= 1.5 * e1,
                       "engine from 4 threads ≥ 1.5x from 1 thread (pairs/s): " + fmt(e4) + " vs " +
                           fmt(e1) + " = " + ratio(e4, e1)});
    targets.push_back({!std::isnan(e4) && !std::isnan(a4), e4 >= a4,
                       "engine from 4 threads ≥ Asio timers from 4 threads (pairs/s): " + fmt(e4) +
                           " vs " + fmt(a4) + " = " + ratio(e4, a4)});
  }
  if (c.wants("memory")) {
    const std::size_t n = c.memory_n;
    const double e = res.median("memory", "rss_bytes_per_task", "engine", n);
    const double b = res.median("memory", "beyond_id_type_payload", "engine", n);
    const double a = res.median("memory", "rss_bytes_per_task", "asio", n);
    o << "\n#### memory per pending task at " << fmtn(n)
      << " (RSS growth over N, a fresh process per side)\n\n"
      << "| side | bytes per task | beyond id (" << id_len << " B), type (" << task_type.size()
      << " B), payload (0 B) |\n|---|---:|---:|\n"
      << "| engine | " << fmt(e) << " | " << fmt(b) << " |\n"
      << "| asio | " << fmt(a) << " | (holds no id) |\n";
    const double idle = res.median("memory", "idle_bytes", "engine", n);
    o << "\nan engine started with nothing in it (its io_context's thread included): "
      << fmt(idle / 1024) << " KiB of RSS\n";
    targets.push_back({!std::isnan(b), b <= 128,
                       "engine memory per pending task at " + fmtn(n) +
                           " ≤ 128 B beyond id, type and payload: " + fmt(b) + " B (RSS " + fmt(e) +
                           " B per task)"});
  }
  if (c.wants("wheel")) {
    const std::size_t n = c.wheel_n;
    const summary h = res.get("wheel", "handout_per_s", "wheel", n, 1);
    const summary e = res.get("wheel", "fire_and_erase_per_s", "wheel", n, 1);
    o << "\n#### the wheel's raw firing rate: " << fmtn(n)
      << " records due over 100 ticks, advance() tick by tick (tasks/s, median of "
      << c.wheel_rounds << " rounds)\n\n"
      << "| sink | tasks/s | ns per task |\n|---|---:|---:|\n"
      << "| keeps the handle (hand-out) | " << fmt(h.median) << spread(h) << " | "
      << fmt(1e9 / h.median) << " |\n"
      << "| erases the record | " << fmt(e.median) << spread(e) << " | " << fmt(1e9 / e.median)
      << " |\n";
    targets.push_back({!std::isnan(h.median), h.median >= 20e6,
                       "the wheel hands out ≥ 20 M due tasks/s: " + fmt(h.median) +
                           "/s (with the sink erasing each record: " + fmt(e.median) + "/s)"});
  }
  if (c.wants("fire")) {
    const std::size_t n = c.fire_n;
    const auto g = [&](const char* op) { return res.get("fire", op, "engine", n, 1); };
    o << "\n#### the engine firing " << fmtn(n)
      << " no-op tasks due within one second, default options (tick 1 ms, 2 workers; median of "
      << c.fire_rounds << " rounds, min–max)\n\n"
      << "| lateness p50 | p99 | max | last task ran, after the first due | engine's own p99 "
         "(stats) |\n|---:|---:|---:|---:|---:|\n"
      << "| " << fmt(g("lateness_p50_ms").median) << " ms" << spread(g("lateness_p50_ms")) << " | "
      << fmt(g("lateness_p99_ms").median) << " ms" << spread(g("lateness_p99_ms")) << " | "
      << fmt(g("lateness_max_ms").median) << " ms" << spread(g("lateness_max_ms")) << " | "
      << fmt(g("all_ran_after_t0_ms").median) << " ms" << spread(g("all_ran_after_t0_ms")) << " | "
      << fmt(g("stats_p99_ms").median) << " ms |\n"
      << "\nScheduling the " << fmtn(n) << " tasks took " << fmt(g("schedule_s").median)
      << " s (median); it ended " << fmt(g("margin_before_t0_s").min)
      << " s or more before the first due time (negative: it overlapped the firing).\n";
    // The bound is 2 ms + dispatch: the workers need about as long
    // as the firing lasts beyond the second the tasks are due in, so the
    // dispatch share is the time the last task ran after the last due one.
    const double p99 = g("lateness_p99_ms").median;
    const double dispatch_ms = std::max(0.0, g("all_ran_after_t0_ms").median - 1000.0);
    targets.push_back({!std::isnan(p99), p99 <= 2 + dispatch_ms,
                       "engine p99 lateness ≤ 2 ms + dispatch, " + fmtn(n) +
                           " tasks due within 1 s: " + fmt(p99) +
                           " ms (dispatch: the last task ran " + fmt(dispatch_ms) +
                           " ms after the last due time)"});
  }
  if (c.wants("precision")) {
    const std::size_t n = c.precision_n;
    const auto g = [&](const char* op) { return res.get("precision", op, "engine", n, 1); };
    o << "\n#### precision with default options: " << fmtn(n)
      << " no-op tasks at delays uniform in [1 ms, " << c.precision_max_ms << " ms] (median of "
      << c.precision_rounds << " rounds, min–max)\n\n"
      << "| lateness p50 | p99 | max | engine's own p99 (stats) | timer wake-ups |\n"
         "|---:|---:|---:|---:|---:|\n"
      << "| " << fmt(g("lateness_p50_ms").median) << " ms" << spread(g("lateness_p50_ms")) << " | "
      << fmt(g("lateness_p99_ms").median) << " ms" << spread(g("lateness_p99_ms")) << " | "
      << fmt(g("lateness_max_ms").median) << " ms" << spread(g("lateness_max_ms")) << " | "
      << fmt(g("stats_p99_ms").median) << " ms | " << fmt(g("wakeups").median) << " |\n";
    const double p99 = g("lateness_p99_ms").median;
    targets.push_back({!std::isnan(p99), p99 <= 2,
                       "engine p99 lateness ≤ 2 ms with default options, " + fmtn(n) +
                           " tasks at random delays: " + fmt(p99) + " ms"});
  }
  o << "\n#### targets (issues 10, 25 and 32)\n\n";
  for (const auto& t : targets) o << "- **" << status(t) << "** " << t.text << "\n";
  return o.str();
}

// The text of a TSV cell: 6 significant digits, n/a as "null".
std::string num(double x) {
  if (std::isnan(x)) return "null";
  char b[64];
  std::snprintf(b, sizeof b, "%.6g", x);
  return b;
}
// The same 6 significant digits in the JSON, so its numbers read like the
// TSV's (the rest is noise); NaN becomes null.
nlohmann::ordered_json json_num(double x) {
  if (std::isnan(x)) return nullptr;
  return std::strtod(num(x).c_str(), nullptr);
}
void write_files(const config& c, const results& res, const std::vector<target>& targets,
                 const std::string& md) {
  if (!c.out_tables.empty()) {
    std::ofstream f(c.out_tables);
    f << md;
    if (!f) die("cannot write the tables file");
  }
  if (!c.out_tsv.empty()) {
    std::ofstream f(c.out_tsv);
    f << "section\top\timpl\tpending\tthreads\trounds\tmedian\tmin\tmax\n";
    for (const auto& [section, op, impl, pending, threads] : res.keys()) {
      const summary s = res.get(section, op, impl, pending, threads);
      f << section << '\t' << op << '\t' << impl << '\t' << pending << '\t' << threads << '\t'
        << s.rounds << '\t' << num(s.median) << '\t' << num(s.min) << '\t' << num(s.max) << '\n';
    }
    if (!f) die("cannot write the TSV file");
  }
  if (!c.out_json.empty()) {
    using json = nlohmann::ordered_json;
    json medians = json::array();
    for (const auto& [section, op, impl, pending, threads] : res.keys()) {
      const summary s = res.get(section, op, impl, pending, threads);
      medians.push_back({{"section", section},
                         {"op", op},
                         {"impl", impl},
                         {"pending", pending},
                         {"threads", threads},
                         {"rounds", s.rounds},
                         {"median", json_num(s.median)},
                         {"min", json_num(s.min)},
                         {"max", json_num(s.max)}});
    }
    json verdicts = json::array();
    for (const auto& t : targets) verdicts.push_back({{"status", status(t)}, {"text", t.text}});
    json rows = json::array();
    for (const row& r : res.rows())
      rows.push_back(
          json::array({r.section, r.op, r.impl, r.pending, r.threads, r.round, json_num(r.value)}));
    const json doc = {
        {"config",
         {{"quick", c.quick},
          {"full", c.full},
          {"sizes", c.sizes},
          {"rounds", c.rounds},
          {"ops_per_round", c.ops_per_round},
          {"thread_pending", c.thread_pending},
          {"thread_rounds", c.thread_rounds},
          {"thread_seconds", json_num(c.thread_seconds)},
          {"memory_n", c.memory_n},
          {"engine_tables", engine_tables != 0 ? engine_tables : delayq::engine_options{}.tables},
          {"fill_n", c.fill_n},
          {"fill_rounds", c.fill_rounds},
          {"wheel_n", c.wheel_n},
          {"wheel_rounds", c.wheel_rounds},
          {"fire_n", c.fire_n},
          {"fire_rounds", c.fire_rounds},
          {"fire_lead_s", json_num(c.fire_lead_s)},
          {"precision_n", c.precision_n},
          {"precision_rounds", c.precision_rounds},
          {"precision_max_ms", c.precision_max_ms},
          {"id_bytes", id_len},
          {"type_bytes", task_type.size()},
          {"payload_bytes", 0}}},
        {"medians", medians},
        {"targets", verdicts},
        {"rows", rows}};
    std::ofstream f(c.out_json);
    f << doc.dump(2) << '\n';
    if (!f) die("cannot write the JSON file");
  }
}

// `a`: the scenario and its arguments, as run_child() passes them.
int child_main(const std::vector<std::string>& a) {
  const auto z = [&](std::size_t i) { return static_cast<std::size_t>(std::stod(a.at(i))); };
  const auto i32 = [&](std::size_t i) { return std::stoi(a.at(i)); };
  const std::string& kind = a.at(0);
  if (kind == "ops")
    child_ops(z(1), i32(2), z(3));
  else if (kind == "threads")
    child_threads(z(1), i32(2), std::stod(a.at(3)));
  else if (kind == "memory")
    child_memory(a.at(1), z(2));
  else if (kind == "fill")
    child_fill(a.at(1), z(2), i32(3));
  else if (kind == "wheel")
    child_wheel(z(1), i32(2));
  else if (kind == "fire")
    child_fire(z(1), i32(2), std::stod(a.at(3)));
  else if (kind == "precision")
    child_precision(z(1), i32(2), std::stoll(a.at(3)));
  else
    die("unknown child");
  std::fflush(stdout);
  std::_Exit(0);  // nothing left to tear down that matters: the process ends
}

}  // namespace
}  // namespace delayq::bench

int main(int argc, char** argv) {
  using namespace delayq::bench;
  config c;
  std::vector<double> size_list;
  std::vector<std::string> child;
  CLI::App app(
      "delayq-bench-engine: the engine's public API against one Asio steady_timer per\n"
      "task, each scenario in fresh child processes; prints the tables and the target\n"
      "check, and writes the files asked for.",
      "delayq-bench-engine");
  app.add_flag("--quick", c.quick, "tiny sizes, one or three rounds (the CI smoke run)");
  app.add_flag("--full", c.full, "add 1e7 pending to the ops scenario");
  add_sizes_option(app, size_list, 10);
  app.add_option("--rounds", c.rounds, "rounds of the ops scenario (default 9; --quick 3)")
      ->check(CLI::PositiveNumber);
  app.add_option("--scenarios", c.scenarios, "the scenarios to run")
      ->delimiter(',')
      ->check(CLI::IsMember({"ops", "fill", "threads", "memory", "wheel", "fire", "precision"}))
      ->allow_extra_args(false)
      ->capture_default_str();
  app.add_option("--out", c.out_json, "write config, rounds, medians and targets as JSON")
      ->type_name("FILE.json");
  app.add_option("--tsv", c.out_tsv, "write one row per figure (median, min, max)")
      ->type_name("FILE.tsv");
  app.add_option("--tables", c.out_tables, "write the Markdown tables (also printed)")
      ->type_name("FILE.md");
  app.add_option("--engine-tables", engine_tables,
                 "engine_options::tables of every engine (default: the engine's own)")
      ->check(CLI::Range(1, 64));
  // How the parent starts a scenario in a child (run_child): the scenario's
  // name and its arguments.
  app.add_option("--child", child)->group("");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (!child.empty()) return child_main(child);
  if (c.quick) {
    c.sizes = {1000, 10000};
    if (c.rounds == 0) c.rounds = 3;
    c.ops_per_round = 2000;
    c.thread_pending = 1000;
    c.thread_rounds = 1;
    c.thread_seconds = 0.05;
    c.memory_n = 10000;
    c.fill_n = 10000;
    c.fill_rounds = 1;
    c.wheel_n = 10000;
    c.wheel_rounds = 1;
    c.fire_n = 10000;
    c.fire_rounds = 1;
    c.fire_lead_s = 0.3;
    c.precision_n = 500;
    c.precision_rounds = 1;
    c.precision_max_ms = 300;
  } else {
    c.sizes = {1000, 100'000, 1'000'000};
    if (c.full) c.sizes.push_back(10'000'000);
    if (c.rounds == 0) c.rounds = 9;
    c.ops_per_round = 50'000;
    c.thread_pending = 1'000'000;
    c.thread_rounds = 5;
    c.thread_seconds = 1.0;
    c.memory_n = 1'000'000;
    c.fill_n = 1'000'000;
    c.fill_rounds = 5;
    c.wheel_n = 1'000'000;
    c.wheel_rounds = 5;
    c.fire_n = 1'000'000;
    c.fire_rounds = 3;
    c.fire_lead_s = 3.0;
    c.precision_n = 10'000;
    c.precision_rounds = 3;
    c.precision_max_ms = 10'000;
  }
  if (!size_list.empty()) {
    c.sizes.clear();
    for (const double v : size_list) c.sizes.push_back(static_cast<std::size_t>(v));
  }
  std::sort(c.sizes.begin(), c.sizes.end());

  results res;
  const auto t0 = clock_type::now();
  if (c.wants("ops"))
    for (std::size_t p : c.sizes)
      run_child(
          {"ops", std::to_string(p), std::to_string(c.rounds), std::to_string(c.ops_per_round)},
          res);
  if (c.wants("fill")) {
    std::fprintf(stderr, "  fill: a fresh engine takes %zu tasks, %d rounds per side\n", c.fill_n,
                 c.fill_rounds);
    for (int r = 0; r < c.fill_rounds; ++r)
      for (int k = 0; k < 3; ++k) {
        // The side going first turns with the round.
        static const char* const sides[3] = {"schedule", "schedule_many", "asio"};
        run_child({"fill", sides[(k + r) % 3], std::to_string(c.fill_n), std::to_string(r)}, res);
      }
  }
  if (c.wants("threads"))
    run_child({"threads", std::to_string(c.thread_pending), std::to_string(c.thread_rounds),
               std::to_string(c.thread_seconds)},
              res);
  if (c.wants("memory")) {
    std::fprintf(stderr, "  memory at %zu pending, a fresh process per side\n", c.memory_n);
    run_child({"memory", "engine", std::to_string(c.memory_n)}, res);
    run_child({"memory", "asio", std::to_string(c.memory_n)}, res);
  }
  if (c.wants("wheel")) {
    std::fprintf(stderr, "  wheel firing, %zu records, %d rounds\n", c.wheel_n, c.wheel_rounds);
    run_child({"wheel", std::to_string(c.wheel_n), std::to_string(c.wheel_rounds)}, res);
  }
  if (c.wants("fire"))
    for (int r = 0; r < c.fire_rounds; ++r) {
      std::fprintf(stderr, "  engine firing %zu tasks, round %d of %d\n", c.fire_n, r + 1,
                   c.fire_rounds);
      run_child(
          {"fire", std::to_string(c.fire_n), std::to_string(r), std::to_string(c.fire_lead_s)},
          res);
    }
  if (c.wants("precision"))
    for (int r = 0; r < c.precision_rounds; ++r) {
      std::fprintf(stderr, "  precision: %zu tasks over %lld ms, round %d of %d\n", c.precision_n,
                   static_cast<long long>(c.precision_max_ms), r + 1, c.precision_rounds);
      run_child({"precision", std::to_string(c.precision_n), std::to_string(r),
                 std::to_string(c.precision_max_ms)},
                res);
    }
  std::fprintf(stderr, "  all scenarios in %.1f s\n", seconds_since(t0));

  std::vector<target> targets;
  const std::string md = tables(c, res, targets);
  std::fputs(md.c_str(), stdout);
  write_files(c, res, targets, md);
  return 0;
}
