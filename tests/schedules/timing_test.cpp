// Cron expressions and time zones: the grammar's errors, the day rule, and
// the DST rules of docs/schedules.md at the transitions of Europe/Berlin,
// America/New_York, Australia/Lord_Howe (a 30-minute shift), and zones whose
// rules changed recently (America/Mexico_City dropped DST in 2022,
// Africa/Cairo took it back in 2023). Expected instants were worked out by
// hand from the zones' rules (each is commented) and agree with zoneinfo
// (croniter_compare.py checks 10,000 more).
#include <doctest/doctest.h>

#include <delayq/schedule.hpp>
#include <delayq/task.hpp>
#include <string>
#include <vector>

#include "detail/schedules/cron_expr.hpp"
#include "detail/schedules/schedule_codec.hpp"
#include "detail/schedules/zone.hpp"

namespace {

using delayq::from_epoch_ms;
using delayq::to_epoch_ms;

// Milliseconds of a UTC civil time.
std::int64_t utc(int y, unsigned mo, unsigned d, int h = 0, int mi = 0, int s = 0) {
  return (delayq::detail::schedules::days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + s) *
         1000;
}

std::vector<std::int64_t> next(const std::string& cron, const std::string& tz, std::int64_t after,
                               std::size_t n) {
  delayq::schedule s;
  s.id = "s";
  s.type = "t";
  s.cron = cron;
  s.timezone = tz;
  const auto problem = delayq::check_schedule(s);
  REQUIRE_MESSAGE(!problem, (problem ? problem->field + ": " + problem->reason : ""));
  boost::system::error_code ec;
  std::vector<std::int64_t> out;
  for (auto t : delayq::schedule_occurrences(s, from_epoch_ms(after), n, ec))
    out.push_back(to_epoch_ms(t));
  REQUIRE_FALSE(ec);
  return out;
}

std::string problem_of(const std::string& cron, const std::string& tz = "") {
  delayq::schedule s;
  s.id = "s";
  s.type = "t";
  s.cron = cron;
  s.timezone = tz;
  const auto p = delayq::check_schedule(s);
  return p ? p->field + ": " + p->reason : "";
}

}  // namespace

TEST_CASE("schedules: cron grammar errors name the field and the reason") {
  CHECK(problem_of("61 * * * *") == "cron: minute field '61': 61 is out of range 0-59");
  CHECK(problem_of("* 24 * * *").find("hour field '24'") != std::string::npos);
  CHECK(problem_of("* * 0 * *").find("day-of-month field '0'") != std::string::npos);
  CHECK(problem_of("* * * 13 *").find("month field '13'") != std::string::npos);
  CHECK(problem_of("* * * * 8").find("day-of-week field '8'") != std::string::npos);
  CHECK(problem_of("* * * *").find("has 4 fields") != std::string::npos);
  CHECK(problem_of("* * * * * * *").find("has 7 fields") != std::string::npos);
  CHECK(problem_of("*/0 * * * *").find("the step '0'") != std::string::npos);
  CHECK(problem_of("5-1 * * * *").find("runs backwards") != std::string::npos);
  CHECK(problem_of("1,,2 * * * *").find("an empty list item") != std::string::npos);
  CHECK(problem_of("0 0 L * *").find("not supported") != std::string::npos);
  CHECK(problem_of("0 0 * * 5#2").find("not supported") != std::string::npos);
  CHECK(problem_of("0 0 ? * *").find("not supported") != std::string::npos);
  CHECK(problem_of("@reboot").find("unknown macro") != std::string::npos);
  CHECK(problem_of("0 0 30 2 *").find("never matches") != std::string::npos);
  CHECK(problem_of("0 0 * * *", "Mars/Olympus") ==
        "timezone: 'Mars/Olympus' is not a time zone of the system's tz data (an IANA name such "
        "as Europe/Berlin)");
  CHECK(problem_of("0 0 * * *", "right/Europe/Berlin").starts_with("timezone:"));
  CHECK(problem_of("0 0 * * *", "../../etc/passwd").starts_with("timezone:"));
  // February 30 never comes, but ORed with Mondays the expression runs.
  CHECK(problem_of("0 0 30 2 MON").empty());
}

