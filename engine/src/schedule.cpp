// Recurring schedules' pure functions (delayq/schedule.hpp): the checks, the
// occurrences, the occurrence ids.
#include "delayq/schedule.hpp"

#include "delayq/error.hpp"
#include "delayq/task.hpp"
#include "detail/schedules/timing.hpp"
#include "detail/validation.hpp"

namespace delayq {

namespace {
constexpr std::size_t max_schedule_id = 240;
}

std::optional<schedule_problem> check_schedule(const schedule& s) {
  if (s.id.size() > max_schedule_id || !detail::valid_id(s.id))
    return schedule_problem{"id",
                            "must be 1-240 bytes, none a space or a control character (its "
                            "occurrences' task ids add '@' and the milliseconds)"};
  if (!detail::valid_type(s.type))
    return schedule_problem{"type", "must be 1-128 characters from [A-Za-z0-9._:-]"};
  if (s.ttr.count() < 0 || s.ttr.count() > 0xffffffffLL)
    return schedule_problem{"ttr_ms", "must be 0 to 4294967295"};
  schedule_problem p;
  if (!detail::schedules::timing::compile(s, p)) return p;
  return std::nullopt;
}

std::vector<std::chrono::system_clock::time_point> schedule_occurrences(
    const schedule& s, std::chrono::system_clock::time_point after, std::size_t n,
    boost::system::error_code& ec) {
  ec = {};
  std::vector<std::chrono::system_clock::time_point> out;
  schedule_problem p;
  auto t = detail::schedules::timing::compile(s, p);
  if (!t) {
    ec = errc::invalid_schedule;
    return out;
  }
  std::int64_t at = to_epoch_ms(after);
  out.reserve(std::min<std::size_t>(n, 1024));
  while (out.size() < n) {
    auto next = t->next_after(at);
    if (!next) break;
    out.push_back(from_epoch_ms(*next));
    at = *next;
  }
  return out;
}

std::string occurrence_id(std::string_view schedule_id, std::chrono::system_clock::time_point at) {
  std::string id(schedule_id);
  id += '@';
  id += std::to_string(to_epoch_ms(at));
  return id;
}

std::string_view to_string(missed_runs m) noexcept {
  switch (m) {
    case missed_runs::skip: return "skip";
    case missed_runs::once: return "once";
    case missed_runs::all: return "all";
  }
  return "skip";
}

std::optional<missed_runs> missed_runs_from(std::string_view name) noexcept {
  if (name == "skip") return missed_runs::skip;
  if (name == "once") return missed_runs::once;
  if (name == "all") return missed_runs::all;
  return std::nullopt;
}

}  // namespace delayq
