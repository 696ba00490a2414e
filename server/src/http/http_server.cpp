#include "http/http_server.hpp"

#include <unistd.h>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <nlohmann/json.hpp>
#include <optional>

#include "delayq/log.hpp"

namespace delayq::server {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = boost::asio::ip::tcp;

http_answer error_answer(unsigned status, const std::string& name, const std::string& message) {
  http_answer a;
  a.status = status;
  a.body = nlohmann::json{{"error", name}, {"message", message}}.dump(
      -1, ' ', false, nlohmann::json::error_handler_t::replace);
  return a;
}

void http_gone_signal::on_gone(std::function<void()> f) {
  std::unique_lock lock(m_);
  if (gone_) {
    lock.unlock();
    f();
    return;
  }
  f_ = std::move(f);
}

void http_gone_signal::fire() {
  std::function<void()> f;
  {
    std::lock_guard lock(m_);
    if (gone_) return;
    gone_ = true;
    f = std::move(f_);
  }
  if (f) f();
}

struct http_server::session : std::enable_shared_from_this<session> {
  // On its strand by the strand's concrete type (io/connection_home.hpp).
  using socket_type = boost::asio::basic_stream_socket<tcp, connection_executor>;
  session(http_server& s, socket_type&& socket, std::shared_ptr<void> home)
      : server(s),
        connections(s.connections_),
        home(std::move(home)),
        stream(std::move(socket)),
        deadline(stream.get_executor()) {
    connections->fetch_add(1, std::memory_order_relaxed);
  }
  ~session() { connections->fetch_sub(1, std::memory_order_relaxed); }
  session(const session&) = delete;
  session& operator=(const session&) = delete;

  http_server& server;
  std::shared_ptr<std::atomic<std::size_t>> connections;  // the server's count
  std::shared_ptr<void> home;                             // session_home's hold
  beast::basic_stream<tcp, connection_executor> stream;
  // The read deadlines. Not the stream's own expiry: that closes the socket,
  // and a request that took too long must still be told so (408).
  connection_timer deadline;
  bool timed_out = false;
  bool reading = false;  // the deadline may cancel only a read
  std::shared_ptr<http_gone_signal> gone;
  beast::flat_buffer buffer;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser;
  bhttp::response<bhttp::string_body> res;
  std::function<void(bool)> after_write;
  bool keep_alive = false;
  bool counted = false;  // this request is in server.in_flight_
  // Watching the socket while a long poll is handled.
  bool watching = false;
  bool peer_gone = false;
  std::optional<http_answer> pending;  // an answer that waits for the watch to end
  // Refused by check_header with its body unread: drain it after the answer.
  bool linger = false;
  std::unique_ptr<std::array<char, 4096>> discard;  // what a lingering read drops

  void arm(std::chrono::milliseconds after) {
    timed_out = false;
    deadline.expires_after(after);
    deadline.async_wait([w = weak_from_this()](const boost::system::error_code& ec) {
      auto self = w.lock();
      if (ec || !self || !self->reading) return;
      self->timed_out = true;
      beast::error_code ignored;
      self->stream.socket().cancel(ignored);
    });
  }

  void read() {
    parser.emplace();
    parser->header_limit(static_cast<std::uint32_t>(server.limits_.max_header));
    parser->body_limit(server.limits_.max_body);
    stream.expires_never();
    reading = true;
    arm(server.limits_.header_timeout);
    bhttp::async_read_header(
        stream, buffer, *parser,
        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_header(ec); });
  }

