// A schedule's timing: compiled from a schedule, and the search for its next
// occurrence (timing.hpp explains the DST rules and the walk).
#include "detail/schedules/timing.hpp"

#include <algorithm>

#include "delayq/task.hpp"

namespace delayq::detail::schedules {
namespace {

constexpr std::int64_t int_min = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t int_max = std::numeric_limits<std::int64_t>::max();
// The longest interval: 100 years (of 366 days).
constexpr std::int64_t longest_every_ms = std::int64_t{100} * 366 * 86400 * 1000;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) noexcept { return -floor_div(-a, b); }

}  // namespace

std::optional<timing> timing::compile(const schedule& s, schedule_problem& problem) {
  auto fail = [&](const char* field, std::string reason) {
    problem = {field, std::move(reason)};
    return std::nullopt;
  };
  timing t;
  if (s.cron.empty() == (s.every.count() == 0))
    return fail(
        s.cron.empty() ? "cron" : "every_ms",
        s.cron.empty() ? "give either cron or every_ms" : "give either cron or every_ms, not both");
  if (s.start) {
    const std::int64_t ms = to_epoch_ms(*s.start);
    if (ms < earliest_ms || ms > latest_ms)
      return fail("start_ms", "must be from 0 (1970) to 9214646400000 (2262-01-01)");
    t.start_ms = ms;
  }
  if (s.end) {
    const std::int64_t ms = to_epoch_ms(*s.end);
    if (ms < earliest_ms || ms > latest_ms)
      return fail("end_ms", "must be from 0 (1970) to 9214646400000 (2262-01-01)");
    if (ms < t.start_ms) return fail("end_ms", "is before start_ms");
    t.end_ms = ms;
  }
  if (!s.cron.empty()) {
    std::string why;
    auto c = cron_expr::parse(s.cron, why);
    if (!c) return fail("cron", why);
    t.is_cron = true;
    t.cron = *c;
    t.tz = s.timezone.empty() ? zone::utc() : zone::find(s.timezone);
    if (t.tz == nullptr)
      return fail("timezone", "'" + s.timezone +
                                  "' is not a time zone of the system's tz data (an IANA name "
                                  "such as Europe/Berlin)");
    return t;
  }
  if (!s.timezone.empty())
    return fail("timezone", "applies to cron only (every_ms counts real time, in UTC)");
  const std::int64_t every = s.every.count();
  if (every < 1000 || every > longest_every_ms)
    return fail("every_ms",
                "must be from 1000 (1 s) to " + std::to_string(longest_every_ms) + " (100 years)");
  t.every_ms = every;
  t.anchor_ms = s.start ? t.start_ms : 0;
  return t;
}

std::optional<std::int64_t> timing::next_after(std::int64_t after_ms) const noexcept {
  if (after_ms >= end_ms) return std::nullopt;
  // The first candidate: after `after_ms`, not before the start.
  const std::int64_t lower = std::max(after_ms + 1, start_ms);
  std::int64_t at = 0;
  if (!is_cron) {
    const std::int64_t k = lower <= anchor_ms ? 0 : ceil_div(lower - anchor_ms, every_ms);
    if (k > (int_max - anchor_ms) / every_ms) return std::nullopt;
    at = anchor_ms + k * every_ms;
  } else {
    // Cron occurrences are whole seconds: the first at or after `lower`.
    auto s = cron_at_or_after(ceil_div(lower, 1000));
    if (!s || *s > latest_ms / 1000) return std::nullopt;
    at = *s * 1000;
  }
  if (at > end_ms) return std::nullopt;
  return at;
}

std::optional<std::int64_t> timing::cron_at_or_after(std::int64_t u) const noexcept {
  // Spans of one offset, one after the other; a zone has about two a year,
  // and next_local() gives up 100 years on, so a few hundred at most.
  const std::int64_t give_up = u + std::int64_t{101} * 366 * 86400;
  for (int spans = 0; spans < 1000 && u < give_up; ++spans) {
    const zone_span span = tz->at(u);
    const std::int64_t o = span.offset;
    // The offset before this span, when it began at a transition.
    std::optional<std::int64_t> before;
    if (span.begin != int_min) before = tz->at(span.begin - 1).offset;
    if (u == span.begin && before && o > *before) {
      // The clocks jumped forward at span.begin: the local times
      // [begin + before, begin + o) never happened. One that matches runs
      // at the jump.
      if (cron.next_local(span.begin + *before, span.begin + o)) return span.begin;
    }
    std::int64_t from = u + o;
    // The clocks went back at span.begin: local times up to begin + before
    // were lived through in the span before; they run again only for a
    // schedule that runs every hour.
    if (before && *before > o && !cron.hour_star) from = std::max(from, span.begin + *before);
    const std::int64_t local_end = span.end == int_max ? int_max : span.end + o;
    if (auto l = cron.next_local(from, local_end)) return *l - o;
    if (span.end == int_max) return std::nullopt;
    u = span.end;
  }
  return std::nullopt;
}

}  // namespace delayq::detail::schedules
