// push_receiver: an HTTP server in the test process that delayq-server's
// push targets point to, answering each call as the test says. Apart from
// server_test_support.hpp since only the push tests need it.
#pragma once

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "server_test_support.hpp"

namespace delayq::server_test {

/// One call the receiver got.
struct push_call {
  std::string target;
  std::string task_id;   // X-Delayq-Task-Id
  std::string attempt;   // X-Delayq-Attempt
  std::string instance;  // X-Delayq-Instance ("" when the server runs without --cluster)
  std::string shard;     // X-Delayq-Shard (--cluster)
  std::string fence;     // X-Delayq-Fence (--cluster): the shard lease's token
  json body;             // null when not JSON
  unsigned answered = 0;
  std::size_t index = 0;         // position in calls(): the order calls were recorded in
  std::int64_t received_ms = 0;  // now_ms() when the request had been read whole
};

/// An HTTP server on 127.0.0.1 (a free port) in the test process, on a thread
/// of its own. Every POST is recorded and answered with the status that
/// `answer(call, index)` returns (index counts from 0 over all calls); 0
/// means no answer at all (the connection stays open and silent), and `hold`
/// holds the call open until answer_held() answers it.
class push_receiver {
 public:
  using answer_fn = std::function<unsigned(const push_call&, std::size_t)>;
  /// What `answer` returns to hold a call until answer_held().
  static constexpr unsigned hold = 1;

  explicit push_receiver(answer_fn answer)
      : answer_(std::move(answer)),
        acceptor_(ioc_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
    accept();
    thread_ = std::thread([this] { ioc_.run(); });
  }
  ~push_receiver() {
    ioc_.stop();
    if (thread_.joinable()) thread_.join();
  }
  push_receiver(const push_receiver&) = delete;
  push_receiver& operator=(const push_receiver&) = delete;

  std::uint16_t port() const { return acceptor_.local_endpoint().port(); }
  std::string url(std::string_view path = "/hook") const {
    return "http://127.0.0.1:" + std::to_string(port()) + std::string(path);
  }

  std::vector<push_call> calls() const {
    std::lock_guard lock(mu_);
    return calls_;
  }

  /// Waits until at least `n` calls were answered; false on the guard.
  bool wait_for_calls(std::size_t n, std::chrono::milliseconds guard = hang_guard) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, guard, [&] { return calls_.size() >= n; });
  }

  /// Waits until a call pushed the task `id`; false on the guard.
  bool wait_for_task(const std::string& id) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, hang_guard, [&] {
      return std::any_of(calls_.begin(), calls_.end(),
                         [&](const push_call& c) { return c.task_id == id; });
    });
  }

  /// Calls that pushed the task `id`.
  std::size_t calls_for(const std::string& id) const {
    std::lock_guard lock(mu_);
    return static_cast<std::size_t>(std::count_if(
        calls_.begin(), calls_.end(), [&](const push_call& c) { return c.task_id == id; }));
  }

  /// Answers every call held so far (`answer` returned `hold`) with `status`,
  /// on the receiver's thread; their push_call::answered becomes `status`.
  void answer_held(unsigned status) {
    asio::post(ioc_, [this, status] {
      std::vector<std::shared_ptr<session>> held;
      {
        std::lock_guard lock(mu_);
        held.swap(held_);
        for (const auto& s : held) calls_[s->call_index].answered = status;
      }
      for (const auto& s : held) s->send(status);
    });
  }

  /// Waits until `pred(calls())` holds, checked at every call recorded, or
  /// `deadline` passes; returns pred's last value. `pred` runs under the
  /// receiver's lock, which holds up the calls coming in: keep it cheap (a
  /// scan of every call made each time delays the pushes by seconds when
  /// thousands come, and with them what a test measures).
  template <class Pred>
  bool wait_until(Pred pred, std::chrono::steady_clock::time_point deadline) {
    std::unique_lock lock(mu_);
    return cv_.wait_until(lock, deadline, [&] { return pred(std::as_const(calls_)); });
  }

 private:
  struct session : std::enable_shared_from_this<session> {
    session(push_receiver& r, tcp::socket s) : owner(r), stream(std::move(s)) {}
    void read() {
      req = {};
      http::async_read(stream, buffer, req,
                       [self = shared_from_this()](beast::error_code ec, std::size_t) {
                         if (!ec) self->respond();
                       });
    }
    void respond() {
      push_call c;
      c.received_ms = now_ms();
      c.target = std::string(req.target());
      c.task_id = std::string(req["X-Delayq-Task-Id"]);
      c.attempt = std::string(req["X-Delayq-Attempt"]);
      c.instance = std::string(req["X-Delayq-Instance"]);
      c.shard = std::string(req["X-Delayq-Shard"]);
      c.fence = std::string(req["X-Delayq-Fence"]);
      c.body = json::parse(req.body(), nullptr, false);
      if (c.body.is_discarded()) c.body = nullptr;
      std::size_t index;
      {
        std::lock_guard lock(owner.mu_);
        index = owner.next_index_++;
      }
      c.answered = owner.answer_(c, index);
      if (c.answered == 0 || c.answered == hold) {
        // Never answered (a push that must time out), or not yet: the
        // connection is kept open, silent, until the receiver goes or
        // answer_held().
        const bool held = c.answered == hold;
        c.answered = 0;
        std::lock_guard lock(owner.mu_);
        c.index = call_index = owner.calls_.size();
        owner.calls_.push_back(std::move(c));
        if (held)
          owner.held_.push_back(shared_from_this());
        else
          owner.silent_.push_back(shared_from_this());
        owner.cv_.notify_all();
        return;
      }
      const unsigned status = c.answered;
      {
        // Recorded before the answer is sent: a test that saw the call may
        // then wait on the server for what the answer causes.
        std::lock_guard lock(owner.mu_);
        c.index = call_index = owner.calls_.size();
        owner.calls_.push_back(std::move(c));
        owner.cv_.notify_all();
      }
      send(status);
    }
    void send(unsigned status) {
      res = http::response<http::string_body>(static_cast<http::status>(status), 11);
      res.set(http::field::content_type, "text/plain");
      res.body() = status / 100 == 2 ? "ok" : "failing on purpose";
      res.keep_alive(req.keep_alive());
      res.prepare_payload();
      http::async_write(stream, res,
                        [self = shared_from_this()](beast::error_code ec, std::size_t) {
                          if (!ec && self->res.keep_alive()) self->read();
                        });
    }
    push_receiver& owner;
    beast::tcp_stream stream;
    beast::flat_buffer buffer;
    http::request<http::string_body> req;
    http::response<http::string_body> res;
    std::size_t call_index = 0;  // this request's place in calls_
  };

  void accept() {
    acceptor_.async_accept([this](beast::error_code ec, tcp::socket s) {
      if (ec) return;
      std::make_shared<session>(*this, std::move(s))->read();
      accept();
    });
  }

  answer_fn answer_;
  asio::io_context ioc_;
  tcp::acceptor acceptor_;
  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<push_call> calls_;
  std::vector<std::shared_ptr<void>> silent_;   // sessions never answered
  std::vector<std::shared_ptr<session>> held_;  // sessions answer_held() answers
  std::size_t next_index_ = 0;
};

}  // namespace delayq::server_test
