// api_router_schedules.cpp - api_router's routes for recurring schedules
// (docs/server.md, "Schedules"): PUT, GET and DELETE of
// /v1/schedules/{id}, and GET /v1/schedules. Under --cluster a call on a
// schedule whose id's shard another instance holds goes there, as a call
// on a task does (its keeper lives there).
#include <charconv>
#include <optional>

#include "api/api_call.hpp"
#include "api/api_router.hpp"
#include "wire/http_url.hpp"
#include "wire/request_codec.hpp"
#include "wire/schedule_json.hpp"

namespace delayq::server {
namespace {

using nlohmann::json;

// 400 invalid_schedule, naming the field: {"error","message","field"}.
http_answer invalid(const schedule_problem& p) {
  return json_answer(400, json{{"error", "invalid_schedule"},
                               {"message", p.field + ": " + p.reason},
                               {"field", p.field}});
}

std::vector<std::chrono::system_clock::time_point> next_of(const schedule& s, std::size_t n) {
  boost::system::error_code ec;
  return schedule_occurrences(s, std::chrono::system_clock::now(), n, ec);
}

}  // namespace

void api_router::put_schedule(call& c, const std::string& id) {
  if (!c.parse_body()) return;
  schedule s;
  if (auto e = parse_schedule(c.body, id, s)) return c.fail(*e);
  // Checked here, before any instance is asked: nothing is stored.
  if (auto p = check_schedule(s)) return c.answer(invalid(*p));
  if (forward_foreign(c, id)) return;
  blocking(std::move(c.respond), [this, s = std::move(s)] {
    boost::system::error_code ec;
    const bool created = parts_.engine->upsert_schedule(s, ec);
    if (ec == errc::invalid_schedule) {
      if (auto p = check_schedule(s)) return invalid(*p);
    }
    if (ec) return error_answer(from_error_code(ec));
    return json_answer(created ? 201 : 200, schedule_json(s, next_of(s, 10)));
  });
}

void api_router::get_schedule(call& c, const std::string& id) {
  const auto n = query_size(query_param(c.query, "next"), 10, max_next_occurrences);
  if (!n)
    return c.fail(
        bad_request("next must be an integer from 0 to " + std::to_string(max_next_occurrences)));
  auto local = [this, id, n = *n] {
    boost::system::error_code ec;
    auto s = parts_.engine->find_schedule(id, ec);
    if (ec) return error_answer(from_error_code(ec));
    if (!s) return error_answer(not_found("no schedule with id " + id));
    return json_answer(200, schedule_json(*s, next_of(*s, n)));
  };
  if (forward_foreign(c, id, local)) return;
  blocking(std::move(c.respond), local);
}

void api_router::delete_schedule(call& c, const std::string& id) {
  if (forward_foreign(c, id)) return;
  blocking(std::move(c.respond), [this, id] {
    boost::system::error_code ec;
    const bool found = parts_.engine->remove_schedule(id, ec);
    if (ec) return error_answer(from_error_code(ec));
    if (!found) return error_answer(not_found("no schedule with id " + id));
    return no_content();
  });
}

void api_router::list_schedules(call& c) {
  const auto offset = query_size(query_param(c.query, "offset"), 0, max_schedule_offset);
  const auto limit = query_size(query_param(c.query, "limit"), 100, 1000);
  const auto next = query_size(query_param(c.query, "next"), 3, 10);
  if (!offset || !limit || !next)
    return c.fail(bad_request("offset must be an integer from 0 to " +
                              std::to_string(max_schedule_offset) +
                              ", limit one from 0 to 1000, next one from 0 to 10"));
  blocking(std::move(c.respond), [this, offset = *offset, limit = *limit, next = *next] {
    boost::system::error_code ec;
    auto all = parts_.engine->list_schedules(offset, limit, ec);
    if (ec) return error_answer(from_error_code(ec));
    const std::size_t total = parts_.engine->count_schedules(ec);
    if (ec) return error_answer(from_error_code(ec));
    json list = json::array();
    for (const schedule& s : all) list.push_back(schedule_json(s, next_of(s, next)));
    return json_answer(200, json{{"schedules", std::move(list)}, {"total", total}});
  });
}

}  // namespace delayq::server
