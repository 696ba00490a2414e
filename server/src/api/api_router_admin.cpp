// api_router_admin.cpp - api_router's routes for operators: push targets,
// dead letters, stats, upcoming tasks, health and metrics. The task and
// lease routes are in api_router.cpp.
#include <charconv>
#include <optional>

#include "api/api_call.hpp"
#include "api/api_router.hpp"
#include "api/metrics_text.hpp"
#include "wire/http_url.hpp"
#include "wire/request_codec.hpp"
#include "wire/task_json.hpp"

namespace delayq::server {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::system_clock;

}  // namespace

// ------------------------------------------------------------------ push targets

void api_router::put_type(call& c, const std::string& type) {
  if (!c.parse_body()) return;
  std::string why;
  auto target = push_target_from_json(c.body, why);
  if (!target) return c.fail(bad_request(why));
  settings(std::move(c.respond), [this, type, t = *target] {
    // Resolving may wait on DNS: here, on the settings strand's thread.
    if (parts_.push_allow != nullptr) {
      std::string why;
      const auto url = parse_http_url(t.url, why);
      if (url) why = parts_.push_allow->check(*url);
      if (!why.empty()) return error_answer({400, "push_target_refused", why});
    }
    boost::system::error_code ec;
    parts_.registry->put(type, t, ec);
    if (ec == boost::system::errc::invalid_argument) return error_answer(bad_request(ec.message()));
    if (ec) return error_answer(from_error_code(ec));
    // Tasks of the type that wait for a consumer go back to the engine, which
    // offers them again: now they are pushed.
    parts_.broker->release_type(type);
    return no_content();
  });
}

void api_router::get_type(call& c, const std::string& type) {
  auto t = parts_.registry->find(type);
  if (!t) return c.fail(not_found("no push target for type " + type));
  c.answer(json_answer(200, to_json(*t)));
}

void api_router::get_types(call& c) {
  json all = json::object();
  for (const auto& [type, t] : parts_.registry->all()) all[type] = to_json(t);
  c.answer(json_answer(200, json{{"types", std::move(all)}}));
}

void api_router::delete_type(call& c, const std::string& type) {
  settings(std::move(c.respond), [this, type] {
    boost::system::error_code ec;
    const bool had = parts_.registry->erase(type, ec);
    if (ec) return error_answer(from_error_code(ec));
    if (!had) return error_answer(not_found("no push target for type " + type));
    return no_content();
  });
}

// ------------------------------------------------------------------ dead letters

void api_router::list_dead(call& c) {
  const auto offset = query_size(query_param(c.query, "offset"), 0, max_dead_offset);
  const auto limit = query_size(query_param(c.query, "limit"), 100, 1000);
  if (!offset || !limit)
    return c.fail(bad_request("offset must be an integer from 0 to " +
                              std::to_string(max_dead_offset) +
                              ", limit one from 0 to 1000 (purge or requeue the first letters "
                              "to reach later ones)"));
  blocking(std::move(c.respond), [this, offset = *offset, limit = *limit] {
    boost::system::error_code ec;
    auto letters = parts_.engine->dead_letters(offset, limit, ec);
    if (ec) return error_answer(from_error_code(ec));
    json list = json::array();
    for (const dead_letter& d : letters) {
      json j = task_json(d.task);
      j["error"] = d.error;
      j["died_ms"] = to_epoch_ms(d.died_at);
      list.push_back(std::move(j));
    }
    return json_answer(200,
                       json{{"dead", std::move(list)}, {"total", parts_.engine->stats().dead}});
  });
}

void api_router::requeue_dead(call& c, const std::string& id) {
  if (!c.parse_body(true)) return;
  milliseconds delay{0};
  if (auto e = parse_requeue(c.body, delay)) return c.fail(*e);
  if (forward_foreign(c, id)) return;
  blocking(std::move(c.respond), [this, id, delay] {
    when_spec w;
    w.delay_ms = delay.count();
    boost::system::error_code ec;
    const bool found = parts_.engine->requeue(id, w.due(parts_.engine->now()), ec);
    if (ec) return error_answer(from_error_code(ec));
    if (!found) return error_answer(not_found("no dead letter with id " + id));
    return no_content();
  });
}

void api_router::purge_dead(call& c, const std::string& id) {
  blocking(std::move(c.respond), [this, id] {
    boost::system::error_code ec;
    const bool found = parts_.engine->purge(id, ec);
    if (ec) return error_answer(from_error_code(ec));
    if (!found) return error_answer(not_found("no dead letter with id " + id));
    return no_content();
  });
}

// ------------------------------------------------------------------ operations

