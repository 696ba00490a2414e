// http_server: HTTP/1.1 with keep-alive on Boost.Beast, on the caller's
// io_context: an acceptor and one session object per connection, each on a
// strand, with no thread per connection. It knows nothing of the API: every
// request goes to one handler, which answers through a callback, from any
// thread, when it is ready (a durable write, a long poll).
//
// It enforces the transport limits of docs/server.md: connections open at
// once, header size (431), body size (413), the time a request may take to
// arrive (408, against slow-drip clients), a caller's check of the headers
// before any body is read (http_limits::check_header), and during a drain it
// answers 503 and closes.
#pragma once

#include <array>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "io/connection_home.hpp"

namespace delayq::server {

using http_request = boost::beast::http::request<boost::beast::http::string_body>;
/// A request's start line and headers, before its body is read.
using http_request_header = boost::beast::http::request_header<>;

/// What a handler answers.
struct http_answer {
  unsigned status = 200;
  std::string body;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
  /// Called once the answer was written (true) or could not be (false: the
  /// client went away), on the session's strand.
  std::function<void(bool written)> after_write;
};

/// Thread safety: call exactly once, from any thread.
using http_respond = std::function<void(http_answer)>;

/// Tells a handler that the client went away before it was answered (a
/// closed long poll), so it can stop waiting and give back what it held.
/// Thread safety: every member is safe from any thread.
class http_gone_signal {
 public:
  /// Calls `f` once the client is gone: later, or at once if it is gone
  /// already. Replaces an earlier `f`.
  void on_gone(std::function<void()> f);
  /// The client is gone (called by the session).
  void fire();

 private:
  std::mutex m_;
  std::function<void()> f_;
  bool gone_ = false;
};

/// Called on a session's strand for each request. `gone` is set for the
/// requests http_limits::watch_disconnect picks, else null.
using http_handler =
    std::function<void(http_request&&, http_respond, std::shared_ptr<http_gone_signal> gone)>;

struct http_limits {
  /// Connections open at once; one past it is closed as soon as it is
  /// accepted, unanswered, and counted (refused_connections()).
  std::size_t max_connections = 4096;
  std::size_t max_body = 8 << 20;
  std::size_t max_header = 8 << 10;
  std::chrono::milliseconds header_timeout{10'000};  ///< Also the keep-alive idle time.
  std::chrono::milliseconds body_timeout{30'000};
  std::chrono::milliseconds write_timeout{30'000};
  /// Requests during which the session watches the socket, so a client that
  /// goes away is noticed before the answer is written (long polls).
  std::function<bool(const http_request&)> watch_disconnect;
  /// Decides on a request from its headers, before its body is read: an
  /// answer refuses it (the body is never read, and a connection with a
  /// body on the way is closed after the answer); nullopt reads on. Called
  /// on the session's strand.
  std::function<std::optional<http_answer>(const http_request_header&)> check_header;
  /// How long a refused connection's unread body is drained after the
  /// answer before the socket closes: closing on unread bytes sends a reset,
  /// which may destroy the answer before the client reads it.
  std::chrono::milliseconds linger{2'000};
};

/// Where a new connection's handlers run: an executor (the connection gets
/// a strand of it), and what the connection holds until it closes (the
/// chooser counts its connections by it; may be null). delayq-server gives
/// each connection the I/O thread with the fewest, so that a connection's
/// requests are read, handled and answered on one thread, and a lone one
/// on the thread its store answers on (server_app.hpp).
using session_home = connection_home;
/// Called once per connection, when it is accepted.
using session_executor_fn = std::function<session_home()>;

/// Thread safety: listen() and start() before running the io_context; the
/// rest from any thread.
class http_server {
 public:
  /// Connections run on `io` unless `session_executor` picks their executor.
  http_server(boost::asio::io_context& io, http_handler handler, http_limits limits,
              session_executor_fn session_executor = nullptr);
  ~http_server();
  http_server(const http_server&) = delete;
  http_server& operator=(const http_server&) = delete;

  /// Binds and listens; returns the bound endpoint (port 0 picks one).
  /// Throws boost::system::system_error.
  boost::asio::ip::tcp::endpoint listen(const boost::asio::ip::tcp::endpoint& at);
  /// Starts accepting connections.
  void start();
  /// Stops accepting; later requests on open connections get 503 draining.
  void drain();
  /// Requests being handled (read, not yet answered and written).
  std::size_t in_flight() const noexcept { return in_flight_.load(std::memory_order_acquire); }
  /// Answers written with a status of class `cls` (1 to 5: 1xx to 5xx).
  std::uint64_t answered(unsigned cls) const noexcept {
    return cls >= 1 && cls <= 5 ? answered_[cls - 1].load(std::memory_order_relaxed) : 0;
  }
  /// Connections open now.
  std::size_t connections() const noexcept { return connections_->load(std::memory_order_relaxed); }
  /// Connections closed at once because max_connections were open.
  std::uint64_t refused_connections() const noexcept {
    return refused_.load(std::memory_order_relaxed);
  }
  /// Closes every connection (after a drain).
  void close_all();

  struct session;  // one connection (http_server.cpp)

 private:
  friend struct session;
  void accept();
  void accept_later();

  boost::asio::io_context& io_;
  session_executor_fn session_executor_;
  http_handler handler_;
  http_limits limits_;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer accept_pause_;  // after an accept error, on the acceptor's strand
  std::chrono::steady_clock::time_point last_accept_log_{};
  std::atomic<bool> draining_{false};
  std::atomic<std::size_t> in_flight_{0};
  // Sessions alive. Shared with them: a session can end after the server
  // (its last handler destroyed with the io_context).
  std::shared_ptr<std::atomic<std::size_t>> connections_ =
      std::make_shared<std::atomic<std::size_t>>(0);
  std::atomic<std::uint64_t> refused_{0};
  std::array<std::atomic<std::uint64_t>, 5> answered_{};  // by status class
  std::mutex sessions_mutex_;
  std::vector<std::weak_ptr<session>> sessions_;
};

/// `{"error": name, "message": message}` as an answer.
http_answer error_answer(unsigned status, const std::string& name, const std::string& message);

}  // namespace delayq::server
