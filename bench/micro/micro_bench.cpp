// delayq-bench-micro - the timing wheel against a sorted set (ZSET-like), a
// lazy-cancel binary heap and one Asio steady_timer per task, on one thread,
// with N tasks pending. See docs/benchmarks.md for results and method.
//
// Each structure is filled with N tasks once (untimed, with its heap bytes
// counted) and kept across the benchmarks of that N. Every timed region is one
// batch of B = clamp(N / 16, 1, 1024) operations, timed with steady_clock
// (Google Benchmark's manual time); the untimed rest of the iteration puts the
// structure back to N pending tasks. What one operation measures:
//
//   schedule    add a task with a new id at a random due tick (the wheel gets
//               a task built outside the timed region and moved in); the
//               batch is cancelled again, untimed
//   cancel      remove a random pending task by id (for Asio: timer.cancel()
//               on a known timer, plus running its aborted handler); the
//               batch is scheduled again, untimed
//   reschedule  move a random pending task by id to a new random due tick
//   fire        advance the clock past every due tick, handing each of the N
//               tasks to a no-op sink (the wheel's sink erases the node); the
//               structure is refilled untimed
//
// Counters: ns_per_op (or ns_per_task and Mtasks_per_s for fire),
// bytes_per_task (net heap bytes held after the fill, over N), and for the
// wheel wheel_bytes_per_task (timer_wheel::memory_bytes() over N).
//
// Flags besides Google Benchmark's: --quick (sizes 64 and 512, a few ms per
// benchmark: the CI smoke run), --full (adds N = 1e7), --sizes=1000,1e6.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iterator>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "bench_cli.hpp"
#include "counting_allocator.hpp"
#include "structures.hpp"

namespace delayq::bench {
namespace {

using clock_type = std::chrono::steady_clock;

id_pool ids;  // ids[k] names the task with key k; grown on demand, never shrunk

std::size_t batch_for(std::size_t n) { return std::clamp<std::size_t>(n / 16, 1, 1024); }

// The one structure alive at a time, shared by the benchmarks of one
// (structure, N): benchmarks are registered structure by structure, size by
// size, so each is filled once per size (the fire benchmark refills it).
struct cached {
  std::string kind;
  std::size_t n = 0;
  std::shared_ptr<void> object;
  bool filled = false;
  double bytes_per_task = 0;
  double wheel_bytes_per_task = 0;
  std::vector<key> order;  // a random permutation of the pending keys 0..n-1
  std::size_t cursor = 0;
  rng random{0x5eed};
};
cached cache;

template <class S>
void fill(S& s, std::size_t n) {
  constexpr std::size_t chunk = 4096;
  std::vector<key> keys(chunk);
  std::vector<std::uint64_t> dues(chunk);
  for (std::size_t first = 0; first < n; first += chunk) {
    const std::size_t c = std::min(chunk, n - first);
    for (std::size_t i = 0; i < c; ++i) {
      keys[i] = static_cast<key>(first + i);
      dues[i] = s.now() + cache.random.between(1, horizon_ticks);
    }
    s.stage(keys.data(), c);
    s.preload(keys.data(), dues.data(), c);
  }
  s.trim();
  cache.filled = true;
}

template <class S>
S& structure_for(std::size_t n) {
  if (cache.kind != S::name || cache.n != n) {
    cache.object.reset();  // free the previous structure before building the next
    cache = cached{};
    const std::size_t capacity = n + batch_for(n);
    while (ids.size() < capacity) ids.push_back(make_id('t', ids.size()));
    cache.kind = S::name;
    cache.n = n;
    cache.order.resize(n);
    std::iota(cache.order.begin(), cache.order.end(), key{0});
    for (std::size_t i = n; i > 1; --i)
      std::swap(cache.order[i - 1], cache.order[cache.random.next() % i]);
    heap_meter meter;
    auto s = std::make_shared<S>(ids, capacity);
    fill(*s, n);
    cache.bytes_per_task = static_cast<double>(meter.bytes()) / static_cast<double>(n);
    cache.wheel_bytes_per_task = static_cast<double>(s->memory_bytes()) / static_cast<double>(n);
    cache.object = std::move(s);
  }
  S& s = *static_cast<S*>(cache.object.get());
  if (!cache.filled) fill(s, n);
  return s;
}

// The next b keys of the permutation: distinct within a batch since b <= n.
void next_keys(std::vector<key>& keys) {
  for (key& k : keys) {
    k = cache.order[cache.cursor];
    cache.cursor = (cache.cursor + 1) % cache.order.size();
  }
}

template <class S>
void random_dues(const S& s, std::vector<std::uint64_t>& dues) {
  for (auto& d : dues) d = s.now() + cache.random.between(1, horizon_ticks);
}

// Per-benchmark tallies turned into counters at the end.
struct tally {
  double ns = 0;
  std::size_t ops = 0;
  std::size_t failures = 0;

