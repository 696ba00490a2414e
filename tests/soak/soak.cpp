// delayq-soak: the program behind scripts/soak.sh, a soak test that is not run
// in CI. Two modes:
//
//   delayq-soak run --store URI --dir DIR --run N --load-until EPOCH_MS
//                   [--seed X] [--schedulers T] [--rate R] [--workers W]
//                   [--drain-timeout-s S]
//     An engine on STORE under mixed load until EPOCH_MS: T threads schedule
//     about R tasks per second each, due in 0-5 s, of five types (soak_files.hpp:
//     quick, flaky, always failing, slow, slow under a timeout); one more thread
//     cancels or reschedules recently acknowledged ids. Then it stops
//     scheduling, waits until the engine holds nothing, and exits 0 (3 when
//     the drain timed out). The script SIGKILLs it and restarts it with the
//     next N; every run appends to the logs in DIR.
//
//   delayq-soak check --store URI --dir DIR [--label NAME] [--schedulers T]
//                     [--outage-ms MS]
//     Reads DIR and the store after the last run drained and checks that
//     every acknowledged id succeeded, is a dead letter in the store, or was
//     cancelled: none lost. Prints a summary table; exits 1 on any loss or
//     inconsistency.

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
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "soak_files.hpp"

namespace {

using namespace std::chrono_literals;
namespace soak = delayq::soak;
using steady = std::chrono::steady_clock;
using system_clock = std::chrono::system_clock;

struct options {
  std::string mode;
  std::string store;
  std::string dir;
  std::string label;
  unsigned run = 0;
  std::int64_t load_until_ms = 0;
  std::uint64_t seed = 1;
  unsigned schedulers = 4;
  unsigned rate = 25;  // schedules per second per scheduler thread
  unsigned workers = 8;
  std::chrono::seconds drain_timeout{120};
  std::optional<std::uint64_t> outage_ms;
};

options parse_args(int argc, char** argv) {
  options o;
  CLI::App app("The soak test's worker and checker, driven by scripts/soak.sh.", "delayq-soak");
  app.require_subcommand(1);
  CLI::App* run = app.add_subcommand(
      "run",
      "An engine on STORE under mixed load until EPOCH_MS, then drained; exits 0, or 3\n"
      "when the drain timed out");
  CLI::App* check = app.add_subcommand(
      "check",
      "After the last run drained: checks that every acknowledged id succeeded, is a\n"
      "dead letter in the store, or was cancelled; exits 1 on any loss");
  for (CLI::App* mode : {run, check}) {
    mode->add_option("--store", o.store, "the store's URI")->required()->type_name("URI");
    mode->add_option("--dir", o.dir, "the directory of the runs' logs")
        ->required()
        ->type_name("DIR");
    mode->add_option("--schedulers", o.schedulers, "scheduling threads per run")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
  }
  run->add_option("--run", o.run, "this run's number, from 1")
      ->required()
      ->check(CLI::PositiveNumber);
  run->add_option("--load-until", o.load_until_ms, "schedule until this time (ms since the epoch)")
      ->required()
      ->check(CLI::PositiveNumber);
  run->add_option("--seed", o.seed, "the seed of the load")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  run->add_option("--rate", o.rate, "schedules per second per scheduling thread")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  run->add_option("--workers", o.workers, "the engine's worker threads")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  std::uint64_t drain_timeout_s = static_cast<std::uint64_t>(o.drain_timeout.count());
  run->add_option("--drain-timeout-s", drain_timeout_s, "most seconds to wait for the drain")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  check->add_option("--label", o.label, "the name in the summary (default: the URI's scheme)");
  check->add_option("--outage-ms", o.outage_ms, "the store's outage, for the summary")
      ->check(CLI::NonNegativeNumber);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e) == 0 ? 0 : 64);  // 64: EX_USAGE
  }
  o.mode = run->parsed() ? "run" : "check";
  o.drain_timeout = std::chrono::seconds{drain_timeout_s};
  if (o.label.empty()) o.label = o.store.substr(0, o.store.find(':'));
  return o;
}

