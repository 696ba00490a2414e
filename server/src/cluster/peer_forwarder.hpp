// cluster/peer_forwarder.hpp - sends an API call on to the instance that owns
// the task's shard, and brings its answer back (docs/scale-out.md, "Calls on
// any instance").
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/system/error_code.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "cluster/forward_marker.hpp"
#include "http/http_server.hpp"

namespace delayq::server {

class connection_pool;

/// Forwards one request to another instance of the cluster over HTTP/1.1,
/// asynchronously: no thread waits for the answer, so a stalled owner holds
/// sockets, not threads. Connections are kept alive and pooled per peer
/// (http/connection_pool.hpp). A call goes once more, on a fresh connection,
/// when a pooled one fails in a way that leaves it without effect: the peer
/// closed it before the request was written whole, or, for a GET, before any
/// byte of an answer. Any other call that gets no answer is reported with
/// `sent` set: it may have been carried out, and is not sent twice. An
/// answer late by 250 ms makes the call dial the peer on the side (and
/// again every 250 ms): when that dial fails within 1 s, the peer cannot be
/// reached, and the call ends at once with the dial's error rather than at
/// its deadline; a peer that is only slow still takes the dial.
///
/// The call goes once: a forwarded request carries `X-Delayq-Forwarded-By`,
/// a marker of this instance that only a member can make
/// (cluster/forward_marker.hpp), and an instance never forwards a request
/// whose marker verifies again, so two instances that disagree on the owner
/// (a hand-over under way) answer not_owner instead of sending the call back
/// and forth. A marker the call arrived with is never passed on: each
/// forward carries this instance's own.
///
/// Example:
/// \code
///   delayq::server::forward_marker marker{key};
///   delayq::server::peer_forwarder fwd{io.get_executor(), "a", marker};
///   fwd.async_forward("http://10.0.0.6:7700", req, steady_clock::now() + 15s,
///                     [](http_answer a, bool sent, boost::system::error_code ec) { ... });
/// \endcode
///
/// Thread safety: async_forward() may be called from any thread, any number
/// of times at once; each exchange runs on the executor.
class peer_forwarder {
 public:
  using clock = std::chrono::steady_clock;
  /// The answer (when `ec` is clear); `sent`: whether any of the request may
  /// have reached the peer (it connected, or a pooled connection was written
  /// on), so that on an error the call may have been carried out there.
  using handler = std::function<void(http_answer answer, bool sent, boost::system::error_code ec)>;

  /// `instance`: this instance's name (in the marker). `marker` makes and
  /// checks the markers; it must outlive the forwarder.
  peer_forwarder(boost::asio::any_io_executor ex, std::string instance,
                 const forward_marker& marker);
  /// Closes the idle connections; forwards in flight end on the executor.
  ~peer_forwarder();
  peer_forwarder(const peer_forwarder&) = delete;
  peer_forwarder& operator=(const peer_forwarder&) = delete;

  /// Sends `req` (its method, target, body, Content-Type and Authorization)
  /// to the host and port of `url` and calls `done` once, on the executor,
  /// with the answer (status, body, Content-Type, Retry-After and
  /// Location). `deadline` bounds resolving, connecting, writing and
  /// reading together (boost::asio::error::timed_out past it). Other
  /// errors: a bad `url` (boost::system::errc::invalid_argument), and what
  /// the network met.
  void async_forward(const std::string& url, const http_request& req, clock::time_point deadline,
                     handler done) const;

  /// Whether `req` was forwarded here by a member: its marker verifies
  /// (forward_marker::is_forwarded). One that does not is removed from
  /// `req` and counted (markers_rejected()); the call is then a client's.
  bool is_forwarded(http_request& req) const { return marker_.is_forwarded(req); }

  /// Markers is_forwarded() ignored since the start (/metrics).
  std::uint64_t markers_rejected() const noexcept { return marker_.rejected(); }

  const std::string& instance() const noexcept { return instance_; }

 private:
  boost::asio::any_io_executor ex_;
  std::string instance_;
  const forward_marker& marker_;
  std::shared_ptr<connection_pool> pool_;  // shared with the forwards in flight
};

}  // namespace delayq::server
