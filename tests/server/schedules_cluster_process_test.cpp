// Recurring schedules in a cluster (docs/schedules.md, "In a cluster"): three
// delayq-server --cluster instances on one Redis, six every-second
// schedules put through one instance (forwarded to their owners), the owner
// of one of them killed with SIGKILL and later started again. A push
// receiver records every delivery. Every occurrence due while the cluster
// ran is delivered, and none twice but for the redelivery of a push the
// killed instance had under way (at-least-once, same attempt).
#include <doctest/doctest.h>

#include <map>
#include <set>

#include "cluster_support.hpp"
#include "push_receiver.hpp"

namespace {

using namespace delayq::server_test;

std::int64_t occurrence_ms(const std::string& task_id) {
  return std::stoll(task_id.substr(task_id.rfind('@') + 1));
}

}  // namespace

TEST_CASE("scale-out: schedules make one task per occurrence with three instances and a kill") {
  push_receiver receiver([](const push_call&, std::size_t) { return 200u; });
  const std::string uri = cluster_store_uri(test_redis_uri());
  const std::vector<std::string> names{"a", "b", "c"};
  std::map<std::string, std::unique_ptr<server_process>> inst;
  for (const auto& n : names) inst[n] = start_instance(uri, n);
  INFO(inst["a"]->output_tail());
  std::map<std::string, std::unique_ptr<http_client>> client;
  for (const auto& n : names) client[n] = std::make_unique<http_client>(inst[n]->port());
  REQUIRE(eventually([&] {
    return settled(names, {client["a"].get(), client["b"].get(), client["c"].get()});
  }));

  const std::string type = "beat";
  auto p = client["a"]->put("/v1/types/" + type, json{{"push_url", receiver.url()}});
  REQUIRE_MESSAGE(p.status == 204, p.describe());
  std::vector<std::string> ids;
  for (int i = 0; i < 6; ++i) ids.push_back("sched-" + std::to_string(i));
  const std::int64_t put_at = now_ms();
  // A schedule begins at its PUT (docs/schedules.md): its first occurrence
  // surely due is the first whole second after the PUT answered (on a slow
  // machine six forwarded PUTs take seconds).
  std::map<std::string, std::int64_t> first_due;
  for (const auto& id : ids) {
    auto r = client["a"]->put("/v1/schedules/" + id,
                              json{{"type", type}, {"payload", id}, {"every_ms", 1000}});
    REQUIRE_MESSAGE(r.status == 201, r.describe());
    first_due[id] = (now_ms() / 1000 + 1) * 1000;
  }
  // The victim: the instance that keeps sched-0.
  const std::string victim =
      names[delayq::rendezvous_owner(delayq::shard_of("sched-0", shard_count), names)];
  const std::string survivor = victim == "a" ? "b" : "a";
  INFO("victim " << victim);
  auto wait_past = [&](std::int64_t ms) {
    receiver.wait_until(
        [&](const std::vector<push_call>& calls) {
          for (auto it = calls.rbegin(); it != calls.rend(); ++it)
            if (occurrence_ms(it->task_id) >= ms) return true;
          return false;
        },
        std::chrono::steady_clock::now() + hang_guard);
  };
  wait_past(put_at + 4000);
  const std::int64_t killed_at = now_ms();
  inst[victim]->kill_now();
  client.erase(victim);
  wait_past(killed_at + 6000);
  const std::int64_t restarted_at = now_ms();
  inst[victim] = start_instance(uri, victim);
  client[victim] = std::make_unique<http_client>(inst[victim]->port());
  wait_past(now_ms() + 6000);
  const std::int64_t removed_at = now_ms();
  for (const auto& id : ids) {
    auto r = client[survivor]->del("/v1/schedules/" + id);
    CHECK_MESSAGE(r.status == 204, r.describe());
  }
  std::string firsts;
  for (const auto& [id, t] : first_due) firsts += " " + id + "@" + std::to_string(t);
  INFO("first due" << firsts);
  INFO("put " << put_at << ", killed " << killed_at << ", restarted " << restarted_at
              << ", removed " << removed_at);
  // Every occurrence due from just after its PUT to just before the removal
  // is to be delivered (none lost to the kill or the hand-back): wait for
  // them all, then for what was made ahead of the removal (other shards'
  // occurrences within the lookahead) and may still come.
  std::set<std::string> expected;
  for (const auto& id : ids)
    for (std::int64_t t = first_due[id]; t < removed_at - 1000; t += 1000)
      expected.insert(id + "@" + std::to_string(t));
  receiver.wait_until(
      [&](const std::vector<push_call>& calls) {
        std::set<std::string> seen;
        for (const auto& c : calls)
          if (expected.count(c.task_id) != 0) seen.insert(c.task_id);
        return seen.size() == expected.size();
      },
      std::chrono::steady_clock::now() + hang_guard);
  wait_past(removed_at + 1000);

  const auto calls = receiver.calls();
  std::map<std::string, std::vector<push_call>> by_id;
  for (const auto& c : calls) by_id[c.task_id].push_back(c);
  std::size_t redelivered = 0;
  for (const auto& [task, deliveries] : by_id) {
    INFO(task);
    CHECK(task.find('@') != std::string::npos);
    if (deliveries.size() == 1) continue;
    // Twice: only a push of the killed instance, in flight when it died,
    // delivered again under the same attempt by the shard's next owner.
    CHECK(deliveries.size() == 2);
    CHECK(deliveries[0].instance == victim);
    // (Sent before the kill; received, at the latest, before the restart.)
    CHECK(deliveries[0].received_ms < restarted_at);
    CHECK(deliveries[1].attempt == deliveries[0].attempt);
    ++redelivered;
  }
  for (const auto& task : expected) CHECK_MESSAGE(by_id.count(task) == 1, task << " missing");
  MESSAGE(calls.size() << " deliveries of " << by_id.size() << " occurrences (" << expected.size()
                       << " checked for being there), " << redelivered
                       << " redelivered after the kill");
}