TEST_CASE("schedules: a schedule's other fields are checked") {
  delayq::schedule s;
  s.id = "daily";
  s.type = "report";
  CHECK(delayq::check_schedule(s)->field == "cron");  // neither cron nor every
  s.cron = "@daily";
  s.every = std::chrono::seconds(5);
  CHECK(delayq::check_schedule(s)->field == "every_ms");  // both
  s.cron.clear();
  s.every = std::chrono::milliseconds(999);
  CHECK(delayq::check_schedule(s)->field == "every_ms");
  s.every = std::chrono::seconds(1);
  CHECK_FALSE(delayq::check_schedule(s));
  s.timezone = "Europe/Berlin";
  CHECK(delayq::check_schedule(s)->field == "timezone");  // every counts real time
  s.timezone.clear();
  s.start = from_epoch_ms(2000);
  s.end = from_epoch_ms(1000);
  CHECK(delayq::check_schedule(s)->field == "end_ms");
  s.end.reset();
  s.start = from_epoch_ms(-1);
  CHECK(delayq::check_schedule(s)->field == "start_ms");
  s.start.reset();
  s.id = "a b";
  CHECK(delayq::check_schedule(s)->field == "id");
  s.id = std::string(241, 'x');
  CHECK(delayq::check_schedule(s)->field == "id");
  s.id = std::string(240, 'x');
  CHECK_FALSE(delayq::check_schedule(s));
  s.type = "bad type";
  CHECK(delayq::check_schedule(s)->field == "type");
}

TEST_CASE("schedules: fields, names, steps, macros and the day rule") {
  const std::int64_t jan1 = utc(2026, 1, 1);  // a Thursday
  CHECK(next("@hourly", "", jan1, 2) ==
        std::vector<std::int64_t>{utc(2026, 1, 1, 1), utc(2026, 1, 1, 2)});
  CHECK(next("@daily", "", jan1, 1) == std::vector<std::int64_t>{utc(2026, 1, 2)});
  CHECK(next("@weekly", "", jan1, 1) == std::vector<std::int64_t>{utc(2026, 1, 4)});  // Sunday
  CHECK(next("@monthly", "", jan1, 1) == std::vector<std::int64_t>{utc(2026, 2, 1)});
  CHECK(next("@yearly", "", jan1, 1) == std::vector<std::int64_t>{utc(2027, 1, 1)});
  CHECK(next("@annually", "", jan1, 1) == next("@YEARLY", "", jan1, 1));
  // Seconds first in a 6-field expression.
  CHECK(next("*/20 * * * * *", "", jan1, 3) == std::vector<std::int64_t>{utc(2026, 1, 1, 0, 0, 20),
                                                                         utc(2026, 1, 1, 0, 0, 40),
                                                                         utc(2026, 1, 1, 0, 1, 0)});
  // Names, case-insensitive, in ranges and with steps; 7 and 0 are Sunday.
  CHECK(next("0 9 * JAN-feb Mon-FRI/2", "", jan1, 3) ==
        std::vector<std::int64_t>{utc(2026, 1, 2, 9), utc(2026, 1, 5, 9), utc(2026, 1, 7, 9)});
  CHECK(next("0 0 * * 7", "", jan1, 1) == next("0 0 * * 0", "", jan1, 1));
  CHECK(next("0 0 * * FRI-SUN", "", jan1, 3) ==
        std::vector<std::int64_t>{utc(2026, 1, 2), utc(2026, 1, 3), utc(2026, 1, 4)});
  // "N/S" is N-max/S: in the day of week 5/2 is Friday and Sunday (7).
  CHECK(next("0 0 * * 5/2", "", jan1, 2) ==
        std::vector<std::int64_t>{utc(2026, 1, 2), utc(2026, 1, 4)});
  CHECK(next("10/25 0 1 1 *", "", utc(2025, 12, 31), 3) ==
        std::vector<std::int64_t>{utc(2026, 1, 1, 0, 10), utc(2026, 1, 1, 0, 35),
                                  utc(2027, 1, 1, 0, 10)});
  // Both day fields restricted: either matches (1 January, or a Monday).
  CHECK(next("0 0 1 * MON", "", jan1, 3) ==
        std::vector<std::int64_t>{utc(2026, 1, 5), utc(2026, 1, 12), utc(2026, 1, 19)});
  // One starts with '*' (Vixie's rule, "*/2" too): both must match.
  CHECK(next("0 0 */2 * MON", "", jan1, 2) ==
        std::vector<std::int64_t>{utc(2026, 1, 5), utc(2026, 1, 19)});
  // 29 February waits for a leap year.
  CHECK(next("0 0 29 2 *", "", jan1, 1) == std::vector<std::int64_t>{utc(2028, 2, 29)});
}

