// delayq-bench-latency - the cost of one dependent random memory access
// (pointer chasing through a random cycle of 64-byte lines) at working sets
// from 32 KiB to 1 GiB, with 4 KiB pages and with transparent huge pages
// requested (madvise(MADV_HUGEPAGE); the kernel may still decline).
//
// This is the floor under every structure in the micro benchmarks: an
// operation on N pending tasks that touches k cache lines the size of the
// structure apart costs at least k times the figure for that working set.
// The counter seconds_per_load is the CPU time per access (Google Benchmark rates
// divide by CPU time, so time the thread was descheduled does not count).
//
// latency/steady_clock_now times std::chrono::steady_clock::now(): the micro
// benchmarks read it twice per timed batch, so its cost divided by the batch
// size is their timing overhead per operation.
//
// Flags besides Google Benchmark's: --quick (32 KiB and 1 MiB only).
#include <benchmark/benchmark.h>
#include <sys/mman.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <vector>

#include "bench_cli.hpp"

namespace delayq::bench {
namespace {

struct line {
  std::size_t next;
  char pad[56];
};
static_assert(sizeof(line) == 64);

void bm_chase(benchmark::State& st, bool huge) {
  const auto bytes = static_cast<std::size_t>(st.range(0));
  const std::size_t n = bytes / sizeof(line);
  constexpr std::size_t align = std::size_t{2} << 20;
  const std::size_t alloc = (n * sizeof(line) + align - 1) / align * align;
  std::unique_ptr<line, decltype(&std::free)> lines(
      static_cast<line*>(std::aligned_alloc(align, alloc)), &std::free);
  if (!lines) {
    st.SkipWithError("out of memory");
    return;
  }
  if (huge) madvise(lines.get(), alloc, MADV_HUGEPAGE);
  // One random cycle through every line, so the hardware cannot prefetch.
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  rng r(7);
  for (std::size_t i = n; i > 1; --i) std::swap(order[i - 1], order[r.next() % i]);
  for (std::size_t i = 0; i < n; ++i) lines.get()[order[i]].next = order[(i + 1) % n];
  std::size_t p = order[0];
  for (std::size_t i = 0; i < n; ++i) p = lines.get()[p].next;  // warm up: fault every page in
  constexpr std::size_t steps = 1 << 16;
  for (auto _ : st) {
    for (std::size_t i = 0; i < steps; ++i) p = lines.get()[p].next;
    benchmark::DoNotOptimize(p);
  }
  st.counters["seconds_per_load"] =
      benchmark::Counter(static_cast<double>(st.iterations() * steps),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  st.counters["bytes"] = static_cast<double>(bytes);
}

void bm_steady_clock_now(benchmark::State& st) {
  for (auto _ : st) benchmark::DoNotOptimize(std::chrono::steady_clock::now());
  st.counters["seconds_per_load"] =
      benchmark::Counter(static_cast<double>(st.iterations()),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

}  // namespace
}  // namespace delayq::bench

int main(int argc, char** argv) {
  using namespace delayq::bench;
  const cli c = take_cli(argc, argv,
                         "delayq-bench-latency: one dependent random memory access per\n"
                         "working-set size (--sizes in bytes), the floor under the micro\n"
                         "benchmarks.",
                         benchmark::PrintDefaultHelp);
  std::vector<std::int64_t> sizes = c.sizes;
  if (sizes.empty())
    sizes = c.quick ? std::vector<std::int64_t>{32 << 10, 1 << 20}
                    : std::vector<std::int64_t>{32 << 10, 256 << 10, 1 << 20,   4 << 20,
                                                16 << 20, 64 << 20,  256 << 20, 1 << 30};
  for (const int huge : {0, 1})
    for (const std::int64_t s : sizes) {
      auto* b = benchmark::RegisterBenchmark(huge ? "latency/huge_pages" : "latency/4k_pages",
                                             [huge](benchmark::State& st) { bm_chase(st, huge); })
                    ->Arg(s)
                    ->ArgName("bytes")
                    ->Unit(benchmark::kMicrosecond);
      if (c.quick) b->MinTime(0.002);
    }
  auto* clock = benchmark::RegisterBenchmark("latency/steady_clock_now", bm_steady_clock_now)
                    ->Unit(benchmark::kNanosecond);
  if (c.quick) clock->MinTime(0.002);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
