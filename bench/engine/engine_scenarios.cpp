// engine_scenarios.cpp - the scenarios of delayq-bench-engine, each run in a
// child process (ops, threads, memory, wheel, fire): the engine side and the
// Asio side, and the raw rows each child prints. See engine_bench.cpp for
// what each scenario measures and how the parent reports it.

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

#include "bench_cli.hpp"
#include "delayq/engine.hpp"
#include "delayq/executor.hpp"
#include "delayq/memory_store.hpp"
#include "delayq/timer_wheel.hpp"
#include "engine_bench.hpp"
#include "io_thread.hpp"

namespace delayq::bench {
namespace {

// ------------------------------------------------------------------ ids

void format_id(std::uint32_t n, char* out) noexcept {
  std::memcpy(out, "order-", 6);
  for (int i = 13; i >= 6; --i) {
    out[i] = static_cast<char>('0' + n % 10);
    n /= 10;
  }
}

// Ids of a list of task numbers, formatted before the clock starts.
class id_list {
 public:
  void assign(const std::vector<std::uint32_t>& numbers) {
    buf_.resize(numbers.size() * id_stride);
    for (std::size_t i = 0; i < numbers.size(); ++i) format_id(numbers[i], &buf_[i * id_stride]);
  }
  std::string_view operator[](std::size_t i) const noexcept {
    return {&buf_[i * id_stride], id_len};
  }

