// push_receiver.hpp - the receiver of the servers' pushes in
// delayq-bench-scaleout: an HTTP server on its own thread that answers every
// POST with 200 and records when it came, the task and the instance. The
// rounds read the records to time firing and failover.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "scaleout_common.hpp"

namespace delayq::bench_server::scaleout {

/// One push as the receiver recorded it, before answering it.
struct delivery {
  steady::time_point at;
  std::string task_id;   // X-Delayq-Task-Id
  std::string instance;  // X-Delayq-Instance
};

/// Listens on 127.0.0.1, a free port, from construction to destruction.
/// Every call is thread-safe.
class push_receiver {
 public:
  push_receiver();
  ~push_receiver();
  push_receiver(const push_receiver&) = delete;
  push_receiver& operator=(const push_receiver&) = delete;

  /// The URL to give delayq-server's --push.
  std::string url() const;
  void clear();
  std::vector<delivery> calls() const;
  std::size_t count() const;

  /// Waits until `done(calls)` holds or the deadline passes; false then.
  /// Polls every 5 ms instead of waking at every delivery: a notification
  /// per push would wake this thread up to ~30,000 times a second, CPU taken
  /// from the servers on a 2-core machine. The figures use the times the
  /// receiver recorded, so the poll costs no precision.
  template <class Pred>
  bool wait_until(steady::time_point deadline, Pred done) {
    for (;;) {
      {
        std::lock_guard lock(mu_);
        if (done(calls_)) return true;
      }
      if (steady::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

 private:
  struct session;  // one connection (push_receiver.cpp)

  void accept();

  boost::asio::io_context ioc_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::thread thread_;
  mutable std::mutex mu_;
  std::vector<delivery> calls_;
};

}  // namespace delayq::bench_server::scaleout