TEST_CASE("schedules: every and start and end") {
  delayq::schedule s;
  s.id = "s";
  s.type = "t";
  s.every = std::chrono::hours(1);
  boost::system::error_code ec;
  auto at = [&](std::int64_t after, std::size_t n) {
    std::vector<std::int64_t> out;
    for (auto t : delayq::schedule_occurrences(s, from_epoch_ms(after), n, ec))
      out.push_back(to_epoch_ms(t));
    return out;
  };
  // Without a start: whole multiples since the epoch (on the hour, UTC).
  CHECK(at(utc(2026, 1, 1, 0, 30), 2) ==
        std::vector<std::int64_t>{utc(2026, 1, 1, 1), utc(2026, 1, 1, 2)});
  // A start anchors them, and is the first.
  s.start = from_epoch_ms(utc(2026, 1, 1, 0, 10));
  CHECK(at(0, 2) == std::vector<std::int64_t>{utc(2026, 1, 1, 0, 10), utc(2026, 1, 1, 1, 10)});
  // The end is inclusive.
  s.end = from_epoch_ms(utc(2026, 1, 1, 2, 10));
  CHECK(at(0, 5).size() == 3);
  s.cron = "0 * * * *";
  s.every = {};
  s.start = from_epoch_ms(utc(2026, 1, 1, 0, 10));
  CHECK(at(0, 5) == std::vector<std::int64_t>{utc(2026, 1, 1, 1), utc(2026, 1, 1, 2)});
}

TEST_CASE("schedules: occurrences stop before a time point would wrap (2262)") {
  // A task is due at a system_clock time point (nanoseconds, which end in
  // April 2262): past 2262-01-01 there is no occurrence, never one wrapped
  // around to 1677 (the HTTP API's fuzzing found a start_ms in 2530).
  constexpr std::int64_t last = 9214646400000;  // 2262-01-01T00:00:00Z
  delayq::schedule s;
  s.id = "s";
  s.type = "t";
  s.every = std::chrono::hours(1);
  s.start = from_epoch_ms(last - 3'600'000);
  boost::system::error_code ec;
  std::vector<std::int64_t> got;
  for (auto t : delayq::schedule_occurrences(s, from_epoch_ms(0), 10, ec))
    got.push_back(to_epoch_ms(t));
  CHECK_FALSE(ec);
  CHECK(got == std::vector<std::int64_t>{last - 3'600'000, last});
  s.every = {};
  s.cron = "0 0 * * *";
  got.clear();
  for (auto t : delayq::schedule_occurrences(s, from_epoch_ms(0), 10, ec))
    got.push_back(to_epoch_ms(t));
  CHECK(got == std::vector<std::int64_t>{last});
  // A start past it is refused, naming the field.
  s.start = from_epoch_ms(last + 1);
  const auto p = delayq::check_schedule(s);
  REQUIRE(p.has_value());
  CHECK(p->field == "start_ms");
}

