// cluster/peer_forwarder.hpp - sends an API call on to the instance that owns
// the task's shard, and brings its answer back (docs/scale-out.md, "Calls on
// any instance").
#pragma once

#include <utility>  // before any Boost.Asio header: Boost 1.74 + C++20 needs it

#include <boost/system/error_code.hpp>
#include <chrono>
#include <string>
#include <string_view>

#include "http/http_server.hpp"

namespace delayq::server {

/// Forwards one request to another instance of the cluster, over a fresh
/// HTTP/1.1 connection, and waits for its answer. The call goes once: a
/// forwarded request carries `X-Delayq-Forwarded-By: <this instance>`, and
/// an instance never forwards such a request again, so two instances that
/// disagree on the owner (a hand-over under way) answer not_owner instead
/// of sending the call back and forth.
///
/// Example:
/// \code
///   delayq::server::peer_forwarder fwd{"a", std::chrono::seconds{15}};
///   bool sent = false;
///   http_answer a = fwd.forward("http://10.0.0.6:7700", req, sent, ec);
/// \endcode
///
/// Thread safety: forward() may be called from any number of threads at
/// once; each call blocks its thread (run it off the I/O threads) on an
/// io_context of its own.
class peer_forwarder {
 public:
  /// The header a forwarded request carries.
  static constexpr std::string_view forwarded_header = "X-Delayq-Forwarded-By";

  /// `instance`: this instance's name (sent in forwarded_header). `timeout`:
  /// the most a forward() takes, from connecting to the answer's last byte.
  peer_forwarder(std::string instance, std::chrono::milliseconds timeout);

  /// Sends `req` (its method, target, body, Content-Type and Authorization)
  /// to the host and port of `url` and returns the answer (status, body,
  /// Content-Type, Retry-After and Location). Errors: a bad `url`
  /// (boost::system::errc::invalid_argument), and what resolving,
  /// connecting, writing or reading met (boost::asio::error::timed_out
  /// past the timeout). `sent` tells, on an error, whether any of the
  /// request may have reached the peer (after connecting): then the call
  /// may have been carried out there.
  http_answer forward(const std::string& url, const http_request& req, bool& sent,
                      boost::system::error_code& ec) const;

  /// Whether `req` was forwarded here by another instance.
  static bool is_forwarded(const http_request& req);

  const std::string& instance() const noexcept { return instance_; }

 private:
  std::string instance_;
  std::chrono::milliseconds timeout_;
};

}  // namespace delayq::server
