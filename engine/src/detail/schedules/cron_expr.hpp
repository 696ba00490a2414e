// A cron expression: its grammar (docs/schedules.md, "Cron expressions"),
// parsed into one bit set per field, and the search for the next local
// (wall-clock) time that matches. Knows no time zone: occurrences.hpp maps
// local times to instants. Internal.
//
// The semantics are Vixie cron's (man 5 crontab), the cron most people
// know: day of month and day of week are ORed when both are restricted,
// that is when neither field starts with '*' ("*/2" is not restricted);
// otherwise both must match. Extensions every common implementation has:
// an optional seconds field (first, as in Quartz, Spring and cron-parser),
// "N/S" as "N-max/S", names in ranges, 7 for Sunday, a range ending in
// Sunday ("FRI-SUN"), and the macros @yearly (@annually), @monthly,
// @weekly, @daily (@midnight) and @hourly. Not supported (400 with the
// reason): L, W, #, ?, H, @reboot, and ranges that wrap (22-2).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace delayq::detail::schedules {

/// A parsed cron expression: bit k of a field is set when value k matches.
/// Thread safety: a plain value.
struct cron_expr {
  std::uint64_t seconds = 1;  ///< bits 0-59; {0} without a seconds field
  std::uint64_t minutes = 0;  ///< bits 0-59
  std::uint32_t hours = 0;    ///< bits 0-23
  std::uint32_t days = 0;     ///< bits 1-31 (day of month)
  std::uint16_t months = 0;   ///< bits 1-12
  std::uint8_t weekdays = 0;  ///< bits 0-6, Sunday = 0
  /// The day-of-month / day-of-week fields start with '*' (Vixie's rule:
  /// a starred field does not count as restricted).
  bool dom_star = false;
  bool dow_star = false;
  /// The hour field starts with '*': the schedule runs in every hour, so in
  /// the hour a fall-back repeats it runs in both passes (docs/schedules.md, "DST").
  bool hour_star = false;

  friend bool operator==(const cron_expr&, const cron_expr&) = default;

  /// The expression, or nothing with `why` saying what is wrong and where
  /// ("minute field '70': 70 is out of range 0-59").
  static std::optional<cron_expr> parse(std::string_view text, std::string& why);

  /// Whether the date (civil, proleptic Gregorian) matches the day fields.
  bool day_matches(std::int64_t days_since_epoch) const noexcept;

  /// The first local time at or after `from` and before `limit` (both in
  /// seconds since 1970-01-01T00:00 of the local wall clock) that matches,
  /// or nothing. Searches at most 100 years past `from`.
  std::optional<std::int64_t> next_local(std::int64_t from, std::int64_t limit) const noexcept;
};

/// Civil-date helpers shared by the schedule code (Howard Hinnant's
/// algorithms, proleptic Gregorian calendar).
inline constexpr std::int64_t day_s = 86400;  ///< seconds in a civil day
std::int64_t days_from_civil(std::int64_t y, unsigned m, unsigned d) noexcept;
void civil_from_days(std::int64_t z, std::int64_t& y, unsigned& m, unsigned& d) noexcept;
/// a / b rounded towards minus infinity (b > 0).
inline std::int64_t floor_div(std::int64_t a, std::int64_t b) noexcept {
  return a / b - ((a % b != 0) && (a < 0));
}

}  // namespace delayq::detail::schedules
