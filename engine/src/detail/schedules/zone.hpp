// A time zone as recurring schedules need it: which UTC offset holds at an
// instant, and over which span of instants it holds. Internal.
//
// The data is the system's (Debian's tzdata, /usr/share/zoneinfo), read by
// Howard Hinnant's date library (Debian's libhowardhinnant-date-dev, built
// with USE_OS_TZDB=1): GCC 12's <chrono> has no time zones. That library
// reads the transitions listed in a zone's TZif file and nothing else; the
// files Debian ships list them up to 2037 and describe the years after with
// a POSIX TZ rule in the file's footer (RFC 8536, section 3.3), which the
// library ignores (it would keep 2037's last offset for ever). So a zone
// here is the library's transitions up to the last one listed, and the
// footer's rule (posix_rule, parsed here) after it, as Python's zoneinfo
// and the C library do.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace date {
class time_zone;
}  // namespace date

namespace delayq::detail::schedules {

/// One span of instants with one UTC offset: [begin, end), in seconds since
/// the Unix epoch; `offset` is local minus UTC, in seconds.
struct zone_span {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  std::int32_t offset = 0;
};

/// A POSIX TZ rule ("CET-1CEST,M3.5.0,M10.5.0/3"), as a TZif footer holds
/// it, with RFC 8536's extensions (transition times from -167 to 167
/// hours). Thread safety: immutable once parsed.
class posix_rule {
 public:
  /// The rule, or nothing when `text` is not one.
  static std::optional<posix_rule> parse(std::string_view text);
  /// The span holding instant `t` (seconds since the epoch).
  zone_span at(std::int64_t t) const;

 private:
  // A transition date: Mm.w.d (month, week 1-5 with 5 = last, weekday 0-6),
  // Jn (day 1-365, February 29 never counted) or n (day 0-365).
  struct date_rule {
    enum class kind { month_week_day, julian_1, julian_0 } k = kind::month_week_day;
    int month = 0, week = 0, weekday = 0, day = 0;
    std::int32_t time = 7200;  // seconds after local midnight
  };
  // When the rule's transition of year `y` happens, in UTC seconds: the
  // local wall time `r` under the offset in force before it.
  static std::int64_t transition(int y, const date_rule& r, std::int32_t offset_before);

  std::int32_t std_offset_ = 0;  // local minus UTC, seconds
  std::int32_t dst_offset_ = 0;
  bool has_dst_ = false;
  date_rule start_, end_;
};

/// A time zone: the system's tz data (see the top of this file), or UTC.
/// Thread safety: find() and every member are safe from any thread; a zone
/// lives as long as the process (they are cached and never freed).
class zone {
 public:
  /// The zone named `name` ("Europe/Berlin", "UTC"), or null when the
  /// system's tz data has no such zone (or it is a "right/" zone: leap
  /// seconds have no place in schedules). The first call reads the list of
  /// zones; each zone is read once.
  static const zone* find(std::string_view name);
  /// UTC itself, which needs no data.
  static const zone* utc();

  /// The span (offset and its limits) holding instant `t`, seconds since
  /// the epoch. Spans before the first transition start at INT64_MIN, the
  /// last one ends at INT64_MAX.
  zone_span at(std::int64_t t) const;
  const std::string& name() const noexcept { return name_; }
  bool is_utc() const noexcept { return tz_ == nullptr; }

 private:
  zone() = default;
  std::string name_;
  const date::time_zone* tz_ = nullptr;  // null: UTC
  std::optional<posix_rule> tail_;       // after tail_begin_
  std::int64_t tail_begin_ = INT64_MAX;
  friend struct zone_cache;
};

/// The version of the system's tz data ("2025b"), from tzdata.zi, or "".
std::string tzdata_version();

}  // namespace delayq::detail::schedules
