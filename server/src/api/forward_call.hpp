// api/forward_call.hpp - under --cluster, a call on a task that another
// instance owns: find the owner's address, forward the call there once, and
// answer with the owner's answer or with what went wrong (docs/scale-out.md,
// "Calls on any instance").
#pragma once

#include <atomic>
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "cluster/peer_directory.hpp"
#include "cluster/peer_forwarder.hpp"
#include "http/http_server.hpp"

namespace delayq::server {

/// What a call_forwarder may do at once, and for how long.
struct forward_limits {
  /// The whole forward: the address lookup, a second try on a new address,
  /// and the owner's answer.
  std::chrono::milliseconds timeout{15000};
  /// Forwards in flight; more get 503 busy at once (a stalled owner holds
  /// a socket per call until the timeout).
  std::size_t max_in_flight = 1024;
};

/// Forwards calls to their owner. An address the directory's map holds is
/// used at once; a miss (a store read) runs on `pool`. The exchange is
/// asynchronous (peer_forwarder), so no thread waits for the owner.
///
/// Answers: the owner's (with `X-Delayq-Instance: OWNER` added); 421
/// not_owner when the owner announced no address; 503 owner_unreachable
/// when the call could not be sent, or the owner refused it as it shuts
/// down (nothing was done; a GET answers from `local` instead); 503
/// outcome_unknown when it was sent and no answer came in time; 503 busy
/// past max_in_flight.
///
/// Thread safety: forward() may be called from any thread, concurrently.
/// `peers`, `fwd` and `pool` must outlive every forward (join the pool and
/// stop the I/O before destroying them).
class call_forwarder {
 public:
  call_forwarder(peer_directory& peers, const peer_forwarder& fwd, boost::asio::thread_pool& pool,
                 forward_limits limits);

  /// Forwards `req` (a call on task `id`) to instance `owner` and answers
  /// through `respond`, once. `local` (may be null): the answer to give
  /// instead when the call could not be sent (a read this instance can
  /// answer from the store); it runs on the pool.
  void forward(std::string owner, http_request req, std::string id, http_respond respond,
               std::function<http_answer()> local);

  /// This instance's name.
  const std::string& instance() const noexcept { return fwd_.instance(); }

 private:
  struct state;  // one forward (forward_call.cpp)
  // On the pool: finds the address (reading the store again when `reread`).
  void send(const std::shared_ptr<state>& f, bool reread);
  void send_to(const std::shared_ptr<state>& f, std::string url);
  void on_answer(const std::shared_ptr<state>& f, http_answer a, bool sent,
                 boost::system::error_code ec);
  // Answers once (later calls do nothing); `reached`: the call may have
  // been carried out by the owner, so `local` must not answer instead.
  void answer(const std::shared_ptr<state>& f, http_answer a, bool reached);

  peer_directory& peers_;
  const peer_forwarder& fwd_;
  boost::asio::thread_pool& pool_;
  forward_limits limits_;
  std::atomic<std::size_t> in_flight_{0};
};

}  // namespace delayq::server
