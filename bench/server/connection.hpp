// connection.hpp - the load client's connections: one keep-alive TCP socket
// with a read buffer, and a queue client on top of it for each protocol
// (beanstalkd's text protocol, delayq-server's HTTP/1.1 + JSON).
//
// Everything here runs on one io_context thread, as C++20 coroutines; a
// connection is used by one coroutine at a time (no pipelining).
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace delayq::bench_server {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

/// A system under test, from `--target NAME=beanstalk://HOST:PORT` or
/// `NAME=http://HOST:PORT`.
struct target {
  std::string name;
  enum class protocol { beanstalk, delayq } proto = protocol::delayq;
  std::string host;
  std::uint16_t port = 0;
  std::string token;  ///< delayq only: sent as `Authorization: Bearer` when set
};

/// Parses `NAME=beanstalk://HOST:PORT` or `NAME=http://HOST:PORT`; throws
/// std::invalid_argument with the reason.
target parse_target(std::string_view spec);

/// One TCP connection: writes whole requests, reads lines and counted bytes
/// through a buffer of its own. Views it returns stay valid until the next
/// read. Errors are thrown (boost::system::system_error, or
/// std::runtime_error when the peer closes mid-answer).
class stream {
 public:
  explicit stream(asio::any_io_executor ex);
  asio::awaitable<void> connect(const tcp::endpoint& ep);
  asio::awaitable<void> write(std::string_view data);
  /// The bytes up to `delim` (excluded); consumes them and `delim`.
  asio::awaitable<std::string_view> read_until(std::string_view delim);
  /// Exactly `n` bytes; consumes them.
  asio::awaitable<std::string_view> read_exact(std::size_t n);
  void close() noexcept;
  bool is_open() const noexcept { return socket_.is_open(); }

 private:
  asio::awaitable<void> fill();  // reads at least one more byte

  tcp::socket socket_;
  std::vector<char> buf_;
  std::size_t begin_ = 0;  // first unconsumed byte
  std::size_t end_ = 0;    // one past the last byte read
};

/// An answer of delayq-server: the status, the body (de-chunked), and
/// whether the server closes the connection after it.
struct http_response {
  int status = 0;
  std::string body;
  bool close = false;  // the server said Connection: close
};

/// One keep-alive HTTP/1.1 connection to delayq-server (`Authorization:
/// Bearer` when the target has a token). request() reconnects when the
/// server closed the last connection; used by the queue client below and by
/// delayq-bench-scaleout for calls the queue interface has no verb for
/// (batches, stats).
class http_connection {
 public:
  http_connection(const target& t, asio::any_io_executor ex);
  asio::awaitable<void> connect();
  /// `method path` with `body` as application/json (sent even when empty).
  asio::awaitable<http_response> request(std::string_view method, std::string_view path,
                                         std::string_view body);
  void close() noexcept { stream_.close(); }
  std::uint64_t reconnects() const noexcept { return reconnects_; }

 private:
  asio::awaitable<http_response> read_response();

  tcp::endpoint ep_;
  stream stream_;
  std::string host_header_;
  std::string auth_header_;
  std::string req_;
  std::uint64_t reconnects_ = 0;
};

/// A job as a consumer holds it between reserve and delete/finish.
struct job {
  std::string id;
  std::string lease;  ///< delayq only
  std::string payload;
};

/// One connection to a queue, spoken in its own protocol. The calls throw
/// std::runtime_error naming the request and the answer when the answer is
/// not the expected one.
class queue_client {
 public:
  virtual ~queue_client() = default;
  virtual asio::awaitable<void> connect() = 0;
  /// Adds a job of `type` (a beanstalkd tube) due in `delay_ms`; returns
  /// once the server acknowledged it. beanstalkd counts delays in whole
  /// seconds: the delay is rounded to the nearest second.
  virtual asio::awaitable<void> put(const std::string& type, std::string_view payload,
                                    std::int64_t delay_ms) = 0;
  /// Reserves one job of `type`, waiting up to `wait_ms` (beanstalkd: whole
  /// seconds, rounded up); false when none came.
  virtual asio::awaitable<bool> reserve(const std::string& type, int wait_ms, job& out) = 0;
  /// Deletes (beanstalkd) or finishes (delayq) a reserved job.
  virtual asio::awaitable<void> remove(const job& j) = 0;
  virtual void close() noexcept = 0;
};

std::unique_ptr<queue_client> make_client(const target& t, asio::any_io_executor ex);

}  // namespace delayq::bench_server
