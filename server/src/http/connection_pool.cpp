#include "http/connection_pool.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/http/error.hpp>
#include <cerrno>
#include <iterator>

namespace delayq::server {
namespace {

// A connection is only ever touched on its strand, closing it included.
void close_on_strand(std::unique_ptr<pooled_connection> c) {
  std::shared_ptr<pooled_connection> shared{std::move(c)};
  const auto strand = shared->strand;
  boost::asio::post(strand, [shared = std::move(shared)] { shared->stream.close(); });
}

// Whether the peer is still there and silent: a peek that would block. An
// end of stream (the peer closed it), an error, or bytes nobody asked for
// (an answer to nothing) make the connection useless. No operation is
// pending on an idle connection, so the socket may be read here.
bool still_open(pooled_connection& c) {
  char byte = 0;
  const auto n = ::recv(c.stream.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

}  // namespace

connection_pool::connection_pool(std::size_t max_idle_per_host,
                                 std::chrono::milliseconds idle_timeout)
    : max_idle_per_host_(max_idle_per_host), idle_timeout_(idle_timeout) {}

connection_pool::~connection_pool() { close_all(); }

std::unique_ptr<pooled_connection> connection_pool::take(const std::string& key) {
  std::vector<std::unique_ptr<pooled_connection>> stale;
  std::unique_ptr<pooled_connection> found;
  const auto now = std::chrono::steady_clock::now();
  // The most recently used one not past the idle limit (the least likely to
  // have been closed by the peer), or null.
  const auto pop_newest = [&]() -> std::unique_ptr<pooled_connection> {
    std::lock_guard lock{mutex_};
    const auto it = idle_.find(key);
    if (it == idle_.end()) return nullptr;
    auto& pool = it->second;
    std::unique_ptr<pooled_connection> c;
    if (pool.empty()) {  // a pool of max_idle_per_host 0
      idle_.erase(it);
      return c;
    }
    if (now - pool.back()->idle_since < idle_timeout_) {
      c = std::move(pool.back());
      pool.pop_back();
    } else {
      // The newest is past the limit: all are.
      std::move(pool.begin(), pool.end(), std::back_inserter(stale));
      pool.clear();
    }
    if (pool.empty()) idle_.erase(it);
    return c;
  };
  while (!found) {
    auto c = pop_newest();
    if (!c) break;
    // The peek is a system call: made outside the lock every forward and
    // push takes.
    if (still_open(*c))
      found = std::move(c);
    else
      stale.push_back(std::move(c));
  }
  for (auto& c : stale) close_on_strand(std::move(c));
  return found;
}

void connection_pool::put(const std::string& key, std::unique_ptr<pooled_connection> c) {
  const auto now = std::chrono::steady_clock::now();
  c->idle_since = now;
  c->buffer.clear();
  c->reset_on_close(false);  // its exchange ended whole
  std::vector<std::unique_ptr<pooled_connection>> stale;
  bool kept = false;
  {
    std::lock_guard lock{mutex_};
    if (!closed_) {
      auto& pool = idle_[key];
      if (pool.size() < max_idle_per_host_) {
        pool.push_back(std::move(c));
        kept = true;
      }
    }
    // Now and then, the connections of every host: those of a peer no
    // longer called (it moved to another address) would otherwise stay open.
    if (now - swept_at_ >= idle_timeout_) {
      swept_at_ = now;
      for (auto it = idle_.begin(); it != idle_.end();) {
        auto& pool = it->second;
        // Oldest first: the expired ones are a prefix.
        const auto fresh = std::find_if(pool.begin(), pool.end(), [&](const auto& p) {
          return now - p->idle_since < idle_timeout_;
        });
        std::move(pool.begin(), fresh, std::back_inserter(stale));
        pool.erase(pool.begin(), fresh);
        it = pool.empty() ? idle_.erase(it) : std::next(it);
      }
    }
  }
  for (auto& old : stale) close_on_strand(std::move(old));
  // Not kept: closed here, on its strand (put()'s caller is on it).
  if (!kept) c->stream.close();
}

void connection_pool::close_all() {
  std::map<std::string, std::vector<std::unique_ptr<pooled_connection>>, std::less<>> closing;
  {
    std::lock_guard lock{mutex_};
    closed_ = true;
    closing.swap(idle_);
  }
  for (auto& [key, pool] : closing)
    for (auto& c : pool) close_on_strand(std::move(c));
}

bool connection_pool::peer_closed(const boost::system::error_code& ec) {
  namespace asio = boost::asio;
  return ec == boost::beast::http::error::end_of_stream || ec == asio::error::eof ||
         ec == asio::error::connection_reset || ec == asio::error::connection_aborted ||
         ec == asio::error::broken_pipe;
}

}  // namespace delayq::server
