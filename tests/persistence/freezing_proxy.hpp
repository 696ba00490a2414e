// A TCP proxy in front of a test server (Redis, PostgreSQL) that can stop
// forwarding on demand:
// a deterministic stand-in for a server that hangs (a long fsync, a paused
// process). While frozen it reads nothing from either side, so what a client
// sends waits in the kernel's buffers; thawed, it forwards it all, and what
// a client sent before it closed still reaches the server.
#pragma once

#include <utility>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace delayq::test {

class freezing_proxy {
 public:
  /// Forwards 127.0.0.1:port() to 127.0.0.1:`target_port`. `client_rcvbuf`
  /// (when not 0): the receive buffer of the proxy's end of each client
  /// connection (the kernel raises it to its minimum), so that while frozen
  /// little of what a client sends leaves the client's own send queue, as
  /// behind a link that went down.
  explicit freezing_proxy(unsigned target_port, int client_rcvbuf = 0) : target_port_(target_port) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    // Accepted sockets inherit it; set before listen() so that the window
    // of the handshake already follows it.
    if (client_rcvbuf != 0)
      ::setsockopt(listen_fd_, SOL_SOCKET, SO_RCVBUF, &client_rcvbuf, sizeof client_rcvbuf);
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(listen_fd_, 16) != 0)
      throw std::runtime_error("freezing_proxy: cannot listen");
    socklen_t len = sizeof addr;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { run(); });
  }
  ~freezing_proxy() {
    stop_ = true;
    thread_.join();
    for (const pair& p : pairs_) {
      ::close(p.client);
      ::close(p.server);
    }
    if (listen_fd_ >= 0) ::close(listen_fd_);
  }
  freezing_proxy(const freezing_proxy&) = delete;
  freezing_proxy& operator=(const freezing_proxy&) = delete;

  unsigned port() const { return port_; }
  /// Stops forwarding (both ways) from now on.
  void freeze() {
    frozen_ = true;
    settle();
  }
  /// Stops forwarding on the connections open now only; connections made
  /// later are forwarded.
  void freeze_existing() {
    frozen_below_ = accepted_.load();
    settle();
  }
  /// Forwards again, starting with what waited.
  void thaw() {
    frozen_below_ = 0;
    frozen_ = false;
  }
  /// Freezes every connection, and from now on refuses new ones (the
  /// listening socket is closed): a server whose network path is gone, as
  /// a client sees it when a fresh dial fails.
  void unplug() {
    frozen_ = true;
    unplugged_ = true;
    settle();
  }
  /// Closes every connection, as a server that went away would (what the
  /// client sent since a freeze is dropped unforwarded), and from now on
  /// closes each new one at once.
  void sever() {
    severed_ = true;
    settle();
  }
  /// From now on the server's replies are read and thrown away: what the
  /// client sends still reaches the server (and runs), the answers never
  /// come back.
  void drop_replies() {
    drop_down_ = true;
    settle();
  }
  /// Closes the connections open now, as a server or a network that reset
  /// them would (the client reads EOF), and forwards later ones whole.
  void close_open() {
    close_now_ = true;
    settle();
  }
  /// Connections the proxy closed because one side closed or reset it,
  /// after forwarding all that side had sent.
  std::size_t ended() const { return ended_; }
  /// Bytes forwarded from clients to the server so far.
  std::size_t forwarded_up() const { return up_; }
  /// Round trips begun since the last reset_turns(): times bytes went up to
  /// the server after bytes came down (or for the first time). A client
  /// that pipelines N commands makes one; one that waits for each reply
  /// before it sends the next makes N.
  std::size_t up_turns() const { return turns_; }
  void reset_turns() {
    settle();
    turns_ = 0;
    last_up_ = false;
  }
  /// While frozen: the bytes clients sent that wait unread in the proxy's
  /// sockets (as of the proxy thread's last pass), so a test can wait until
  /// a client's write has left it.
  std::size_t queued_up() const { return queued_up_; }

 private:
  // Returns once the proxy thread began a pass after the call: a pass that
  // polled before a freeze may still forward what it saw.
  void settle() const {
    const std::uint64_t target = passes_.load() + 2;
    while (passes_.load() < target) std::this_thread::yield();
  }

  struct pair {
    int client;
    int server;
    std::uint64_t seq;  // accept order
  };

  int dial() const {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<std::uint16_t>(target_port_));
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(fd);
      return -1;
    }
    return fd;
  }

  // Copies what `from` has to `to`; false when `from` closed or failed.
  bool pump(int from, int to, bool up) {
    char buf[65536];
    const ssize_t n = ::recv(from, buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0) return false;
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    if (!up && drop_down_) return true;  // a reply lost on the way
    for (ssize_t off = 0; off < n;) {
      const ssize_t w = ::send(to, buf + off, static_cast<std::size_t>(n - off), MSG_NOSIGNAL);
      if (w <= 0) return false;
      off += w;
    }
    if (up) {
      up_ += static_cast<std::size_t>(n);
      if (!last_up_) ++turns_;
    }
    last_up_ = up;
    return true;
  }

  void run() {
    while (!stop_) {
      ++passes_;
      if (close_now_) {
        for (const pair& p : pairs_) {
          ::close(p.client);
          ::close(p.server);
        }
        pairs_.clear();
        // In the same pass: a connection made from now on gets its replies.
        drop_down_ = false;
        close_now_ = false;
      }
      if (severed_) {
        for (const pair& p : pairs_) {
          ::close(p.client);
          ::close(p.server);
        }
        pairs_.clear();
      }
      if (unplugged_ && listen_fd_ >= 0) {
        ::close(listen_fd_);
        listen_fd_ = -1;
      }
      std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}};
      const bool frozen = frozen_;
      const std::uint64_t below = frozen_below_;
      // A frozen pair is polled for nothing (fd -1), so indexes stay aligned.
      if (!frozen)
        for (const pair& p : pairs_) {
          const bool held = p.seq < below;
          fds.push_back({held ? -1 : p.client, POLLIN, 0});
          fds.push_back({held ? -1 : p.server, POLLIN, 0});
        }
      if (frozen) {
        std::size_t queued = 0;
        for (const pair& p : pairs_) {
          int n = 0;
          if (::ioctl(p.client, FIONREAD, &n) == 0 && n > 0) queued += static_cast<std::size_t>(n);
        }
        queued_up_ = queued;
      }
      if (::poll(fds.data(), fds.size(), 5) <= 0) continue;
      if (fds[0].revents & POLLIN) {
        const int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c >= 0 && severed_) {
          ::close(c);
        } else if (c >= 0) {
          const int s = dial();
          if (s < 0)
            ::close(c);
          else
            pairs_.push_back({c, s, accepted_++});
        }
      }
      if (frozen) continue;
      const std::size_t polled = (fds.size() - 1) / 2;
      std::vector<pair> alive;
      for (std::size_t i = 0; i < polled; ++i) {
        const pollfd& c = fds[1 + 2 * i];
        const pollfd& s = fds[2 + 2 * i];
        bool ok = true;
        if (c.revents & (POLLIN | POLLHUP | POLLERR))
          ok = pump(pairs_[i].client, pairs_[i].server, true);
        if (ok && (s.revents & (POLLIN | POLLHUP | POLLERR)))
          ok = pump(pairs_[i].server, pairs_[i].client, false);
        if (ok) {
          alive.push_back(pairs_[i]);
        } else {
          ::close(pairs_[i].client);
          ::close(pairs_[i].server);
          ++ended_;
        }
      }
      // Pairs accepted during this pass were not polled yet: keep them.
      for (std::size_t i = polled; i < pairs_.size(); ++i) alive.push_back(pairs_[i]);
      pairs_ = std::move(alive);
    }
  }

  unsigned target_port_;
  int listen_fd_ = -1;
  unsigned port_ = 0;
  std::atomic<bool> frozen_{false};
  std::atomic<std::uint64_t> frozen_below_{0};
  std::atomic<std::uint64_t> accepted_{0};
  std::atomic<std::uint64_t> passes_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> severed_{false};
  std::atomic<bool> drop_down_{false};
  std::atomic<bool> close_now_{false};
  std::atomic<bool> unplugged_{false};
  std::atomic<std::size_t> up_{0};
  std::atomic<std::size_t> ended_{0};
  std::atomic<std::size_t> queued_up_{0};
  std::atomic<std::size_t> turns_{0};
  std::atomic<bool> last_up_{false};
  std::vector<pair> pairs_;  // the proxy thread's, and the destructor's after join
  std::thread thread_;
};

}  // namespace delayq::test
