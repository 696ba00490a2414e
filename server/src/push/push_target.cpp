#include "push/push_target.hpp"

#include "wire/http_url.hpp"

namespace delayq::server {

nlohmann::json to_json(const push_target& t) {
  return nlohmann::json{{"push_url", t.url},
                        {"timeout_ms", static_cast<std::int64_t>(t.timeout.count())},
                        {"concurrency", t.concurrency}};
}

namespace {

// Reads an integer field within [lo, hi]; a float such as 1.5 (or 10.0) is a
// wrong type, not something to round silently.
bool read_int(const nlohmann::json& v, std::string_view name, std::int64_t lo, std::int64_t hi,
              std::int64_t& out, std::string& why) {
  if (!v.is_number_integer()) {
    why = std::string(name) + ": must be an integer";
    return false;
  }
  bool in_range = false;
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    in_range = u <= static_cast<std::uint64_t>(hi) && static_cast<std::int64_t>(u) >= lo;
    if (in_range) out = static_cast<std::int64_t>(u);
  } else {
    const auto s = v.get<std::int64_t>();
    in_range = s >= lo && s <= hi;
    if (in_range) out = s;
  }
  if (!in_range) {
    why = std::string(name) + ": must be between " + std::to_string(lo) + " and " +
          std::to_string(hi);
    return false;
  }
  return true;
}

}  // namespace

std::optional<push_target> push_target_from_json(const nlohmann::json& j, std::string& why) {
  if (!j.is_object()) {
    why = "the push target must be a JSON object";
    return std::nullopt;
  }
  push_target t;
  bool have_url = false;
  for (const auto& [key, value] : j.items()) {
    if (key == "push_url") {
      if (!value.is_string()) {
        why = "push_url: must be a string";
        return std::nullopt;
      }
      t.url = value.get<std::string>();
      std::string url_why;
      if (!parse_http_url(t.url, url_why)) {
        why = "push_url: " + url_why;
        return std::nullopt;
      }
      have_url = true;
    } else if (key == "timeout_ms") {
      std::int64_t ms = 0;
      if (!read_int(value, key, min_push_timeout_ms, max_push_timeout_ms, ms, why)) {
        return std::nullopt;
      }
      t.timeout = std::chrono::milliseconds{ms};
    } else if (key == "concurrency") {
      std::int64_t n = 0;
      if (!read_int(value, key, static_cast<std::int64_t>(min_push_concurrency),
                    static_cast<std::int64_t>(max_push_concurrency), n, why)) {
        return std::nullopt;
      }
      t.concurrency = static_cast<std::size_t>(n);
    } else {
      why = "unknown field \"" + key + "\"";
      return std::nullopt;
    }
  }
  if (!have_url) {
    why = "push_url: required";
    return std::nullopt;
  }
  return t;
}

}  // namespace delayq::server
