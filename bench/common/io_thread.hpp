// io_thread.hpp - an io_context with a thread of its own, for the engine's
// timer in the benchmarks (engine/, e2e/).
#pragma once

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <thread>

namespace delayq::bench {

/// Runs an io_context on a thread of its own until destroyed; a work guard
/// keeps it running while nothing is queued.
///
/// Thread safety: io() may be used from any thread; construct and destroy on one.
class io_thread {
 public:
  io_thread() : guard_(boost::asio::make_work_guard(io_)), thread_([this] { io_.run(); }) {}
  ~io_thread() {
    guard_.reset();
    io_.stop();
    thread_.join();
  }
  io_thread(const io_thread&) = delete;
  io_thread& operator=(const io_thread&) = delete;
  boost::asio::io_context& io() noexcept { return io_; }

 private:
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard_;
  std::thread thread_;
};

}  // namespace delayq::bench