TEST_CASE("schedules: DST in Europe/Berlin") {
  // 2026-03-29: 02:00 CET (+1) jumps to 03:00 CEST (+2) at 01:00Z.
  // A nonexistent 02:30 runs at the jump, 01:00Z; 02:00 and 02:30 are one.
  CHECK(next("30 2 * * *", "Europe/Berlin", utc(2026, 3, 28), 3) ==
        std::vector<std::int64_t>{utc(2026, 3, 28, 1, 30), utc(2026, 3, 29, 1),
                                  utc(2026, 3, 30, 0, 30)});
  CHECK(next("0,30 2 * * *", "Europe/Berlin", utc(2026, 3, 28, 12), 2) ==
        std::vector<std::int64_t>{utc(2026, 3, 29, 1), utc(2026, 3, 30, 0)});
  CHECK(next("*/30 * * * *", "Europe/Berlin", utc(2026, 3, 29, 0, 15), 3) ==
        std::vector<std::int64_t>{utc(2026, 3, 29, 0, 30), utc(2026, 3, 29, 1),
                                  utc(2026, 3, 29, 1, 30)});
  // 2026-10-25: 03:00 CEST goes back to 02:00 CET at 01:00Z; 02:00-02:59
  // happens twice. A fixed 02:30 runs once, at its first instant (00:30Z).
  CHECK(next("30 2 * * *", "Europe/Berlin", utc(2026, 10, 24), 3) ==
        std::vector<std::int64_t>{utc(2026, 10, 24, 0, 30), utc(2026, 10, 25, 0, 30),
                                  utc(2026, 10, 26, 1, 30)});
  // The hour field starts with '*': the repeated hour runs in both passes,
  // so the every-30-minute schedule has no hole (Sidekiq #5049).
  CHECK(next("*/30 * * * *", "Europe/Berlin", utc(2026, 10, 24, 23, 45), 5) ==
        std::vector<std::int64_t>{utc(2026, 10, 25, 0), utc(2026, 10, 25, 0, 30),
                                  utc(2026, 10, 25, 1), utc(2026, 10, 25, 1, 30),
                                  utc(2026, 10, 25, 2)});
  // After 2037 the TZif file's footer rule: CEST in July 2040, CET in January.
  CHECK(next("0 12 1 7 *", "Europe/Berlin", utc(2040, 1, 1), 1) ==
        std::vector<std::int64_t>{utc(2040, 7, 1, 10)});
  CHECK(next("0 12 1 1 *", "Europe/Berlin", utc(2040, 6, 1), 1) ==
        std::vector<std::int64_t>{utc(2041, 1, 1, 11)});
  // 2045-03-26 (last Sunday of March): the footer's jump at 01:00Z.
  CHECK(next("30 2 * * *", "Europe/Berlin", utc(2045, 3, 25, 12), 1) ==
        std::vector<std::int64_t>{utc(2045, 3, 26, 1)});
}

TEST_CASE("schedules: DST in America/New_York") {
  // 2026-03-08: 02:00 EST (-5) jumps to 03:00 EDT (-4) at 07:00Z.
  CHECK(next("30 2 * * *", "America/New_York", utc(2026, 3, 7), 3) ==
        std::vector<std::int64_t>{utc(2026, 3, 7, 7, 30), utc(2026, 3, 8, 7),
                                  utc(2026, 3, 9, 6, 30)});
  // 2026-11-01: 02:00 EDT goes back to 01:00 EST at 06:00Z; 01:30 is first
  // at 05:30Z (EDT), again at 06:30Z (EST): it runs once.
  CHECK(next("30 1 * * *", "America/New_York", utc(2026, 10, 31, 12), 2) ==
        std::vector<std::int64_t>{utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)});
  CHECK(next("*/15 1 * * *", "America/New_York", utc(2026, 11, 1, 4), 5) ==
        std::vector<std::int64_t>{utc(2026, 11, 1, 5), utc(2026, 11, 1, 5, 15),
                                  utc(2026, 11, 1, 5, 30), utc(2026, 11, 1, 5, 45),
                                  utc(2026, 11, 2, 6)});
  // Every minute keeps running through the repeated hour.
  auto every_minute = next("* * * * *", "America/New_York", utc(2026, 11, 1, 5, 58), 4);
  CHECK(every_minute == std::vector<std::int64_t>{utc(2026, 11, 1, 5, 59), utc(2026, 11, 1, 6),
                                                  utc(2026, 11, 1, 6, 1), utc(2026, 11, 1, 6, 2)});
}

TEST_CASE("schedules: DST in Australia/Lord_Howe, a 30-minute shift") {
  // 2026-10-04: 02:00 (+10:30) jumps to 02:30 (+11) at 15:30Z on the 3rd.
  CHECK(next("15 2 * * *", "Australia/Lord_Howe", utc(2026, 10, 2), 3) ==
        std::vector<std::int64_t>{utc(2026, 10, 2, 15, 45), utc(2026, 10, 3, 15, 30),
                                  utc(2026, 10, 4, 15, 15)});
  // 2026-04-05: 02:00 (+11) goes back to 01:30 (+10:30) at 15:00Z on the
  // 4th; 01:45 happens at 14:45Z and 15:15Z, and runs at the first.
  CHECK(next("45 1 * * *", "Australia/Lord_Howe", utc(2026, 4, 3, 12), 3) ==
        std::vector<std::int64_t>{utc(2026, 4, 3, 14, 45), utc(2026, 4, 4, 14, 45),
                                  utc(2026, 4, 5, 15, 15)});
  // An every-20-minutes schedule runs in both passes of 01:30-01:59.
  CHECK(next("*/20 * * * *", "Australia/Lord_Howe", utc(2026, 4, 4, 14, 10), 4) ==
        std::vector<std::int64_t>{utc(2026, 4, 4, 14, 20), utc(2026, 4, 4, 14, 40),
                                  utc(2026, 4, 4, 15, 10), utc(2026, 4, 4, 15, 30)});
}

