// delayq-bench-postgres: the PostgreSQL store alone, and an engine's restart
// on it.
//
//   delayq-bench-postgres [--uri=postgres://...] [--tasks=1000000] [--quick]
//                         [--schema=NAME --keep | --only=list]
//
// Measures, in a fresh schema that it drops afterwards:
//   write1000  store.write() of batches of 1000 saves, one after the other
//   async      async_write() of batches of --async-batch saves, up to
//              max_writes_in_flight() outstanding (every task)
//   rawcopy    the recovery read without decoding: the same COPY, bytes only
//              (what the server and libpq cost)
//   list       store.list() of every task (the recovery read), three times
//   start      engine::start() on the stored set: the whole restart, the
//              tasks read, decoded and put in the wheel, three times
//   single     store.write() of one save at a time
// and prints one line per figure: name, count, seconds, per second.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include <libpq-fe.h>
#include <CLI/CLI.hpp>

#include "delayq/delayq.hpp"
#include "delayq/postgres_store.hpp"
#include "pg_raw.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

struct args {
  std::string uri;
  std::size_t tasks = 1'000'000;
  std::size_t async_batch = 1000;
  std::size_t single = 2000;
  bool quick = false;
  std::string schema;
  bool only_list = false;
  bool keep = false;
};

args parse(int argc, char** argv) {
  args a;
  if (const char* env = std::getenv("DELAYQ_TEST_POSTGRES")) a.uri = env;
  CLI::App app(
      "The PostgreSQL store alone: write() batches, pipelined async_write(), the\n"
      "recovery read of --tasks (raw COPY, list(), engine start()), single writes.",
      "delayq-bench-postgres");
  app.add_option("--uri", a.uri, "the server (default: $DELAYQ_TEST_POSTGRES)")->type_name("URI");
  app.add_option("--tasks", a.tasks, "tasks stored and read back (--quick: 20000)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--async-batch", a.async_batch, "saves per async_write()")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_flag("--quick", a.quick, "tiny sizes (the CI smoke run)");
  app.add_option("--schema", a.schema,
                 "a fixed schema (with --only=list, an existing set); default: a fresh one");
  std::string only;
  app.add_option("--only", only, "list: only the reads of what the schema holds")
      ->check(CLI::IsMember({"list"}));
  app.add_flag("--keep", a.keep, "keep the schema afterwards");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e) == 0 ? 0 : 2);
  }
  if (a.uri.empty()) {
    std::fprintf(stderr,
                 "delayq-bench-postgres: give --uri, or run it through scripts/with-postgres.sh\n");
    std::exit(2);
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
    // Due over the next day: a restart holds them all in the wheel.
    t.due = now + std::chrono::milliseconds(60'000 + rng() % 86'400'000);
  }
  return out;
}

