// delayq-bench-engine - the public engine API as a user calls it, against one
// Asio steady_timer per task, from 1 and from 4 user threads in the same run.
// See docs/benchmarks.md for results and method.
//
//   engine/schedule_cancel  delayq::engine with a memory_store, started, its
//       io_context run by a thread of its own. One iteration on a user thread:
//       engine.cancel(id) of the oldest of that thread's 256 pending tasks,
//       then engine.schedule(type, "", delay, {.id = id}) of it again with a
//       new delay (1-2 h). Both calls are synchronous and return once the
//       store has the change, as they do for a user.
//   asio/cancel_arm  the same with a steady_timer per task on one io_context
//       run by another thread: timer.cancel(), then expires_after(delay) and
//       async_wait(no-op). The aborted handler runs on the io_context's thread.
//
// Both hold a base of P pending tasks (Google Benchmark's argument; 1e5 by
// default, --sizes=... to change, --quick for a smoke run) plus the windows.
// Time per iteration (real time, across all threads) covers one cancel and one
// schedule: per op is half of it; schedule calls per second is its inverse.
#include <utility>  // before any Boost.Asio header: Boost 1.74 + C++20 needs it

#include <benchmark/benchmark.h>

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench_cli.hpp"
#include "delayq/engine.hpp"
#include "delayq/executor.hpp"
#include "delayq/memory_store.hpp"
#include "io_thread.hpp"

namespace delayq::bench {
namespace {

constexpr int max_threads = 4;
constexpr std::size_t window = 256;  // pending tasks each user thread cycles through
constexpr std::size_t delay_count = 4096;

std::vector<std::chrono::milliseconds> random_delays(std::uint64_t seed) {
  rng r(seed);
  std::vector<std::chrono::milliseconds> d(delay_count);
  for (auto& x : d) x = std::chrono::milliseconds(r.between(3'600'000, 7'200'000));
  return d;
}

class engine_rig {
 public:
  explicit engine_rig(std::size_t base) : delays_(random_delays(1)) {
    executor_factory executors;
    executors.add("bench", [](const task&) {});
    engine_options o;
    o.workers = 1;  // nothing fires during the benchmark: one idle worker is enough
    engine_ = std::make_unique<engine>(io_.io(), executors, std::make_unique<memory_store>(), o);
    engine_->start();
    schedule_options so;
    for (std::size_t i = 0; i < base; ++i) {
      so.id = make_id('p', i);
      engine_->schedule("bench", std::string(), delays_[i % delay_count], so);
    }
    for (int t = 0; t < max_threads; ++t) {
      auto& w = windows_[t];
      w.opts.resize(window);
      for (std::size_t i = 0; i < window; ++i) {
        w.opts[i].id = make_id(static_cast<char>('a' + t), i);
        engine_->schedule("bench", std::string(), delays_[i], w.opts[i]);
      }
    }
  }
  ~engine_rig() { engine_->stop(std::chrono::milliseconds(0)); }

  // One iteration on user thread t; returns false when a call failed.
  bool cancel_then_schedule(int t) {
    auto& w = windows_[t];
    const schedule_options& so = w.opts[w.pos];
    boost::system::error_code ec;
    bool ok = engine_->cancel(so.id, ec) && !ec;
    engine_->schedule("bench", std::string(), delays_[w.next_delay], so, ec);
    ok = ok && !ec;
    w.pos = (w.pos + 1) % window;
    w.next_delay = (w.next_delay + 1) % delay_count;
    return ok;
  }
  std::size_t pending() const { return engine_->pending(); }

