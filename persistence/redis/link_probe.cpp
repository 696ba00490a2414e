// persistence/redis/link_probe.cpp - the side dial of a late call (see
// link_probe.hpp).
#include "link_probe.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace delayq::detail::redis {

void link_probe::start(const redis_connection_options& opts) {
  reset();
  running_ = true;
  timeout_ = opts.connect_timeout;
  deadline_ = std::chrono::steady_clock::now() + opts.connect_timeout;
  // hiredis resolves the name and begins connect(2) on a non-blocking
  // socket: EINPROGRESS leaves a context without an error, a failure at
  // once (ENETUNREACH when the route is gone) sets one.
  ctx_.reset(opts.unix_socket.empty()
                 ? redisConnectNonBlock(opts.host.c_str(), static_cast<int>(opts.port))
                 : redisConnectUnixNonBlock(opts.unix_socket.c_str()));
  if (!ctx_) {
    failed_at_once_ = true;
    why_ = "out of memory for a Redis context";
  } else if (ctx_->err) {
    failed_at_once_ = true;
    why_ = ctx_->errstr;
  }
}

int link_probe::fd() const noexcept { return running_ && !failed_at_once_ && ctx_ ? ctx_->fd : -1; }

link_probe::result link_probe::check(std::chrono::steady_clock::time_point now) {
  if (!running_) return result::pending;
  if (failed_at_once_) return decide(result::unreachable, why_);
  pollfd p{ctx_->fd, POLLOUT, 0};
  if (::poll(&p, 1, 0) > 0) {
    int err = 0;
    socklen_t len = sizeof err;
    if (::getsockopt(ctx_->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err == 0 && !(p.revents & (POLLERR | POLLHUP))) return decide(result::reachable, {});
    return decide(result::unreachable, std::strerror(err != 0 ? err : ECONNRESET));
  }
  if (now >= deadline_)
    return decide(result::unreachable,
                  "no connection within " + std::to_string(timeout_.count()) + " ms");
  return result::pending;
}

link_probe::result link_probe::decide(result r, std::string why) {
  reset();
  why_ = std::move(why);
  return r;
}

void link_probe::reset() noexcept {
  ctx_.reset();
  running_ = false;
  failed_at_once_ = false;
}

}  // namespace delayq::detail::redis
