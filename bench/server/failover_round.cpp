// failover_round.cpp - a failover round of delayq-bench-scaleout: 3
// instances with tasks due all the time on every shard; one is SIGKILLed,
// and the time from the kill to the first push, by a survivor, of a task of
// a shard the dead one held is measured (and to the last of its shards taken
// over). The shards the killed instance held are the shards
// (delayq::shard_of) of the tasks it pushed (X-Delayq-Instance) before the
// kill.

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <delayq/shard_leases.hpp>
#include <iostream>
#include <map>
#include <set>
#include <stdexcept>
#include <string>

#include "cluster_client.hpp"
#include "scaleout_rounds.hpp"
#include "server_process.hpp"

namespace delayq::bench_server::scaleout {

namespace asio = boost::asio;

json failover_round(const options& o, push_receiver& rx, int lease_ms, int round,
                    std::mt19937_64& rng) {
  asio::io_context io;
  server_config c{o.server_bin, store_uri(o, fresh_prefix("failover")),
                  o.shards,     lease_ms,
                  rx.url(),     o.log_dir};
  rx.clear();
  instances in = start_instances(c, 3);
  wait_all_shards_held(io, in, o.shards, std::chrono::seconds(60));
  const std::string victim = "i2";

  // The kill comes `lead` plus a random fraction of a lease after the first
  // task is due: the takeover time depends on where in the renewal cycle
  // of the leases the kill falls, so every round draws that anew. Tasks are
  // due from 1 s ahead until well past two leases after the kill.
  std::uniform_int_distribution<std::int64_t> phase(0, lease_ms - 1);
  const std::int64_t lead_ms = 2000 + phase(rng);
  const std::int64_t window_ms = lead_ms + 3 * lease_ms + 3000;
  const auto count = static_cast<std::size_t>(window_ms * o.failover_rate / 1000);
  const std::int64_t start = wall_ms() + 1000;
  const auto start_steady = steady::now() + std::chrono::milliseconds(1000);
  schedule_tasks(io, in, count, o.batch, o.connections, [&](std::size_t k) {
    return start + static_cast<std::int64_t>(k) * window_ms / static_cast<std::int64_t>(count);
  });
  // Wait (on deliveries) until tasks have been running for `lead`.
  const std::size_t before_kill = static_cast<std::size_t>(lead_ms * o.failover_rate / 1000);
  if (!rx.wait_until(start_steady + std::chrono::seconds(60),
                     [&](const auto& calls) { return calls.size() >= before_kill; })) {
    throw std::runtime_error("failover: tasks did not start running");
  }
  check_alive(in);
  // The clock starts when SIGKILL is sent: kill() also reaps the process,
  // which takes a moment that belongs to the failover time.
  const auto killed_at = steady::now();
  in[1]->kill();

  // The victim's shards: those of the tasks it pushed (all before the kill:
  // it is reaped, and the receiver records a call before answering).
  std::set<std::uint32_t> victim_shards;
  for (const auto& d : rx.calls()) {
    if (d.instance == victim) victim_shards.insert(delayq::shard_of(d.task_id, o.shards));
  }
  if (victim_shards.empty()) throw std::runtime_error("failover: the victim pushed nothing");

  // First push after the kill, by a survivor, per victim shard.
  std::map<std::uint32_t, steady::time_point> taken;
  std::size_t seen = 0;
  const auto deadline = killed_at + std::chrono::milliseconds(4 * lease_ms + 10000);
  const bool all = rx.wait_until(deadline, [&](const auto& calls) {
    for (; seen < calls.size(); ++seen) {
      const auto& d = calls[seen];
      if (d.at < killed_at || d.instance == victim) continue;
      const auto s = delayq::shard_of(d.task_id, o.shards);
      if (victim_shards.count(s) && !taken.count(s)) taken[s] = d.at;
    }
    return taken.size() == victim_shards.size();
  });
  for (const std::size_t i : {0u, 2u}) {
    if (!in[i]->alive())
      throw std::runtime_error(in[i]->name() + " exited (log " + in[i]->log_path() + ")");
  }
  if (taken.empty()) throw std::runtime_error("failover: no shard of the victim was taken over");
  steady::time_point first = steady::time_point::max(), last = steady::time_point::min();
  for (const auto& [s, at] : taken) {
    first = std::min(first, at);
    last = std::max(last, at);
  }
  const double first_s = seconds_between(killed_at, first);
  const double last_s = seconds_between(killed_at, last);
  std::cerr << "scaleout: failover lease " << lease_ms << " ms round " << round << ": "
            << victim_shards.size() << " shards of " << victim << ", first run after the kill "
            << first_s << " s, all " << taken.size() << " taken over " << (all ? "" : "(NOT all) ")
            << last_s << " s\n";
  return json{{"lease_ms", lease_ms},
              {"round", round},
              {"kill_after_first_due_ms", lead_ms},
              {"tasks", count},
              {"victim_shards", victim_shards.size()},
              {"shards_taken_over", taken.size()},
              {"all_taken_over", all},
              {"first_s", first_s},
              {"last_s", last_s}};
}

}  // namespace delayq::bench_server::scaleout
