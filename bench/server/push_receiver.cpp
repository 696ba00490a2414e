// push_receiver.cpp - the push receiver's HTTP server (Beast): one session
// per connection, kept alive as long as the server keeps it.
#include "push_receiver.hpp"

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <memory>

namespace delayq::bench_server::scaleout {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct push_receiver::session : std::enable_shared_from_this<session> {
  session(push_receiver& r, tcp::socket s) : owner(r), stream(std::move(s)) {}
  void read() {
    req = {};
    http::async_read(stream, buffer, req,
                     [self = shared_from_this()](beast::error_code ec, std::size_t) {
                       if (!ec) self->respond();
                     });
  }
  void respond() {
    {
      // Recorded before the answer: the time is when the push arrived.
      std::lock_guard lock(owner.mu_);
      owner.calls_.push_back({steady::now(), std::string(req["X-Delayq-Task-Id"]),
                              std::string(req["X-Delayq-Instance"])});
    }
    res = http::response<http::string_body>(http::status::ok, 11);
    res.body() = "ok";
    res.keep_alive(req.keep_alive());
    res.prepare_payload();
    http::async_write(stream, res, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      if (!ec && self->res.keep_alive()) self->read();
    });
  }
  push_receiver& owner;
  beast::tcp_stream stream;
  beast::flat_buffer buffer;
  http::request<http::string_body> req;
  http::response<http::string_body> res;
};

push_receiver::push_receiver()
    : acceptor_(ioc_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
  accept();
  thread_ = std::thread([this] { ioc_.run(); });
}

push_receiver::~push_receiver() {
  ioc_.stop();
  thread_.join();
}

std::string push_receiver::url() const {
  return "http://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port()) + "/hook";
}

void push_receiver::clear() {
  std::lock_guard lock(mu_);
  calls_.clear();
}

std::vector<delivery> push_receiver::calls() const {
  std::lock_guard lock(mu_);
  return calls_;
}

std::size_t push_receiver::count() const {
  std::lock_guard lock(mu_);
  return calls_.size();
}

void push_receiver::accept() {
  acceptor_.async_accept([this](beast::error_code ec, tcp::socket s) {
    if (ec) return;
    std::make_shared<session>(*this, std::move(s))->read();
    accept();
  });
}

}  // namespace delayq::bench_server::scaleout
