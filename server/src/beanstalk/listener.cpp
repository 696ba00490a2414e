#include "beanstalk/listener.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <cstring>
#include <stdexcept>

#include "delayq/log.hpp"

namespace delayq::server::beanstalk {

namespace ip = boost::asio::ip;
using local = boost::asio::local::stream_protocol;

listener::listener(boost::asio::io_context::executor_type ex, std::vector<ip_block> allow,
                   std::size_t max_connections, std::size_t max_job_size, connection_limits limits,
                   std::function<session_home()> session_executor)
    : ex_(ex),
      session_executor_(std::move(session_executor)),
      strand_(boost::asio::make_strand(ex)),
      allow_(std::move(allow)),
      max_connections_(max_connections),
      max_job_size_(max_job_size),
      limits_(limits) {}

// The I/O threads have stopped by now: nothing else touches the acceptors.
listener::~listener() { close_now(); }

namespace {

// The address part of "ADDR:PORT" ("[::1]:11300", "localhost:11300").
ip::tcp::endpoint parse_tcp(const std::string& spec) {
  const std::size_t colon = spec.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == spec.size())
    throw std::invalid_argument("--beanstalk-listen wants ADDR:PORT or unix:PATH, got \"" + spec +
                                "\"");
  std::string host = spec.substr(0, colon);
  const std::string port_text = spec.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  if (host == "localhost") host = "127.0.0.1";
  if (port_text.size() > 5 || port_text.find_first_not_of("0123456789") != std::string::npos ||
      std::stoul(port_text) > 65535)
    throw std::invalid_argument("--beanstalk-listen: bad port \"" + port_text + "\"");
  boost::system::error_code ec;
  const auto addr = ip::make_address(host, ec);
  if (ec) throw std::invalid_argument("--beanstalk-listen: \"" + host + "\" is not an IP address");
  return {addr, static_cast<unsigned short>(std::stoul(port_text))};
}

// A socket file at `path` that nobody accepts on any more (a server that
// was killed) is removed, as beanstalkd does; a live one, or a file that is
// not a socket, is an error.
void clear_stale_socket(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return;  // nothing there
  if (!S_ISSOCK(st.st_mode))
    throw std::runtime_error("--beanstalk-listen unix:" + path +
                             ": the path exists and is not a socket; not replacing it");
  boost::asio::io_context io;
  local::socket probe(io);
  boost::system::error_code ec;
  probe.connect(local::endpoint(path), ec);
  if (!ec)
    throw std::runtime_error("--beanstalk-listen unix:" + path +
                             ": another server accepts connections there");
  // Only a refused connection says nobody listens: a socket we may not
  // connect to (EACCES) may well be someone else's live one.
  if (ec != boost::asio::error::connection_refused)
    throw std::runtime_error("--beanstalk-listen unix:" + path + ": " + ec.message() +
                             "; not replacing the socket file");
  if (::unlink(path.c_str()) != 0)
    throw std::runtime_error("--beanstalk-listen unix:" + path +
                             ": cannot remove the stale socket file");
}

}  // namespace

std::string listener::listen(const std::string& spec) {
  bound b;
  b.a = std::make_unique<acceptor>(strand_);
  protocol::endpoint at;
  bool tcp = true;
  if (spec.starts_with("unix:")) {
    tcp = false;
    b.unix_path = spec.substr(5);
    if (b.unix_path.empty() || b.unix_path.size() >= sizeof(sockaddr_un{}.sun_path))
      throw std::invalid_argument("--beanstalk-listen unix:PATH wants a path of 1-" +
                                  std::to_string(sizeof(sockaddr_un{}.sun_path) - 1) + " bytes");
    clear_stale_socket(b.unix_path);
    at = local::endpoint(b.unix_path);
  } else {
    at = parse_tcp(spec);
  }
  try {
    b.a->open(at.protocol());
    if (tcp) b.a->set_option(boost::asio::socket_base::reuse_address(true));
    b.a->bind(at);
    b.a->listen(boost::asio::socket_base::max_listen_connections);
  } catch (const boost::system::system_error& e) {
    throw std::runtime_error("--beanstalk-listen " + spec + ": " + e.code().message());
  }
  std::string where = spec;
  if (tcp) {
    // The port the kernel chose for port 0.
    const auto local_end = b.a->local_endpoint();
    const auto* sa = reinterpret_cast<const sockaddr*>(local_end.data());
    ip::tcp::endpoint e;
    std::memcpy(e.data(), sa, local_end.size());
    where = (e.address().is_v6() ? "[" + e.address().to_string() + "]" : e.address().to_string()) +
            ":" + std::to_string(e.port());
  }
  bound_.push_back(std::move(b));
  return where;
}