void api_router::stats(call& c) {
  const engine_stats s = parts_.engine->stats();
  const lease_broker::counters b = parts_.broker->stats();
  // Per type: the engine's counts, and the consumers' leases (0 for a type
  // that was never reserved).
  const auto broker_types = parts_.broker->type_stats();
  json types = json::object();
  for (const type_metrics& t : parts_.engine->metrics().types) {
    const auto r = broker_types.find(t.type);
    types[t.type] = {{"pending", t.pending},
                     {"ready", t.ready},
                     {"running", t.running},
                     {"reserved", r == broker_types.end() ? std::size_t{0} : r->second.reserved},
                     {"scheduled", t.scheduled},
                     {"fired", t.fired},
                     {"succeeded", t.succeeded},
                     {"failed", t.failed},
                     {"retried", t.retried},
                     {"died", t.died},
                     {"cancelled", t.cancelled}};
  }
  json j = {
      {"pending", s.pending},
      {"ready", s.ready},
      {"running", s.running},
      {"scheduled", s.scheduled},
      {"loaded", s.loaded},
      {"paged", s.paged},
      {"shards_held", s.shards_held},
      {"shards_gained", s.shards_gained},
      {"shards_lost", s.shards_lost},
      {"shards_leaving", s.shards_leaving},
      {"lease_rounds", s.lease_rounds},
      {"fired", s.fired},
      {"succeeded", s.succeeded},
      {"failed", s.failed},
      {"cancelled", s.cancelled},
      {"quarantined", s.quarantined},
      {"retried", s.retried},
      {"timed_out", s.timed_out},
      {"died", s.died},
      {"dead", s.dead},
      {"writes_queued", s.writes_queued},
      {"writes_kept", s.writes_kept},
      {"schedules", s.schedules},
      {"occurrences_made", s.occurrences_made},
      {"occurrences_missed", s.occurrences_missed},
      {"occurrences_lost", s.occurrences_lost},
      {"lateness_p50_us", s.lateness_p50.count()},
      {"lateness_p90_us", s.lateness_p90.count()},
      {"lateness_p99_us", s.lateness_p99.count()},
      {"lateness_max_us", s.lateness_max.count()},
      {"server",
       {{"ready_for_consumers", b.ready},
        {"reserved", b.reserved},
        {"waiting_consumers", b.waiting_consumers},
        {"leases_granted", b.reserved_total},
        {"finished", b.finished},
        {"failed_by_consumers", b.failed},
        {"leases_expired", b.expired},
        {"given_back", b.given_back},
        {"stale_given_back", b.stale},
        {"pushes_in_flight", parts_.pusher->in_flight()},
        {"pushes_queued", parts_.pusher->queued()},
        {"pushes_sent", parts_.pusher->sent()},
        {"pushes_failed", parts_.pusher->failed()},
        {"pushes_withdrawn", parts_.pusher->withdrawn()}}},
      {"types", std::move(types)},
  };
  c.answer(json_answer(200, j));
}

void api_router::upcoming(call& c) {
  const auto limit = query_size(query_param(c.query, "limit"), 20, 1000);
  if (!limit) return c.fail(bad_request("limit must be an integer from 0 to 1000"));
  const std::string type = query_param(c.query, "type").value_or("");
  // A pass over every pending task (engine::upcoming): off the I/O threads.
  blocking(std::move(c.respond), [this, limit = *limit, type] {
    json list = json::array();
    for (const task& t : parts_.engine->upcoming(limit, type)) list.push_back(task_json(t));
    return json_answer(200, json{{"tasks", std::move(list)}});
  });
}

void api_router::healthz(call& c) {
  // From the kept state, on the I/O thread: a probe loop of any rate costs
  // the store nothing and never waits behind it.
  const store_health::state h = parts_.health->now();
  json j{{"status", h.ok ? "ok" : "store_unavailable"}, {"checked_ms_ago", h.age.count()}};
  if (!h.ok) j["reason"] = h.why;
  c.answer(json_answer(h.ok ? 200 : 503, j));
}

void api_router::metrics(call& c) {
  http_answer a;
  a.content_type = "text/plain; version=0.0.4";
  server_metrics m;
  m.engine = parts_.engine->metrics();
  m.broker = parts_.broker->stats();
  m.broker_types = parts_.broker->type_stats();
  m.io_threads = parts_.io_threads;
  if (parts_.forwarder != nullptr)
    m.forward_markers_rejected = parts_.forwarder->markers_rejected();
  a.body = render_metrics(m, *parts_.pusher, parts_.http);
  if (parts_.extra_metrics) parts_.extra_metrics(a.body);
  c.answer(std::move(a));
}

}  // namespace delayq::server
