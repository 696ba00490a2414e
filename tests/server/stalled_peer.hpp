// A peer that takes almost nothing and reads nothing until asked: the other
// end of a link that went down, as a sender sees it. Its receive buffer is
// the kernel's minimum, so most of what a client writes waits in the
// client's own send queue. Used to check that a call given up on is
// withdrawn (reset), not left for the kernel to deliver later.
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cerrno>
#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>

namespace delayq::server_test {

class stalled_peer {
 public:
  stalled_peer() : acceptor_(io_) {
    namespace asio = boost::asio;
    acceptor_.open(asio::ip::tcp::v4());
    acceptor_.set_option(asio::socket_base::receive_buffer_size(1));  // raised to the minimum
    acceptor_.bind({asio::ip::make_address("127.0.0.1"), 0});
    acceptor_.listen();
  }

  /// "http://127.0.0.1:PORT".
  std::string base() const {
    return "http://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port());
  }

  /// Takes the first connection made (a link check's later dial stays queued).
  void accept() {
    // Bounded: Asio's blocking accept would wait for ever for a client that
    // never connects.
    pollfd ready{acceptor_.native_handle(), POLLIN, 0};
    if (::poll(&ready, 1, 20'000) != 1) throw std::runtime_error("stalled_peer: no connection");
    peer_.emplace(acceptor_.accept());
    const timeval bound{20, 0};  // a failure's bound: the reset or the end comes at once
    ::setsockopt(peer_->native_handle(), SOL_SOCKET, SO_RCVTIMEO, &bound, sizeof bound);
  }

  struct drained {
    std::size_t bytes = 0;
    int error = 0;  // how it ended: ECONNRESET for a reset, 0 for an end of stream
  };
  /// Reads all that comes, until the connection ends. With recv(): SO_RCVTIMEO
  /// bounds it, where Asio's blocking read would wait on past a timeout.
  drained read_to_end() {
    drained out;
    std::array<char, 4096> buf;
    ssize_t n = 0;
    while ((n = ::recv(peer_->native_handle(), buf.data(), buf.size(), 0)) > 0)
      out.bytes += static_cast<std::size_t>(n);
    out.error = n < 0 ? errno : 0;
    return out;
  }

 private:
  boost::asio::io_context io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::optional<boost::asio::ip::tcp::socket> peer_;
};

}  // namespace delayq::server_test
