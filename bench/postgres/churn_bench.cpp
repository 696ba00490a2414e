// delayq-bench-pg-churn: does the live tasks' table of the PostgreSQL store
// stay bounded while its rows churn, with one long transaction open in
// another session?
//
//   delayq-bench-pg-churn [--uri=postgres://...] [--variant=rotate|tuned|plain]
//                         [--long-tx] [--seconds=600] [--rate=2000] [--delay-ms=5000]
//                         [--report-every=30] [--quick]
//
// An engine on a fresh schema schedules --rate tasks a second, each due
// --delay-ms later, and runs them (a no-op executor): every task is inserted,
// then deleted once it ran, and about rate x delay wait at any time. After
// one delay (the steady state) it notes the table's size (both partitions,
// their indexes and TOAST: pg_total_relation_size), then reports every
// --report-every seconds the size, the live and dead rows the statistics
// count, and the tasks run per second, until --seconds passed. The
// variants:
//   plain   the partitions with PostgreSQL's default autovacuum settings, no
//           rotation (rotate=off)
//   tuned   the store's per-table autovacuum settings (scale factors 0.02, no
//           cost delay), no rotation
//   rotate  tuned, and the generation rotation (pg_rotation.hpp): the store's
//           default
// --long-tx opens a REPEATABLE READ transaction in another session before the
// churn starts (it reads pg_class, nothing of delayq's) and keeps it open to
// the end: VACUUM can then remove no row deleted after it began.
// The last lines sum it up: the size at the start, the largest, at the end.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include <libpq-fe.h>
#include <CLI/CLI.hpp>

#include "delayq/delayq.hpp"
#include "delayq/postgres_store.hpp"
#include "pg_raw.hpp"

namespace {

using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

struct args {
  std::string uri;
  std::string variant = "rotate";
  bool long_tx = false;
  int seconds = 600;
  int rate = 2000;
  int delay_ms = 5000;
  int report_every = 30;
};

args parse(int argc, char** argv) {
  args a;
  if (const char* env = std::getenv("DELAYQ_TEST_POSTGRES")) a.uri = env;
  CLI::App app("Churn on the PostgreSQL store: the live tasks' table size over time.",
               "delayq-bench-pg-churn");
  app.add_option("--uri", a.uri, "the server (default: $DELAYQ_TEST_POSTGRES)");
  app.add_option("--variant", a.variant, "plain, tuned or rotate")
      ->check(CLI::IsMember({"plain", "tuned", "rotate"}))
      ->capture_default_str();
  app.add_flag("--long-tx", a.long_tx, "hold a long transaction open in another session");
  app.add_option("--seconds", a.seconds, "how long the churn runs")->capture_default_str();
  app.add_option("--rate", a.rate, "tasks scheduled (and run) per second")->capture_default_str();
  app.add_option("--delay-ms", a.delay_ms, "each task's delay")->capture_default_str();
  app.add_option("--report-every", a.report_every, "seconds between two reports")
      ->capture_default_str();
  bool quick = false;
  app.add_flag("--quick", quick, "a 12 s run at 500 tasks/s (the CI smoke run)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e) == 0 ? 0 : 2);
  }
  if (a.uri.empty()) {
    std::fprintf(stderr,
                 "delayq-bench-pg-churn: give --uri, or run it through "
                 "scripts/with-postgres.sh\n");
    std::exit(2);
  }
  if (quick) {
    a.seconds = 12;
    a.rate = 500;
    a.delay_ms = 1000;
    a.report_every = 4;
  }
  return a;
}

PGconn* raw_connect(const delayq::postgres_options& o) {
  return delayq_bench::pg_connect(o, "delayq-bench-pg-churn");
}

void exec(PGconn* c, const std::string& sql) {
  delayq_bench::pg_exec(c, sql, "delayq-bench-pg-churn");
}

struct sample {
  long long size = 0, live = 0, dead = 0;
  int gen = 0;
};

sample measure(PGconn* c, const std::string& schema) {
  sample s;
  const std::string q =
      "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::int8, "
      "coalesce(sum(st.n_live_tup), 0)::int8, coalesce(sum(st.n_dead_tup), 0)::int8, "
      "(SELECT value::int4 FROM \"" +
      schema +
      "\".meta WHERE key = 'gen') FROM pg_class c JOIN pg_namespace n ON n.oid = "
      "c.relnamespace LEFT JOIN pg_stat_user_tables st ON st.relid = c.oid WHERE n.nspname = '" +
      schema + "' AND c.relname IN ('tasks_0', 'tasks_1')";
  PGresult* r = PQexec(c, q.c_str());
  if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1) {
    s.size = std::atoll(PQgetvalue(r, 0, 0));
    s.live = std::atoll(PQgetvalue(r, 0, 1));
    s.dead = std::atoll(PQgetvalue(r, 0, 2));
    s.gen = std::atoi(PQgetvalue(r, 0, 3));
  }
  PQclear(r);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const args a = parse(argc, argv);
  // The rotation's log lines say what it moved: "... drained (N live tasks
  // moved) and truncated".
  std::atomic<long long> rotations{0}, moved{0};
  delayq::set_log_function([&](delayq::log_level level, std::string_view line) {
    if (const auto at = line.find("drained ("); at != std::string_view::npos) {
      ++rotations;
      moved += std::atoll(std::string(line.substr(at + 9, 20)).c_str());
      return;
    }
    if (level >= delayq::log_level::warning)
      std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
  });
  delayq::postgres_options o = delayq::postgres_options::parse(a.uri);
  o.layout.schema = "churn_" + a.variant + "_" + std::to_string(::getpid());
  o.rotate = a.variant == "rotate";
  PGconn* watch = raw_connect(o);
  auto store = delayq::open_postgres_store(o);
  if (a.variant == "plain")
    for (const char* part : {"tasks_0", "tasks_1"})
      exec(watch, "ALTER TABLE \"" + o.layout.schema + "\"." + part +
                      " RESET (autovacuum_vacuum_scale_factor, "
                      "autovacuum_vacuum_insert_scale_factor, autovacuum_vacuum_cost_delay)");
  PGconn* long_tx = nullptr;
  if (a.long_tx) {
    long_tx = raw_connect(o);
    exec(long_tx, "BEGIN ISOLATION LEVEL REPEATABLE READ");
    exec(long_tx, "SELECT count(*) FROM pg_class");
  }