  void on_header(beast::error_code ec) {
    if (ec) return read_failed(ec);
    if (server.limits_.check_header) {
      if (auto refusal = server.limits_.check_header(parser->get().base())) {
        reading = false;
        deadline.cancel();
        server.in_flight_.fetch_add(1, std::memory_order_acq_rel);
        counted = true;
        // Nothing more is read of this request. Without a body on the way
        // the connection may serve the next one; with one, it closes.
        keep_alive = parser->is_done() && parser->get().keep_alive();
        linger = !parser->is_done();
        parser.reset();
        return write(std::move(*refusal));
      }
    }
    // The body mostly came with the headers: parse what is buffered here.
    // Another async_read would cost a handler hop and a timer per request
    // (measured: 15% of the put rate on one connection).
    while (!parser->is_done() && buffer.size() > 0) {
      const std::size_t used = parser->put(buffer.data(), ec);
      buffer.consume(used);
      if (ec == bhttp::error::need_more) {
        ec = {};
        break;
      }
      if (ec) return on_read(ec);
      if (used == 0) break;
    }
    if (parser->is_done()) return on_read({});
    arm(server.limits_.body_timeout);
    bhttp::async_read(
        stream, buffer, *parser,
        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
    reading = false;
    deadline.cancel();
    if (ec) return read_failed(ec);
    http_request req = parser->release();
    parser.reset();
    keep_alive = req.keep_alive();
    server.in_flight_.fetch_add(1, std::memory_order_acq_rel);
    counted = true;
    if (server.draining_.load(std::memory_order_acquire)) {
      keep_alive = false;
      return write(error_answer(503, "draining", "the server is shutting down"));
    }
    gone.reset();
    if (server.limits_.watch_disconnect && server.limits_.watch_disconnect(req)) {
      gone = std::make_shared<http_gone_signal>();
      watch();
    }
    auto self = shared_from_this();
    http_respond respond = [self](http_answer a) {
      boost::asio::dispatch(self->stream.get_executor(),
                            [self, a = std::move(a)]() mutable { self->answered(std::move(a)); });
    };
    server.handler_(std::move(req), std::move(respond), gone);
  }

  // Reads while a request is handled: an end of stream says the client went
  // away; bytes (a pipelined next request) stay in the buffer for read().
  void watch() {
    watching = true;
    stream.socket().async_read_some(
        buffer.prepare(4096), [self = shared_from_this()](beast::error_code ec, std::size_t n) {
          self->buffer.commit(n);
          self->watching = false;
          if (ec && ec != boost::asio::error::operation_aborted) {
            self->peer_gone = true;
            // The handler stops waiting (and answers, which closes).
            if (self->gone) self->gone->fire();
          }
          // Data and no answer yet (a pipelined request) ends the watch too:
          // the data is parsed after the answer.
          if (self->pending) {
            http_answer a = std::move(*self->pending);
            self->pending.reset();
            self->answered(std::move(a));
          }
        });
  }

  void answered(http_answer a) {
    if (watching) {
      // Let the watch end first: a read and the next read() must not overlap.
      pending = std::move(a);
      beast::error_code ignored;
      stream.socket().cancel(ignored);
      return;
    }
    if (peer_gone) {
      if (a.after_write) a.after_write(false);
      done_with_request();
      return close();
    }
    write(std::move(a));
  }

  void write(http_answer a) {
    res = {};
    res.version(11);
    res.result(a.status);
    if (const unsigned cls = a.status / 100; cls >= 1 && cls <= 5)
      server.answered_[cls - 1].fetch_add(1, std::memory_order_relaxed);
    res.set(bhttp::field::server, "delayq-server/" DELAYQ_VERSION);
    if (!a.body.empty() || a.status != 204) res.set(bhttp::field::content_type, a.content_type);
    for (auto& [name, value] : a.headers) res.set(name, value);
    if (server.draining_.load(std::memory_order_acquire)) keep_alive = false;
    res.keep_alive(keep_alive);
    res.body() = std::move(a.body);
    res.prepare_payload();
    after_write = std::move(a.after_write);
    stream.expires_after(server.limits_.write_timeout);
    bhttp::async_write(stream, res, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      self->on_write(ec);
    });
  }

  void on_write(beast::error_code ec) {
    if (after_write) std::exchange(after_write, nullptr)(!ec);
    done_with_request();
    if (!ec && linger) return linger_close();
    if (ec || !keep_alive) return close();
    read();
  }

  // After a refusal with the body unread: the answer is sent, the sending
  // side shut, and what the client still sends is read and dropped until it
  // closes or limits_.linger passes. Never buffered, so it costs no memory.
  void linger_close() {
    beast::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
    discard = std::make_unique<std::array<char, 4096>>();
    reading = true;
    arm(server.limits_.linger);
    drop_some();
  }

  void drop_some() {
    stream.socket().async_read_some(boost::asio::buffer(*discard),
                                    [self = shared_from_this()](beast::error_code ec, std::size_t) {
                                      if (ec) {
                                        self->reading = false;
                                        return self->close();
                                      }
                                      self->drop_some();
                                    });
  }

  void done_with_request() {
    if (counted) server.in_flight_.fetch_sub(1, std::memory_order_acq_rel);
    counted = false;
  }