 private:
  std::vector<char> buf_;
};

// The ids of the numbers 0 .. n - 1.
id_list first_ids(std::size_t n) {
  std::vector<std::uint32_t> all(n);
  for (std::size_t i = 0; i < n; ++i) all[i] = static_cast<std::uint32_t>(i);
  id_list ids;
  ids.assign(all);
  return ids;
}

std::vector<milliseconds> random_delays(std::uint64_t seed, std::size_t n) {
  rng r(seed);
  std::vector<milliseconds> d(n);
  for (auto& x : d) x = milliseconds(static_cast<std::int64_t>(r.between(3'600'000, 7'200'000)));
  return d;
}

std::size_t rss_bytes() {
  std::ifstream f("/proc/self/statm");
  std::size_t pages_total = 0, pages_resident = 0;
  f >> pages_total >> pages_resident;
  return pages_resident * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

// A row a child prints: section, op, impl, pending, threads, round, value.
void emit(const char* section, const char* op, const char* impl, std::size_t pending, int threads,
          int round, double value) {
  std::printf("%s\t%s\t%s\t%zu\t%d\t%d\t%.6g\n", section, op, impl, pending, threads, round, value);
}

// ------------------------------------------------------------------ the two sides

// The engine as a user holds it: default options, a memory_store, started,
// its io_context on a thread of its own.
class engine_side {
 public:
  engine_side() : engine_side(engine_options{}) {}
  explicit engine_side(
      engine_options o, executor_factory::function fn = [](const task&) {}) {
    if (engine_tables != 0) o.tables = engine_tables;
    executor_factory executors;
    executors.add(std::string(task_type), std::move(fn));
    engine_ = std::make_unique<engine>(io_.io(), executors, std::make_unique<memory_store>(), o);
    engine_->start();
  }
  static constexpr const char* name = "engine";

  void schedule(std::string_view id, milliseconds delay) {
    so_.id.assign(id);
    engine_->schedule(task_type, std::string(), delay, so_, ec_);
    if (ec_) die("engine.schedule failed");
  }
  void cancel(std::string_view id) {
    if (!engine_->cancel(id, ec_) || ec_) die("engine.cancel found no task");
  }
  void reschedule(std::string_view id, milliseconds delay) {
    if (!engine_->reschedule(id, std::chrono::system_clock::now() + delay, ec_) || ec_)
      die("engine.reschedule found no task");
  }
  engine& get() noexcept { return *engine_; }

 private:
  io_thread io_;  // declared first: outlives the engine, whose timer lives on it
  std::unique_ptr<engine> engine_;
  schedule_options so_;
  boost::system::error_code ec_;
};

// One steady_timer per task, by index.
class asio_side {
 public:
  explicit asio_side(std::size_t capacity) {
    timers_.reserve(capacity);
    for (std::size_t i = 0; i < capacity; ++i) timers_.emplace_back(io_.io());
  }
  static constexpr const char* name = "asio";

  void schedule(std::uint32_t n, milliseconds delay) {
    auto& t = timers_[n];
    t.expires_after(delay);
    t.async_wait([](const boost::system::error_code&) {});
  }
  void cancel(std::uint32_t n) {
    if (timers_[n].cancel() != 1) die("asio cancel found no wait");
  }
  void reschedule(std::uint32_t n, milliseconds delay) {
    auto& t = timers_[n];
    if (t.expires_after(delay) != 1) die("asio reschedule found no wait");
    t.async_wait([](const boost::system::error_code&) {});
  }

 private:
  io_thread io_;  // declared first: destroyed last (children _Exit before, anyway)
  std::vector<boost::asio::steady_timer> timers_;
};

}  // namespace

// ------------------------------------------------------------------ child: ops

void child_ops(std::size_t pending, int rounds, std::size_t ops_per_round) {
  const std::size_t batch = std::clamp<std::size_t>(pending / 10, 10, ops_per_round);
  const std::size_t batches = (ops_per_round + batch - 1) / batch;
  const auto delays = random_delays(7, 4096);
  rng r(pending);

  std::vector<std::uint32_t> live(pending), spare(batch);
  for (std::size_t i = 0; i < pending; ++i) live[i] = static_cast<std::uint32_t>(i);
  for (std::size_t i = 0; i < batch; ++i) spare[i] = static_cast<std::uint32_t>(pending + i);

  std::fprintf(stderr, "  ops at %zu pending: filling...", pending);
  auto t0 = clock_type::now();
  engine_side eng;
  {
    id_list ids;
    ids.assign(live);
    for (std::size_t i = 0; i < pending; ++i) eng.schedule(ids[i], delays[i % delays.size()]);
  }
  const double fill_engine = seconds_since(t0);
  t0 = clock_type::now();
  asio_side asio(pending + batch);
  for (std::size_t i = 0; i < pending; ++i) asio.schedule(live[i], delays[i % delays.size()]);
  const double fill_asio = seconds_since(t0);
  std::fprintf(stderr, " engine %.2f s, asio %.2f s; %d rounds of %zu batches of %zu\n",
               fill_engine, fill_asio, rounds, batches, batch);
  emit("ops", "fill_s", "engine", pending, 1, 0, fill_engine);
  emit("ops", "fill_s", "asio", pending, 1, 0, fill_asio);

  std::vector<std::uint32_t> cancel_n(batch), move_n(batch);
  std::vector<milliseconds> delay_of(batch);
  id_list sched_ids, cancel_ids, move_ids;
  for (int round = 0; round < rounds; ++round) {
    double ns[2][3] = {};  // [engine, asio][schedule, cancel, reschedule]
    for (std::size_t b = 0; b < batches; ++b) {
      // The plan of this batch, the same for both sides: schedule the spare
      // numbers, cancel random live ones (the spares become live first), move
      // random live ones.
      for (auto n : spare) live.push_back(n);
      for (std::size_t i = 0; i < batch; ++i) {
        const std::size_t j = r.between(0, live.size() - 1);
        cancel_n[i] = live[j];
        live[j] = live.back();
        live.pop_back();
      }
      for (std::size_t i = 0; i < batch; ++i) {
        move_n[i] = live[r.between(0, live.size() - 1)];
        delay_of[i] = delays[r.between(0, delays.size() - 1)];
      }
      sched_ids.assign(spare);
      cancel_ids.assign(cancel_n);
      move_ids.assign(move_n);

      const auto run_engine = [&] {
        auto t = clock_type::now();
        for (std::size_t i = 0; i < batch; ++i) eng.schedule(sched_ids[i], delay_of[i]);
        auto u = clock_type::now();
        for (std::size_t i = 0; i < batch; ++i) eng.cancel(cancel_ids[i]);
        auto v = clock_type::now();
        for (std::size_t i = 0; i < batch; ++i) eng.reschedule(move_ids[i], delay_of[i]);
        auto w = clock_type::now();
        ns[0][0] += std::chrono::duration<double, std::nano>(u - t).count();
        ns[0][1] += std::chrono::duration<double, std::nano>(v - u).count();
        ns[0][2] += std::chrono::duration<double, std::nano>(w - v).count();
      };
      const auto run_asio = [&] {
        auto t = clock_type::now();
        for (std::size_t i = 0; i < batch; ++i) asio.schedule(spare[i], delay_of[i]);
        auto u = clock_type::now();
        for (std::size_t i = 0; i < batch; ++i) asio.cancel(cancel_n[i]);
        auto v = clock_type::now();
        for (std::size_t i = 0; i < batch; ++i) asio.reschedule(move_n[i], delay_of[i]);
        auto w = clock_type::now();
        ns[1][0] += std::chrono::duration<double, std::nano>(u - t).count();
        ns[1][1] += std::chrono::duration<double, std::nano>(v - u).count();
        ns[1][2] += std::chrono::duration<double, std::nano>(w - v).count();
      };
      if (round % 2 == 0) {
        run_engine();
        run_asio();
      } else {
        run_asio();
        run_engine();
      }
      spare = cancel_n;  // cancelled numbers are free for the next batch
    }
    const double ops = static_cast<double>(batches * batch);
    const char* op_names[3] = {"schedule", "cancel", "reschedule"};
    for (int s = 0; s < 2; ++s)
      for (int o = 0; o < 3; ++o)
        emit("ops", op_names[o], s == 0 ? "engine" : "asio", pending, 1, round, ns[s][o] / ops);
  }
}

// ------------------------------------------------------------------ child: threads

namespace {

struct thread_plan {
  std::vector<std::uint32_t> numbers;
  id_list ids;
};

}  // namespace

template <class Pair>
double run_threads(int threads, double seconds, const std::vector<thread_plan>& plans,
                   Pair&& pair) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false}, stop{false};
  std::vector<std::uint64_t> pairs(static_cast<std::size_t>(threads) * 8, 0);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      const thread_plan& plan = plans[static_cast<std::size_t>(t)];
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      std::uint64_t done = 0;
      std::size_t i = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        for (int k = 0; k < 32; ++k) {
          pair(t, plan, i);
          i = (i + 1) % thread_ids;
        }
        done += 32;
      }
      pairs[static_cast<std::size_t>(t) * 8] = done;  // 64 bytes apart
    });
  }
  while (ready.load() < threads) std::this_thread::yield();
  const auto t0 = clock_type::now();
  go.store(true, std::memory_order_release);
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop.store(true);
  for (auto& th : pool) th.join();
  const double elapsed = seconds_since(t0);
  std::uint64_t total = 0;
  for (int t = 0; t < threads; ++t) total += pairs[static_cast<std::size_t>(t) * 8];
  return static_cast<double>(total) / elapsed;
}

