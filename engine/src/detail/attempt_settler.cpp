#include "detail/attempt_settler.hpp"

#include "delayq/log.hpp"
#include "detail/validation.hpp"

namespace delayq::detail {
namespace {

std::string describe_attempted(std::string_view id, std::string_view type) {
  return "task " + std::string(id) + " (" + std::string(type) + ")";
}

}  // namespace

attempt_settler::verdict attempt_settler::decide(const outcome& o,
                                                 const type_registry::type_info& type,
                                                 std::string_view id, std::uint32_t attempts_before,
                                                 bool replaced, bool stopping,
                                                 std::vector<alert>& alerts, std::int64_t now_ms) {
  if (o.result == outcome::what::released || o.result == outcome::what::buried) {
    // The executor's own verdict: neither a success nor a failure (no
    // failure-rate alert), and the retry policy has no say.
    if (replaced) return {verdict_kind::drop_replaced};
    if (o.result == outcome::what::buried) return {verdict_kind::bury, attempts_before + 1};
    ++released_;
    type_counters::add(type.counters.mine().released);
    return {verdict_kind::release, attempts_before, o.due_ms};
  }
  const bool ok = o.result == outcome::what::succeeded;
  const bool ran = o.result != outcome::what::abandoned && o.result != outcome::what::withheld;
  if (ran) {
    ok ? ++succeeded_ : ++failed_;
    type_counters::add(ok ? type.counters.mine().succeeded : type.counters.mine().failed);
    std::lock_guard lock(mutex_);
    failures_.note_outcome(type.name, ok, alerts);
  }
  if (replaced) return {verdict_kind::drop_replaced};
  if (!ran) return {stopping ? verdict_kind::drop : verdict_kind::rearm};
  if (ok) return {verdict_kind::remove};
  const std::uint32_t attempts = attempts_before + 1;
  const retry_policy& policy = *type.retry;
  if (!failure_policy::may_retry(policy, attempts, o.result == outcome::what::hopeless))
    return {verdict_kind::bury, attempts};
  std::chrono::milliseconds wait;
  {
    std::lock_guard lock(mutex_);
    wait = failures_.backoff(policy, attempts);
  }
  ++retried_;
  type_counters::add(type.counters.mine().retried);
  log(log_level::warning, describe_attempted(id, type.name) + " attempt " +
                              std::to_string(attempts) + " of " +
                              std::to_string(policy.max_attempts) + " failed: " + o.failure +
                              "; retrying in " + std::to_string(wait.count()) + " ms");
  return {verdict_kind::retry, attempts, now_ms + wait.count()};
}

void attempt_settler::note_death(const task& t, const type_registry::type_info& type,
                                 const std::string& failure, std::vector<alert>& alerts,
                                 bool buried, bool asked) {
  const std::string who = describe_attempted(t.id, type.name);
  if (buried && asked)
    log(log_level::error, who + " is a dead letter: its executor buried it: " + failure);
  else if (buried)
    log(log_level::error,
        who + " is a dead letter after " + std::to_string(t.attempts) + " attempts: " + failure);
  else if (asked)
    log(log_level::error, who +
                              " was buried by its executor; the store keeps no dead letters, so "
                              "the task stays stored as it was last written and runs again at "
                              "the next start(): " +
                              failure);
  else
    log(log_level::error, who + " failed its " + std::to_string(t.attempts) +
                              " attempts; the store keeps no dead letters, so the task stays "
                              "stored as its last retry left it and runs again at the next "
                              "start(): " +
                              failure);
  ++died_;
  type_counters::add(type.counters.mine().died);
  std::lock_guard lock(mutex_);
  failures_.note_death(t, failure, alerts);
}

}  // namespace delayq::detail
