// wire/dump_json.hpp - how every JSON the server writes becomes text.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace delayq::server {

/// Serialises `j` compactly, replacing invalid UTF-8 with U+FFFD:
/// `j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)`.
/// Every JSON the server writes goes through this one call, so no response
/// or push can fail (or throw) because of a payload's bytes.
///
/// Thread safety: a pure function.
std::string dump_json(const nlohmann::json& j);

}  // namespace delayq::server