void child_threads(std::size_t pending, int rounds, double seconds) {
  const auto delays = random_delays(11, 4096);
  std::fprintf(stderr, "  threads at %zu pending: filling...", pending);
  engine_side eng;
  asio_side asio(pending);
  {
    std::vector<std::uint32_t> all(pending);
    for (std::size_t i = 0; i < pending; ++i) all[i] = static_cast<std::uint32_t>(i);
    id_list ids;
    ids.assign(all);
    for (std::size_t i = 0; i < pending; ++i) {
      eng.schedule(ids[i], delays[i % delays.size()]);
      asio.schedule(all[i], delays[i % delays.size()]);
    }
  }
  // The bound on what sharing costs: one engine per thread, each holding
  // only its thread's slice of the tasks, so that the threads share nothing
  // of delayq's (only the machine: its cores, caches and memory). Run from
  // max_threads threads only: with one thread it is the engine side.
  std::vector<std::unique_ptr<engine_side>> separate;
  for (int t = 0; t < max_threads; ++t) {
    separate.push_back(std::make_unique<engine_side>());
    const std::size_t lo = pending * static_cast<std::size_t>(t) / max_threads;
    const std::size_t hi = pending * static_cast<std::size_t>(t + 1) / max_threads;
    std::vector<std::uint32_t> slice;
    for (std::size_t i = lo; i < hi; ++i) slice.push_back(static_cast<std::uint32_t>(i));
    id_list ids;
    ids.assign(slice);
    for (std::size_t i = 0; i < slice.size(); ++i)
      separate.back()->schedule(ids[i], delays[slice[i] % delays.size()]);
  }
  std::fprintf(stderr, " done; %d rounds of %.2f s per measurement\n", rounds, seconds);

  // plans[T][t]: thread t of T owns the numbers [t*P/T, (t+1)*P/T) and cycles
  // through thread_ids random ones of them.
  std::map<int, std::vector<thread_plan>> plans;
  for (int threads : {1, max_threads}) {
    auto& v = plans[threads];
    v.resize(static_cast<std::size_t>(threads));
    for (int t = 0; t < threads; ++t) {
      rng r(static_cast<std::uint64_t>(threads * 100 + t));
      const std::size_t lo =
          pending * static_cast<std::size_t>(t) / static_cast<std::size_t>(threads);
      const std::size_t hi =
          pending * static_cast<std::size_t>(t + 1) / static_cast<std::size_t>(threads);
      auto& p = v[static_cast<std::size_t>(t)];
      p.numbers.resize(thread_ids);
      for (auto& n : p.numbers) n = static_cast<std::uint32_t>(r.between(lo, hi - 1));
      p.ids.assign(p.numbers);
    }
  }

  // Each user thread needs its own schedule_options and error_code: the
  // engine_side helpers are for one thread, so the pairs call the engine here.
  struct alignas(64) per_thread {
    schedule_options so;
    boost::system::error_code ec;
  };
  std::vector<per_thread> locals(max_threads);
  auto pair_on = [&](engine& e, int t, const thread_plan& plan, std::size_t i) {
    per_thread& l = locals[static_cast<std::size_t>(t)];
    const std::string_view id = plan.ids[i];
    if (!e.cancel(id, l.ec) || l.ec) die("engine.cancel found no task (threads)");
    l.so.id.assign(id);
    e.schedule(task_type, std::string(), delays[i % delays.size()], l.so, l.ec);
    if (l.ec) die("engine.schedule failed (threads)");
  };
  auto engine_pair = [&](int t, const thread_plan& plan, std::size_t i) {
    pair_on(eng.get(), t, plan, i);
  };
  auto engines_pair = [&](int t, const thread_plan& plan, std::size_t i) {
    pair_on(separate[static_cast<std::size_t>(t)]->get(), t, plan, i);
  };
  auto asio_pair = [&](int, const thread_plan& plan, std::size_t i) {
    asio.cancel(plan.numbers[i]);
    asio.schedule(plan.numbers[i], delays[i % delays.size()]);
  };
  // The sides take turns, the first one moving on each round, so that none
  // always runs first or last.
  for (int round = 0; round < rounds; ++round) {
    for (int threads : {1, max_threads}) {
      const auto& p = plans[threads];
      const auto run = [&](const char* side, auto& pair) {
        emit("threads", "pairs_per_s", side, pending, threads, round,
             run_threads(threads, seconds, p, pair));
      };
      const int sides = threads == max_threads ? 3 : 2;
      for (int k = 0; k < sides; ++k) {
        switch ((k + round) % sides) {
          case 0: run("engine", engine_pair); break;
          case 1: run("asio", asio_pair); break;
          default: run("engines", engines_pair);
        }
      }
    }
  }
}

