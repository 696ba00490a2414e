// delayq/schedule.hpp - a recurring schedule (engine::upsert_schedule()):
// what it runs, and when. Plain values and pure functions; the rules are in
// docs/schedules.md.
#pragma once

#include <utility>

#include <boost/system/error_code.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "delayq/schedule_options.hpp"

namespace delayq {

/// What a schedule does with occurrences whose time passed before any
/// instance made them tasks (all instances were down, or the store could
/// not be written, for longer than the lookahead): docs/schedules.md,
/// "Missed runs". The window is measured in UTC.
enum class missed_runs : std::uint8_t {
  skip,  ///< Run none of them (the default): the schedule goes on with its next occurrence.
  once,  ///< Run the latest of them, once, at once.
  all,   ///< Run each of them, oldest first, at once: at most 1,000 (the oldest); the rest are
         ///< skipped.
};

/// A recurring schedule: every occurrence becomes an ordinary task of
/// `type` with `payload`, whose id is `ID@MS` (the schedule's id, '@', the
/// occurrence's instant in UTC milliseconds since the epoch:
/// occurrence_id()). Exactly one of `cron` and `every` says when.
///
/// Thread safety: a plain value.
struct schedule {
  /// 1-240 bytes, no spaces or control characters (a task id with room for
  /// "@" and the milliseconds).
  std::string id;
  /// The task type of every occurrence (as a task's: 1-128 of [A-Za-z0-9._:-]).
  std::string type;
  /// The payload of every occurrence (opaque bytes).
  std::string payload;
  /// A cron expression: 5 fields (minute hour day-of-month month
  /// day-of-week) or 6 (a seconds field first), lists, ranges, steps,
  /// names, or @yearly @annually @monthly @weekly @daily @midnight @hourly.
  /// Read in `timezone`. Empty: `every` says when.
  std::string cron;
  /// A fixed interval of at least 1 s: occurrences at `start` + k * every
  /// (k = 0, 1, ...), or at whole multiples of `every` since the Unix epoch
  /// when there is no `start`. 0: `cron` says when.
  std::chrono::milliseconds every{0};
  /// An IANA time zone name ("Europe/Berlin") the cron expression is read
  /// in; empty means "UTC". Only with `cron`. The system's tz data.
  std::string timezone;
  /// No occurrence before `start` (inclusive), none after `end` (inclusive).
  std::optional<std::chrono::system_clock::time_point> start;
  std::optional<std::chrono::system_clock::time_point> end;
  missed_runs missed = missed_runs::skip;
  /// Each occurrence's task::priority and task::ttr (schedule_options).
  std::uint32_t priority = 0;
  std::chrono::milliseconds ttr{0};
  /// What making an occurrence a task does when its task (same id) is
  /// pending already (a task is made at most once per occurrence; this
  /// matters only when an instance retries after a crash): keep it (the
  /// default; reject does the same and logs it), or replace it with this
  /// schedule's type, payload, priority and ttr.
  on_conflict conflict = on_conflict::keep;

  friend bool operator==(const schedule&, const schedule&) = default;
};

/// What is wrong with a schedule: the field (as named in the HTTP API:
/// "cron", "every_ms", "timezone", "start_ms", ...) and why.
struct schedule_problem {
  std::string field;
  std::string reason;
};

/// The first thing wrong with `s`, or nothing when an engine would accept
/// it (but for the engine's own limits: the payload against
/// engine_options::max_payload, the type against its executors). Reads the
/// system's tz data for a time zone. Thread-safe.
std::optional<schedule_problem> check_schedule(const schedule& s);

/// The first `n` occurrences of `s` after `after` (strictly), earliest
/// first; fewer when the schedule ends (its `end`, or a cron expression
/// that matches no date within 100 years). `s` must pass check_schedule()
/// (errc::invalid_schedule otherwise, and nothing returned). Thread-safe.
std::vector<std::chrono::system_clock::time_point> schedule_occurrences(
    const schedule& s, std::chrono::system_clock::time_point after, std::size_t n,
    boost::system::error_code& ec);

/// The task id of the occurrence of schedule `schedule_id` at `at`:
/// "ID@MS", MS the UTC milliseconds since the epoch.
std::string occurrence_id(std::string_view schedule_id, std::chrono::system_clock::time_point at);

/// The name of `m` in the HTTP API ("skip", "once", "all"), and back.
std::string_view to_string(missed_runs m) noexcept;
std::optional<missed_runs> missed_runs_from(std::string_view name) noexcept;

}  // namespace delayq
