// durable_engine.cpp - the engine measurements of the `durable` scenario of
// delayq-bench: (3) schedule() blocking, (4) async_schedule() with N in
// flight, (5) schedule_many(), (6) removals keep up, (7) recovery. See
// durable_bench.cpp.

#include <SQLiteCpp/Database.h>
#include <SQLiteCpp/Statement.h>
#include <SQLiteCpp/Transaction.h>
#include <stdlib.h>

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

// /proc/self/status fields in MiB (VmRSS, VmHWM).
double status_mb(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string key = std::string(field) + ":";
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return std::strtod(line.c_str() + key.size(), nullptr) / 1024.0;
  return 0;
}

// Resets VmHWM to the current RSS (Linux >= 4.0); false when not allowed.
bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  f.flush();
  return static_cast<bool>(f);
}

// ------------------------------------------------------------ engine runs

engine_options bench_engine_options(const durable_config& c, std::size_t queued) {
  engine_options o;
  o.tick = c.tick;
  o.workers = c.workers;
  // The bound on queued writes must not turn a deep async window into busy
  // errors: the scenario measures throughput, the bound has tests of its own.
  o.max_queued_writes = std::max<std::size_t>(o.max_queued_writes, 2 * queued + 1000);
  return o;
}

// An engine on a fresh store, started; destroyed (and the store cleared) by
// the caller after the measurement.
struct engine_run {
  io_thread io;
  executor_factory executors;
  std::unique_ptr<engine> eng;
  engine_run(
      const durable_config& c, const backend& b, std::size_t queued,
      std::function<void(const task&)> run = [](const task&) {}) {
    executors.add("noop", std::move(run));
    eng = std::make_unique<engine>(io.io(), executors, b.open(), bench_engine_options(c, queued));
    eng->start();
  }
};
}  // namespace

durable_rate run_blocking(const durable_config& c, const backend& b, int threads) {
  durable_rate r{"engine::schedule(), blocking, " + std::to_string(threads) + " threads"};
  b.clear();
  {
    engine_run run(c, b, 0);
    std::atomic<std::uint64_t> done{0}, failed{0};
    std::atomic<bool> capped{false};
    const std::uint64_t per_thread = c.blocking_tasks / static_cast<std::uint64_t>(threads);
    std::vector<std::thread> pool;
    const auto t0 = steady_clock::now();
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        schedule_options so;
        boost::system::error_code ec;
        for (std::uint64_t i = 0; i < per_thread; ++i) {
          if (seconds_since(t0) > c.max_seconds) {
            capped = true;
            return;
          }
          so.id = make_id(static_cast<char>('a' + t), i);
          run.eng->schedule("noop", std::string(), std::chrono::hours(1), so, ec);
          (ec ? failed : done).fetch_add(1, std::memory_order_relaxed);
        }
      });
    for (auto& th : pool) th.join();
    r.seconds = seconds_since(t0);
    r.tasks = done;
    r.failed = failed;
    r.capped = capped;
  }
  b.clear();
  return r;
}

durable_rate run_async(const durable_config& c, const backend& b, std::uint64_t in_flight) {
  durable_rate r{"engine::async_schedule(), " + std::to_string(in_flight) + " in flight, 1 thread"};
  const std::uint64_t total = std::max(c.async_tasks, in_flight);
  b.clear();
  {
    engine_run run(c, b, in_flight);
    std::mutex m;
    std::condition_variable cv;
    std::uint64_t outstanding = 0, done = 0, failed = 0;
    boost::system::error_code first_error;
    steady_clock::time_point last{};
    const auto t0 = steady_clock::now();
    std::uint64_t issued = 0;
    for (; issued < total; ++issued) {
      {
        std::unique_lock lock(m);
        cv.wait(lock, [&] { return outstanding < in_flight; });
        ++outstanding;
      }
      if ((issued & 0xff) == 0 && seconds_since(t0) > c.max_seconds) {
        std::lock_guard lock(m);
        --outstanding;
        r.capped = true;
        break;
      }
      schedule_options so;
      so.id = make_id('q', issued);
      run.eng->async_schedule("noop", std::string(), std::chrono::hours(1), std::move(so),
                              [&](boost::system::error_code ec, std::string) {
                                std::lock_guard lock(m);
                                --outstanding;
                                ++done;
                                if (ec) {
                                  ++failed;
                                  if (!first_error) first_error = ec;
                                }
                                last = steady_clock::now();
                                cv.notify_one();
                              });
    }
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return outstanding == 0; });
    r.seconds = std::chrono::duration<double>(last - t0).count();
    r.tasks = done - failed;
    r.failed = failed;
    if (first_error)
      std::fprintf(stderr, "  %s: %llu of %llu failed, first: %s\n", r.what.c_str(),
                   static_cast<unsigned long long>(failed), static_cast<unsigned long long>(done),
                   first_error.message().c_str());
  }
  b.clear();
  return r;
}

