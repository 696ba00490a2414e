// delayq-crash-worker: the process the crash test kills. It runs an engine on
// a real store, schedules tasks c-0 .. c-(N-1) with seeded random delays, and
// records what it did in DIR (crash_files.hpp) so that a later run, and the
// driver, can tell what survived a SIGKILL. Every fifth task fails its first
// attempt or two on purpose (crash::designed_failures), so kills also land
// on retries in flight.
//
//   delayq-crash-worker --store URI --dir DIR --tasks N --span-ms S --seed X
//                       [--in-flight W] [--drain] [--timeout-s T]
//
// With --in-flight W > 1 it schedules with async_schedule(), up to W at once
// from one thread, and appends an id to acked.log once it and every id
// before it completed; a kill then leaves up to W ids in doubt, which the
// next run settles one by one (see main()). Without --drain it schedules what is left and then runs
// until it is killed. With --drain it schedules what is left, waits until the engine holds nothing,
// checks that every acknowledged task succeeded, that no task died and that the store holds neither
// tasks nor dead letters, and exits 0; any inconsistency exits non-zero with a message.

#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <delayq/delayq.hpp>
#include <delayq/open_store.hpp>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_set>
#include <vector>

#include "crash_files.hpp"

namespace {

using namespace std::chrono_literals;
namespace crash = delayq::crash;

struct options {
  std::string store;
  std::string dir;
  std::size_t tasks = 0;
  std::uint64_t span_ms = 0;
  std::uint64_t seed = 0;
  std::size_t in_flight = 1;  // schedules outstanding at once (1: blocking schedule())
  bool drain = false;
  std::chrono::seconds timeout{240};  // --drain: most time to wait for the engine to empty
};

unsigned run_number = 0;  // this process's run, for messages

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "delayq-crash-worker (run %u): %s\n", run_number, what.c_str());
  // _Exit: the engine's threads are still running; no static destructor may
  // pull anything from under them.
  std::_Exit(2);
}

options parse_args(int argc, char** argv) {
  options o;
  CLI::App app(
      "The process delayq-crash-driver kills: an engine on STORE scheduling tasks\n"
      "c-0 .. c-(N-1), recording in DIR what it did.",
      "delayq-crash-worker");
  app.add_option("--store", o.store, "the store's URI")->required()->type_name("URI");
  app.add_option("--dir", o.dir, "the directory of the run's files")->required()->type_name("DIR");
  app.add_option("--tasks", o.tasks, "tasks in all")->required()->check(CLI::PositiveNumber);
  app.add_option("--span-ms", o.span_ms, "delays are seeded random in [0, S] ms")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--seed", o.seed, "the seed of the delays")->check(CLI::NonNegativeNumber);
  app.add_option("--in-flight", o.in_flight,
                 "async schedules outstanding at once (0 or 1: blocking schedule())")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_flag("--drain", o.drain,
               "schedule what is left, wait until the engine holds nothing, check, exit");
  std::uint64_t timeout_s = static_cast<std::uint64_t>(o.timeout.count());
  app.add_option("--timeout-s", timeout_s, "--drain: most seconds to wait for the engine to empty")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e) == 0 ? 0 : 64);  // 64: EX_USAGE
  }
  o.in_flight = std::max<std::size_t>(1, o.in_flight);
  o.timeout = std::chrono::seconds{timeout_s};
  return o;
}

std::string path_in(const options& o, const char* name) { return o.dir + "/" + name; }

// An append-only file whose every line is durable before append() returns.
// One write() per line: a kill leaves a line whole or absent, but for a line
// across a page boundary (crash::drop_torn_tail); concurrent appenders (the
// two workers) never interleave within a line.
class durable_log {
 public:
  explicit durable_log(const std::string& path)
      : path_(path), fd_(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) {
    if (fd_ < 0) fail("cannot open " + path_);
  }
  ~durable_log() { ::close(fd_); }
  durable_log(const durable_log&) = delete;
  durable_log& operator=(const durable_log&) = delete;

  void append(const std::string& line) const {
    if (::write(fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size()) ||
        ::fdatasync(fd_) != 0)
      fail("cannot append to " + path_);  // exits: an attempt must never fail and be retried
  }

 private:
  std::string path_;
  int fd_;
};