TEST_CASE("schedules: zones whose rules changed recently") {
  // Mexico City's last jump back, 2022-10-30 02:00 CDT -> 01:00 CST (07:00Z):
  // 01:30 runs at its first instant, 06:30Z.
  CHECK(next("30 1 * * *", "America/Mexico_City", utc(2022, 10, 29, 12), 2) ==
        std::vector<std::int64_t>{utc(2022, 10, 30, 6, 30), utc(2022, 10, 31, 7, 30)});
  // No DST since: on 2023-04-02, where it used to jump, 02:30 CST is 08:30Z.
  CHECK(next("30 2 * * *", "America/Mexico_City", utc(2023, 4, 1, 12), 1) ==
        std::vector<std::int64_t>{utc(2023, 4, 2, 8, 30)});
  // Cairo took DST back on 2023-04-28: 00:00 EET (+2) jumps to 01:00 EEST (+3)
  // at 22:00Z on the 27th; a nonexistent 00:30 runs then.
  CHECK(next("30 0 * * *", "Africa/Cairo", utc(2023, 4, 26, 12), 3) ==
        std::vector<std::int64_t>{utc(2023, 4, 26, 22, 30), utc(2023, 4, 27, 22),
                                  utc(2023, 4, 28, 21, 30)});
}

TEST_CASE("schedules: the TZif footer's POSIX rules parse") {
  using delayq::detail::schedules::posix_rule;
  CHECK(posix_rule::parse("CET-1CEST,M3.5.0,M10.5.0/3"));
  CHECK(posix_rule::parse("<+1030>-10:30<+11>-11,M10.1.0,M4.1.0"));
  CHECK(posix_rule::parse("<-02>2<-01>,M3.5.0/-1,M10.5.0/0"));  // negative time
  CHECK(posix_rule::parse("EET-2EEST,M4.5.5/0,M10.5.4/24"));    // 24:00
  CHECK(posix_rule::parse("<+13>-13"));
  CHECK_FALSE(posix_rule::parse("CET"));
  CHECK_FALSE(posix_rule::parse("CET-1CEST"));  // DST without its rules
  CHECK_FALSE(posix_rule::parse("CET-1CEST,M13.5.0,M10.5.0"));
  // Cairo's footer: EEST from the last Friday of April at 00:00 to the last
  // Thursday of October at 24:00. 2040-04-27 is the last Friday of April.
  auto p = posix_rule::parse("EET-2EEST,M4.5.5/0,M10.5.4/24");
  const auto span = p->at(utc(2040, 6, 1) / 1000);
  CHECK(span.offset == 3 * 3600);
  CHECK(span.begin == utc(2040, 4, 26, 22) / 1000);
  CHECK(delayq::detail::schedules::zone::find("Africa/Cairo")->at(utc(2040, 6, 1) / 1000).offset ==
        3 * 3600);
}

TEST_CASE("schedules: definitions and states round-trip their bytes") {
  using namespace delayq::detail::schedules;
  delayq::schedule s;
  s.id = "nightly";
  s.type = "report.build";
  s.payload = std::string("a\0b\xff", 4);
  s.cron = "0 3 * * MON-FRI";
  s.timezone = "Europe/Berlin";
  s.start = from_epoch_ms(1000);
  s.end = from_epoch_ms(9000000000000);
  s.missed = delayq::missed_runs::all;
  s.priority = 7;
  s.ttr = std::chrono::seconds(30);
  s.conflict = delayq::on_conflict::replace;
  const std::string bytes = encode_definition(s);
  CHECK(decode_definition("nightly", bytes) == s);
  CHECK_FALSE(decode_definition("nightly", bytes.substr(0, bytes.size() - 1)));
  CHECK_FALSE(decode_definition("nightly", bytes + "x"));
  CHECK_FALSE(decode_definition("nightly", "\x02" + bytes.substr(1)));  // a newer version
  schedule_state st{123, -5, 99, 0xfedcba9876543210};
  CHECK(decode_state(encode_state(st)) == st);
  CHECK_FALSE(decode_state(""));
}
