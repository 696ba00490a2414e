// http/connection_pool.hpp - idle keep-alive HTTP/1.1 client connections,
// per host:port, for the server's outgoing calls (push deliveries and calls
// forwarded to another instance of a cluster).
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/system/error_code.hpp>
#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace delayq::server {

/// One TCP connection to a host:port. It keeps the strand it was made with
/// for its whole life: the stream's internal timer may still have a handler
/// queued on that strand when the connection goes back to the pool, and the
/// next request on it must run on the same strand to stay ordered after it.
struct pooled_connection {
  using strand_type = boost::asio::strand<boost::asio::any_io_executor>;
  explicit pooled_connection(const strand_type& s)
      : strand(s), stream(boost::asio::any_io_executor{s}) {}
  /// While set, closing the connection resets it (SO_LINGER 0): the kernel
  /// drops what the peer has not received yet, instead of delivering it
  /// later (a partition that heals), after the caller gave the call up and
  /// answered or retried it (docs/faults.md, fix 16). Set before a request
  /// is written (the stream closes the socket itself at its deadline);
  /// cleared once a whole answer came, and by connection_pool::put().
  void reset_on_close(bool on) {
    boost::system::error_code ignored;
    stream.socket().set_option(boost::asio::ip::tcp::socket::linger(on, 0), ignored);
  }

  strand_type strand;
  boost::beast::tcp_stream stream;
  boost::beast::flat_buffer buffer;
  std::chrono::steady_clock::time_point idle_since{};
};

/// Idle connections by "host:port", most recently used first.
///
/// A pooled connection may be closed by the peer just as a request is
/// written on it (the peer's idle timeout fired while it sat here). take()
/// lowers the odds: it hands out only connections idle for less than
/// `idle_timeout`, and none the peer has already closed (a non-blocking
/// peek sees the end of stream). The window that remains is the caller's to
/// handle: a request that fails on a reused connection before any byte of an
/// answer (peer_closed()) may be sent again on a fresh one.
///
/// Thread safety: every member may be called from any thread, concurrently.
/// A connection is touched only on its strand once it is out of the pool.
class connection_pool {
 public:
  connection_pool(std::size_t max_idle_per_host, std::chrono::milliseconds idle_timeout);
  /// Calls close_all().
  ~connection_pool();
  connection_pool(const connection_pool&) = delete;
  connection_pool& operator=(const connection_pool&) = delete;

  /// An open idle connection to `key`, or null.
  std::unique_ptr<pooled_connection> take(const std::string& key);
  /// Keeps `c` (idle: no operation pending, its answer read whole) for
  /// `key`, its reset_on_close() cleared; closes it when the host has
  /// max_idle_per_host already, or after close_all(). Called on c's strand.
  /// At most once per idle_timeout it also closes the expired connections
  /// of every host.
  void put(const std::string& key, std::unique_ptr<pooled_connection> c);
  /// Closes every idle connection, and those put() later.
  void close_all();

  /// Whether `ec`, met on a reused connection before any byte of an answer
  /// arrived, says the peer had closed it.
  static bool peer_closed(const boost::system::error_code& ec);

 private:
  const std::size_t max_idle_per_host_;
  const std::chrono::milliseconds idle_timeout_;
  std::mutex mutex_;
  bool closed_ = false;
  std::chrono::steady_clock::time_point swept_at_{};  // when put() last closed expired ones
  std::map<std::string, std::vector<std::unique_ptr<pooled_connection>>, std::less<>> idle_;
};

}  // namespace delayq::server