  boost::asio::io_context io;
  auto guard = boost::asio::make_work_guard(io);
  std::thread io_thread([&] { io.run(); });
  std::atomic<long long> ran{0}, failed{0};
  delayq::executor_factory f;
  f.add("churn", [&](const delayq::task&) { ran.fetch_add(1, std::memory_order_relaxed); });
  delayq::engine_options eo;
  eo.tick = 10ms;
  eo.workers = 4;
  delayq::engine eng(io, f, std::move(store), eo);
  eng.start();

  std::printf("# delayq-bench-pg-churn: variant %s%s, %d tasks/s due %d ms later, %d s, on %s\n",
              a.variant.c_str(), a.long_tx ? ", a long transaction open" : "", a.rate, a.delay_ms,
              a.seconds, o.describe().c_str());
  std::printf("%8s %10s %9s %9s %4s %10s %8s\n", "t_s", "size_kB", "live", "dead", "gen", "ran/s",
              "errors");
  std::fflush(stdout);

  const auto start = clock_type::now();
  const auto steady_at = start + std::chrono::milliseconds(a.delay_ms);
  const auto end = steady_at + std::chrono::seconds(a.seconds);
  auto next_report = steady_at;
  long long ran_at_report = 0;
  long long start_size = -1, max_size = 0, last_size = 0;
  long long scheduled = 0;
  const auto step = 10ms;
  auto next = start;
  while (clock_type::now() < end) {
    // Pace: rate/100 tasks every 10 ms (a fraction carried over).
    next += step;
    const long long due_by =
        static_cast<long long>(std::chrono::duration<double>(next - start).count() * a.rate);
    for (; scheduled < due_by; ++scheduled)
      eng.async_schedule("churn", "payload of a churned task",
                         std::chrono::milliseconds(a.delay_ms),
                         [&](boost::system::error_code ec, std::string) {
                           if (ec) failed.fetch_add(1, std::memory_order_relaxed);
                         });
    const auto now = clock_type::now();
    if (now >= next_report) {
      const sample s = measure(watch, o.layout.schema);
      const double t = std::chrono::duration<double>(now - steady_at).count();
      const long long r = ran.load();
      const double per_s =
          next_report == steady_at ? 0 : static_cast<double>(r - ran_at_report) / a.report_every;
      ran_at_report = r;
      if (start_size < 0) start_size = s.size;
      max_size = std::max(max_size, s.size);
      last_size = s.size;
      std::printf("%8.0f %10lld %9lld %9lld %4d %10.0f %8lld\n", t, s.size / 1024, s.live, s.dead,
                  s.gen, per_s, failed.load());
      std::fflush(stdout);
      next_report += std::chrono::seconds(a.report_every);
    }
    std::this_thread::sleep_until(next);
  }
  eng.stop(30s);
  guard.reset();
  io_thread.join();
  if (long_tx) {
    exec(long_tx, "ROLLBACK");
    PQfinish(long_tx);
  }
  const sample s = measure(watch, o.layout.schema);
  max_size = std::max(max_size, s.size);
  last_size = s.size;
  std::printf(
      "# size at the start %lld kB, largest %lld kB, at the end %lld kB: end/start %.2f, "
      "largest/start %.2f\n",
      start_size / 1024, max_size / 1024, last_size / 1024,
      start_size > 0 ? static_cast<double>(last_size) / start_size : 0.0,
      start_size > 0 ? static_cast<double>(max_size) / start_size : 0.0);
  std::printf("# %lld tasks scheduled, %lld ran, %lld schedules failed\n", scheduled, ran.load(),
              failed.load());
  std::printf(
      "# %lld generations drained and truncated, %lld live tasks moved (%.3f per task "
      "scheduled)\n",
      rotations.load(), moved.load(),
      scheduled > 0 ? static_cast<double>(moved.load()) / scheduled : 0.0);
  exec(watch, "DROP SCHEMA \"" + o.layout.schema + "\" CASCADE");
  PQfinish(watch);
  return 0;
}
