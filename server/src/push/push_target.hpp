// push/push_target.hpp - where the tasks of a push type are sent, and how.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace delayq::server {

/// The HTTP endpoint a push type's tasks are POSTed to (PUT /v1/types/{type}).
///
/// Thread safety: a plain value.
struct push_target {
  std::string url;                           ///< An http:// URL (parse_http_url accepts it).
  std::chrono::milliseconds timeout{10000};  ///< Whole request: resolve to last response byte.
  std::size_t concurrency = 64;              ///< Most requests in flight for the type.

  friend bool operator==(const push_target&, const push_target&) = default;
};

/// Limits of the JSON form (docs/server.md, "Push").
inline constexpr std::int64_t min_push_timeout_ms = 1;
inline constexpr std::int64_t max_push_timeout_ms = 600000;
inline constexpr std::size_t min_push_concurrency = 1;
inline constexpr std::size_t max_push_concurrency = 10000;

/// {"push_url", "timeout_ms", "concurrency"}: the form of PUT /v1/types/{type}
/// and of the stored setting.
///
/// Thread safety: a pure function.
nlohmann::json to_json(const push_target& t);

/// Reads the JSON form as docs/server.md says: an object with `push_url`
/// (required, a string parse_http_url accepts), `timeout_ms` (integer
/// 1-600000, default 10000) and `concurrency` (integer 1-10000, default 64).
/// An unknown field or a wrong type is refused, naming the field. On refusal
/// returns nothing and sets `why` to a sentence fit for a 400 response.
///
/// Thread safety: a pure function.
std::optional<push_target> push_target_from_json(const nlohmann::json& j, std::string& why);

}  // namespace delayq::server
