// delayq-crash-driver: runs delayq-crash-worker against one store, kills it
// with SIGKILL at seeded random moments, restarts it, lets a last run drain
// everything, then checks the files the runs left (crash_files.hpp):
//
//   delayq-crash-driver --backend sqlite|redis|redis-cluster|postgres --worker PATH --work-dir DIR
//                       [--tasks N] [--span-ms S] [--kills K] [--seed X]
//                       [--in-flight W] [--keep]
//
// With --in-flight W > 1 the workers schedule with async_schedule(), W at
// once, so kills land with many schedules in flight.
//
// The seed is --seed, else $DELAYQ_CRASH_SEED, else random; it is printed, so
// a failure can be replayed (the kill moments, not the thread timing). The
// Redis backend uses the server in $DELAYQ_TEST_REDIS (redis-cluster: the
// cluster in $DELAYQ_TEST_REDIS_CLUSTER) under a fresh prefix
// and deletes its keys at the end; the PostgreSQL one the server in
// $DELAYQ_TEST_POSTGRES under a fresh schema, which it drops at the end. Exits 0 when every check
// passed.
#include <utility>

#include <hiredis/hiredis.h>
#include <libpq-fe.h>
#include <poll.h>
#include <spawn.h>
#include <sys/inotify.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <delayq/postgres_store.hpp>
#include <delayq/redis_store.hpp>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "crash_files.hpp"

extern char** environ;

namespace {

using namespace std::chrono_literals;
namespace crash = delayq::crash;

struct options {
  std::string backend;
  std::string worker;
  std::string work_dir;
  std::size_t tasks = 2000;
  std::uint64_t span_ms = 3000;
  unsigned kills = 6;
  std::optional<std::uint64_t> seed;
  std::uint64_t in_flight = 1;  // the workers' async schedules at once (1: blocking)
  bool keep = false;            // keep the directory and the Redis keys even on success
};

// A worker that writes nothing for this long is stuck (a kill moment waits
// for its progress); generous for sanitizer builds on a loaded machine.
constexpr auto stall_limit = 120s;

std::string tag;         // "crash sqlite", for every message
std::string work_files;  // the run's directory, named when the test fails
pid_t live_worker = -1;  // a worker to kill before exiting: it would hold CTest's pipes open
std::function<void()> drop_keys;  // deletes this test's Redis keys, when it has some

[[noreturn]] void fatal(const std::string& what) {
  std::fprintf(stderr, "%s: FAIL: %s\n", tag.c_str(), what.c_str());
  if (live_worker > 0) {
    ::kill(live_worker, SIGKILL);
    ::waitpid(live_worker, nullptr, 0);
  }
  if (drop_keys) drop_keys();
  if (!work_files.empty())
    std::fprintf(stderr, "%s: the runs' files are kept in %s\n", tag.c_str(), work_files.c_str());
  std::exit(1);
}

options parse_args(int argc, char** argv) {
  options o;
  CLI::App app(
      "Runs delayq-crash-worker against one store, kills it with SIGKILL at seeded\n"
      "random moments, restarts it, lets a last run drain everything, then checks\n"
      "that nothing acknowledged was lost. Exits 0 when every check passed.",
      "delayq-crash-driver");
  app.add_option("--backend", o.backend, "the store")
      ->required()
      ->check(CLI::IsMember({"sqlite", "redis", "redis-cluster", "postgres"}));
  app.add_option("--worker", o.worker, "the delayq-crash-worker binary")
      ->required()
      ->type_name("PATH");
  app.add_option("--work-dir", o.work_dir, "where each test's directory goes")
      ->required()
      ->type_name("DIR");
  app.add_option("--tasks", o.tasks, "tasks in all, at least 2")->capture_default_str();
  app.add_option("--span-ms", o.span_ms, "delays are seeded random in [0, S] ms")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--kills", o.kills, "SIGKILLs before the last run")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--seed", o.seed, "the seed (default: $DELAYQ_CRASH_SEED, else random)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--in-flight", o.in_flight,
                 "the workers' async schedules at once (1: blocking schedule())")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_flag("--keep", o.keep, "keep the directory and the Redis keys even on success");
  try {
    app.parse(argc, argv);
    if (o.tasks < 2) throw CLI::ValidationError("--tasks", "must be at least 2");
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e) == 0 ? 0 : 64);  // 64: EX_USAGE
  }
  return o;
}

