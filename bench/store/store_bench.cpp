// delayq-bench-store: what redis_store does at the server's speed.
//
//   delayq-bench-store [--uri=redis://HOST:PORT] [--tasks=1000000] [--quick]
//
// Measures, on a fresh key prefix that it deletes afterwards:
//   write1000  store.write() of batches of 1000 saves, one after the other
//   async      async_write() of batches of --async-batch saves, up to
//              max_writes_in_flight() outstanding
//   single     store.write() of one save at a time
//   list       store.list() of --tasks stored tasks (the recovery read)
//   multi1000  the server's limit, for comparison: raw hiredis, pipelined
//              MULTI/HSET/ZADD/EXEC batches of 1000, 16 batches in flight
// and prints one line per figure: name, count, seconds, per second.
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>

#include <hiredis/hiredis.h>

#include <CLI/CLI.hpp>

#include "delayq/record_codec.hpp"
#include "delayq/redis_store.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

struct args {
  std::string uri;
  std::size_t tasks = 1'000'000;
  std::size_t async_batch = 1000;
  std::size_t single = 2000;
  bool quick = false;
  std::string prefix;  // --prefix=NAME: a fixed prefix (with --only=list, an existing set)
  bool only_list = false;
  bool keep = false;
};

args parse(int argc, char** argv) {
  args a;
  if (const char* env = std::getenv("DELAYQ_TEST_REDIS")) a.uri = env;
  if (a.uri.empty()) a.uri = "redis://127.0.0.1:6379";
  CLI::App app(
      "redis_store alone at the server's speed: write() batches, pipelined\n"
      "async_write(), single writes, list() of --tasks, raw MULTI batches.",
      "delayq-bench-store");
  app.add_option("--uri", a.uri, "the Redis (default: $DELAYQ_TEST_REDIS, else local 6379)")
      ->type_name("URI")
      ->capture_default_str();
  app.add_option("--tasks", a.tasks, "tasks stored and listed back (--quick: 20000)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--async-batch", a.async_batch, "saves per async_write()")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_flag("--quick", a.quick, "tiny sizes (the CI smoke run)");
  app.add_option("--prefix", a.prefix,
                 "a fixed key prefix (with --only=list, an existing set); default: a fresh one");
  std::string only;
  app.add_option("--only", only, "list: only the list() of what the prefix holds")
      ->check(CLI::IsMember({"list"}));
  app.add_flag("--keep", a.keep, "keep the keys afterwards");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e) == 0 ? 0 : 2);
  }
  a.only_list = only == "list";
  if (a.quick) {
    a.tasks = 20'000;
    a.single = 200;
  }
  return a;
}

std::vector<delayq::task> make_tasks(std::size_t n, const std::string& tag) {
  std::vector<delayq::task> out(n);
  std::mt19937_64 rng(42);
  const auto now = std::chrono::system_clock::now();
  for (std::size_t i = 0; i < n; ++i) {
    delayq::task& t = out[i];
    t.id = tag + std::to_string(i);
    t.type = "bench.store";
    t.payload = "payload-" + std::to_string(rng() % 1'000'000);
    t.due = now + std::chrono::milliseconds(rng() % 86'400'000);
  }
  return out;
}

std::vector<delayq::store_change> saves(const std::vector<delayq::task>& tasks, std::size_t from,
                                        std::size_t n) {
  std::vector<delayq::store_change> out;
  out.reserve(n);
  for (std::size_t i = from; i < from + n && i < tasks.size(); ++i)
    out.push_back({delayq::change_kind::save, &tasks[i]});
  return out;
}

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

