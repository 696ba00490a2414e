// beanstalk/listener.hpp - the beanstalk protocol's listening sockets
// (--beanstalk-listen ADDR:PORT or unix:PATH), on the server's I/O threads:
// one Asio acceptor per address, one session per connection, no thread per
// connection.
//
// beanstalk has no authentication, so who may connect is decided here
// (docs/beanstalk.md, "Security"): a unix socket (file permissions), or a
// TCP peer on loopback, or inside a --beanstalk-allow block. Any other peer
// is closed at once. At --max-connections, a new connection gets the place
// of the connection idle the longest (one that holds no reservation, waits
// in no reserve and has no command under way), which is closed; when none
// is idle, the new one is closed at once.
#pragma once

#include <atomic>
#include <boost/asio/basic_socket_acceptor.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "beanstalk/job_service.hpp"
#include "beanstalk/session.hpp"
#include "io/connection_home.hpp"
#include "security/ip_block.hpp"

namespace delayq::server::beanstalk {

/// Thread safety: listen() and start() from one thread before the I/O
/// threads run; set_service() and close() from any thread.
class listener {
 public:
  /// Where a session runs: a strand of the executor (the session holds the
  /// pointer until it ends, for the chooser's count; may be null).
  using session_home = connection_home;

  /// The acceptors run on `ex`; each session on a strand of what
  /// `session_executor` returns (of `ex` when it is null), called once per
  /// connection, when it is accepted.
  listener(boost::asio::io_context::executor_type ex, std::vector<ip_block> allow,
           std::size_t max_connections, std::size_t max_job_size, connection_limits limits = {},
           std::function<session_home()> session_executor = nullptr);
  ~listener();
  listener(const listener&) = delete;
  listener& operator=(const listener&) = delete;

  /// Binds and listens on `spec`: "ADDR:PORT" (port 0: any free one) or
  /// "unix:PATH". A socket file left at PATH by a server that is gone is
  /// replaced; one a live server answers on, or any other file, is not.
  /// Returns the bound address as `spec` would name it. Throws
  /// std::invalid_argument for a malformed spec and std::runtime_error
  /// (naming the address) when it cannot listen.
  std::string listen(const std::string& spec);

  /// Accepts on every address given to listen().
  void start();

  /// The service the sessions use, once the store answered (until then
  /// they answer INTERNAL_ERROR).
  void set_service(job_service* service) noexcept { service_.store(service); }

  /// Stops accepting (a drain), on the I/O threads; connections open stay
  /// until the server stops. Removes the unix socket files it made.
  void stop_accepting();

  session_registry& registry() noexcept { return registry_; }

 private:
  using protocol = boost::asio::generic::stream_protocol;
  using acceptor = boost::asio::basic_socket_acceptor<protocol>;
  struct bound {
    std::unique_ptr<acceptor> a;
    std::string unix_path;  // for close()
  };
  void accept(acceptor& a, bool tcp);
  void close_now();
  bool allowed(const protocol::endpoint& peer) const;

  boost::asio::io_context::executor_type ex_;
  std::function<session_home()> session_executor_;  // null: ex_
  connection_executor strand_;                      // the acceptors'
  std::vector<ip_block> allow_;
  std::size_t max_connections_;
  std::size_t max_job_size_;
  connection_limits limits_;
  std::vector<bound> bound_;
  std::atomic<job_service*> service_{nullptr};
  session_registry registry_;
};

}  // namespace delayq::server::beanstalk
