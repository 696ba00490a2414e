// tests/persistence/io_runner.hpp - an io_context with a thread of its own,
// on which a test drives a store's write pipeline
// (task_store::drive_writes_on()), as delayq-server drives it on its
// engine's.
#pragma once

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <cstdlib>
#include <memory>
#include <thread>

#include "delayq/task_store.hpp"

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

/// Where a Redis store's write pipeline runs in a test: on a thread of its
/// own, or, in the "<io_context>" copies of the cases
/// (DELAYQ_TEST_REDIS_WRITES_ON_IO=1, tests/persistence/CMakeLists.txt), on
/// an io_context of the test's, as in delayq-server. Declare it before the
/// store: it must outlive it.
struct pipeline_home {
  std::unique_ptr<io_runner> io;
  pipeline_home() {
    if (const char* on = std::getenv("DELAYQ_TEST_REDIS_WRITES_ON_IO"); on && *on == '1')
      io = std::make_unique<io_runner>();
  }
  void drive(task_store& store) {
    if (io) store.drive_writes_on(io->io.get_executor());
  }
};

}  // namespace delayq::test