 private:
  struct alignas(64) thread_window {  // one cache line apart: no false sharing
    std::vector<schedule_options> opts;
    std::size_t pos = 0;
    std::size_t next_delay = 0;
  };
  io_thread io_;  // declared first: outlives the engine, whose timer lives on it
  std::vector<std::chrono::milliseconds> delays_;
  std::unique_ptr<engine> engine_;
  thread_window windows_[max_threads];
};

class asio_rig {
 public:
  explicit asio_rig(std::size_t base) : delays_(random_delays(1)) {
    base_.reserve(base);
    for (std::size_t i = 0; i < base; ++i) {
      base_.emplace_back(io_.io());
      base_.back().expires_after(delays_[i % delay_count]);
      base_.back().async_wait([](const boost::system::error_code&) {});
    }
    for (int t = 0; t < max_threads; ++t) {
      auto& w = windows_[t];
      w.timers.reserve(window);
      for (std::size_t i = 0; i < window; ++i) {
        w.timers.emplace_back(io_.io());
        w.timers.back().expires_after(delays_[i]);
        w.timers.back().async_wait([](const boost::system::error_code&) {});
      }
    }
  }
  ~asio_rig() {
    for (auto& t : base_) t.cancel();
    for (auto& w : windows_)
      for (auto& t : w.timers) t.cancel();
  }

  bool cancel_then_schedule(int t) {
    auto& w = windows_[t];
    boost::asio::steady_timer& timer = w.timers[w.pos];
    const bool ok = timer.cancel() == 1;
    timer.expires_after(delays_[w.next_delay]);
    timer.async_wait([](const boost::system::error_code&) {});
    w.pos = (w.pos + 1) % window;
    w.next_delay = (w.next_delay + 1) % delay_count;
    return ok;
  }

 private:
  struct alignas(64) thread_window {
    std::vector<boost::asio::steady_timer> timers;
    std::size_t pos = 0;
    std::size_t next_delay = 0;
  };
  io_thread io_;  // declared first: destroyed last, after every timer
  std::vector<std::chrono::milliseconds> delays_;
  std::vector<boost::asio::steady_timer> base_;
  thread_window windows_[max_threads];
};

// One rig of each kind, built for the base size of the benchmark about to run
// (in Setup, before its threads start) and kept across runs and repetitions.
template <class Rig>
struct rig_cache {
  static inline std::unique_ptr<Rig> rig;
  static inline std::size_t base = 0;
  static void setup(const benchmark::State& st) {
    const auto want = static_cast<std::size_t>(st.range(0));
    if (rig && base == want) return;
    rig.reset();
    rig = std::make_unique<Rig>(want);
    base = want;
  }
};

template <class Rig>
void bm_cancel_schedule(benchmark::State& st) {
  Rig& rig = *rig_cache<Rig>::rig;
  const int t = st.thread_index();
  std::size_t failures = 0;
  for (auto _ : st) failures += !rig.cancel_then_schedule(t);
  if (failures != 0) st.SkipWithError("a cancel or schedule call failed");
  st.SetItemsProcessed(st.iterations());  // schedule calls (and as many cancels)
  st.counters["pending_base"] =
      benchmark::Counter(static_cast<double>(st.range(0)), benchmark::Counter::kAvgThreads);
}

}  // namespace
}  // namespace delayq::bench

int main(int argc, char** argv) {
  using namespace delayq::bench;
  const cli c = take_cli(argc, argv);
  std::vector<std::int64_t> sizes = c.sizes;
  if (sizes.empty()) sizes = {c.quick ? 100 : 100'000};

  auto add = [&](const char* name, void (*fn)(benchmark::State&),
                 void (*setup)(const benchmark::State&)) {
    for (const std::int64_t p : sizes) {
      auto* b = benchmark::RegisterBenchmark(name, fn)
                    ->Arg(p)
                    ->ArgName("pending")
                    ->Setup(setup)
                    ->Threads(1)
                    ->Threads(max_threads)
                    ->UseRealTime()
                    ->Unit(benchmark::kNanosecond);
      if (c.quick) b->MinTime(0.005);
    }
  };
  add("engine/schedule_cancel", bm_cancel_schedule<engine_rig>, rig_cache<engine_rig>::setup);
  add("asio/cancel_arm", bm_cancel_schedule<asio_rig>, rig_cache<asio_rig>::setup);

  benchmark::AddCustomContext("delayq.window_per_thread", std::to_string(window));
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  rig_cache<engine_rig>::rig.reset();
  rig_cache<asio_rig>::rig.reset();
  return 0;
}