// Counts the complete lines of a file that only grows, reading only what was
// appended since the last call.
class line_counter {
 public:
  explicit line_counter(std::string path) : path_(std::move(path)) {}
  std::size_t update() {
    std::FILE* f = std::fopen(path_.c_str(), "rb");
    if (!f) return lines_;
    if (std::fseek(f, static_cast<long>(offset_), SEEK_SET) == 0) {
      char buf[65536];
      for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) {
        lines_ += static_cast<std::size_t>(std::count(buf, buf + n, '\n'));
        offset_ += n;
      }
    }
    std::fclose(f);
    return lines_;
  }
  std::size_t lines() const { return lines_; }

 private:
  std::string path_;
  std::size_t offset_ = 0;
  std::size_t lines_ = 0;
};

// One worker process.
class worker_process {
 public:
  worker_process(const std::string& path, const std::vector<std::string>& args) {
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(path.c_str()));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    if (int e = posix_spawn(&pid_, path.c_str(), nullptr, nullptr, argv.data(), environ); e != 0)
      fatal("cannot start " + path + ": " + std::strerror(e));
    live_worker = pid_;
#ifdef SYS_pidfd_open
    pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
#endif
  }
  ~worker_process() {
    if (pidfd_ >= 0) ::close(pidfd_);
    if (!reaped_) {
      ::kill(pid_, SIGKILL);
      wait();
    }
  }
  worker_process(const worker_process&) = delete;
  worker_process& operator=(const worker_process&) = delete;

  // Readable when the process has exited; -1 when the kernel has no pidfd
  // (then exited() is polled).
  int pidfd() const { return pidfd_; }
  bool exited() {
    if (reaped_) return true;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) != pid_) return false;
    reaped(status);
    return true;
  }
  int wait() {
    while (!reaped_) {
      int status = 0;
      if (::waitpid(pid_, &status, 0) == pid_) {
        reaped(status);
      } else if (errno != EINTR) {
        fatal("waitpid failed");
      }
    }
    return status_;
  }
  void kill() const { ::kill(pid_, SIGKILL); }

 private:
  void reaped(int status) {
    reaped_ = true;
    status_ = status;
    live_worker = -1;
  }

  pid_t pid_ = -1;
  int pidfd_ = -1;
  bool reaped_ = false;
  int status_ = 0;
};

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("killed by signal ") + strsignal(WTERMSIG(status));
  return "ended with wait status " + std::to_string(status);
}

// Wakes on every change in the work directory (inotify) and on the worker's
// exit (pidfd): a kill moment is chosen by the worker's progress, so it lands
// at the same point of the work in a plain and in a sanitizer build.
class progress_watch {
 public:
  explicit progress_watch(const std::string& dir)
      : acked_(dir + "/" + crash::acked_log), executed_(dir + "/" + crash::executed_log) {
    fd_ = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    if (fd_ < 0 || inotify_add_watch(fd_, dir.c_str(), IN_MODIFY | IN_CREATE | IN_MOVED_TO) < 0)
      fatal("inotify on " + dir + " failed");
  }
  ~progress_watch() { ::close(fd_); }
  progress_watch(const progress_watch&) = delete;
  progress_watch& operator=(const progress_watch&) = delete;

  std::size_t acked() { return acked_.update(); }
  std::size_t executed() { return executed_.update(); }

  // Blocks until `done()` holds. Fails the test when the worker exits or
  // writes nothing for stall_limit.
  template <class Pred>
  void wait_until(worker_process& w, Pred done, const char* what) {
    for (;;) {
      acked_.update();
      executed_.update();
      if (done()) return;
      if (w.exited())
        fatal("the worker " + describe_status(w.wait()) + " while the driver waited for " + what);
      pollfd fds[2] = {{fd_, POLLIN, 0}, {w.pidfd(), POLLIN, 0}};
      // Without a pidfd, wake now and then to notice an exit.
      const auto timeout = w.pidfd() >= 0 ? stall_limit : 50ms;
      const int n = ::poll(fds, w.pidfd() >= 0 ? 2 : 1,
                           static_cast<int>(std::chrono::milliseconds(timeout).count()));
      if (n < 0 && errno != EINTR) fatal("poll failed");
      if (n == 0 && w.pidfd() >= 0)
        fatal("the worker wrote nothing for " + std::to_string(stall_limit.count()) +
              " s while the driver waited for " + what);
      char buf[4096];
      while (::read(fd_, buf, sizeof buf) > 0) {
      }
    }
  }

