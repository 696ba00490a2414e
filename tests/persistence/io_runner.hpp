// tests/persistence/io_runner.hpp - an io_context with a thread of its own,
// on which a test drives a store's write pipeline
// (task_store::drive_writes_on()), as delayq-server drives it on its
// engine's.
#pragma once

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <thread>

namespace delayq::test {

/// Runs until destroyed (then finishes what is queued).
struct io_runner {
  boost::asio::io_context io{1};
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work =
      boost::asio::make_work_guard(io);
  std::thread thread{[this] { io.run(); }};
  ~io_runner() {
    work.reset();
    if (thread.joinable()) thread.join();
  }
};

}  // namespace delayq::test