void report(const char* name, std::size_t n, double s, const char* unit) {
  std::printf("%-10s %10zu %9.3f s %12.0f %s/s\n", name, n, s, static_cast<double>(n) / s, unit);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const args a = parse(argc, argv);
  const std::string prefix =
      a.prefix.empty() ? "bench-store-" + std::to_string(::getpid()) : a.prefix;
  std::string uri = a.uri;
  uri += uri.find('?') == std::string::npos ? "?prefix=" : "&prefix=";
  uri += prefix;
  delayq::redis_store store(delayq::redis_options::parse(uri));
  std::printf("# delayq-bench-store on %s, %zu tasks, async batches of %zu, %zu in flight\n",
              store.describe().c_str(), a.tasks, a.async_batch, store.max_writes_in_flight());
  std::printf("%-10s %10s %11s %12s\n", "figure", "count", "time", "rate");

  const auto tasks = make_tasks(a.tasks, "t-");
  std::vector<std::string> ids;
  ids.reserve(tasks.size());
  for (const auto& t : tasks) ids.push_back(t.id);
  const auto clear = [&] {
    for (std::size_t i = 0; i < ids.size(); i += 10'000)
      store.remove(std::span(ids).subspan(i, std::min<std::size_t>(10'000, ids.size() - i)));
  };

  if (a.only_list) {
    for (int run = 0; run < 3; ++run) {
      std::size_t seen = 0;
      const auto t0 = clock_type::now();
      const auto summary = store.list([&](delayq::task&& t) { seen += t.id.size() > 0; });
      report("list", summary.tasks, seconds_since(t0), "tasks");
    }
    return 0;
  }

  // write(): batches of 1000, one at a time.
  {
    const std::size_t n = std::min<std::size_t>(a.tasks, a.quick ? 10'000 : 200'000);
    const auto t0 = clock_type::now();
    for (std::size_t i = 0; i < n; i += 1000)
      store.write(saves(tasks, i, std::min<std::size_t>(1000, n - i)));
    report("write1000", n, seconds_since(t0), "tasks");
  }
  clear();

  // async_write(): every task, max_writes_in_flight() batches outstanding.
  {
    std::mutex m;
    std::condition_variable cv;
    std::size_t outstanding = 0, failed = 0;
    std::vector<std::vector<delayq::store_change>> batches;
    for (std::size_t i = 0; i < tasks.size(); i += a.async_batch)
      batches.push_back(saves(tasks, i, a.async_batch));
    const auto t0 = clock_type::now();
    for (const auto& b : batches) {
      std::unique_lock lock(m);
      cv.wait(lock, [&] { return outstanding < store.max_writes_in_flight(); });
      ++outstanding;
      lock.unlock();
      store.async_write(b, [&](boost::system::error_code ec) {
        std::lock_guard g(m);
        --outstanding;
        if (ec) ++failed;
        cv.notify_all();
      });
    }
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return outstanding == 0; });
    report("async", tasks.size(), seconds_since(t0), "tasks");
    if (failed) std::printf("# %zu async batches failed\n", failed);
  }

  // list(): the recovery read of everything stored above.
  for (int run = 0; run < 1; ++run) {
    std::size_t seen = 0;
    const auto t0 = clock_type::now();
    const auto summary = store.list([&](delayq::task&& t) { seen += t.id.size() > 0; });
    report("list", summary.tasks, seconds_since(t0), "tasks");
    if (summary.tasks != tasks.size())
      std::printf("# list returned %zu of %zu tasks\n", summary.tasks, tasks.size());
  }

  // The server's limit: what raw pipelined MULTI batches of 1000 reach.
  {
    clear();
    const delayq::redis_options o = store.options();
    redisContext* c = o.unix_socket.empty() ? redisConnect(o.host.c_str(), static_cast<int>(o.port))
                                            : redisConnectUnix(o.unix_socket.c_str());
    if (c && !c->err) {
      const std::string hash = "{" + prefix + "}:tasks", due = "{" + prefix + "}:due";
      std::vector<std::string> records, scores;
      for (const auto& t : tasks) {
        records.push_back(delayq::encode_task(t));
        scores.push_back(std::to_string(delayq::to_epoch_ms(t.due)));
      }
      const auto append = [&](std::size_t from) {
        const std::size_t to = std::min(from + 1000, tasks.size());
        redisAppendCommand(c, "MULTI");
        for (std::size_t i = from; i < to; ++i) {
          redisAppendCommand(c, "HSET %b %b %b", hash.data(), hash.size(), tasks[i].id.data(),
                             tasks[i].id.size(), records[i].data(), records[i].size());
          redisAppendCommand(c, "ZADD %b %b %b", due.data(), due.size(), scores[i].data(),
                             scores[i].size(), tasks[i].id.data(), tasks[i].id.size());
        }
        redisAppendCommand(c, "EXEC");
        return 2 * (to - from) + 2;
      };
      std::vector<std::size_t> window;
      std::size_t next = 0;
      bool ok = true;
      const auto t0 = clock_type::now();
      while (ok && (next < tasks.size() || !window.empty())) {
        while (window.size() < 16 && next < tasks.size()) {
          window.push_back(append(next));
          next += 1000;
        }
        for (std::size_t r = 0; r < window.front() && ok; ++r) {
          void* reply = nullptr;
          ok = redisGetReply(c, &reply) == REDIS_OK;
          if (reply) freeReplyObject(reply);
        }
        window.erase(window.begin());
      }
      report("multi1000", tasks.size(), seconds_since(t0), "tasks");
    }
    if (c) redisFree(c);
    clear();
  }

  // write() of one change at a time (ops/s).
  {
    const auto t0 = clock_type::now();
    for (std::size_t i = 0; i < a.single; ++i) store.write(saves(tasks, i, 1));
    report("single", a.single, seconds_since(t0), "ops");
  }

  if (!a.keep) clear();
  return 0;
}
