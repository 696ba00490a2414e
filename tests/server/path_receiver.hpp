// path_receiver: an HTTP server in a unit test process whose answer depends
// on the request's path; the outgoing HTTP clients (push_client,
// peer_forwarder) are tested against it.
#pragma once

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <condition_variable>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace delayq::server_test {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

// Bounds every wait, so that a lost callback fails the test instead of hanging it.
inline constexpr auto wait_bound = std::chrono::seconds(60);

/// A small Beast server on 127.0.0.1:0 inside the test, run by a thread of
/// its own; what it does depends on the request's path:
///   /ok             200, keep-alive
///   /fail           500, keep-alive
///   /hang           reads the request and never answers
///   /close          reads the request and closes the connection
///   /ok-then-close  200 (announcing keep-alive), then closes the connection
///   /ok-then-drop-next  200, keep-alive; then closes the connection as the next
///                   request arrives, without reading it
///   /draining       503 {"error":"draining"}, as delayq-server shutting down
///   /hold           holds the request until release_held()
///   /big            200 with a body larger than the client reads
///
/// Thread safety: the accessors may be called from any thread.
class path_receiver {
  using tcp = boost::asio::ip::tcp;

 public:
  struct seen_request {
    std::string method;
    std::string target;
    std::map<std::string, std::string> headers;
    std::string body;
  };

  path_receiver() : acceptor_(io_, tcp::endpoint{asio::ip::make_address("127.0.0.1"), 0}) {
    accept();
    thread_ = std::thread([this] { io_.run(); });
  }
  ~path_receiver() {
    io_.stop();
    thread_.join();
  }

  std::string url(std::string_view path) const {
    return "http://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port()) +
           std::string(path);
  }
  std::string host() const {
    return "127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port());
  }

  std::vector<seen_request> requests() const {
    std::lock_guard lock{mutex_};
    return requests_;
  }
  std::size_t connections() const {
    std::lock_guard lock{mutex_};
    return connections_;
  }
  // Requests closed unread (/ok-then-drop-next).
  std::size_t dropped() const {
    std::lock_guard lock{mutex_};
    return dropped_;
  }
  std::size_t max_held() const {
    std::lock_guard lock{mutex_};
    return max_held_;
  }
  // Waits until `total` /hold requests have arrived since the start.
  bool wait_held_total(std::size_t total) {
    std::unique_lock lock{mutex_};
    return cv_.wait_for(lock, wait_bound, [&] { return held_total_ >= total; });
  }
  // Closes the listening socket; open connections stay. A fresh dial is
  // refused from now on, as one to a peer cut off from the network fails.
  void stop_listening() {
    std::promise<void> closed;
    auto f = closed.get_future();
    asio::post(io_, [&] {
      beast::error_code ignored;
      acceptor_.close(ignored);
      closed.set_value();
    });
    f.wait();
  }
  // Answers every held request 200.
  void release_held() {
    asio::post(io_, [this] {
      auto sessions = std::move(held_sessions_);
      held_sessions_.clear();
      {
        std::lock_guard lock{mutex_};
        held_now_ -= sessions.size();
      }
      for (auto& s : sessions) s->respond(200, false, "released");
    });
  }

 private:
  struct session : std::enable_shared_from_this<session> {
    session(path_receiver& r, tcp::socket s) : owner(r), socket(std::move(s)) {}

    void read() {
      req = {};
      http::async_read(socket, buffer, req,
                       [self = shared_from_this()](beast::error_code ec, std::size_t) {
                         if (!ec) self->on_request();
                       });
    }

    void on_request() {
      seen_request seen{
          std::string(req.method_string()), std::string(req.target()), {}, req.body()};
      for (const auto& f : req) seen.headers[std::string(f.name_string())] = std::string(f.value());
      {
        std::lock_guard lock{owner.mutex_};
        owner.requests_.push_back(std::move(seen));
      }
      const std::string target{req.target()};
      const std::string path = target.substr(0, target.find('?'));
      if (path == "/ok") return respond(200, false, "ok");
      if (path == "/fail") return respond(500, false, "no");
      if (path == "/ok-then-close") return respond(200, true, "ok");
      if (path == "/ok-then-drop-next") return respond(200, false, "ok", true);
      if (path == "/draining")
        return respond(503, false, R"({"error":"draining","message":"shutting down"})");
      if (path == "/big") return respond(200, false, std::string(200 * 1024, 'x'));
      if (path == "/close") {
        beast::error_code ignored;
        socket.shutdown(tcp::socket::shutdown_both, ignored);
        socket.close(ignored);
        return;
      }
      if (path == "/hang") {
        owner.hung_sessions_.push_back(shared_from_this());
        return;
      }
      if (path == "/hold") {
        owner.held_sessions_.push_back(shared_from_this());
        {
          std::lock_guard lock{owner.mutex_};
          ++owner.held_total_;
          ++owner.held_now_;
          owner.max_held_ = std::max(owner.max_held_, owner.held_now_);
        }
        owner.cv_.notify_all();
        return;
      }
      respond(404, false, "unknown path");
    }

    void respond(unsigned status, bool close_after, std::string body, bool drop_next = false) {
      res = {};
      res.version(11);
      res.result(status);
      res.keep_alive(true);
      res.set(http::field::content_type, "text/plain");
      res.body() = std::move(body);
      res.prepare_payload();
      http::async_write(
          socket, res,
          [self = shared_from_this(), close_after, drop_next](beast::error_code ec, std::size_t) {
            if (ec) return;
            if (close_after) {
              beast::error_code ignored;
              self->socket.close(ignored);
              return;
            }
            if (drop_next) return self->drop_next();
            self->read();
          });
    }

    // Waits for the first bytes of a next request and closes with them
    // unread (the kernel answers with a reset): the client wrote on a
    // connection that was open when it looked, and gets no answer.
    void drop_next() {
      socket.async_wait(tcp::socket::wait_read, [self = shared_from_this()](beast::error_code) {
        {
          std::lock_guard lock{self->owner.mutex_};
          ++self->owner.dropped_;
        }
        beast::error_code ignored;
        self->socket.close(ignored);
      });
    }

    path_receiver& owner;
    tcp::socket socket;
    beast::flat_buffer buffer;
    http::request<http::string_body> req;
    http::response<http::string_body> res;
  };

  void accept() {
    acceptor_.async_accept([this](beast::error_code ec, tcp::socket s) {
      if (ec) return;
      {
        std::lock_guard lock{mutex_};
        ++connections_;
      }
      std::make_shared<session>(*this, std::move(s))->read();
      accept();
    });
  }

  asio::io_context io_;
  tcp::acceptor acceptor_;
  // Touched on the receiver's thread only.
  std::vector<std::shared_ptr<session>> hung_sessions_;
  std::vector<std::shared_ptr<session>> held_sessions_;

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<seen_request> requests_;
  std::size_t connections_ = 0;
  std::size_t dropped_ = 0;
  std::size_t held_total_ = 0;
  std::size_t held_now_ = 0;
  std::size_t max_held_ = 0;
  std::thread thread_;
};

}  // namespace delayq::server_test