// ==================================================================== run

unsigned this_run = 0;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "delayq-soak (run %u): %s\n", this_run, what.c_str());
  std::_Exit(2);  // the engine's threads are still running
}

// The ids acknowledged lately, for the thread that cancels and reschedules.
class recent_ids {
 public:
  void add(std::string id) {
    std::lock_guard lock(mutex_);
    ids_.push_back(std::move(id));
    if (ids_.size() > 2000) ids_.pop_front();
  }
  std::optional<std::string> pick(std::mt19937_64& rng) {
    std::lock_guard lock(mutex_);
    if (ids_.empty()) return std::nullopt;
    return ids_[std::uniform_int_distribution<std::size_t>(0, ids_.size() - 1)(rng)];
  }

 private:
  std::mutex mutex_;
  std::deque<std::string> ids_;
};

int run(const options& o) {
  this_run = o.run;
  std::filesystem::create_directories(o.dir);
  const soak::durable_log acked(o.dir + "/" + soak::acked_log);
  const soak::durable_log events(o.dir + "/" + soak::events_log);
  const soak::durable_log errors(o.dir + "/" + soak::errors_log);
  const std::string run_tag = std::to_string(o.run) + " ";

  std::atomic<std::uint64_t> error_lines{0}, refused{0}, cancel_calls{0}, cancelled{0},
      rescheduled{0}, alerts_died{0}, alerts_rate{0};
  // A store outage makes the engine log an error per failed write: all go to
  // the errors log; stderr gets the first few.
  delayq::set_log_function([&](delayq::log_level level, std::string_view message) {
    if (level < delayq::log_level::error) return;
    const auto n = error_lines.fetch_add(1);
    const std::string line = "run " + std::to_string(o.run) + ": " + std::string(message);
    if (n < 5) std::fprintf(stderr, "delayq-soak: %s\n", line.c_str());
    try {
      errors.append(line + "\n");
    } catch (const std::exception& e) {
      die(e.what());
    }
  });
  auto log_event = [&](const std::string& line) {
    try {
      events.append(run_tag + line + "\n");
    } catch (const std::exception& e) {
      die(e.what());
    }
  };

  // What an attempt does is a function of (id, attempt): see soak_files.hpp.
  auto attempt = [&](const delayq::task& t) {
    const std::uint32_t number = t.attempts + 1;
    const std::uint64_t h = soak::attempt_hash(t.id, number);
    const auto started = steady::now();
    std::string outcome = "ok";
    if (t.type == soak::type_flaky) {
      if (h % 100 < 35) outcome = "fail";
    } else if (t.type == soak::type_doomed) {
      outcome = "fail";
    } else if (t.type == soak::type_slow || t.type == soak::type_slow_timed) {
      std::this_thread::sleep_for(std::chrono::milliseconds{50 + h % 151});
    }
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - started).count();
    if (t.type == soak::type_slow_timed && ms >= soak::late_ms) outcome = "late";
    log_event("exec " + t.id + " " + std::to_string(number) + " " + outcome + " " +
              std::to_string(ms));
    if (outcome != "ok") throw std::runtime_error("soak: " + outcome);
  };
  delayq::executor_factory executors;
  for (const auto& type : soak::all_types()) executors.add(type, attempt);

  delayq::engine_options eo;
  eo.tick = 10ms;
  eo.workers = o.workers;
  eo.retry.max_attempts = soak::max_attempts;
  eo.retry.base = std::chrono::milliseconds{soak::retry_base_ms};
  eo.retry.cap = std::chrono::milliseconds{soak::retry_cap_ms};
  eo.timeout_per_type[soak::type_slow_timed] = std::chrono::milliseconds{soak::timeout_ms};
  eo.alerts.on_alert = [&](const delayq::alert& a) {
    (a.what == delayq::alert::kind::task_died ? alerts_died : alerts_rate)++;
  };

  boost::asio::io_context io;
  auto guard = boost::asio::make_work_guard(io);
  std::thread io_thread([&io] { io.run(); });

  // The store may be down when a run starts: keep trying for a minute.
  std::optional<delayq::engine> eng;
  for (auto deadline = steady::now() + 60s;;) {
    try {
      eng.emplace(io, executors, delayq::open_store(o.store), eo);
      eng->start();
      break;
    } catch (const std::exception& e) {
      eng.reset();
      if (steady::now() > deadline) die(std::string("cannot start the engine: ") + e.what());
      std::this_thread::sleep_for(500ms);
    }
  }
  const auto at_start = eng->stats();
  std::fprintf(stderr, "delayq-soak: run %u on %s: loaded %llu tasks, %zu dead letters\n", o.run,
               o.store.c_str(), static_cast<unsigned long long>(at_start.loaded), at_start.dead);

  std::atomic<bool> stop_stats{false};
  auto write_stats = [&](bool final, bool drained) {
    const delayq::engine_stats s = eng->stats();
    std::string text;
    auto put = [&text](const char* key, std::uint64_t v) {
      text += std::string(key) + " " + std::to_string(v) + "\n";
    };
    put("loaded", s.loaded);
    put("scheduled", s.scheduled);
    put("fired", s.fired);
    put("succeeded", s.succeeded);
    put("failed", s.failed);
    put("retried", s.retried);
    put("timed_out", s.timed_out);
    put("died", s.died);
    put("cancelled", s.cancelled);
    put("quarantined", s.quarantined);
    put("dead_now", s.dead);
    put("pending", s.pending);
    put("lateness_p99_us", static_cast<std::uint64_t>(s.lateness_p99.count()));
    put("lateness_max_us", static_cast<std::uint64_t>(s.lateness_max.count()));
    put("refused", refused);
    put("cancel_calls", cancel_calls);
    put("rescheduled", rescheduled);
    put("error_lines", error_lines);
    put("alerts_died", alerts_died);
    put("alerts_rate", alerts_rate);
    if (final) {
      put("final", 1);
      put("drained", drained ? 1 : 0);
    }
    soak::replace_file(o.dir, soak::stats_file(o.run), text);
  };
  std::thread stats_thread([&] {
    while (!stop_stats) {
      write_stats(false, false);
      std::this_thread::sleep_for(500ms);
    }
  });

  const auto load_until = system_clock::time_point{std::chrono::milliseconds{o.load_until_ms}};
  std::vector<std::thread> schedulers;
  recent_ids recent;
  for (unsigned th = 0; th < o.schedulers; ++th) {
    schedulers.emplace_back([&, th] {
      std::mt19937_64 rng(o.seed * 1000003 + o.run * 101 + th);
      // Weights of ok, flaky, doomed, slow, slow.timed.
      std::discrete_distribution<std::size_t> pick_type({35, 20, 10, 15, 20});
      std::uniform_int_distribution<std::int64_t> pick_delay(0, 5000);
      std::exponential_distribution<double> pause(static_cast<double>(o.rate));
      for (std::uint64_t seq = 0; system_clock::now() < load_until; ++seq) {
        const std::string& type = soak::all_types()[pick_type(rng)];
        const std::string id =
            "r" + std::to_string(o.run) + "t" + std::to_string(th) + "n" + std::to_string(seq);
        boost::system::error_code ec;
        eng->schedule(type, "", std::chrono::milliseconds{pick_delay(rng)}, {id}, ec);
        if (!ec) {
          try {
            acked.append(id + " " + type + "\n");
          } catch (const std::exception& e) {
            die(e.what());
          }
          recent.add(id);
        } else {
          ++refused;
          log_event("refused " + id + " " + ec.message());
          std::this_thread::sleep_for(100ms);  // the store is down: do not spin
        }
        std::this_thread::sleep_for(std::chrono::duration<double>(pause(rng)));
      }
    });
  }
  std::thread canceller([&] {
    std::mt19937_64 rng(o.seed * 7919 + o.run);
    std::uniform_int_distribution<std::int64_t> pick_delay(0, 5000);
    while (system_clock::now() < load_until) {
      std::this_thread::sleep_for(100ms);
      const auto id = recent.pick(rng);
      if (!id) continue;
      boost::system::error_code ec;
      if (rng() % 2 == 0) {
        ++cancel_calls;
        log_event("cancel-intent " + *id);
        const bool done = eng->cancel(*id, ec);
        if (done) ++cancelled;
        log_event((ec ? "cancel-failed " : done ? "cancelled " : "cancel-missed ") + *id);
      } else if (eng->reschedule(
                     *id, system_clock::now() + std::chrono::milliseconds{pick_delay(rng)}, ec)) {
        ++rescheduled;
        log_event("rescheduled " + *id);
      }
    }
  });
  for (auto& t : schedulers) t.join();
  canceller.join();

  // Drain: wait until the engine holds nothing.
  const auto drain_deadline = steady::now() + o.drain_timeout;
  while (eng->pending() != 0 && steady::now() < drain_deadline) std::this_thread::sleep_for(50ms);
  const bool drained = eng->pending() == 0;
  if (!drained)
    std::fprintf(stderr, "delayq-soak: run %u: %zu tasks still pending after %lld s\n", o.run,
                 eng->pending(), static_cast<long long>(o.drain_timeout.count()));
  eng->stop(30s);
  stop_stats = true;
  stats_thread.join();
  write_stats(true, drained);
  eng.reset();
  guard.reset();
  io.stop();
  io_thread.join();
  delayq::set_log_function({});
  return drained ? 0 : 3;
}

