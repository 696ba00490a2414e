// throughput_round.cpp - a throughput round of delayq-bench-scaleout: N
// instances, POST /v1/tasks:batch round-robin over them (tasks acknowledged
// per second), then as many tasks all due at one instant, pushed to the
// receiver (distinct tasks delivered per second from the first delivery to
// the last), with the busy cores of both phases.

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_set>

#include "cluster_client.hpp"
#include "cpu_usage.hpp"
#include "scaleout_rounds.hpp"
#include "server_process.hpp"

namespace delayq::bench_server::scaleout {

namespace asio = boost::asio;

json throughput_round(const options& o, push_receiver& rx, int n, int round) {
  asio::io_context io;
  server_config c{o.server_bin, store_uri(o, fresh_prefix("n" + std::to_string(n))),
                  o.shards,     o.lease_ms,
                  rx.url(),     o.log_dir};
  rx.clear();
  instances in = start_instances(c, n);
  const double balance_s = wait_all_shards_held(io, in, o.shards, std::chrono::seconds(60));

  // Schedule: due in a day, so nothing fires during the round.
  const std::int64_t far = wall_ms() + 24 * 3600 * 1000;
  const cpu_snapshot sched_cpu0 = cpu_now(in, o.redis_pid);
  const schedule_result sched =
      schedule_tasks(io, in, o.tasks, o.batch, o.connections, [&](std::size_t) { return far; });
  const json sched_cores = busy_cores(sched_cpu0, cpu_now(in, o.redis_pid));
  const double schedule_rate = static_cast<double>(o.tasks) / sched.seconds;

  // Firing: as many tasks, all due at one instant, far enough ahead that
  // scheduling them (as long again as above, twice over for margin) ends
  // before it.
  const std::int64_t margin_ms =
      std::max<std::int64_t>(2000, static_cast<std::int64_t>(sched.seconds * 2000) + 1000);
  const std::int64_t due = wall_ms() + margin_ms;
  const auto due_steady = steady::now() + std::chrono::milliseconds(margin_ms);
  const schedule_result fire =
      schedule_tasks(io, in, o.tasks, o.batch, o.connections, [&](std::size_t) { return due; });
  // Every owner holds every task of its shards before the due time (tasks
  // scheduled through another instance reach the owner by a notice)?
  // `pending` counts held tasks.
  bool held_before_due = false;
  while (steady::now() < due_steady) {
    std::int64_t pending = 0;
    for (const auto& s : in) pending += stats_of(io, s->port()).value("pending", 0);
    if (pending == static_cast<std::int64_t>(2 * o.tasks)) {
      held_before_due = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // CPU from the due time to the last delivery (roughly: the snapshot is
  // taken once the first delivery came, and again once all had).
  const std::unordered_set<std::string> want(fire.ids.begin(), fire.ids.end());
  rx.wait_until(due_steady + std::chrono::seconds(120),
                [](const auto& calls) { return !calls.empty(); });
  const cpu_snapshot fire_cpu0 = cpu_now(in, o.redis_pid);
  std::size_t seen_calls = 0;
  std::unordered_set<std::string> got;
  const bool all = rx.wait_until(due_steady + std::chrono::seconds(120), [&](const auto& calls) {
    for (; seen_calls < calls.size(); ++seen_calls) {
      if (want.count(calls[seen_calls].task_id)) got.insert(calls[seen_calls].task_id);
    }
    return got.size() == want.size();
  });
  const json fire_cores = busy_cores(fire_cpu0, cpu_now(in, o.redis_pid));
  check_alive(in);
  const auto calls = rx.calls();
  if (!all) {
    throw std::runtime_error(std::to_string(want.size() - got.size()) + " of " +
                             std::to_string(want.size()) +
                             " tasks not delivered within 120 s of their due time");
  }
  steady::time_point first = steady::time_point::max(), last = steady::time_point::min();
  std::size_t fire_calls = 0;
  std::map<std::string, std::size_t> by_instance;
  for (const auto& d : calls) {
    if (!want.count(d.task_id)) continue;
    ++fire_calls;
    ++by_instance[d.instance];
    first = std::min(first, d.at);
    last = std::max(last, d.at);
  }
  const double fire_s = seconds_between(first, last);
  const double firing_rate = static_cast<double>(want.size()) / fire_s;
  json r{{"instances", n},
         {"round", round},
         {"balance_s", balance_s},
         {"schedule_s", sched.seconds},
         {"schedule_per_s", schedule_rate},
         {"schedule_busy_cores", sched_cores},
         {"fire_schedule_s", fire.seconds},
         {"held_before_due", held_before_due},
         {"first_delivery_after_due_ms",
          std::chrono::duration<double, std::milli>(first - due_steady).count()},
         {"fire_s", fire_s},
         {"fired_per_s", firing_rate},
         {"firing_busy_cores", fire_cores},
         {"deliveries", fire_calls},
         {"duplicates", fire_calls - want.size()},
         {"deliveries_by_instance", by_instance}};
  std::cerr << "scaleout: N=" << n << " round " << round << ": schedule "
            << static_cast<long>(schedule_rate) << "/s, firing " << static_cast<long>(firing_rate)
            << "/s (" << want.size() << " tasks in " << fire_s << " s, " << fire_calls - want.size()
            << " duplicates, held before due: " << (held_before_due ? "yes" : "NO") << ")\n";
  return r;
}

}  // namespace delayq::bench_server::scaleout