 private:
  int fd_ = -1;
  line_counter acked_;
  line_counter executed_;
};

// The Redis server the tests use, with a prefix of our own.
struct redis_target {
  std::string uri;  // with ?prefix=
  std::string prefix;
};

redis_target redis_from_env(bool cluster) {
  const char* base = std::getenv(cluster ? "DELAYQ_TEST_REDIS_CLUSTER" : "DELAYQ_TEST_REDIS");
  if ((!base || !*base) && cluster)
    fatal(
        "DELAYQ_TEST_REDIS_CLUSTER is not set: run the test through "
        "scripts/with-redis-cluster.sh (ctest -L cluster does), which starts a private "
        "three-node Redis Cluster and sets it");
  if (!base || !*base)
    fatal(
        "DELAYQ_TEST_REDIS is not set: run the tests through scripts/with-redis.sh (e.g. "
        "scripts/with-redis.sh ctest -R crash) or scripts/test.sh, which start a private "
        "redis-server and set it, or export DELAYQ_TEST_REDIS=redis://127.0.0.1:PORT for a "
        "server you started yourself");
  redis_target t;
  t.prefix = "crash-" + std::to_string(::getpid()) + "-" +
             std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count());
  t.uri = std::string(base) +
          (std::string_view(base).find('?') == std::string_view::npos ? "?" : "&") +
          "prefix=" + t.prefix;
  return t;
}

// Deletes every key of the prefix. Returns an error message, or empty.
std::string drop_redis_prefix(const redis_target& t) {
  boost::system::error_code ec;
  std::string why;
  auto o = delayq::redis_options::parse(t.uri, ec, &why);
  if (ec) return "cannot parse " + t.uri + ": " + why;
  if (o.cluster) {
    // Every seed is asked; the master of the prefix's slot deletes, the
    // others answer MOVED.
    std::string error = "no seed holds the keys";
    for (const auto& [host, port] : o.seeds) {
      auto one = t;
      one.uri = "redis://" + host + ":" + std::to_string(port) + "?prefix=" + t.prefix;
      if (std::string e = drop_redis_prefix(one); e.empty())
        error.clear();
      else if (e.find("MOVED") == std::string::npos)
        return e;
    }
    return error;
  }
  const timeval timeout{5, 0};
  redisContext* c = o.unix_socket.empty()
                        ? redisConnectWithTimeout(o.host.c_str(), static_cast<int>(o.port), timeout)
                        : redisConnectUnixWithTimeout(o.unix_socket.c_str(), timeout);
  if (!c || c->err) {
    std::string msg = c ? c->errstr : "out of memory";
    redisFree(c);
    return "cannot connect to " + o.address() + ": " + msg;
  }
  std::vector<std::vector<std::string>> cmds;
  if (!o.password.empty())
    cmds.push_back(o.user.empty() ? std::vector<std::string>{"AUTH", o.password}
                                  : std::vector<std::string>{"AUTH", o.user, o.password});
  if (o.db != 0) cmds.push_back({"SELECT", std::to_string(o.db)});
  const std::string k = "{" + t.prefix + "}:";
  cmds.push_back({"DEL", k + "tasks", k + "due", k + "quarantine", k + "quarantine:reason",
                  k + "meta", k + "dead", k + "dead:by_time", k + "dead:quarantine",
                  k + "dead:quarantine:reason"});
  std::string error;
  for (const auto& cmd : cmds) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (const auto& a : cmd) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    auto* r = static_cast<redisReply*>(
        redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data()));
    if (!r || r->type == REDIS_REPLY_ERROR)
      error = cmd.front() + " failed: " + (r ? std::string(r->str, r->len) : c->errstr);
    if (r) freeReplyObject(r);
    if (!error.empty()) break;
  }
  redisFree(c);
  return error;
}

// The PostgreSQL server the tests use, with a schema of our own.
struct postgres_target {
  std::string uri;  // with ?schema=
  std::string schema;
};

postgres_target postgres_from_env() {
  const char* base = std::getenv("DELAYQ_TEST_POSTGRES");
  if (!base || !*base)
    fatal(
        "DELAYQ_TEST_POSTGRES is not set: run the tests through scripts/with-postgres.sh (e.g. "
        "scripts/with-postgres.sh ctest -R crash) or scripts/test.sh, which start a private "
        "PostgreSQL and set it");
  postgres_target t;
  t.schema = "crash_" + std::to_string(::getpid()) + "_" +
             std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count());
  t.uri = std::string(base) +
          (std::string_view(base).find('?') == std::string_view::npos ? "?" : "&") +
          "schema=" + t.schema;
  return t;
}

