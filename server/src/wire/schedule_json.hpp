// wire/schedule_json.hpp - a recurring schedule as the JSON the HTTP API
// answers with (docs/server.md, "Schedules").
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <vector>

#include "delayq/schedule.hpp"

namespace delayq::server {

/// {"id","type","payload","cron"|"every_ms","timezone"?,"start_ms"?,
/// "end_ms"?,"missed","priority","ttr_ms","conflict"}: the fields of the PUT
/// body, those left out of it at their defaults ("timezone" only with
/// "cron": "UTC" when none was given). Serialise with dump_json() (the
/// payload may hold bytes that are not UTF-8). Thread safety: pure.
nlohmann::json schedule_json(const delayq::schedule& s);

/// The same, with "next_due_ms": the occurrences given, as UTC milliseconds.
nlohmann::json schedule_json(const delayq::schedule& s,
                             const std::vector<std::chrono::system_clock::time_point>& next);

}  // namespace delayq::server