// ------------------------------------------------------------------ child: memory

void child_memory(const std::string& impl, std::size_t n) {
  const auto delays = random_delays(13, 4096);
  const id_list ids = first_ids(n);
  if (impl == "engine") {
    // What an engine takes before it holds anything: its tables' slot
    // arrays, its threads' stacks as far as they are touched.
    const std::size_t empty = rss_bytes();
    engine_side eng;
    const std::size_t before = rss_bytes();
    emit("memory", "idle_bytes", "engine", n, 1, 0, static_cast<double>(before - empty));
    for (std::size_t i = 0; i < n; ++i) eng.schedule(ids[i], delays[i % delays.size()]);
    const double per = static_cast<double>(rss_bytes() - before) / static_cast<double>(n);
    emit("memory", "rss_bytes_per_task", "engine", n, 1, 0, per);
    emit("memory", "beyond_id_type_payload", "engine", n, 1, 0,
         per - static_cast<double>(id_len + task_type.size()));
    std::fflush(stdout);
    std::_Exit(0);
  }
  io_thread io;
  const std::size_t before = rss_bytes();
  std::vector<boost::asio::steady_timer> timers;
  timers.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    timers.emplace_back(io.io());
    timers.back().expires_after(delays[i % delays.size()]);
    timers.back().async_wait([](const boost::system::error_code&) {});
  }
  const double per = static_cast<double>(rss_bytes() - before) / static_cast<double>(n);
  emit("memory", "rss_bytes_per_task", "asio", n, 1, 0, per);
  std::fflush(stdout);
  std::_Exit(0);
}