std::vector<delayq::store_change> saves(const std::vector<delayq::task>& tasks, std::size_t from,
                                        std::size_t n) {
  std::vector<delayq::store_change> out;
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

PGconn* raw_connect(const delayq::postgres_options& o) {
  return delayq_bench::pg_connect(o, "delayq-bench-postgres");
}

// The recovery read's COPY, bytes only: what the store's list() costs
// before any decoding.
void raw_copy(const delayq::postgres_options& o, std::size_t expected) {
  PGconn* c = raw_connect(o);
  const std::string sql =
      "COPY (SELECT id, record FROM \"" + o.layout.schema + "\".tasks) TO STDOUT (FORMAT binary)";
  const auto t0 = clock_type::now();
  PGresult* r = PQexec(c, sql.c_str());
  std::size_t rows = 0, bytes = 0;
  if (PQresultStatus(r) == PGRES_COPY_OUT) {
    char* buf = nullptr;
    int n = 0;
    while ((n = PQgetCopyData(c, &buf, 0)) > 0) {
      ++rows;
      bytes += static_cast<std::size_t>(n);
      PQfreemem(buf);
    }
  }
  PQclear(r);
  while ((r = PQgetResult(c))) PQclear(r);
  report("rawcopy", rows > 0 ? rows - 1 : 0, seconds_since(t0), "rows");
  std::printf("# rawcopy: %zu bytes (%.1f MB), %zu rows expected\n", bytes, bytes / 1e6, expected);
  PQfinish(c);
}

void reads(const delayq::postgres_options& o, std::size_t expected, int runs) {
  raw_copy(o, expected);
  auto store = delayq::open_postgres_store(o);
  std::vector<double> times;
  for (int run = 0; run < runs; ++run) {
    std::size_t seen = 0;
    const auto t0 = clock_type::now();
    const auto summary = store->list([&](delayq::task&& t) { seen += !t.id.empty(); });
    times.push_back(seconds_since(t0));
    report("list", summary.tasks, times.back(), "tasks");
    if (summary.tasks != expected)
      std::printf("# list returned %zu of %zu tasks\n", summary.tasks, expected);
  }
  std::sort(times.begin(), times.end());
  std::printf("# list median %.3f s\n", times[times.size() / 2]);
  store.reset();

  // The restart: an engine on the stored set, start() until it holds them.
  times.clear();
  for (int run = 0; run < runs; ++run) {
    boost::asio::io_context io;
    delayq::executor_factory f;
    f.add("bench.store", [](const delayq::task&) {});
    delayq::engine_options eo;
    eo.max_pending = expected + 1000;
    delayq::engine eng(io, f, delayq::open_postgres_store(o), eo);
    const auto t0 = clock_type::now();
    eng.start();
    times.push_back(seconds_since(t0));
    report("start", eng.pending(), times.back(), "tasks");
    eng.stop(std::chrono::seconds{10});
  }
  std::sort(times.begin(), times.end());
  std::printf("# start median %.3f s\n", times[times.size() / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  const args a = parse(argc, argv);
  const std::string schema = a.schema.empty() ? "bench_pg_" + std::to_string(::getpid()) : a.schema;
  delayq::postgres_options o = delayq::postgres_options::parse(a.uri);
  o.layout.schema = schema;
  const int runs = a.quick ? 1 : 3;
  if (a.only_list) {
    std::printf("# delayq-bench-postgres on %s: the reads of what it holds\n",
                o.describe().c_str());
    reads(o, a.tasks, runs);
    return 0;
  }
  // Each write figure in a schema of its own, fresh: no dead rows of another
  // figure in its way (nor a generation rotation they would set off).
  const auto drop = [&](const std::string& name) {
    PGconn* c = raw_connect(o);
    delayq_bench::pg_exec(c, "DROP SCHEMA IF EXISTS \"" + name + "\" CASCADE",
                          "delayq-bench-postgres");
    PQfinish(c);
  };
  const auto in_schema = [&](const std::string& name) {
    delayq::postgres_options x = o;
    x.layout.schema = name;
    return x;
  };
  auto store = delayq::open_postgres_store(o);
  std::printf("# delayq-bench-postgres on %s, %zu tasks, async batches of %zu, %zu in flight\n",
              store->describe().c_str(), a.tasks, a.async_batch, store->max_writes_in_flight());
  std::printf("%-10s %10s %11s %12s\n", "figure", "count", "time", "rate");

  const auto tasks = make_tasks(a.tasks, "t-");
  {
    const std::size_t n = std::min<std::size_t>(a.tasks, a.quick ? 10'000 : 200'000);
    const auto first = make_tasks(n, "w-");
    auto w = delayq::open_postgres_store(in_schema(schema + "_w"));
    const auto t0 = clock_type::now();
    for (std::size_t i = 0; i < n; i += 1000)
      w->write(saves(first, i, std::min<std::size_t>(1000, n - i)));
    report("write1000", n, seconds_since(t0), "tasks");
    w.reset();
    drop(schema + "_w");
  }

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
      cv.wait(lock, [&] { return outstanding < store->max_writes_in_flight(); });
      ++outstanding;
      lock.unlock();
      store->async_write(b, [&](boost::system::error_code ec) {
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

  // The table as a restart finds it: vacuumed and analyzed, as autovacuum
  // leaves it.
  {
    PGconn* c = raw_connect(o);
    delayq_bench::pg_exec(c, "VACUUM ANALYZE \"" + schema + "\".tasks", "delayq-bench-postgres");
    PQfinish(c);
  }
  reads(o, tasks.size(), runs);

  store.reset();
  {
    const auto singles = make_tasks(a.single, "s-");
    auto one = delayq::open_postgres_store(in_schema(schema + "_s"));
    const auto t0 = clock_type::now();
    for (std::size_t i = 0; i < a.single; ++i) one->write(saves(singles, i, 1));
    report("single", a.single, seconds_since(t0), "ops");
    one.reset();
    drop(schema + "_s");
  }
  if (!a.keep) drop(schema);
  return 0;
}
