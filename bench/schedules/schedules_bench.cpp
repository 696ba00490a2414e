// delayq-bench-schedules: recurring schedules' costs (issue 35's targets,
// docs/benchmarks.md, "Recurring schedules"). A plain program:
//
//   load      N schedules stored (SQLite; with --uri also Redis, plain and
//             in the sharded layout of 64 shards), then
//             engine::start(), which reads them and arms each for its next
//             occurrence: the time start() takes, and the heap the engine
//             holds per waiting schedule (mallinfo2, no occurrence made yet:
//             their next runs are hours away). Targets: under 1 s for 1e5,
//             at most 512 B each.
//   lateness  S every-second schedules on an in-memory engine for D seconds:
//             each occurrence's lateness (its executor's start minus its
//             due time), beside plain tasks scheduled for the same instants
//             in the same engine. Target: p99 within 2 ms, like any task.
//
// --quick runs tiny sizes (CI's smoke run). Timings never gate anything.
#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <delayq/delayq.hpp>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

std::int64_t now_ms() { return delayq::to_epoch_ms(std::chrono::system_clock::now()); }

std::size_t heap_bytes() { return mallinfo2().uordblks; }

// CPU time of the calling thread (user + system), s: what a call cost
// whatever else the machine runs (wall time on a shared machine also counts
// waiting for a core).
double thread_cpu_s() {
  rusage u{};
  ::getrusage(RUSAGE_THREAD, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

std::size_t rss_bytes() {
  std::ifstream f("/proc/self/statm");
  std::size_t pages = 0, rss = 0;
  f >> pages >> rss;
  return rss * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}

// The definition bytes the engine stores for `s`, written through the
// engine itself (upsert on a scratch memory engine would cost as much as
// what we measure): the store's role takes opaque bytes, so plant them by
// upserting into a memory store once and copying the record.
std::pair<std::string, std::string> record_of(const delayq::schedule& s) {
  boost::asio::io_context io;
  delayq::executor_factory ex;
  ex.add(s.type, [](const delayq::task&) {});
  auto store = std::make_unique<delayq::memory_store>();
  delayq::memory_store* raw = store.get();
  delayq::engine eng(io, ex, std::move(store));
  eng.start();
  eng.upsert_schedule(s);
  boost::system::error_code ec;
  const std::string ids[] = {s.id};
  auto rec = raw->find_schedules(ids, ec);
  eng.stop();
  return {rec[0]->definition, rec[0]->state};
}

nlohmann::json run_load(const std::string& uri, const std::string& label, std::size_t n) {
  // Half cron (a few zones), half intervals; ids like real ones.
  const std::vector<std::string> zones{"Europe/Berlin", "America/New_York", "UTC",
                                       "Australia/Lord_Howe"};
  std::vector<std::pair<std::string, std::string>> shapes;
  for (std::size_t k = 0; k < 8; ++k) {
    delayq::schedule s;
    s.id = "shape";
    s.type = "report";
    s.payload = R"({"account":12345})";
    if (k % 2 == 0) {
      s.cron = "0 3 * * MON-FRI";
      s.timezone = zones[k / 2];
    } else {
      s.every = std::chrono::hours(6 + static_cast<int>(k));
    }
    shapes.push_back(record_of(s));
  }
  {
    auto store = delayq::open_store(uri);
    auto* role = store->schedules();
    std::vector<std::string> ids(1000);
    std::vector<delayq::schedule_write> batch;
    for (std::size_t from = 0; from < n; from += 1000) {
      batch.clear();
      for (std::size_t i = from; i < std::min(n, from + 1000); ++i) {
        ids[i - from] = "account-" + std::to_string(100000 + i) + "/report";
        delayq::schedule_write w;
        w.id = ids[i - from];
        w.definition = shapes[i % shapes.size()].first;
        w.state = shapes[i % shapes.size()].second;
        batch.push_back(w);
      }
      boost::system::error_code ec;
      role->write_schedules(batch, ec);
      if (ec) throw boost::system::system_error(ec, "planting schedules");
    }
  }
  boost::asio::io_context io;
  auto guard = boost::asio::make_work_guard(io);
  std::thread runner([&] { io.run(); });
  delayq::executor_factory ex;
  ex.add("report", [](const delayq::task&) {});
  // Warm what every engine loads once (the tz data of the zones used), so
  // that the per-schedule figure is the schedules' own.
  for (const auto& z : zones) {
    delayq::schedule s;
    s.id = "warm";
    s.type = "report";
    s.cron = "@daily";
    s.timezone = z;
    (void)delayq::check_schedule(s);
  }
  // The store's part alone: every record in pages of 1,000, as start()
  // reads them (scan_schedules), and as a listing pages through them in id
  // order (list_schedules; a sharded store merges a page of every shard).
  double read_s = 0, list_s = 0;
  {
    auto s = delayq::open_store(uri);
    const auto r0 = clock_type::now();
    std::size_t seen = 0;
    boost::system::error_code ec;
    s->schedules()->scan_schedules(
        1000, [&](std::vector<delayq::schedule_record>& page) { seen += page.size(); }, ec);
    if (ec) throw boost::system::system_error(ec, "reading schedules");
    read_s = std::chrono::duration<double>(clock_type::now() - r0).count();
    if (seen != n) throw std::runtime_error("read " + std::to_string(seen) + " schedules");
    const auto l0 = clock_type::now();
    std::string after;
    seen = 0;
    for (;;) {
      auto page = s->schedules()->list_schedules(after, 1000, ec);
      if (ec) throw boost::system::system_error(ec, "listing schedules");
      seen += page.size();
      if (page.size() < 1000) break;
      after = page.back().id;
    }
    list_s = std::chrono::duration<double>(clock_type::now() - l0).count();
    if (seen != n) throw std::runtime_error("listed " + std::to_string(seen) + " schedules");
  }
  malloc_trim(0);
  auto store = delayq::open_store(uri);
  const std::size_t heap0 = heap_bytes(), rss0 = rss_bytes();
  delayq::engine eng(io, ex, std::move(store));
  const auto t0 = clock_type::now();
  const double cpu0 = thread_cpu_s();
  eng.start();  // the schedules are read and armed on this thread
  const double start_cpu_s = thread_cpu_s() - cpu0;
  const double start_s = std::chrono::duration<double>(clock_type::now() - t0).count();
  const std::size_t heap1 = heap_bytes(), rss1 = rss_bytes();
  const auto stats = eng.stats();
  eng.stop();
  guard.reset();
  io.stop();
  runner.join();
  nlohmann::json j{{"store", label},
                   {"schedules", n},
                   {"held", stats.schedules},
                   {"tasks_made", stats.occurrences_made},
                   {"start_s", start_s},
                   {"start_cpu_s", start_cpu_s},
                   {"store_read_s", read_s},
                   {"store_list_s", list_s},
                   {"heap_bytes_per_schedule", double(heap1 - heap0) / double(n)},
                   {"rss_bytes_per_schedule", double(rss1 - rss0) / double(n)}};
  std::printf(
      "load %-7s %8zu schedules: start() %.3f s, %.3f s of its thread's CPU (reading the store "
      "alone %.3f s, listing it in id order %.3f s), heap %.0f B and RSS %.0f B per schedule, "
      "%llu occurrences made\n",
      label.c_str(), n, start_s, start_cpu_s, read_s, list_s,
      j["heap_bytes_per_schedule"].get<double>(), j["rss_bytes_per_schedule"].get<double>(),
      static_cast<unsigned long long>(stats.occurrences_made));
  return j;
}

struct percentiles {
  double min = 0, p50 = 0, p99 = 0, max = 0;
  std::size_t n = 0;
};

percentiles of(std::vector<double> v) {
  percentiles p;
  p.n = v.size();
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  p.min = v.front();
  p.p50 = v[v.size() / 2];
  p.p99 = v[std::min(v.size() - 1, v.size() * 99 / 100)];
  p.max = v.back();
  return p;
}

// Lateness samples recorded by the executors without a lock: the measuring
// must not make the workers wait for each other (a shared std::mutex put a
// contended worker to sleep in the kernel, inside the burst it measures).
struct sample_log {
  explicit sample_log(std::size_t capacity) : ms(capacity) {}
  void add(double late_ms) noexcept {
    const std::size_t i = n.fetch_add(1, std::memory_order_relaxed);
    if (i < ms.size()) ms[i] = late_ms;
  }
  std::vector<double> taken() {
    ms.resize(std::min(ms.size(), n.load()));
    return std::move(ms);
  }
  std::vector<double> ms;
  std::atomic<std::size_t> n{0};
};

nlohmann::json run_lateness(std::size_t schedules, int seconds) {
  const std::size_t want = schedules * static_cast<std::size_t>(seconds);
  sample_log occ_log(want), task_log(want);
  auto late = [](const delayq::task& t) {
    return std::chrono::duration<double, std::milli>(std::chrono::system_clock::now() - t.due)
        .count();
  };
  delayq::executor_factory ex;
  ex.add("occurrence", [&](const delayq::task& t) { occ_log.add(late(t)); });
  ex.add("plain", [&](const delayq::task& t) { task_log.add(late(t)); });
  boost::asio::io_context io;
  auto guard = boost::asio::make_work_guard(io);
  std::thread runner([&] { io.run(); });
  delayq::engine eng(io, ex, std::make_unique<delayq::memory_store>());
  eng.start();
  const std::int64_t begin = (now_ms() / 1000 + 2) * 1000;
  for (std::size_t i = 0; i < schedules; ++i) {
    delayq::schedule s;
    s.id = "beat-" + std::to_string(i);
    s.type = "occurrence";
    s.every = 1s;
    s.start = delayq::from_epoch_ms(begin);
    s.end = delayq::from_epoch_ms(begin + (seconds - 1) * 1000);
    eng.upsert_schedule(s);
  }
  // The same instants as plain tasks, in the same engine.
  for (int k = 0; k < seconds; ++k) {
    std::vector<delayq::task_spec> batch;
    for (std::size_t i = 0; i < schedules; ++i)
      batch.push_back({"plain", "", delayq::from_epoch_ms(begin + k * 1000), {}});
    eng.schedule_many(std::move(batch));
  }
  const auto deadline = clock_type::now() + std::chrono::seconds(seconds + 60);
  while ((occ_log.n.load() < want || task_log.n.load() < want) && clock_type::now() <= deadline)
    std::this_thread::sleep_for(50ms);
  eng.stop();
  guard.reset();
  io.stop();
  runner.join();
  const percentiles o = of(occ_log.taken()), t = of(task_log.taken());
  std::printf(
      "lateness %zu every-second schedules for %d s, ms: occurrences min %.2f p50 %.2f p99 %.2f "
      "max %.2f (%zu); plain tasks min %.2f p50 %.2f p99 %.2f max %.2f (%zu)\n",
      schedules, seconds, o.min, o.p50, o.p99, o.max, o.n, t.min, t.p50, t.p99, t.max, t.n);
  return {
      {"schedules", schedules},
      {"seconds", seconds},
      {"occurrences",
       {{"n", o.n}, {"min_ms", o.min}, {"p50_ms", o.p50}, {"p99_ms", o.p99}, {"max_ms", o.max}}},
      {"plain_tasks",
       {{"n", t.n}, {"min_ms", t.min}, {"p50_ms", t.p50}, {"p99_ms", t.p99}, {"max_ms", t.max}}}};
}

}  // namespace

int main(int argc, char** argv) try {
  CLI::App app{"delayq-bench-schedules: recurring schedules' load time, memory and lateness"};
  bool quick = false;
  std::size_t n = 100000, beats = 1000;
  int seconds = 10;
  std::string redis_uri, out;
  app.add_flag("--quick", quick, "tiny sizes (CI's smoke run)");
  app.add_option("--schedules", n, "schedules stored for the load run")->capture_default_str();
  app.add_option("--beats", beats, "every-second schedules of the lateness run")
      ->capture_default_str();
  app.add_option("--seconds", seconds, "how long the lateness run lasts")->capture_default_str();
  app.add_option("--uri", redis_uri, "also load from this Redis (redis://HOST:PORT)");
  app.add_option("--out", out, "write the figures as JSON here");
  CLI11_PARSE(app, argc, argv);
  if (quick) {
    n = 2000;
    beats = 50;
    seconds = 2;
  }
  const auto dir = std::filesystem::temp_directory_path() /
                   ("delayq-bench-schedules-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  nlohmann::json all;
  all["load"].push_back(run_load("sqlite:" + (dir / "s.db").string(), "sqlite", n));
  if (!redis_uri.empty()) {
    const std::string prefix = redis_uri + "/0?prefix=bench-sched-" + std::to_string(::getpid());
    all["load"].push_back(run_load(prefix, "redis", n));
    // A cluster's layout: 64 shards (the default of --cluster), each a
    // key space of its own.
    all["load"].push_back(run_load(prefix + "-sharded&shards=64", "redis64", n));
  }
  all["lateness"] = run_lateness(beats, seconds);
  std::filesystem::remove_all(dir);
  if (!out.empty()) std::ofstream(out) << all.dump(2) << "\n";
  return 0;
} catch (const std::exception& e) {
  std::cerr << "delayq-bench-schedules: " << e.what() << "\n";
  return 1;
}