// ------------------------------------------------------------------ child: fill

// Issue 32's shape: a fresh engine (or a fresh io_context) takes n tasks
// from one user thread, ids "order-N" formatted before the clock, delays
// uniform over [120 s, 3600 s], no warm-up. `how`: "schedule" (one call a
// task), "schedule_many" (1,000 a call, the task_spec values built inside
// the clock: a caller builds them too) or "asio" (a steady_timer made,
// expires_after and async_wait per task, into a vector reserved ahead).
void child_fill(const std::string& how, std::size_t n, int round) {
  const id_list ids = first_ids(n);
  rng r(29 + static_cast<std::uint64_t>(round));
  std::vector<milliseconds> delay(n);
  for (auto& d : delay) d = milliseconds(static_cast<std::int64_t>(r.between(120'000, 3'600'000)));
  double s = 0;
  std::size_t rss_before = 0;
  if (how == "asio") {
    io_thread io;
    rss_before = rss_bytes();
    std::vector<boost::asio::steady_timer> timers;
    timers.reserve(n);
    const auto t0 = clock_type::now();
    for (std::size_t i = 0; i < n; ++i) {
      timers.emplace_back(io.io());
      timers.back().expires_after(delay[i]);
      timers.back().async_wait([](const boost::system::error_code&) {});
    }
    s = seconds_since(t0);
    emit("fill", "rss_bytes_per_task", how.c_str(), n, 1, round,
         (static_cast<double>(rss_bytes()) - static_cast<double>(rss_before)) /
             static_cast<double>(n));
  } else {
    engine_side eng;
    rss_before = rss_bytes();
    if (how == "schedule") {
      const auto t0 = clock_type::now();
      for (std::size_t i = 0; i < n; ++i) eng.schedule(ids[i], delay[i]);
      s = seconds_since(t0);
    } else if (how == "schedule_many") {
      constexpr std::size_t per_call = 1000;
      boost::system::error_code ec;
      const auto t0 = clock_type::now();
      for (std::size_t i = 0; i < n; i += per_call) {
        const std::size_t k = std::min(per_call, n - i);
        const auto now = std::chrono::system_clock::now();
        std::vector<task_spec> batch(k);
        for (std::size_t j = 0; j < k; ++j) {
          batch[j].type = task_type;
          batch[j].due = now + delay[i + j];
          batch[j].options.id = ids[i + j];
        }
        eng.get().schedule_many(std::move(batch), ec);
        if (ec) die("engine.schedule_many failed (fill)");
      }
      s = seconds_since(t0);
    } else {
      die("unknown fill side");
    }
    if (eng.get().stats().pending != n) die("the engine does not hold every task (fill)");
    emit("fill", "rss_bytes_per_task", how.c_str(), n, 1, round,
         (static_cast<double>(rss_bytes()) - static_cast<double>(rss_before)) /
             static_cast<double>(n));
  }
  emit("fill", "ns_per_task", how.c_str(), n, 1, round, s * 1e9 / static_cast<double>(n));
  std::fflush(stdout);
  std::_Exit(0);  // a fresh process per round: skip the teardown
}

// ------------------------------------------------------------------ child: wheel

void child_wheel(std::size_t n, int rounds) {
  constexpr std::uint64_t ticks = 100;  // 1 s at a 10 ms tick
  const id_list ids = first_ids(n);
  std::vector<std::uint64_t> due(n);
  rng r(17);
  for (auto& d : due) d = r.between(1, ticks);
  std::vector<timer_wheel::handle> out(n);
  for (int round = 0; round < rounds; ++round) {
    for (int erase = 0; erase < 2; ++erase) {
      timer_wheel w(3600);
      w.reserve(n);
      for (std::size_t i = 0; i < n; ++i)
        if (w.insert(timer_wheel::item{ids[i], {}}, due[i]) == timer_wheel::npos)
          die("wheel insert failed");
      std::size_t fired = 0;
      const auto t0 = clock_type::now();
      if (erase) {
        for (std::uint64_t t = 1; t <= ticks; ++t)
          fired += w.advance(t, [&](timer_wheel::handle h) { w.erase(h); });
      } else {
        std::size_t k = 0;
        for (std::uint64_t t = 1; t <= ticks; ++t)
          fired += w.advance(t, [&](timer_wheel::handle h) { out[k++] = h; });
      }
      const double s = seconds_since(t0);
      if (fired != n) die("the wheel did not hand out every task");
      emit("wheel", erase ? "fire_and_erase_per_s" : "handout_per_s", "wheel", n, 1, round,
           static_cast<double>(n) / s);
    }
  }
}

// ------------------------------------------------------------------ lateness

namespace {

// What the executor of the fire and precision scenarios records: each
// attempt's lateness (system_clock::now() at its start minus its due time),
// and when the last one started.
class lateness_log {
 public:
  explicit lateness_log(std::size_t n) : late_us_(n) {}

  void operator()(const task& t) {
    const auto now = std::chrono::system_clock::now();
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(now - t.due).count();
    const std::size_t k = ran_.fetch_add(1, std::memory_order_relaxed);
    if (k < late_us_.size()) late_us_[k] = us;
    const auto at =
        std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count();
    std::int64_t prev = last_us_.load(std::memory_order_relaxed);
    while (prev < at && !last_us_.compare_exchange_weak(prev, at, std::memory_order_relaxed)) {
    }
  }

  // Polls (a benchmark, not a test: no event to wait on is worth the code)
  // until every task ran; dies after `limit`.
  void wait_all(clock_type::time_point limit) {
    while (ran_.load() < late_us_.size()) {
      if (clock_type::now() > limit) die("the tasks did not all run in time");
      std::this_thread::sleep_for(milliseconds(2));
    }
    std::sort(late_us_.begin(), late_us_.end());
  }
  // After wait_all(): the p-quantile of lateness, in ms.
  double quantile_ms(double p) const {
    const std::size_t n = late_us_.size();
    const auto k = static_cast<std::size_t>(std::ceil(p * static_cast<double>(n))) - 1;
    return static_cast<double>(late_us_[std::min(k, n - 1)]) / 1000.0;
  }
  double max_ms() const { return static_cast<double>(late_us_.back()) / 1000.0; }
  std::int64_t last_us() const { return last_us_.load(); }

 private:
  std::vector<std::int64_t> late_us_;
  std::atomic<std::size_t> ran_{0};
  std::atomic<std::int64_t> last_us_{0};
};

// Emits the lateness rows every lateness scenario reports.
void emit_lateness(const char* section, std::size_t n, int round, const lateness_log& log,
                   const engine_stats& st) {
  emit(section, "lateness_p50_ms", "engine", n, 1, round, log.quantile_ms(0.50));
  emit(section, "lateness_p99_ms", "engine", n, 1, round, log.quantile_ms(0.99));
  emit(section, "lateness_max_ms", "engine", n, 1, round, log.max_ms());
  emit(section, "stats_p99_ms", "engine", n, 1, round,
       static_cast<double>(st.lateness_p99.count()) / 1000.0);
}

}  // namespace

// ------------------------------------------------------------------ child: fire

void child_fire(std::size_t n, int round, double lead_s) {
  lateness_log log(n);
  engine_side eng(engine_options{}, std::ref(log));
  const id_list ids = first_ids(n);
  rng r(19 + static_cast<std::uint64_t>(round));
  const auto t0 = std::chrono::system_clock::now() +
                  std::chrono::duration_cast<std::chrono::system_clock::duration>(
                      std::chrono::duration<double>(lead_s));
  schedule_options so;
  boost::system::error_code ec;
  const auto s0 = clock_type::now();
  for (std::size_t i = 0; i < n; ++i) {
    so.id.assign(ids[i]);
    eng.get().schedule_at(task_type, std::string(),
                          t0 + std::chrono::microseconds(r.between(0, 999'999)), so, ec);
    if (ec) die("engine.schedule_at failed (fire)");
  }
  const double sched_s = seconds_since(s0);
  const double margin_s =
      std::chrono::duration<double>(t0 - std::chrono::system_clock::now()).count();
  log.wait_all(clock_type::now() + std::chrono::duration_cast<clock_type::duration>(
                                       std::chrono::duration<double>(lead_s + 60)));
  const double all_ran_ms =
      static_cast<double>(
          log.last_us() -
          std::chrono::duration_cast<std::chrono::microseconds>(t0.time_since_epoch()).count()) /
      1000.0;
  emit_lateness("fire", n, round, log, eng.get().stats());
  emit("fire", "all_ran_after_t0_ms", "engine", n, 1, round, all_ran_ms);
  emit("fire", "schedule_s", "engine", n, 1, round, sched_s);
  emit("fire", "margin_before_t0_s", "engine", n, 1, round, margin_s);
  std::fflush(stdout);
  std::_Exit(0);  // skip the teardown: a fresh process per round anyway
}

// ------------------------------------------------------------------ child: precision

void child_precision(std::size_t n, int round, std::int64_t max_delay_ms) {
  lateness_log log(n);
  engine_side eng(engine_options{}, std::ref(log));
  const id_list ids = first_ids(n);
  rng r(23 + static_cast<std::uint64_t>(round));
  for (std::size_t i = 0; i < n; ++i)
    eng.schedule(ids[i], milliseconds(static_cast<std::int64_t>(
                             r.between(1, static_cast<std::uint64_t>(max_delay_ms)))));
  log.wait_all(clock_type::now() + milliseconds(max_delay_ms) + std::chrono::seconds(60));
  emit_lateness("precision", n, round, log, eng.get().stats());
  emit("precision", "wakeups", "engine", n, 1, round,
       static_cast<double>(eng.get().stats().wakeups));
  std::fflush(stdout);
  std::_Exit(0);
}
}  // namespace delayq::bench