// Drops the schema. Returns an error message, or empty.
std::string drop_postgres_schema(const postgres_target& t) {
  const auto o = delayq::postgres_options::parse(t.uri);
  const std::string port = std::to_string(o.connection.port);
  const char* keys[] = {"host", "port", "user", "password", "dbname", nullptr};
  const char* values[] = {o.connection.host.c_str(),     port.c_str(),
                          o.connection.user.c_str(),     o.connection.password.c_str(),
                          o.connection.database.c_str(), nullptr};
  PGconn* c = PQconnectdbParams(keys, values, 0);
  std::string error;
  if (PQstatus(c) != CONNECTION_OK) {
    error = PQerrorMessage(c);
  } else {
    PGresult* r = PQexec(c, ("DROP SCHEMA IF EXISTS \"" + t.schema + "\" CASCADE").c_str());
    if (PQresultStatus(r) != PGRES_COMMAND_OK) error = PQresultErrorMessage(r);
    PQclear(r);
  }
  PQfinish(c);
  return error;
}

std::optional<unsigned> read_run_counter(const std::string& dir) {
  const auto f = crash::read_lines(dir + "/" + crash::run_counter);
  if (f.lines.empty() || f.torn) return std::nullopt;
  return crash::parse_number<unsigned>(f.lines.front());
}

// What the kills left behind, for the checker.
struct history {
  std::vector<std::size_t> acked_at_kill;  // acked.log lines after each kill
  unsigned final_run = 0;                  // the run number of the draining run
};

struct verdict {
  std::vector<std::string> failures;
  std::size_t executions = 0;
  std::size_t failed_attempts = 0;  // designed failures logged, repeats included
  std::size_t retried_tasks = 0;    // tasks designed to fail at least once
  std::size_t duplicates = 0;       // attempts run again after a kill: both kinds below
  std::size_t repeated_successes = 0;
  std::size_t repeated_failures = 0;
  std::size_t max_duplicates_per_run = 0;
  std::size_t furthest_from_end = 0;  // lines of its run after a repeated execution
  std::size_t found_pending = 0;
  std::size_t found_executed = 0;
  void fail(std::string what) { failures.push_back(std::move(what)); }
};