void listener::start() {
  for (bound& b : bound_) accept(*b.a, b.unix_path.empty());
}

bool listener::allowed(const protocol::endpoint& peer) const {
  const auto* sa = reinterpret_cast<const sockaddr*>(peer.data());
  if (sa->sa_family != AF_INET && sa->sa_family != AF_INET6) return true;  // unix: file modes
  ip::tcp::endpoint e;
  std::memcpy(e.data(), sa, std::min<std::size_t>(peer.size(), sizeof(sockaddr_in6)));
  // Only an IPv4-mapped source is that IPv4 peer (a dual-stack socket shows
  // IPv4 clients so). A NAT64 source (64:ff9b::/96) is an IPv6 host, not the
  // IPv4 address inside it: plain_address() would let 64:ff9b::7f00:1 in as
  // loopback.
  auto a = e.address();
  if (a.is_v6() && a.to_v6().is_v4_mapped()) a = ip::make_address_v4(ip::v4_mapped, a.to_v6());
  if (a.is_loopback()) return true;
  for (const ip_block& b : allow_)
    if (b.contains(a)) return true;
  return false;
}

void listener::accept(acceptor& a, bool tcp) {
  // On strand_ (the acceptor's executor), so stop_accepting() never closes
  // an acceptor while a handler starts its next accept. Each session on a
  // strand of its own: its handlers never run at once. Accepted here, then
  // moved to the thread chosen for it when it arrived (not when the accept
  // was queued: a lone connection must find the others closed).
  a.async_accept([this, &a, tcp](boost::system::error_code ec, protocol::socket socket) {
    if (ec == boost::asio::error::operation_aborted || !a.is_open()) return;
    if (!ec) {
      boost::system::error_code peer_ec;
      const auto peer = socket.remote_endpoint(peer_ec);
      bool room = true;
      if (!peer_ec && allowed(peer) && registry_.counts().current >= max_connections_) {
        // Full: the connection idle the longest makes room (a client that
        // leaks connections would otherwise lock every other out), unless
        // every one holds a job or waits for one.
        if (auto oldest = registry_.take_longest_idle()) {
          oldest->evict();
        } else {
          registry_.count_refused();
          room = false;
        }
      }
      if (peer_ec || !allowed(peer) || !room) {
        socket.close(peer_ec);
      } else {
        session_home home = session_executor_ ? session_executor_() : session_home{ex_, nullptr};
        session::socket_type moved(boost::asio::make_strand(home.first));
        const auto local = socket.local_endpoint(peer_ec);
        const int fd = peer_ec ? -1 : socket.release(peer_ec);
        if (!peer_ec) moved.assign(local.protocol(), fd, peer_ec);
        if (peer_ec) {
          if (fd >= 0 && !moved.is_open()) ::close(fd);
          log(log_level::warning,
              "beanstalk: accept: moving a connection to its thread: " + peer_ec.message());
          return accept(a, tcp);
        }
        if (tcp) moved.set_option(ip::tcp::no_delay(true), peer_ec);
        std::make_shared<session>(std::move(moved), service_, registry_, max_job_size_, limits_,
                                  std::move(home.second))
            ->start();
      }
    } else {
      // Out of descriptors and the like: accept again a little later (a
      // connection may have closed by then), without spinning.
      log(log_level::warning, "beanstalk: accept failed: " + ec.message());
      auto t = std::make_shared<boost::asio::steady_timer>(a.get_executor());
      t->expires_after(std::chrono::milliseconds{100});
      t->async_wait([this, &a, tcp, t](const boost::system::error_code& e) {
        if (!e && a.is_open()) accept(a, tcp);
      });
      return;
    }
    accept(a, tcp);
  });
}

void listener::stop_accepting() {
  // On the acceptors' strand: an acceptor is not safe to close while a
  // handler on another thread starts its next accept.
  boost::asio::post(strand_, [this] { close_now(); });
}

void listener::close_now() {
  for (bound& b : bound_) {
    boost::system::error_code ignored;
    if (b.a && b.a->is_open()) b.a->close(ignored);
    if (!b.unix_path.empty()) {
      ::unlink(b.unix_path.c_str());
      b.unix_path.clear();
    }
  }
}

}  // namespace delayq::server::beanstalk
