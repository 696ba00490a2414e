#include "wire/request_codec.hpp"

#include <algorithm>
#include <initializer_list>
#include <limits>

namespace delayq::server {
namespace {

using nlohmann::json;
using std::chrono::system_clock;

std::string prefixed(const std::string& where, std::string message) {
  return where.empty() ? message : where + ": " + message;
}

std::optional<api_error> check_object(const json& j, const std::string& where,
                                      std::initializer_list<std::string_view> allowed) {
  if (!j.is_object()) return bad_request(prefixed(where, "expected a JSON object"));
  for (const auto& [key, value] : j.items()) {
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
    std::string names;
    for (std::string_view a : allowed) names += (names.empty() ? "" : ", ") + std::string(a);
    return bad_request(prefixed(where, "unknown field \"" + key + "\" (allowed: " + names + ")"));
  }
  return std::nullopt;
}

std::optional<api_error> get_string(const json& j, const char* key, const std::string& where,
                                    std::string& out, bool required) {
  auto it = j.find(key);
  if (it == j.end()) {
    if (required) return bad_request(prefixed(where, std::string("missing field \"") + key + "\""));
    return std::nullopt;
  }
  if (!it->is_string())
    return bad_request(prefixed(where, std::string("field \"") + key + "\" must be a string"));
  out = it->get_ref<const std::string&>();
  return std::nullopt;
}

std::optional<api_error> get_int(const json& j, const char* key, const std::string& where,
                                 std::int64_t lo, std::int64_t hi,
                                 std::optional<std::int64_t>& out) {
  auto it = j.find(key);
  if (it == j.end()) return std::nullopt;
  const auto range = [&] {
    return bad_request(prefixed(where, std::string("field \"") + key +
                                           "\" must be an integer from " + std::to_string(lo) +
                                           " to " + std::to_string(hi)));
  };
  std::int64_t v = 0;
  if (it->is_number_unsigned()) {
    const auto u = it->get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return range();
    v = static_cast<std::int64_t>(u);
  } else if (it->is_number_integer()) {
    v = it->get<std::int64_t>();
  } else {
    return range();
  }
  if (v < lo || v > hi) return range();
  out = v;
  return std::nullopt;
}

constexpr std::int64_t any_int_lo = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t any_int_hi = std::numeric_limits<std::int64_t>::max();

std::optional<api_error> read_when(const json& j, const std::string& where, when_spec& out) {
  if (auto e = get_int(j, "delay_ms", where, any_int_lo, any_int_hi, out.delay_ms)) return e;
  if (auto e = get_int(j, "due_ms", where, any_int_lo, any_int_hi, out.due_ms)) return e;
  if (out.delay_ms.has_value() == out.due_ms.has_value())
    return bad_request(prefixed(where, "give exactly one of \"delay_ms\" and \"due_ms\""));
  return std::nullopt;
}

std::optional<api_error> read_lease(const json& j, lease_request& out) {
  return get_string(j, "lease", {}, out.lease, true);
}

}  // namespace

system_clock::time_point when_spec::due(system_clock::time_point now) const {
  // Out of range on either side maps to an instant the engine refuses with
  // the error the caller would expect, without overflowing on the way.
  const auto before_epoch = system_clock::time_point{} - milliseconds{1};
  const std::int64_t now_ms = to_epoch_ms(now);
  // system_clock counts nanoseconds in 64 bits: about 292 years either way.
  constexpr std::int64_t max_ms = std::numeric_limits<std::int64_t>::max() / 1'000'000 - 1;
  std::int64_t ms = 0;
  if (delay_ms) {
    if (*delay_ms < 0) return before_epoch;
    if (*delay_ms > max_ms - now_ms) return system_clock::time_point::max();
    ms = now_ms + *delay_ms;
  } else {
    if (!due_ms || *due_ms < 0) return before_epoch;
    if (*due_ms > max_ms) return system_clock::time_point::max();
    ms = *due_ms;
  }
  return from_epoch_ms(ms);
}

std::optional<api_error> parse_json(std::string_view body, json& out, bool empty_is_object) {
  if (body.empty() && empty_is_object) {
    out = json::object();
    return std::nullopt;
  }
  out = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (out.is_discarded()) return bad_request("the body is not valid JSON");
  return std::nullopt;
}

std::optional<api_error> parse_add(const json& j, add_request& out, const std::string& where) {
  if (auto e = check_object(j, where,
                            {"type", "payload", "delay_ms", "due_ms", "id", "conflict",
                             "trigger_count", "priority", "ttr_ms"}))
    return e;
  std::optional<std::int64_t> trigger, priority, ttr;
  if (auto e = get_int(j, "trigger_count", where, 0, max_trigger_count, trigger)) return e;
  out.trigger_count = static_cast<std::uint32_t>(trigger.value_or(0));
  if (auto e =
          get_int(j, "priority", where, 0, std::numeric_limits<std::uint32_t>::max(), priority))
    return e;
  out.priority = static_cast<std::uint32_t>(priority.value_or(0));
  if (auto e = get_int(j, "ttr_ms", where, 0, max_ttr.count(), ttr)) return e;
  // 0: the reserving consumer's own choice; else a lease a reserve could ask for.
  if (ttr && *ttr != 0 && *ttr < min_ttr.count())
    return bad_request(prefixed(where, "field \"ttr_ms\" must be 0 or an integer from " +
                                           std::to_string(min_ttr.count()) + " to " +
                                           std::to_string(max_ttr.count())));
  out.ttr = milliseconds{ttr.value_or(0)};
  if (auto e = get_string(j, "type", where, out.type, true)) return e;
  if (auto e = get_string(j, "payload", where, out.payload, false)) return e;
  if (auto e = get_string(j, "id", where, out.id, false)) return e;
  if (j.contains("id") && out.id.empty())
    return bad_request(prefixed(where, "field \"id\" must not be empty (leave it out to get one)"));
  std::string conflict;
  if (auto e = get_string(j, "conflict", where, conflict, false)) return e;
  if (conflict.empty() || conflict == "reject")
    out.conflict = on_conflict::reject;
  else if (conflict == "replace")
    out.conflict = on_conflict::replace;
  else if (conflict == "keep")
    out.conflict = on_conflict::keep;
  else
    return bad_request(
        prefixed(where, "field \"conflict\" must be \"reject\", \"replace\" or \"keep\""));
  return read_when(j, where, out.when);
}

std::optional<api_error> parse_batch(const json& j, std::vector<add_request>& out) {
  if (auto e = check_object(j, {}, {"tasks"})) return e;
  auto it = j.find("tasks");
  if (it == j.end() || !it->is_array()) return bad_request("field \"tasks\" must be an array");
  if (it->empty()) return bad_request("field \"tasks\" must not be empty");
  if (it->size() > max_batch)
    return api_error{413, "payload_too_large",
                     "a batch holds at most " + std::to_string(max_batch) + " tasks"};
  out.clear();
  out.reserve(it->size());
  for (std::size_t i = 0; i < it->size(); ++i) {
    add_request r;
    if (auto e = parse_add((*it)[i], r, "tasks[" + std::to_string(i) + "]")) return e;
    out.push_back(std::move(r));
  }
  return std::nullopt;
}

std::optional<api_error> parse_when(const json& j, when_spec& out) {
  if (auto e = check_object(j, {}, {"delay_ms", "due_ms"})) return e;
  return read_when(j, {}, out);
}

namespace {

std::optional<api_error> read_reserve(const json& j, const std::string& where,
                                      reserve_request& out) {
  if (auto e = check_object(j, where, {"types", "max", "wait_ms", "ttr_ms"})) return e;
  const std::string types = where.empty() ? "\"types\"" : "\"" + where + ".types\"";
  if (auto it = j.find("types"); it != j.end()) {
    if (!it->is_array()) return bad_request("field " + types + " must be an array of strings");
    if (it->size() > max_reserve_types)
      return bad_request("field " + types + " names at most " + std::to_string(max_reserve_types) +
                         " types");
    for (const json& t : *it) {
      if (!t.is_string() || t.get_ref<const std::string&>().empty())
        return bad_request("field " + types + " must be an array of non-empty strings");
      out.types.push_back(t.get<std::string>());
    }
  }
  std::optional<std::int64_t> max, wait, ttr;
  if (auto e = get_int(j, "max", where, 1, static_cast<std::int64_t>(max_reserve), max)) return e;
  if (auto e = get_int(j, "wait_ms", where, 0, max_wait.count(), wait)) return e;
  if (auto e = get_int(j, "ttr_ms", where, min_ttr.count(), max_ttr.count(), ttr)) return e;
  if (max) out.max = static_cast<std::size_t>(*max);
  if (wait) out.wait = milliseconds{*wait};
  if (ttr) out.ttr = milliseconds{*ttr};
  return std::nullopt;
}

// finish's and fail's "next": the reserve that follows the attempt's end.
std::optional<api_error> read_next(const json& j, lease_request& out) {
  auto it = j.find("next");
  if (it == j.end()) return std::nullopt;
  out.next.emplace();
  return read_reserve(*it, "next", *out.next);
}

}  // namespace

std::optional<api_error> parse_reserve(const json& j, reserve_request& out) {
  return read_reserve(j, {}, out);
}

std::optional<api_error> parse_finish(const json& j, lease_request& out) {
  if (auto e = check_object(j, {}, {"lease", "next"})) return e;
  if (auto e = read_lease(j, out)) return e;
  return read_next(j, out);
}

std::optional<api_error> parse_fail(const json& j, lease_request& out) {
  if (auto e = check_object(j, {}, {"lease", "error", "next"})) return e;
  if (auto e = read_lease(j, out)) return e;
  if (auto e = get_string(j, "error", {}, out.error, false)) return e;
  return read_next(j, out);
}

std::optional<api_error> parse_touch(const json& j, lease_request& out) {
  if (auto e = check_object(j, {}, {"lease", "ttr_ms"})) return e;
  if (auto e = read_lease(j, out)) return e;
  std::optional<std::int64_t> ttr;
  if (auto e = get_int(j, "ttr_ms", {}, min_ttr.count(), max_ttr.count(), ttr)) return e;
  if (ttr) out.ttr = milliseconds{*ttr};
  return std::nullopt;
}

std::optional<api_error> parse_finish_batch(const json& j, finish_batch_request& out) {
  if (auto e = check_object(j, {}, {"tasks", "next"})) return e;
  auto it = j.find("tasks");
  if (it == j.end() || !it->is_array()) return bad_request("field \"tasks\" must be an array");
  if (it->empty()) return bad_request("field \"tasks\" must not be empty");
  if (it->size() > max_finish_batch)
    return bad_request("field \"tasks\" holds at most " + std::to_string(max_finish_batch) +
                       " finishes");
  out.tasks.clear();
  out.tasks.reserve(it->size());
  for (std::size_t i = 0; i < it->size(); ++i) {
    const json& t = (*it)[i];
    const std::string where = "tasks[" + std::to_string(i) + "]";
    if (auto e = check_object(t, where, {"id", "lease"})) return e;
    finish_batch_request::item item;
    if (auto e = get_string(t, "id", where, item.id, true)) return e;
    if (auto e = get_string(t, "lease", where, item.lease, true)) return e;
    out.tasks.push_back(std::move(item));
  }
  out.next.reset();
  if (auto n = j.find("next"); n != j.end()) {
    out.next.emplace();
    return read_reserve(*n, "next", *out.next);
  }
  return std::nullopt;
}

std::optional<api_error> parse_schedule(const json& j, const std::string& id, schedule& out) {
  if (auto e = check_object(j, {},
                            {"type", "payload", "cron", "every_ms", "timezone", "start_ms",
                             "end_ms", "missed", "priority", "ttr_ms", "conflict"}))
    return e;
  out = schedule{};
  out.id = id;
  if (auto e = get_string(j, "type", {}, out.type, true)) return e;
  if (auto e = get_string(j, "payload", {}, out.payload, false)) return e;
  if (auto e = get_string(j, "cron", {}, out.cron, false)) return e;
  if (j.contains("cron") && out.cron.empty())
    return bad_request("field \"cron\" must not be empty (leave it out to use every_ms)");
  if (auto e = get_string(j, "timezone", {}, out.timezone, false)) return e;
  if (j.contains("timezone") && out.timezone.empty())
    return bad_request("field \"timezone\" must not be empty (leave it out for UTC)");
  std::optional<std::int64_t> every, start, end, priority, ttr;
  if (auto e = get_int(j, "every_ms", {}, 1, any_int_hi, every)) return e;
  if (auto e = get_int(j, "start_ms", {}, any_int_lo, any_int_hi, start)) return e;
  if (auto e = get_int(j, "end_ms", {}, any_int_lo, any_int_hi, end)) return e;
  if (auto e = get_int(j, "priority", {}, 0, std::numeric_limits<std::uint32_t>::max(), priority))
    return e;
  if (auto e = get_int(j, "ttr_ms", {}, 0, max_ttr.count(), ttr)) return e;
  if (ttr && *ttr != 0 && *ttr < min_ttr.count())
    return bad_request("field \"ttr_ms\" must be 0 or an integer from " +
                       std::to_string(min_ttr.count()) + " to " + std::to_string(max_ttr.count()));
  // Out of the range check_schedule() accepts, but never overflowing here.
  constexpr std::int64_t ms_hi = std::int64_t{1} << 50;
  if (every) out.every = milliseconds{std::min(*every, ms_hi)};
  // start and end become system_clock time points (nanoseconds), which end
  // in April 2262 (the fuzzer found start_ms 1.8e13 overflowing): clamped
  // to what one holds, and check_schedule() refuses them out of its range
  // (1970 to 2262-01-01), naming the field.
  const std::int64_t point_ms = std::chrono::duration_cast<milliseconds>(
                                    std::chrono::system_clock::time_point::max().time_since_epoch())
                                    .count();
  if (start) out.start = from_epoch_ms(std::clamp(*start, -point_ms, point_ms));
  if (end) out.end = from_epoch_ms(std::clamp(*end, -point_ms, point_ms));
  out.priority = static_cast<std::uint32_t>(priority.value_or(0));
  out.ttr = milliseconds{ttr.value_or(0)};
  std::string missed;
  if (auto e = get_string(j, "missed", {}, missed, false)) return e;
  if (!missed.empty() || j.contains("missed")) {
    auto m = missed_runs_from(missed);
    if (!m) return bad_request("field \"missed\" must be \"skip\", \"once\" or \"all\"");
    out.missed = *m;
  }
  std::string conflict;
  if (auto e = get_string(j, "conflict", {}, conflict, false)) return e;
  if (conflict.empty() || conflict == "keep")
    out.conflict = on_conflict::keep;
  else if (conflict == "replace")
    out.conflict = on_conflict::replace;
  else if (conflict == "reject")
    out.conflict = on_conflict::reject;
  else
    return bad_request("field \"conflict\" must be \"keep\", \"replace\" or \"reject\"");
  return std::nullopt;
}

std::optional<api_error> parse_requeue(const json& j, milliseconds& delay) {
  if (auto e = check_object(j, {}, {"delay_ms"})) return e;
  std::optional<std::int64_t> d;
  if (auto e = get_int(j, "delay_ms", {}, 0, any_int_hi, d)) return e;
  delay = milliseconds{d.value_or(0)};
  return std::nullopt;
}

std::optional<api_error> parse_signal(const json& j, std::uint32_t& n) {
  if (auto e = check_object(j, {}, {"n"})) return e;
  std::optional<std::int64_t> v;
  if (auto e = get_int(j, "n", {}, 1, max_trigger_count, v)) return e;
  n = static_cast<std::uint32_t>(v.value_or(1));
  return std::nullopt;
}

}  // namespace delayq::server