  void add(benchmark::State& st, clock_type::duration took, std::size_t n) {
    const double secs = std::chrono::duration<double>(took).count();
    st.SetIterationTime(secs);
    ns += secs * 1e9;
    ops += n;
  }
  template <class S>
  void finish(benchmark::State& st, std::size_t n, std::size_t batch, const char* per) {
    if (failures != 0) {
      st.SkipWithError("an operation failed (duplicate or missing id): the benchmark is wrong");
      return;
    }
    st.counters[per] = ops ? ns / static_cast<double>(ops) : 0;
    st.counters["n"] = static_cast<double>(n);
    st.counters["batch"] = static_cast<double>(batch);
    st.counters["bytes_per_task"] = cache.bytes_per_task;
    if (std::string_view(S::name) == "wheel")
      st.counters["wheel_bytes_per_task"] = cache.wheel_bytes_per_task;
  }
};

template <class S>
void bm_schedule(benchmark::State& st) {
  const auto n = static_cast<std::size_t>(st.range(0));
  S& s = structure_for<S>(n);
  const std::size_t b = batch_for(n);
  std::vector<key> keys(b);
  std::iota(keys.begin(), keys.end(), static_cast<key>(n));  // the spare ids n..n+b-1
  std::vector<std::uint64_t> dues(b);
  tally t;
  for (auto _ : st) {
    random_dues(s, dues);
    s.stage(keys.data(), b);
    const auto t0 = clock_type::now();
    const std::size_t ok = s.schedule(keys.data(), dues.data(), b);
    const auto t1 = clock_type::now();
    t.add(st, t1 - t0, b);
    t.failures += b - ok;
    t.failures += b - s.cancel(keys.data(), b);
  }
  t.finish<S>(st, n, b, "ns_per_op");
}

// `Cancel` is S::cancel, or for the wheel also S::cancel_many: the same
// removals handed over as one erase_many() call per batch (the plan for the
// 50 ns target: overlap the memory accesses of several cancels).
template <class S, std::size_t (S::*Cancel)(const key*, std::size_t) = &S::cancel>
void bm_cancel(benchmark::State& st) {
  const auto n = static_cast<std::size_t>(st.range(0));
  S& s = structure_for<S>(n);
  const std::size_t b = batch_for(n);
  std::vector<key> keys(b);
  std::vector<std::uint64_t> dues(b);
  tally t;
  for (auto _ : st) {
    next_keys(keys);
    const auto t0 = clock_type::now();
    const std::size_t ok = (s.*Cancel)(keys.data(), b);
    const auto t1 = clock_type::now();
    t.add(st, t1 - t0, b);
    t.failures += b - ok;
    random_dues(s, dues);
    s.stage(keys.data(), b);
    t.failures += b - s.schedule(keys.data(), dues.data(), b);
  }
  t.finish<S>(st, n, b, "ns_per_op");
}

template <class S>
void bm_reschedule(benchmark::State& st) {
  const auto n = static_cast<std::size_t>(st.range(0));
  S& s = structure_for<S>(n);
  const std::size_t b = batch_for(n);
  std::vector<key> keys(b);
  std::vector<std::uint64_t> dues(b);
  tally t;
  for (auto _ : st) {
    next_keys(keys);
    random_dues(s, dues);
    const auto t0 = clock_type::now();
    const std::size_t ok = s.reschedule(keys.data(), dues.data(), b);
    const auto t1 = clock_type::now();
    t.add(st, t1 - t0, b);
    t.failures += b - ok;
  }
  t.finish<S>(st, n, b, "ns_per_op");
}

template <class S>
void bm_fire(benchmark::State& st) {
  const auto n = static_cast<std::size_t>(st.range(0));
  S& s = structure_for<S>(n);
  tally t;
  for (auto _ : st) {
    if (!cache.filled) fill(s, n);
    s.prepare_fire();
    const auto t0 = clock_type::now();
    const std::size_t fired = s.fire_all();
    const auto t1 = clock_type::now();
    cache.filled = false;
    t.add(st, t1 - t0, fired);
    t.failures += fired != n;
  }
  t.finish<S>(st, n, n, "ns_per_task");
  if (t.ns > 0) st.counters["Mtasks_per_s"] = static_cast<double>(t.ops) / t.ns * 1e3;
}

template <class S>
void register_structure(const std::vector<std::int64_t>& sizes, bool quick) {
  struct op {
    const char* name;
    void (*fn)(benchmark::State&);
  };
  const op ops[] = {{"schedule", bm_schedule<S>},
                    {"cancel", bm_cancel<S>},
                    {"reschedule", bm_reschedule<S>},
                    {"fire", bm_fire<S>}};
  std::vector<op> list(std::begin(ops), std::end(ops));
  if constexpr (requires(S & s, const key* k) { s.cancel_many(k, std::size_t{}); })
    list.push_back({"cancel_many", bm_cancel<S, &S::cancel_many>});
  for (const std::int64_t n : sizes)
    for (const op& o : list) {
      auto* b = benchmark::RegisterBenchmark((std::string(S::name) + "/" + o.name).c_str(), o.fn)
                    ->Arg(n)
                    ->ArgName("n")
                    ->UseManualTime()
                    ->Unit(benchmark::kMicrosecond);
      if (quick) b->MinTime(0.002);
    }
}

}  // namespace
}  // namespace delayq::bench

