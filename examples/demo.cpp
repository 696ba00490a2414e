// delayq-demo: a small Asio program that embeds the engine the way a service
// would. It registers two task types, schedules a handful of tasks a few
// seconds out, cancels one, reschedules one, and prints each execution with
// its planned time, actual time and lateness.
//
//   delayq-demo [--tasks N] [--tick MS] [--store URI] [--resume]
//               [--crash-after SECONDS] [--help]

#include <CLI/CLI.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <delayq/delayq.hpp>
#include <functional>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>

namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::system_clock;

struct settings {
  int tasks = 6;
  std::chrono::milliseconds tick{100};
  std::string store;  // empty: the engine's default (DELAYQ_STORE, else Redis)
  bool resume = false;
  int crash_after = 0;  // seconds; 0: never
};

// The flags, each checked for its range; --help prints them. A bad flag
// exits 2 with a message.
settings parse(int argc, char** argv) {
  settings s;
  CLI::App app(
      "Schedules a few delayed tasks of two types (order.cancel, reminder.send),\n"
      "cancels one, reschedules one, and prints every execution with its planned\n"
      "time, actual time and lateness. Runs whatever the store already held too\n"
      "(tasks a crashed run left behind: overdue ones at once). Exits once the\n"
      "store is empty.",
      "delayq-demo");
  app.add_option("--tasks", s.tasks, "tasks to schedule")
      ->type_name("N")
      ->check(CLI::Range(2, 10000))
      ->capture_default_str();
  int tick_ms = static_cast<int>(s.tick.count());
  app.add_option("--tick", tick_ms, "wheel tick in milliseconds")
      ->type_name("MS")
      ->check(CLI::Range(1, 60000))
      ->capture_default_str();
  app.add_option("--store", s.store,
                 "where tasks are kept (default: $DELAYQ_STORE, else\n"
                 "redis://127.0.0.1:6379/0); also sqlite:FILE, memory:")
      ->type_name("URI");
  app.add_flag("--resume", s.resume, "schedule nothing; run what the store holds");
  app.add_option("--crash-after", s.crash_after,
                 "kill this process with SIGKILL after SEC seconds, to\n"
                 "show that a restart (--resume) loses nothing")
      ->type_name("SEC")
      ->check(CLI::Range(1, 3600));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e) == 0 ? 0 : 2);
  }
  s.tick = std::chrono::milliseconds{tick_ms};
  return s;
}

// "10:17:41.234" in UTC.
std::string clock_text(clock_type::time_point t) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch());
  const std::time_t secs = static_cast<std::time_t>(ms.count() / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%02d:%02d:%02d.%03d", tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ms.count() % 1000));
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  const settings cfg = parse(argc, argv);
  boost::asio::io_context io;
  std::mutex out_mutex;

  // Both executors print the same line; a real one would call a service.
  auto report = [&](const delayq::task& t) {
    const auto now = clock_type::now();
    const auto late = std::chrono::duration_cast<std::chrono::milliseconds>(now - t.due);
    std::lock_guard lock(out_mutex);
    std::printf("ran        %-15s %-14s planned %s  actual %s  late %5lld ms  payload %s\n",
                t.id.c_str(), t.type.c_str(), clock_text(t.due).c_str(), clock_text(now).c_str(),
                static_cast<long long>(late.count()), t.payload.c_str());
    std::fflush(stdout);
  };
  delayq::executor_factory executors;
  executors.add("order.cancel", report);
  executors.add("reminder.send", report);

  delayq::engine_options options;
  options.tick = cfg.tick;
  std::unique_ptr<delayq::engine> engine;
  try {
    // No store given: the engine opens its default one.
    auto store = delayq::open_store(cfg.store.empty() ? delayq::default_store_uri() : cfg.store);
    engine = std::make_unique<delayq::engine>(io, executors, std::move(store), options);
    engine->start();
  } catch (const boost::system::system_error& e) {
    std::fprintf(stderr, "delayq-demo: %s\n", e.what());
    return 1;
  }
  const auto loaded = engine->stats().loaded;
  std::printf("delayq demo: tick %lld ms, store %s, %llu tasks loaded from it%s\n",
              static_cast<long long>(cfg.tick.count()), engine->store().c_str(),
              static_cast<unsigned long long>(loaded), loaded ? " (overdue ones run at once)" : "");

  if (!cfg.resume) {
    std::vector<std::string> ids;
    for (int i = 0; i < cfg.tasks; ++i) {
      const bool order = i % 2 == 0;
      const std::string type = order ? "order.cancel" : "reminder.send";
      const std::string payload = (order ? "order-" : "user-") + std::to_string(1000 + i);
      const auto delay = std::chrono::milliseconds{1000 + (i * 4000) / cfg.tasks};
      ids.push_back(engine->schedule(type, payload, delay));
      std::lock_guard lock(out_mutex);
      std::printf("scheduled  %-15s %-14s due     %s  (in %.1f s)\n", ids.back().c_str(),
                  type.c_str(), clock_text(engine->find(ids.back())->due).c_str(),
                  static_cast<double>(delay.count()) / 1000.0);
    }
    // Cancel the second task and move the last one to the front.
    if (engine->cancel(ids[1])) std::printf("cancelled  %s\n", ids[1].c_str());
    const auto new_due = clock_type::now() + 500ms;
    if (engine->reschedule(ids.back(), new_due))
      std::printf("rescheduled %s to %s (was the last, now the first)\n", ids.back().c_str(),
                  clock_text(new_due).c_str());
  }

  // Done when nothing is left: checked a few times a second.
  boost::asio::steady_timer poll(io);
  std::function<void()> check = [&] {
    if (engine->pending() == 0) return io.stop();
    poll.expires_after(100ms);
    poll.async_wait([&](const boost::system::error_code& ec) {
      if (!ec) check();
    });
  };
  check();

  boost::asio::steady_timer crash(io);
  if (cfg.crash_after > 0) {
    crash.expires_after(std::chrono::seconds{cfg.crash_after});
    crash.async_wait([&](const boost::system::error_code& ec) {
      if (ec) return;
      std::printf("crashing now (SIGKILL): %zu tasks pending; run again with --resume\n",
                  engine->pending());
      std::fflush(stdout);
      std::raise(SIGKILL);
    });
  }

  // Ctrl-C stops cleanly: what has not run stays in the store.
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int) {
    if (!ec) io.stop();
  });
  io.run();

  engine->stop();
  const auto s = engine->stats();
  std::printf(
      "done: %llu ran, %llu cancelled, %zu pending; lateness p50 %lld ms, p99 %lld ms, max %lld "
      "ms\n",
      static_cast<unsigned long long>(s.succeeded), static_cast<unsigned long long>(s.cancelled),
      s.pending, static_cast<long long>(s.lateness_p50.count() / 1000),
      static_cast<long long>(s.lateness_p99.count() / 1000),
      static_cast<long long>(s.lateness_max.count() / 1000));
  return 0;
}