// The checks. What a SIGKILL can truly cause, given the engine's order
// (persist before schedule() returns; execute; after a success remove, after
// a failure save the task with attempts + 1 and its retry time) and the
// worker's (ack line after schedule() returned; log line synced before the
// executor returns or throws):
//
// - Nothing acknowledged is lost: every id of acked.log has a successful
//   attempt in executed.log. acked.log must be exactly c-0 .. c-(N-1), in
//   order.
// - An attempt runs again in a later run only if what followed it was not
//   durable at the kill: the removal after a success, or the save of the new
//   attempt count after a failure. Both are written in the background (the
//   store writer batches them; the worker goes on to its next task at once,
//   and a retry is armed only once its new count landed), so any attempt of
//   a killed run may repeat, as at-least-once allows; a repeated failure is
//   counted again. The check: every line followed by another line of its id
//   with the same attempt number is in a run that was killed.
// - Attempt numbers: an id's first line is attempt 1; after a failed attempt
//   a the next line of the id is a + 1 (the count was saved; always so within
//   one run, where the engine holds the count in memory) or, across a kill, a
//   again (the save was lost, under the rule above). Never backwards, never a
//   skip: a lost counter may only repeat attempts. After a success the next
//   line, if any, is the same attempt in a later run (a lost removal). So an
//   id fails exactly its designed attempts 1 .. d, then succeeds at d + 1, and
//   has one success plus the bounded repeats. No task dies (the worker checks
//   the dead letters; the engine would also log the death as an error).
// - An id is in doubt only when a kill fell between its schedule completing
//   and its ack line: the first unacknowledged id at that kill (the first
//   --in-flight ids with async schedules). The next run settles it without
//   scheduling it again (crash_worker.cpp) and tags its ack line; a tagged
//   line must lie within in_flight of the acked count of some kill. Every
//   executed id must be acknowledged.
verdict check(const options& o, const std::string& dir, const history& h) {
  verdict v;
  const std::set<std::size_t> boundaries(h.acked_at_kill.begin(), h.acked_at_kill.end());

  const auto acked = crash::read_lines(dir + "/" + crash::acked_log);
  if (acked.torn) v.fail("acked.log ends with a torn line");
  if (acked.lines.size() != o.tasks)
    v.fail("acked.log has " + std::to_string(acked.lines.size()) + " lines, expected " +
           std::to_string(o.tasks));
  for (std::size_t k = 0; k < acked.lines.size(); ++k) {
    const auto a = crash::parse_acked(acked.lines[k]);
    if (!a || a->id != crash::task_id(k)) {
      v.fail("acked.log line " + std::to_string(k + 1) + " is '" + acked.lines[k] + "', expected " +
             crash::task_id(k));
      continue;
    }
    if (a->how.empty()) continue;
    (a->how == crash::found_pending ? v.found_pending : v.found_executed)++;
    // In doubt: one of the first in_flight ids unacknowledged at some kill.
    const auto b = boundaries.upper_bound(k);
    if (b == boundaries.begin() || k - *std::prev(b) >= o.in_flight)
      v.fail(a->id + " was acknowledged as " + a->how + " although no kill left it among the " +
             std::to_string(o.in_flight) + " first unacknowledged ids");
  }

  const auto executed = crash::read_lines(dir + "/" + crash::executed_log);
  if (executed.torn) v.fail("executed.log ends with a torn line");
  v.executions = executed.lines.size();
  std::vector<crash::executed_line> lines;
  lines.reserve(executed.lines.size());
  std::map<unsigned, std::size_t> last_of_run;
  for (std::size_t i = 0; i < executed.lines.size(); ++i) {
    auto e = crash::parse_executed(executed.lines[i]);
    if (!e || !crash::task_index(e->id, o.tasks) || e->worker >= crash::worker_threads ||
        e->run == 0 || e->run > h.final_run || e->attempt == 0 ||
        e->attempt > crash::max_attempts) {
      v.fail("executed.log line " + std::to_string(i + 1) + " is malformed or out of range: '" +
             executed.lines[i] + "'");
      e = crash::executed_line{};
    }
    if (!lines.empty() && e->run != 0 && e->run < lines.back().run)
      v.fail("executed.log line " + std::to_string(i + 1) + " is of run " + std::to_string(e->run) +
             " after lines of run " + std::to_string(lines.back().run));
    if (e->run != 0 && !e->ok) ++v.failed_attempts;
    last_of_run[e->run] = i;
    lines.push_back(std::move(*e));
  }

  std::vector<std::vector<std::size_t>> runs_of(o.tasks);  // id index -> its lines
  for (std::size_t i = 0; i < lines.size(); ++i)
    if (auto k = crash::task_index(lines[i].id, o.tasks)) runs_of[*k].push_back(i);

  auto where = [&](std::size_t i) {
    const crash::executed_line& e = lines[i];
    return std::string(e.ok ? "succeeded" : "failed") + " at attempt " + std::to_string(e.attempt) +
           " in run " + std::to_string(e.run) + " (executed.log line " + std::to_string(i + 1) +
           ")";
  };
  std::map<unsigned, std::size_t> repeats_per_run;
  std::size_t lost = 0;
  std::string lost_examples;
  for (std::size_t k = 0; k < o.tasks; ++k) {
    const auto& at = runs_of[k];
    const std::string id = crash::task_id(k);
    const unsigned designed = crash::designed_failures(k);
    if (designed != 0) ++v.retried_tasks;
    if (std::none_of(at.begin(), at.end(), [&](std::size_t i) { return lines[i].ok; })) {
      if (++lost <= 10) lost_examples += " " + id;
      continue;
    }
    if (lines[at.front()].attempt != 1)
      v.fail(id + " first " + where(at.front()) + ", not at attempt 1");
    // The executor decides by the attempt number: these hold unless the log lies.
    for (std::size_t i : at)
      if (lines[i].ok != (lines[i].attempt > designed))
        v.fail(id + " is designed to fail its first " + std::to_string(designed) +
               " attempts, yet " + where(i));
    for (std::size_t j = 0; j + 1 < at.size(); ++j) {
      const crash::executed_line& e = lines[at[j]];
      const crash::executed_line& next = lines[at[j + 1]];
      const std::string pair = id + " " + where(at[j]) + ", then " + where(at[j + 1]);
      if (!e.ok && next.attempt == e.attempt + 1) continue;  // a retry after a saved count
      if (next.attempt < e.attempt) {
        v.fail(pair + ": its attempt count went backwards" +
               (e.run == next.run ? " within one run" : ""));
        continue;
      }
      if (next.attempt != e.attempt) {
        v.fail(pair + ": " +
               (e.ok ? "a success changed the attempt count"
                     : "attempt numbers skipped; a lost counter may only repeat an attempt"));
        continue;
      }
      // The same attempt again: what followed `e` was not durable.
      ++v.duplicates;
      ++(e.ok ? v.repeated_successes : v.repeated_failures);
      ++repeats_per_run[e.run];
      if (e.run == next.run) {
        v.fail(pair + ": the same attempt ran twice in one run");
        continue;
      }
      if (e.run == h.final_run) {  // every run before the draining one was killed
        v.fail(pair + ": run " + std::to_string(e.run) +
               " was not killed, so what followed the attempt had been written");
        continue;
      }
      v.furthest_from_end = std::max(v.furthest_from_end, last_of_run[e.run] - at[j]);
    }
  }
  if (lost != 0)
    v.fail(std::to_string(lost) + " acknowledged tasks never succeeded:" + lost_examples);
  for (const auto& [run, n] : repeats_per_run)
    v.max_duplicates_per_run = std::max(v.max_duplicates_per_run, n);

  const auto errors = crash::read_lines(dir + "/" + crash::errors_log);
  for (const auto& line : errors.lines) v.fail("the engine logged an error: " + line);
  return v;
}

