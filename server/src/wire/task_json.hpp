// wire/task_json.hpp - a task as the JSON the HTTP API and push targets see.
#pragma once

#include <nlohmann/json.hpp>

#include "delayq/task.hpp"

namespace delayq::server {

/// The JSON form of a task: {"id","type","payload","due_ms","attempts",
/// "trigger_count","signals","priority","ttr_ms"}, with `due_ms` in
/// milliseconds since the Unix epoch (delayq::to_epoch_ms); trigger_count 0
/// is an ordinary task; ttr_ms 0 leaves the lease to the reserving consumer.
///
/// The payload goes in as its raw bytes. A library user may have stored bytes
/// that are not valid UTF-8, which nlohmann::json's default dump() throws on;
/// always serialise with dump_json() (wire/dump_json.hpp), never with
/// json::dump() directly.
///
/// Thread safety: a pure function.
nlohmann::json task_json(const delayq::task& t);

}  // namespace delayq::server
