// api/task_json.hpp - a task as the JSON the HTTP API and push targets see.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "delayq/task.hpp"

namespace delayq::server {

/// The JSON form of a task: {"id","type","payload","due_ms","attempts",
/// "trigger_count","signals"}, with `due_ms` in milliseconds since the Unix
/// epoch (delayq::to_epoch_ms); trigger_count 0 is an ordinary task.
///
/// The payload goes in as its raw bytes. A library user may have stored bytes
/// that are not valid UTF-8, which nlohmann::json's default dump() throws on;
/// always serialise with dump_json(), never with json::dump() directly.
///
/// Thread safety: a pure function.
nlohmann::json task_json(const delayq::task& t);

/// Serialises `j` compactly, replacing invalid UTF-8 with U+FFFD:
/// `j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)`.
/// Every JSON the server writes goes through this one call, so no response
/// or push can fail (or throw) because of a payload's bytes.
///
/// Thread safety: a pure function.
std::string dump_json(const nlohmann::json& j);

}  // namespace delayq::server