// ==================================================================== check

// What the logs and the store say about one id.
struct id_record {
  std::string type;  // empty: never acknowledged
  bool acked = false;
  bool refused = false;
  std::size_t ok = 0;        // successful attempts logged
  std::size_t attempts = 0;  // attempt lines of any outcome
  std::set<std::uint32_t> attempt_numbers;
  bool cancelled = false;
  unsigned cancelled_run = 0;
  std::size_t after_cancel_same_run = 0;
  std::size_t after_cancel_later_run = 0;
  unsigned cancel_intent_run = 0;  // an intent not yet resolved (0: none)
  bool cancel_in_doubt = false;
};

struct type_row {
  std::size_t scheduled = 0, succeeded = 0, dead = 0, cancelled = 0, cancel_in_doubt = 0, lost = 0,
              duplicates = 0;
};

int check(const options& o) {
  std::vector<std::string> failures;
  auto fail = [&failures](std::string what) { failures.push_back(std::move(what)); };
  std::unordered_map<std::string, id_record> ids;

  // Runs, and which of them drained (the others were killed).
  std::map<unsigned, std::map<std::string, std::uint64_t>> stats;
  for (const auto& entry : std::filesystem::directory_iterator(o.dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("stats.", 0) != 0) continue;
    const auto run = soak::parse_number<unsigned>(std::string_view(name).substr(6));
    if (!run) continue;
    for (const auto& line : soak::read_lines(entry.path().string()).lines) {
      const auto f = soak::fields(line);
      if (f.size() == 2)
        if (auto v = soak::parse_number<std::uint64_t>(f[1])) stats[*run][std::string(f[0])] = *v;
    }
  }
  if (stats.empty()) fail("no stats files in " + o.dir + ": did any run start?");
  std::set<unsigned> killed_runs;
  for (const auto& [run, s] : stats)
    if (!s.count("final")) killed_runs.insert(run);
  const unsigned last_run = stats.empty() ? 0 : stats.rbegin()->first;
  if (!stats.empty() && !(stats[last_run].count("drained") && stats[last_run]["drained"] == 1))
    fail("the last run (" + std::to_string(last_run) + ") did not drain");
  auto sum = [&stats](const char* key) {
    std::uint64_t total = 0;
    for (const auto& [run, s] : stats)
      if (auto it = s.find(key); it != s.end()) total += it->second;
    return total;
  };

  const auto acked = soak::read_lines(o.dir + "/" + soak::acked_log);
  if (acked.torn) fail("acked.log ends with a torn line");
  const auto& types = soak::all_types();
  for (const auto& line : acked.lines) {
    const auto f = soak::fields(line);
    if (f.size() != 2 || std::find(types.begin(), types.end(), f[1]) == types.end()) {
      fail("malformed acked.log line '" + line + "'");
      continue;
    }
    id_record& r = ids[std::string(f[0])];
    if (r.acked) fail(std::string(f[0]) + " acknowledged twice");
    r.acked = true;
    r.type = f[1];
  }

  std::uint64_t late_attempts = 0, repeated_attempts = 0;
  const auto events = soak::read_lines(o.dir + "/" + soak::events_log);
  if (events.torn) fail("events.log ends with a torn line");
  for (const auto& line : events.lines) {
    const auto f = soak::fields(line);
    const auto run = f.empty() ? std::nullopt : soak::parse_number<unsigned>(f[0]);
    if (!run || f.size() < 3) {
      fail("malformed events.log line '" + line + "'");
      continue;
    }
    id_record& r = ids[std::string(f[2])];
    const std::string_view what = f[1];
    if (what == "exec") {
      const auto number = f.size() == 6 ? soak::parse_number<std::uint32_t>(f[3]) : std::nullopt;
      if (!number || (f[4] != "ok" && f[4] != "fail" && f[4] != "late")) {
        fail("malformed events.log line '" + line + "'");
        continue;
      }
      ++r.attempts;
      if (!r.attempt_numbers.insert(*number).second) ++repeated_attempts;
      if (f[4] == "ok") ++r.ok;
      if (f[4] == "late") ++late_attempts;
      if (r.cancelled)
        ++(*run == r.cancelled_run ? r.after_cancel_same_run : r.after_cancel_later_run);
    } else if (what == "refused") {
      r.refused = true;
    } else if (what == "cancel-intent") {
      r.cancel_intent_run = *run;
    } else if (what == "cancelled" || what == "cancel-missed" || what == "cancel-failed") {
      if (r.cancel_intent_run != *run) fail("a cancel outcome without its intent: '" + line + "'");
      r.cancel_intent_run = 0;
      if (what == "cancelled" && !r.cancelled) {
        r.cancelled = true;
        r.cancelled_run = *run;
      }
    } else if (what != "rescheduled") {
      fail("malformed events.log line '" + line + "'");
    }
  }

  // The store, after the last run drained.
  std::unordered_set<std::string> live;
  std::unordered_map<std::string, delayq::dead_letter> dead;
  try {
    const auto store = delayq::open_store(o.store);
    store->list([&live](delayq::task&& t) { live.insert(std::move(t.id)); });
    for (std::size_t offset = 0;;) {
      auto page = store->dead_letters()->list_dead(offset, 1000);
      offset += page.size();
      for (auto& d : page) dead.emplace(d.task.id, std::move(d));
      if (page.size() < 1000) break;
    }
  } catch (const std::exception& e) {
    fail(std::string("cannot read the store: ") + e.what());
  }

  std::map<std::string, type_row> rows;
  type_row total;
  std::size_t unacked_seen = 0, refused_but_stored = 0, ok_and_dead = 0;
  std::vector<std::string> lost_examples;
  for (auto& [id, r] : ids) {
    const auto d = dead.find(id);
    const bool is_dead = d != dead.end();
    if (r.cancel_intent_run != 0) {
      if (killed_runs.count(r.cancel_intent_run))
        r.cancel_in_doubt = true;
      else
        fail(id + ": a cancel() in run " + std::to_string(r.cancel_intent_run) +
             " has no outcome, and that run was not killed");
    }
    if (is_dead && d->second.task.attempts != soak::max_attempts)
      fail(id + " died after " + std::to_string(d->second.task.attempts) + " attempts, not " +
           std::to_string(soak::max_attempts) + ": " + d->second.error);
    if (r.cancelled && r.after_cancel_later_run != 0)
      fail(id + " was cancelled in run " + std::to_string(r.cancelled_run) + " yet ran " +
           std::to_string(r.after_cancel_later_run) + " attempts in later runs");
    // One attempt may be running when cancel() comes, two for the timed type
    // (a timed-out attempt still sleeping beside its retry).
    const std::size_t may_follow = r.type == soak::type_slow_timed ? 2 : 1;
    if (r.cancelled && r.after_cancel_same_run > may_follow)
      fail(id + " was cancelled yet ran " + std::to_string(r.after_cancel_same_run) +
           " attempts after it in the same run");
    if (live.count(id)) fail(id + " is still a live task in the store after the drain");

    if (!r.acked) {
      if (r.attempts == 0 && !is_dead && !live.count(id)) continue;  // refused, never stored
      if (r.refused)
        ++refused_but_stored;  // schedule() said no, yet the task was stored
      else
        ++unacked_seen;  // schedule() returned as the run was killed, before the ack line
      continue;
    }
    type_row& row = rows[r.type];
    ++row.scheduled;
    if (r.refused) fail(id + " was both refused and acknowledged");
    if (r.type == soak::type_doomed && r.ok != 0) fail(id + " (always failing) succeeded");
    if (is_dead && (r.type == soak::type_ok || r.type == soak::type_slow))
      fail(id + " of type " + r.type + ", which never fails, is a dead letter");
    if (r.ok != 0) {
      ++row.succeeded;
      row.duplicates += r.ok - 1;
      if (is_dead) {
        // Only a timed attempt can be told "ok" by its executor and "timed
        // out" by the engine; a flaky attempt repeats its outcome.
        ++ok_and_dead;
        if (r.type != soak::type_slow_timed)
          fail(id + " succeeded and yet is a dead letter: " + d->second.error);
      }
    } else if (is_dead) {
      ++row.dead;
    } else if (r.cancelled) {
      ++row.cancelled;
    } else if (r.cancel_in_doubt) {
      ++row.cancel_in_doubt;
    } else {
      ++row.lost;
      if (lost_examples.size() < 10) lost_examples.push_back(id + " (" + r.type + ")");
    }
  }
  for (const auto& [id, d] : dead)
    if (!ids.count(id)) fail("dead letter " + id + " is no task of this soak");
  for (const auto& [type, row] : rows) {
    total.scheduled += row.scheduled;
    total.succeeded += row.succeeded;
    total.dead += row.dead;
    total.cancelled += row.cancelled;
    total.cancel_in_doubt += row.cancel_in_doubt;
    total.lost += row.lost;
    total.duplicates += row.duplicates;
  }
  if (total.lost != 0) {
    std::string examples;
    for (const auto& e : lost_examples) examples += " " + e;
    fail(std::to_string(total.lost) + " acknowledged tasks LOST (neither succeeded, nor a dead " +
         "letter, nor cancelled):" + examples);
  }
  const std::size_t kills = killed_runs.size();
  if (unacked_seen > std::size_t{o.schedulers} * kills)
    fail(std::to_string(unacked_seen) + " unacknowledged ids were stored, more than one per " +
         "scheduler thread per kill");
  if (sum("quarantined") != 0)
    fail(std::to_string(sum("quarantined")) + " stored records could not be decoded");

  // The summary.
  const char* verdict = failures.empty() ? "PASS" : "FAIL";
  std::printf("\nsoak %s: %s  (%u runs, %zu killed)\n", o.label.c_str(), verdict, last_run, kills);
  std::printf("  %-24s %8s", "", "total");
  for (const auto& type : types) std::printf(" %15s", type.c_str());
  std::printf("\n");
  auto row_line = [&](const char* name, std::size_t type_row::*field) {
    std::printf("  %-24s %8zu", name, total.*field);
    for (const auto& type : types) std::printf(" %15zu", rows[type].*field);
    std::printf("\n");
  };
  row_line("scheduled (acknowledged)", &type_row::scheduled);
  row_line("succeeded", &type_row::succeeded);
  row_line("dead letters", &type_row::dead);
  row_line("cancelled", &type_row::cancelled);
  row_line("cancel in doubt (kill)", &type_row::cancel_in_doubt);
  row_line("LOST", &type_row::lost);
  row_line("duplicates (extra ok)", &type_row::duplicates);
  std::printf("  %-24s %8llu  (engine; killed runs up to their last stats snapshot)\n", "timeouts",
              static_cast<unsigned long long>(sum("timed_out")));
  std::printf("  %-24s %8llu  (attempts that overran %u ms and threw)\n", "late attempts",
              static_cast<unsigned long long>(late_attempts), soak::late_ms);
  std::printf("  %-24s %8llu\n", "retries (engine)",
              static_cast<unsigned long long>(sum("retried")));
  std::printf("  %-24s %8llu  (the same attempt run again after a kill)\n", "repeated attempts",
              static_cast<unsigned long long>(repeated_attempts));
  std::printf("  %-24s %8llu  (%llu cancelled)\n", "cancel() calls",
              static_cast<unsigned long long>(sum("cancel_calls")),
              static_cast<unsigned long long>(sum("cancelled")));
  std::printf("  %-24s %8llu\n", "reschedules",
              static_cast<unsigned long long>(sum("rescheduled")));
  std::printf("  %-24s %8llu  (errc while the store was down; nothing stored)\n",
              "refused schedules", static_cast<unsigned long long>(sum("refused")));
  std::printf("  %-24s %8zu  (refused, yet stored: must be 0 per the docs)\n", "refused but stored",
              refused_but_stored);
  std::printf("  %-24s %8zu  (stored as a kill hit before the ack line)\n", "unacknowledged",
              unacked_seen);
  std::printf("  %-24s %8zu  (timed type: executor ok, engine timeout)\n", "ok and dead",
              ok_and_dead);
  std::printf("  %-24s %8zu\n", "dead letters in store", dead.size());
  std::printf("  %-24s %8zu\n", "live tasks in store", live.size());
  std::printf("  %-24s %8llu  (task_died %llu, failure_rate %llu)\n", "alerts",
              static_cast<unsigned long long>(sum("alerts_died") + sum("alerts_rate")),
              static_cast<unsigned long long>(sum("alerts_died")),
              static_cast<unsigned long long>(sum("alerts_rate")));
  std::printf("  %-24s %8llu\n", "engine error lines",
              static_cast<unsigned long long>(sum("error_lines")));
  if (o.outage_ms)
    std::printf("  %-24s %8.1f s\n", "store outage", static_cast<double>(*o.outage_ms) / 1000.0);
  else
    std::printf("  %-24s %8s\n", "store outage", "none");
  std::fflush(stdout);
  if (refused_but_stored != 0)
    std::fprintf(stderr,
                 "soak %s: note: %zu schedule() calls failed and yet stored their task (a write "
                 "the store applied as the connection dropped); they ran, nothing was lost\n",
                 o.label.c_str(), refused_but_stored);
  const std::size_t shown = std::min<std::size_t>(failures.size(), 20);
  for (std::size_t i = 0; i < shown; ++i)
    std::fprintf(stderr, "soak %s: FAIL: %s\n", o.label.c_str(), failures[i].c_str());
  if (failures.size() > shown)
    std::fprintf(stderr, "soak %s: ... and %zu more\n", o.label.c_str(), failures.size() - shown);
  return failures.empty() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse_args(argc, argv);
  return o.mode == "run" ? run(o) : check(o);
}
