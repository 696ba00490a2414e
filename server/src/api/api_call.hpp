// api/api_call.hpp - one request as api_router's handlers see it: private
// to api_router*.cpp (the routes are split over two files by subject).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "api/api_router.hpp"
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

/// 204 No Content.
inline http_answer no_content() {
  http_answer a;
  a.status = 204;
  return a;
}

}  // namespace delayq::server