// Replaces `path` with `text` atomically and durably: a kill leaves the old
// file or the new one.
void replace_file(const std::string& dir, const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 || ::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size()) ||
      ::fsync(fd) != 0)
    fail("cannot write " + tmp);
  ::close(fd);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail("cannot rename " + tmp);
  const int d = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d < 0 || ::fsync(d) != 0) fail("cannot sync " + dir);
  ::close(d);
}

// Reads, increments and replaces the run counter. A run killed before the
// rename has no number and has done nothing yet; the next run takes it.
unsigned next_run(const options& o) {
  const std::string path = path_in(o, crash::run_counter);
  const auto prev = crash::read_lines(path);
  unsigned run = 1;
  if (!prev.lines.empty() || prev.torn) {
    auto n = prev.lines.empty() ? std::nullopt : crash::parse_number<unsigned>(prev.lines.front());
    if (!n || prev.torn) fail("corrupt run counter " + path);
    run = *n + 1;
  }
  replace_file(o.dir, path, std::to_string(run) + "\n");
  return run;
}

// The ids with an attempt in executed.log: all of them, or only those whose
// attempt succeeded. `live` is a read while this run's executors append: a
// read() may then end inside a line another thread is still writing (Linux
// does not make a read atomic against a write() to a regular file; seen in an
// ASan run). That line belongs to a task the engine still holds, since its
// executor has not returned, so the in-doubt check loses nothing by skipping
// it; once the engine has stopped, a torn line is an error again.
enum class log_read { live, settled };
std::unordered_set<std::string> executed_ids(const options& o, bool succeeded_only, log_read when) {
  const auto log = crash::read_lines(path_in(o, crash::executed_log));
  if (log.torn && when == log_read::settled) fail("executed.log ends with a torn line");
  std::unordered_set<std::string> ids;
  for (const auto& line : log.lines) {
    auto e = crash::parse_executed(line);
    if (!e) fail("malformed line in executed.log: '" + line + "'");
    if (e->ok || !succeeded_only) ids.insert(std::move(e->id));
  }
  return ids;
}

// What a designed failure throws; the engine's retry warnings quote it.
constexpr std::string_view designed_failure = "designed failure";