std::vector<std::string> worker_args(const options& o, const std::string& dir,
                                     const std::string& store, std::uint64_t seed, bool drain) {
  std::vector<std::string> args = {"--store",     store,
                                   "--dir",       dir,
                                   "--tasks",     std::to_string(o.tasks),
                                   "--span-ms",   std::to_string(o.span_ms),
                                   "--seed",      std::to_string(seed),
                                   "--in-flight", std::to_string(o.in_flight)};
  if (drain) args.emplace_back("--drain");
  return args;
}

std::uint64_t pick_seed(const options& o) {
  if (o.seed) return *o.seed;
  if (const char* env = std::getenv("DELAYQ_CRASH_SEED"); env && *env) {
    auto v = crash::parse_number<std::uint64_t>(env);
    if (!v) {
      std::fprintf(stderr, "delayq-crash-driver: DELAYQ_CRASH_SEED is not a number\n");
      std::exit(64);
    }
    return *v;
  }
  return (static_cast<std::uint64_t>(std::random_device{}()) << 32) ^
         static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse_args(argc, argv);
  tag = "crash " + o.backend;
  const auto started = std::chrono::steady_clock::now();
  const std::uint64_t seed = pick_seed(o);

  std::optional<redis_target> redis;
  std::optional<postgres_target> postgres;
  if (o.backend == "postgres")
    postgres = postgres_from_env();
  else if (o.backend != "sqlite")
    redis = redis_from_env(o.backend == "redis-cluster");
  if (redis && !o.keep)
    drop_keys = [&redis] {
      if (auto error = drop_redis_prefix(*redis); !error.empty())
        std::fprintf(stderr, "%s: warning: could not delete the keys of prefix %s: %s\n",
                     tag.c_str(), redis->prefix.c_str(), error.c_str());
    };
  if (postgres && !o.keep)
    drop_keys = [&postgres] {
      if (auto error = drop_postgres_schema(*postgres); !error.empty())
        std::fprintf(stderr, "%s: warning: could not drop schema %s: %s\n", tag.c_str(),
                     postgres->schema.c_str(), error.c_str());
    };

  std::filesystem::create_directories(o.work_dir);
  std::string dir = o.work_dir + "/crash-" + o.backend + "-XXXXXX";
  if (!mkdtemp(dir.data())) fatal("cannot create a directory under " + o.work_dir);
  work_files = dir;
  const std::string store = redis      ? redis->uri
                            : postgres ? postgres->uri
                                       : "sqlite:" + dir + "/tasks.db";
  // Never the password of a postgres:// URI.
  const std::string store_shown =
      postgres ? delayq::postgres_options::parse(postgres->uri).describe() : store;
  std::fprintf(stderr, "%s: seed %llu, %zu tasks over %llu ms, %u kills, store %s, dir %s\n",
               tag.c_str(), static_cast<unsigned long long>(seed), o.tasks,
               static_cast<unsigned long long>(o.span_ms), o.kills, store_shown.c_str(),
               dir.c_str());

  // Kill moments: the first half while tasks are being scheduled (after a
  // random number of further acks), the rest once all are scheduled (after a
  // random number of further executions), each followed by a random pause of
  // up to 2 ms so the kill lands anywhere in the work between two lines.
  std::mt19937_64 rng(seed);
  auto uniform = [&rng](std::size_t lo, std::size_t hi) {
    return std::uniform_int_distribution<std::size_t>(lo, std::max(lo, hi))(rng);
  };
  progress_watch watch(dir);
  history h;
  const unsigned scheduling_kills = (o.kills + 1) / 2;
  std::size_t kills_while_scheduling = 0;
  for (unsigned i = 0; i < o.kills; ++i) {
    worker_process w(o.worker, worker_args(o, dir, store, seed, false));
    const std::size_t acked = watch.acked();
    if (i < scheduling_kills && acked + 1 < o.tasks) {
      const std::size_t room = o.tasks - 1 - acked;
      const std::size_t target = acked + uniform(1, room / (scheduling_kills - i));
      watch.wait_until(
          w, [&] { return watch.acked() >= target; }, "acknowledgements");
    } else {
      watch.wait_until(
          w, [&] { return watch.acked() >= o.tasks; }, "the end of scheduling");
      const std::size_t done = watch.executed();
      const std::size_t total = crash::expected_executions(o.tasks);
      const std::size_t remaining = total > done ? total - done : 0;
      const std::size_t target = done + uniform(0, remaining / (o.kills - i + 1));
      watch.wait_until(
          w, [&] { return watch.executed() >= target; }, "executions");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(uniform(0, 2000)));
    w.kill();
    const int status = w.wait();
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
      fatal("run " + std::to_string(i + 1) + ": the worker " + describe_status(status) +
            " before the driver killed it");
    h.acked_at_kill.push_back(watch.acked());
    if (h.acked_at_kill.back() < o.tasks) ++kills_while_scheduling;
  }

  // The draining run checks on its own too; when it fails, the files are
  // still checked, so the report says what went wrong.
  std::string drain_failure;
  {
    worker_process w(o.worker, worker_args(o, dir, store, seed, true));
    const int status = w.wait();
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      drain_failure = "the draining run " + describe_status(status);
  }
  const auto final_run = read_run_counter(dir);
  if (!final_run) fatal("no run counter in " + dir);
  h.final_run = *final_run;

  verdict v = check(o, dir, h);
  if (!drain_failure.empty()) v.failures.insert(v.failures.begin(), drain_failure);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf(
      "%s: %s: seed %llu, tasks %zu (%zu designed to fail 1-2 attempts), kills %u (%zu while "
      "scheduling), runs %u, executions %zu (%zu failed on purpose), repeated attempts %zu "
      "(%zu successes, %zu failures; at most %zu per killed run, the furthest %zu lines before "
      "the kill), in-doubt ids found pending %zu / already "
      "run %zu, %.1f s\n",
      tag.c_str(), v.failures.empty() ? "PASS" : "FAIL", static_cast<unsigned long long>(seed),
      o.tasks, v.retried_tasks, o.kills, kills_while_scheduling, h.final_run, v.executions,
      v.failed_attempts, v.duplicates, v.repeated_successes, v.repeated_failures,
      v.max_duplicates_per_run, v.furthest_from_end, v.found_pending, v.found_executed, seconds);
  std::fflush(stdout);

  const std::size_t shown = std::min<std::size_t>(v.failures.size(), 20);
  for (std::size_t i = 0; i < shown; ++i)
    std::fprintf(stderr, "%s: FAIL: %s\n", tag.c_str(), v.failures[i].c_str());
  if (v.failures.size() > shown)
    std::fprintf(stderr, "%s: ... and %zu more failures\n", tag.c_str(), v.failures.size() - shown);

  if (drop_keys) drop_keys();
  if (!v.failures.empty()) {
    std::fprintf(stderr, "%s: the runs' files are kept in %s; replay with --seed %llu\n",
                 tag.c_str(), dir.c_str(), static_cast<unsigned long long>(seed));
    return 1;
  }
  if (!o.keep) std::filesystem::remove_all(dir);
  return 0;
}