int main(int argc, char** argv) {
  using namespace delayq::bench;
  const cli c =
      take_cli(argc, argv,
               "delayq-bench-micro: the wheel against a sorted set, a lazy heap and Asio\n"
               "timers, single thread, across pending sizes (default 1e3-1e6; --full\n"
               "adds 1e7).",
               benchmark::PrintDefaultHelp);
  std::vector<std::int64_t> sizes = c.sizes;
  if (sizes.empty()) {
    sizes = c.quick ? std::vector<std::int64_t>{64, 512}
                    : std::vector<std::int64_t>{1'000, 10'000, 100'000, 1'000'000};
    if (c.full && !c.quick) sizes.push_back(10'000'000);
  }
  register_structure<wheel_structure>(sizes, c.quick);
  register_structure<zset_structure>(sizes, c.quick);
  register_structure<heap_structure>(sizes, c.quick);
  register_structure<asio_structure>(sizes, c.quick);

  benchmark::AddCustomContext("delayq.sizeof_task", std::to_string(sizeof(delayq::task)));
  benchmark::AddCustomContext("delayq.horizon_ticks", std::to_string(horizon_ticks));
  benchmark::AddCustomContext("delayq.wheel_slots", "3600");
  benchmark::AddCustomContext("delayq.batch", "clamp(n / 16, 1, 1024) ops per timed region");
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