durable_rate run_many(const durable_config& c, const backend& b) {
  durable_rate r{"engine::schedule_many() of 1000, 1 thread"};
  b.clear();
  {
    engine_run run(c, b, 1000);
    const auto due = system_clock::now() + std::chrono::hours(1);
    const auto t0 = steady_clock::now();
    for (std::uint64_t i = 0; i < c.many_tasks;) {
      if (seconds_since(t0) > c.max_seconds) {
        r.capped = true;
        break;
      }
      const std::uint64_t size = std::min<std::uint64_t>(1000, c.many_tasks - i);
      std::vector<task_spec> specs(size);
      for (std::uint64_t k = 0; k < size; ++k) {
        specs[k].type = "noop";
        specs[k].due = due;
        specs[k].options.id = make_id('m', i + k);
      }
      boost::system::error_code ec;
      run.eng->schedule_many(std::move(specs), ec);
      (ec ? r.failed : r.tasks) += size;
      i += size;
    }
    r.seconds = seconds_since(t0);
  }
  b.clear();
  return r;
}

durable_removals run_removals(const durable_config& c, const backend& b) {
  durable_removals r;
  r.tasks = c.removal_tasks;
  b.clear();
  lateness_recorder late;
  completion fired(c.removal_tasks);
  std::atomic<std::int64_t> last_ns{0};
  {
    engine_run run(c, b, 1000, [&](const task& t) {
      late.record(system_clock::now() - t.due);
      last_ns.store(steady_clock::now().time_since_epoch().count(), std::memory_order_relaxed);
      fired.add();
    });
    const auto base = system_clock::now() + c.removal_lead;
    rng random(0xd0e);
    const auto t0 = steady_clock::now();
    for (std::uint64_t i = 0; i < c.removal_tasks;) {
      const std::uint64_t size = std::min<std::uint64_t>(1000, c.removal_tasks - i);
      std::vector<task_spec> specs(size);
      for (std::uint64_t k = 0; k < size; ++k) {
        specs[k].type = "noop";
        specs[k].due = base + milliseconds(static_cast<std::int64_t>(random.between(
                                  0, static_cast<std::uint64_t>(c.removal_window.count()))));
        specs[k].options.id = make_id('r', i + k);
      }
      run.eng->schedule_many(std::move(specs));
      i += size;
    }
    r.schedule_s = seconds_since(t0);
    if (r.schedule_s * 1000 > static_cast<double>(c.removal_lead.count()))
      std::fprintf(stderr,
                   "  removals: scheduling took %.2f s, longer than the %lld ms lead: the first "
                   "tasks ran late because of it\n",
                   r.schedule_s, static_cast<long long>(c.removal_lead.count()));
    const auto limit = c.removal_lead + c.removal_window + std::chrono::seconds(60);
    fired.wait(limit, [](std::uint64_t) {});
    r.ran = fired.done();
    const steady_clock::time_point last{steady_clock::duration(last_ns.load())};
    std::this_thread::sleep_until(last + c.removal_linger);
    r.held_after_linger = b.count();
    if (r.held_after_linger > 0) {
      // Not empty yet: how long until it is (up to 10 s after the last run).
      std::uint64_t left = r.held_after_linger;
      while (left > 0 && steady_clock::now() < last + std::chrono::seconds(10)) {
        std::this_thread::sleep_for(milliseconds(20));
        left = b.count();
      }
      if (left == 0)
        r.drained_after_s = std::chrono::duration<double>(steady_clock::now() - last).count();
    }
  }
  const distribution d = summarize(late.take());
  r.lateness_p50_us = d.p50_us;
  r.lateness_p99_us = d.p99_us;
  r.lateness_max_us = d.max_us;
  b.clear();
  return r;
}

durable_recovery run_recovery(const durable_config& c, const backend& b) {
  durable_recovery r;
  r.tasks = c.recovery_tasks;
  b.clear();
  {
    auto store = b.open();
    const auto base = std::chrono::floor<milliseconds>(system_clock::now() + std::chrono::hours(1));
    std::vector<task> batch;
    const auto f0 = steady_clock::now();
    for (std::uint64_t i = 0; i < c.recovery_tasks;) {
      batch.clear();
      const std::uint64_t size = std::min<std::uint64_t>(10'000, c.recovery_tasks - i);
      for (std::uint64_t k = i; k < i + size; ++k)
        batch.push_back(bench_task('v', k, base + milliseconds(k % 60'000)));
      store->save(batch);
      i += size;
    }
    r.fill_s = seconds_since(f0);
    // What the store's own streaming costs, apart from the engine's wheel.
    std::uint64_t listed = 0;
    const auto l0 = steady_clock::now();
    store->list([&](task&&) { ++listed; });
    r.list_s = seconds_since(l0);
  }
  {
    io_thread io;
    executor_factory executors;
    executors.add("noop", [](const task&) {});
    // The store is opened before the clock starts: the figure is start().
    auto eng = std::make_unique<engine>(io.io(), executors, b.open(), bench_engine_options(c, 0));
    r.rss_before_mb = status_mb("VmRSS");
    if (!reset_peak_rss())
      std::fprintf(stderr, "  recovery: cannot reset VmHWM; peak is lifetime\n");
    const auto t0 = steady_clock::now();
    eng->start();
    r.start_s = seconds_since(t0);
    r.rss_peak_mb = status_mb("VmHWM");
    r.rss_after_mb = status_mb("VmRSS");
    r.loaded = eng->stats().loaded;
  }
  b.clear();
  return r;
}

}  // namespace delayq::bench