  // The request did not arrive whole: answer what went wrong when it can
  // still be told, then close.
  void read_failed(beast::error_code ec) {
    keep_alive = false;
    if (timed_out) {
      // Nothing of a next request arrived: an idle keep-alive connection.
      if (buffer.size() == 0 && !parser->got_some()) return close();
      return write(error_answer(408, "request_timeout", "the request did not arrive in time"));
    }
    if (ec == bhttp::error::end_of_stream || ec == boost::asio::error::operation_aborted ||
        ec == boost::asio::error::connection_reset || ec == boost::asio::error::eof)
      return close();
    if (ec == bhttp::error::body_limit)
      return write(error_answer(
          413, "payload_too_large",
          "the body is larger than " + std::to_string(server.limits_.max_body) + " bytes"));
    if (ec == bhttp::error::header_limit)
      return write(error_answer(
          431, "headers_too_large",
          "the headers are larger than " + std::to_string(server.limits_.max_header) + " bytes"));
    write(error_answer(400, "bad_request", "malformed HTTP request: " + ec.message()));
  }

  void close() {
    deadline.cancel();
    beast::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream.close();
  }
};

http_server::http_server(boost::asio::io_context& io, http_handler handler, http_limits limits,
                         session_executor_fn session_executor)
    : io_(io),
      session_executor_(std::move(session_executor)),
      handler_(std::move(handler)),
      limits_(std::move(limits)),
      acceptor_(boost::asio::make_strand(io)),
      accept_pause_(acceptor_.get_executor()) {}

http_server::~http_server() = default;

tcp::endpoint http_server::listen(const tcp::endpoint& at) {
  acceptor_.open(at.protocol());
  acceptor_.set_option(boost::asio::socket_base::reuse_address(true));
  acceptor_.bind(at);
  acceptor_.listen(boost::asio::socket_base::max_listen_connections);
  return acceptor_.local_endpoint();
}

void http_server::start() {
  boost::asio::dispatch(acceptor_.get_executor(), [this] { accept(); });
}

void http_server::accept() {
  // Accepted on the acceptor's thread, then moved to the thread chosen for
  // it: chosen when it arrives, not when the accept was queued (a lone
  // connection must find the others closed).
  acceptor_.async_accept([this](beast::error_code ec, tcp::socket accepted) {
    if (ec == boost::asio::error::operation_aborted || !acceptor_.is_open()) return;
    if (ec) {
      // Out of descriptors and the like: keep serving the
      // open connections, try again a little later (at
      // once would spin), and say so once a second.
      const auto now = std::chrono::steady_clock::now();
      if (now - last_accept_log_ >= std::chrono::seconds{1}) {
        last_accept_log_ = now;
        log(log_level::warning, "accept: " + ec.message());
      }
      return accept_later();
    } else if (connections_->load(std::memory_order_relaxed) >= limits_.max_connections) {
      // At the limit: closed at once, unanswered (an
      // answer would need a write that can wait).
      refused_.fetch_add(1, std::memory_order_relaxed);
      beast::error_code ignored;
      accepted.close(ignored);
    } else {
      session_home home =
          session_executor_ ? session_executor_() : session_home{io_.get_executor(), nullptr};
      session::socket_type socket(boost::asio::make_strand(home.first));
      beast::error_code ignored;
      const auto local = accepted.local_endpoint(ec);
      const int fd = ec ? -1 : accepted.release(ec);
      if (!ec) socket.assign(local.protocol(), fd, ec);
      if (ec) {
        if (fd >= 0 && !socket.is_open()) ::close(fd);
        log(log_level::warning, "accept: moving a connection to its thread: " + ec.message());
        return accept();
      }
      socket.set_option(tcp::no_delay(true), ignored);
      auto s = std::make_shared<session>(*this, std::move(socket), std::move(home.second));
      {
        std::lock_guard lock(sessions_mutex_);
        std::erase_if(sessions_, [](auto& w) { return w.expired(); });
        sessions_.push_back(s);
      }
      s->read();
    }
    accept();
  });
}

void http_server::accept_later() {
  accept_pause_.expires_after(std::chrono::milliseconds{100});
  accept_pause_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec && acceptor_.is_open()) accept();
  });
}

void http_server::drain() {
  draining_.store(true, std::memory_order_release);
  boost::asio::dispatch(acceptor_.get_executor(), [this] {
    beast::error_code ignored;
    acceptor_.close(ignored);
    accept_pause_.cancel();
  });
}

void http_server::close_all() {
  std::vector<std::shared_ptr<session>> live;
  {
    std::lock_guard lock(sessions_mutex_);
    for (auto& w : sessions_)
      if (auto s = w.lock()) live.push_back(std::move(s));
    sessions_.clear();
  }
  for (auto& s : live) boost::asio::dispatch(s->stream.get_executor(), [s] { s->close(); });
}

}  // namespace delayq::server
