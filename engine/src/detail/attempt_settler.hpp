// What an attempt's outcome does to its task (the end of a task's life, or
// its next attempt), and the counts of outcomes:
//
//   succeeded               -> remove: the task leaves the store (a write that
//                              must land; at-least-once until it has)
//   failed, hopeless        -> retry at now + backoff (failure_policy), with
//                              one attempt more; or, once the retry policy
//                              says no more, bury: a dead letter
//   released                -> release: due again at the time the executor
//                              gave, with its attempt count unchanged (not a
//                              success nor a failure; counted as released)
//   buried                  -> bury at once, whatever retries are left (a
//                              death, not a failure)
//   abandoned, withheld     -> run it again at the next tick (drop it when
//                              the engine is stopping: the store has it)
//   replaced while it ran   -> drop: the new version owns the id and the store
//
// The settler decides and counts; the engine core applies the verdict to the
// wheel and hands its write to the store writer (engine_core::settle(), in
// engine_core_fire.cpp). Outcomes of attempts never started because
// they were cancelled while queued (outcome::what::dead) are not attempts:
// the core frees their record without asking.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "detail/dispatcher.hpp"
#include "detail/failure_policy.hpp"
#include "detail/spin_mutex.hpp"
#include "detail/type_registry.hpp"

namespace delayq::detail {

/// Thread safety: every member is safe from any thread (the outcomes of
/// every table come here).
class attempt_settler {
 public:
  enum class verdict_kind : std::uint8_t {
    drop_replaced,  // the id went to a new version: let go of this record
    rearm,          // never ran to an outcome: again at the next tick
    drop,           // never ran to an outcome, and the engine is stopping
    remove,         // succeeded
    retry,          // failed: again at `due_ms`, with `attempts` made
    bury,           // failed for the last time, or buried: a dead letter after `attempts`
    release,        // released: again at `due_ms`, `attempts` unchanged
  };
  struct verdict {
    verdict_kind what = verdict_kind::remove;
    std::uint32_t attempts = 0;  // retry, bury: the attempts made, this one included
    std::int64_t due_ms = 0;     // retry, release
  };

  explicit attempt_settler(failure_policy& failures) : failures_(failures) {}

  /// The verdict on outcome `o` of an attempt on task `id` of `type` that had
  /// made `attempts_before` attempts. `replaced`: the id went to a new version
  /// while it ran. A release's due time is o.due_ms as given: the caller
  /// bounds it. Counts the outcome, logs a retry, and appends the alerts
  /// to raise to `alerts`. `now_ms`: now by the engine's clock (a retry is
  /// due its backoff after it).
  verdict decide(const outcome& o, const type_registry::type_info& type, std::string_view id,
                 std::uint32_t attempts_before, bool replaced, bool stopping,
                 std::vector<alert>& alerts, std::int64_t now_ms);
  /// A bury verdict's dead letter is `t` (as written): counts and logs the
  /// death and appends its alert. `buried`: a dead letter was written (the
  /// store has the role); `asked`: the executor buried it
  /// (attempt_completion::bury()), its retries did not run out.
  void note_death(const task& t, const type_registry::type_info& type, const std::string& failure,
                  std::vector<alert>& alerts, bool buried = true, bool asked = false);

  std::uint64_t succeeded() const noexcept { return succeeded_.load(std::memory_order_relaxed); }
  std::uint64_t failed() const noexcept { return failed_.load(std::memory_order_relaxed); }
  std::uint64_t retried() const noexcept { return retried_.load(std::memory_order_relaxed); }
  std::uint64_t died() const noexcept { return died_.load(std::memory_order_relaxed); }
  std::uint64_t released() const noexcept { return released_.load(std::memory_order_relaxed); }

 private:
  failure_policy& failures_;
  // The failure policy's state (its random draws, each type's health) is
  // shared by the outcomes of every table.
  spin_mutex mutex_;
  std::atomic<std::uint64_t> succeeded_{0}, failed_{0}, retried_{0}, died_{0}, released_{0};
};

}  // namespace delayq::detail
