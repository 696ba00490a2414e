// A small synchronous HTTP/1.1 client for delayqctl: one request per
// connection (Connection: close), the whole exchange bounded by one timeout.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace delayq::ctl {

/// Where a server is: parsed from `http://HOST[:PORT][/PREFIX]`.
struct server_url {
  std::string host;
  std::string port = "80";
  std::string prefix;  ///< path prefix without a trailing slash ("" or "/delayq")

  /// Parses `url`; std::nullopt (with `why` set) when it is not an http:// URL.
  static std::optional<server_url> parse(std::string_view url, std::string& why);
};

/// The answer to one request, or why there is none.
struct http_result {
  bool reached = false;    ///< false: no answer (refused, reset, timed out); see `failure`
  bool timed_out = false;  ///< the exchange did not finish within the timeout
  std::string failure;     ///< why there is no answer, for people
  unsigned status = 0;
  std::string body;
};

/// Sends `method target` (target already percent-encoded, without the
/// prefix) with an optional JSON body and a bearer token (none when empty),
/// and waits for the answer at most `timeout`. Never throws for network
/// errors: they come back in the result.
http_result http_request(const server_url& server, std::string_view method,
                         const std::string& target, const std::string& token,
                         const std::optional<std::string>& json_body,
                         std::chrono::milliseconds timeout);

}  // namespace delayq::ctl
