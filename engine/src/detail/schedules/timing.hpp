// When a schedule's occurrences are, as UTC instants: a cron expression read
// in a time zone, with the DST rules of docs/schedules.md, or a fixed
// interval; cut by the schedule's start and end. Internal.
//
// DST, cron only. The expression matches local wall-clock times; each
// matching local time is one occurrence at the instant it happens, but:
// - a local time that does not exist (the clocks jumped over it) runs at
//   the first valid instant after it: the instant of the jump. Several
//   such times make one occurrence (one instant, one task id);
// - a local time that exists twice (the clocks went back) runs once, at
//   its first instant; except when the hour field starts with '*': such a
//   schedule runs in every hour, and the repeated hour is an hour too, so
//   it runs in both passes (the alternative, an hour with no run of an
//   every-minute job, is Sidekiq #5049).
//
// How next_after() finds them: it walks the zone's spans of one offset
// (zone::at()), and in each span searches the local times the span covers
// for the first match (cron_expr::next_local()); a span that starts with a
// forward jump first checks the skipped local times, and one that starts
// with a backward jump skips the local times the span before had covered,
// unless the hour field is starred.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>

#include "delayq/schedule.hpp"
#include "detail/schedules/cron_expr.hpp"
#include "detail/schedules/zone.hpp"

namespace delayq::detail::schedules {

/// Bounds of the instants a schedule may name, in ms since the epoch:
/// 1970-01-01 to 2262-01-01 (UTC). An occurrence becomes a task due at a
/// system_clock time point (nanoseconds), which ends in April 2262: later
/// occurrences would wrap around to 1677.
inline constexpr std::int64_t earliest_ms = 0;
inline constexpr std::int64_t latest_ms = 9214646400000;

/// A schedule's timing, compiled. Thread safety: a plain value; const
/// members are safe from any thread.
struct timing {
  bool is_cron = false;
  cron_expr cron;
  const zone* tz = nullptr;  // cron only; never null then
  std::int64_t every_ms = 0;
  std::int64_t anchor_ms = 0;  // every only: start, else 0 (the epoch)
  std::int64_t start_ms = earliest_ms;
  std::int64_t end_ms = latest_ms;

  friend bool operator==(const timing&, const timing&) = default;

  /// The timing of `s`, or nothing with `problem` set (check_schedule()'s
  /// answer).
  static std::optional<timing> compile(const schedule& s, schedule_problem& problem);

  /// The first occurrence strictly after `after_ms`, or nothing (past the
  /// end, or no match within 100 years).
  std::optional<std::int64_t> next_after(std::int64_t after_ms) const noexcept;

 private:
  // The first occurrence instant (seconds) at or after `u` (seconds).
  std::optional<std::int64_t> cron_at_or_after(std::int64_t u) const noexcept;
};

}  // namespace delayq::detail::schedules
