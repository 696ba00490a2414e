// api/api_call.hpp - one request as api_router's handlers see it: private
// to api_router*.cpp (the routes are split over several files by subject).
#pragma once

#include <charconv>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "api/api_router.hpp"
#include "wire/dump_json.hpp"
#include "wire/request_codec.hpp"

namespace delayq::server {

// One request: its parts, split once, and the way to answer it.
struct api_router::call {
  http_request req;
  http_respond respond;
  std::shared_ptr<http_gone_signal> gone;  // long polls only
  std::string path;                        // percent-encoded, without the query
  std::string query;
  std::vector<std::string> seg;  // decoded path segments
  nlohmann::json body;

  void answer(http_answer a) { std::exchange(respond, nullptr)(std::move(a)); }
  void fail(const api_error& e) { answer(error_answer(e)); }
  // Parses the body; false (and answered) when it is not JSON.
  bool parse_body(bool empty_is_object = false) {
    if (auto e = parse_json(req.body(), body, empty_is_object)) {
      fail(*e);
      return false;
    }
    return true;
  }
};

/// A query parameter that must be a whole number up to `max`; `dflt` when
/// absent, nothing when malformed or out of range.
inline std::optional<std::size_t> query_size(const std::optional<std::string>& s, std::size_t dflt,
                                             std::size_t max) {
  if (!s) return dflt;
  std::size_t v = 0;
  auto [p, ec] = std::from_chars(s->data(), s->data() + s->size(), v);
  if (ec != std::errc{} || p != s->data() + s->size() || v > max) return std::nullopt;
  return v;
}

/// A POST of `body` to `target` made for another instance under --cluster
/// (a part of a batch), carrying the caller's token from `from`.
inline http_request sub_call(const http_request& from, const char* target,
                             const nlohmann::json& body) {
  http_request req{boost::beast::http::verb::post, target, 11};
  if (const auto auth = from.find(boost::beast::http::field::authorization); auth != from.end())
    req.set(boost::beast::http::field::authorization, auth->value());
  req.set(boost::beast::http::field::content_type, "application/json");
  req.body() = dump_json(body);
  req.prepare_payload();
  return req;
}

/// 204 No Content.
inline http_answer no_content() {
  http_answer a;
  a.status = 204;
  return a;
}

}  // namespace delayq::server
