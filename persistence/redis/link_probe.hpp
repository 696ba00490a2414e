// persistence/redis/link_probe.hpp - is the Redis server still reachable?
// A side dial, made while a call waits for a late reply. Internal.
//
// A reply that is late does not say why: the server may be busy (a long
// fsync, a slow script) or the network path to it may be gone. Waiting out
// command_timeout (5 s by default) in both cases hangs every caller of an
// instance cut off from Redis (issue 33). So a connection whose reply is
// late by link_check dials the server once more on the side, without
// blocking, and bounded by connect_timeout:
// - the dial fails (no route, refused, reset, or no answer within
//   connect_timeout): the server cannot be reached, and the waiting call
//   fails now, as if command_timeout had passed;
// - the dial connects: the server's host is there, so the call keeps
//   waiting, and checks again after another link_check.
// Only the TCP (or Unix socket) handshake is asked for, not a reply from
// Redis: the kernel completes it even while the server process is paused
// or busy, and a busy server must not be taken for a lost one.
#pragma once

#include <chrono>
#include <string>

#include "connection.hpp"

namespace delayq::detail::redis {

/// One side dial at a time. Not thread-safe: its owner serializes the calls.
class link_probe {
 public:
  enum class result { pending, reachable, unreachable };

  link_probe() = default;
  ~link_probe() { reset(); }
  link_probe(const link_probe&) = delete;
  link_probe& operator=(const link_probe&) = delete;

  /// Starts a non-blocking dial of `opts`' server, bounded by its
  /// connect_timeout. A dial that fails at once (no route) is decided here:
  /// check() then answers `unreachable`.
  void start(const redis_connection_options& opts);
  bool running() const noexcept { return running_; }
  /// The socket to poll for POLLOUT while pending, else -1.
  int fd() const noexcept;
  /// When a pending dial gives up.
  std::chrono::steady_clock::time_point deadline() const noexcept { return deadline_; }
  /// The dial's result as of `now` (without waiting); a decided one ends
  /// the dial, so the next start() begins afresh.
  result check(std::chrono::steady_clock::time_point now);
  /// Why the last dial failed.
  const std::string& why() const noexcept { return why_; }
  void reset() noexcept;

 private:
  result decide(result r, std::string why);

  context_ptr ctx_;
  bool running_ = false;
  bool failed_at_once_ = false;
  std::string why_;
  std::chrono::milliseconds timeout_{0};
  std::chrono::steady_clock::time_point deadline_{};
};

/// How long a reply may be late before the link is checked, and how often
/// after that: `opts.link_check`, or never when it is zero.
inline bool link_check_due(const redis_connection_options& opts,
                           std::chrono::steady_clock::duration waited) {
  return opts.link_check.count() > 0 && waited >= opts.link_check;
}

}  // namespace delayq::detail::redis