// How many tasks were acknowledged, checking that acked.log is c-0, c-1, ...
std::size_t acknowledged(const options& o) {
  const auto log = crash::read_lines(path_in(o, crash::acked_log));
  if (log.torn) fail("acked.log ends with a torn line");
  for (std::size_t k = 0; k < log.lines.size(); ++k) {
    auto a = crash::parse_acked(log.lines[k]);
    if (!a || a->id != crash::task_id(k))
      fail("acked.log line " + std::to_string(k + 1) + " is '" + log.lines[k] + "', expected " +
           crash::task_id(k));
  }
  if (log.lines.size() > o.tasks) fail("acked.log holds more than --tasks ids");
  return log.lines.size();
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse_args(argc, argv);
  run_number = next_run(o);

  const durable_log errors(path_in(o, crash::errors_log));
  delayq::set_log_function([&errors](delayq::log_level level, std::string_view message) {
    if (level < delayq::log_level::warning) return;
    // Hundreds of "attempt N failed: designed failure; retrying" per run are
    // the test working, not news.
    if (level == delayq::log_level::warning &&
        message.find(designed_failure) != std::string_view::npos)
      return;
    const std::string line = "run " + std::to_string(run_number) + ": " + std::string(message);
    std::fprintf(stderr, "delayq-crash-worker: %s\n", line.c_str());
    // An error (a failed store write, a quarantined record) breaks what the
    // driver checks for; it fails the test even from a run that is killed.
    if (level == delayq::log_level::error) errors.append(line + "\n");
  });

  // A run killed in the middle of a line's write() can leave it torn; the
  // driver starts no worker before the last one is gone.
  crash::drop_torn_tail(path_in(o, crash::executed_log));
  crash::drop_torn_tail(path_in(o, crash::acked_log));
  const durable_log executed(path_in(o, crash::executed_log));
  const durable_log acked(path_in(o, crash::acked_log));
  std::size_t next = acknowledged(o);

  std::mutex progress_mutex;
  std::condition_variable progress;
  std::atomic<unsigned> workers_seen{0};
  delayq::executor_factory executors;
  executors.add(crash::task_type, [&](const delayq::task& t) {
    thread_local const unsigned worker = workers_seen.fetch_add(1);
    const auto k = crash::task_index(t.id, o.tasks);
    if (!k) fail("the engine ran an unknown task " + t.id);
    crash::executed_line e{run_number, t.id, worker, true, t.attempts + 1};
    const unsigned designed = crash::designed_failures(*k);
    e.ok = e.attempt > designed;
    // Logged before the throw: a failed attempt whose line is missing never
    // ran far enough for the engine to count it.
    executed.append(crash::format_executed(e));
    progress.notify_all();
    if (!e.ok)
      throw std::runtime_error(std::string(designed_failure) + " " + std::to_string(e.attempt) +
                               " of " + std::to_string(designed));
  });

  boost::asio::io_context io;
  auto guard = boost::asio::make_work_guard(io);
  std::thread io_thread([&io] { io.run(); });

  delayq::engine_options eo;
  eo.tick = 10ms;
  eo.workers = crash::worker_threads;
  eo.catch_up_rate = 0;  // overdue tasks all run at once after a restart
  eo.retry.max_attempts = crash::max_attempts;
  eo.retry.base = std::chrono::milliseconds{crash::retry_base_ms};
  eo.retry.cap = std::chrono::milliseconds{crash::retry_cap_ms};
  std::optional<delayq::engine> eng;
  try {
    eng.emplace(io, executors, delayq::open_store(o.store), eo);
    eng->start();
  } catch (const std::exception& e) {
    fail(std::string("cannot start the engine: ") + e.what());
  }
  const delayq::engine_stats at_start = eng->stats();
  if (at_start.quarantined != 0)
    fail(std::to_string(at_start.quarantined) + " stored records could not be decoded");
  if (at_start.dead != 0)
    fail("the store holds " + std::to_string(at_start.dead) +
         " dead letters: no task may die (it is designed to fail at most 2 of " +
         std::to_string(crash::max_attempts) + " attempts)");
  std::fprintf(stderr,
               "delayq-crash-worker: run %u: loaded %llu stored tasks, %zu of %zu acknowledged%s\n",
               run_number, static_cast<unsigned long long>(at_start.loaded), next, o.tasks,
               o.drain ? ", draining" : "");

  // The first unacknowledged ids are in doubt (one with blocking schedules,
  // up to --in-flight with async ones): the previous run may have been
  // killed after their schedule completed and before their ack line. Scheduling one
  // again with on_conflict::keep is not enough: if the restarted engine already
  // ran and removed it, keep finds nothing and adds it a second time. start()
  // loaded everything stored, so the engine either still holds it (find()
  // sees waiting, retrying and running tasks), or it ran since (and its line
  // is in executed.log, written before the engine forgot it), or it was never
  // stored. Any line counts: a failed attempt proves the task was stored too.
  // With async schedules the ids in doubt need not be a prefix of the ones
  // stored, so each is settled on its own, in order: found, ran, or
  // scheduled now (blocking) and acknowledged.
  auto schedule_blocking = [&](std::size_t k) {
    const std::string id = crash::task_id(k);
    const auto delay = std::chrono::milliseconds{crash::task_delay_ms(o.seed, k, o.span_ms)};
    boost::system::error_code ec;
    // keep: a pending task with this id stays as it is (none is expected:
    // every earlier id is acknowledged and the in-doubt ones are settled).
    const std::string got =
        eng->schedule(crash::task_type, "", delay, {id, delayq::on_conflict::keep}, ec);
    if (ec) fail("schedule(" + id + ") failed: " + ec.message());
    if (got != id) fail("schedule(" + id + ") returned id " + got);
    acked.append(id + "\n");
  };
  const std::size_t in_doubt_end = std::min(o.tasks, next + o.in_flight);
  if (next < in_doubt_end) {
    auto ran = executed_ids(o, false, log_read::live);
    for (bool settled = true; next < in_doubt_end && settled; ++next) {
      const std::string id = crash::task_id(next);
      // Read executed.log again after find() failed: the task may have run
      // (and left the engine) since the last read, and its line is written
      // before the engine forgets it.
      const bool found = eng->find(id).has_value();
      if (!found && ran.count(id) == 0) ran = executed_ids(o, false, log_read::live);
      if (found)
        acked.append(id + " " + std::string(crash::found_pending) + "\n");
      else if (ran.count(id) != 0)
        acked.append(id + " " + std::string(crash::found_executed) + "\n");
      else if (o.in_flight > 1)
        schedule_blocking(next);
      else
        settled = false;  // never stored: the loop below schedules it
      if (!settled) break;
    }
  }

  if (o.in_flight <= 1) {
    for (; next < o.tasks; ++next) schedule_blocking(next);
  } else {
    // Up to in_flight async schedules at once. Completions may come in any
    // order; acked.log gets the longest prefix of completed ids, so it stays
    // c-0, c-1, ... and a kill leaves at most in_flight ids in doubt, all
    // within in_flight of the end of acked.log.
    std::mutex m;
    std::condition_variable room;
    std::vector<char> completed(o.tasks, 0);
    std::size_t outstanding = 0, first_unacked = next;
    for (std::size_t k = next; k < o.tasks; ++k) {
      {
        std::unique_lock lock(m);
        // Bounded by the first id not yet acknowledged, not by the count
        // outstanding: every id sent lies within in_flight of acked.log's end.
        room.wait(lock, [&] { return k < first_unacked + o.in_flight; });
        ++outstanding;
      }
      const std::string id = crash::task_id(k);
      const auto delay = std::chrono::milliseconds{crash::task_delay_ms(o.seed, k, o.span_ms)};
      eng->async_schedule(std::string(crash::task_type), "", delay, {id, delayq::on_conflict::keep},
                          [&, k, id](boost::system::error_code ec, std::string got) {
                            if (ec) fail("async_schedule(" + id + ") failed: " + ec.message());
                            if (got != id) fail("async_schedule(" + id + ") returned id " + got);
                            std::lock_guard lock(m);
                            completed[k] = 1;
                            for (; first_unacked < o.tasks && completed[first_unacked];
                                 ++first_unacked)
                              acked.append(crash::task_id(first_unacked) + "\n");
                            --outstanding;
                            room.notify_all();
                          });
    }
    std::unique_lock lock(m);
    room.wait(lock, [&] { return outstanding == 0; });
    next = o.tasks;
  }

  if (!o.drain) {
    io_thread.join();  // io.run() has work until the driver kills us
    fail("the io_context stopped while the engine was running");
  }

  // Drain: wait until the engine holds nothing. The executor's notification
  // comes just before the engine counts the attempt done, so the wait also
  // rechecks once per tick.
  const auto deadline = std::chrono::steady_clock::now() + o.timeout;
  {
    std::unique_lock lock(progress_mutex);
    while (eng->pending() != 0) {
      if (std::chrono::steady_clock::now() > deadline)
        fail("drain: " + std::to_string(eng->pending()) + " tasks still pending after " +
             std::to_string(o.timeout.count()) + " s");
      progress.wait_for(lock, eo.tick);
    }
  }
  if (!eng->stop(30s)) fail("drain: stop() left attempts running");
  const delayq::engine_stats done = eng->stats();
  // Every failure of this run was a designed one, and each was retried.
  if (done.died != 0) fail("drain: " + std::to_string(done.died) + " tasks became dead letters");
  if (done.failed != done.retried)
    fail("drain: " + std::to_string(done.failed) + " attempts failed but " +
         std::to_string(done.retried) + " were retried");
  if (done.timed_out != 0) fail("drain: " + std::to_string(done.timed_out) + " attempts timed out");
  eng.reset();
  guard.reset();
  io.stop();
  io_thread.join();

  // Nothing may be left behind in the store, not even a dead letter, and
  // every acknowledged task succeeded.
  std::size_t left = 0;
  std::vector<delayq::dead_letter> dead;
  try {
    const auto store = delayq::open_store(o.store);
    store->list([&left](delayq::task&&) { ++left; });
    dead = store->dead_letters()->list_dead(0, 10);
  } catch (const std::exception& e) {
    fail(std::string("drain: cannot list the store: ") + e.what());
  }
  if (left != 0) fail("drain: the store still holds " + std::to_string(left) + " tasks");
  if (!dead.empty())
    fail("drain: the store holds dead letters, the first " + dead.front().task.id + " after " +
         std::to_string(dead.front().task.attempts) + " attempts: " + dead.front().error);
  const auto ran = executed_ids(o, true, log_read::settled);
  std::size_t lost = 0;
  std::string examples;
  for (std::size_t k = 0; k < o.tasks; ++k) {
    if (ran.count(crash::task_id(k)) != 0) continue;
    if (++lost <= 10) examples += " " + crash::task_id(k);
  }
  if (lost != 0)
    fail("drain: " + std::to_string(lost) + " acknowledged tasks never succeeded:" + examples);
  delayq::set_log_function({});
  return 0;
}
