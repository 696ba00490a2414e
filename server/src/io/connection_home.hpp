// io/connection_home.hpp - where an accepted connection's handlers run: the
// executor types the HTTP and beanstalk listeners give their sessions.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <chrono>
#include <memory>
#include <utility>

namespace delayq::server {

/// A connection's executor: a strand of one I/O thread's io_context, by
/// its concrete type. Not any_io_executor: a strand is too big for
/// any_executor's inline buffer, so each copy an operation makes of a
/// type-erased one (to track its work, to ask its properties) is a heap
/// allocation, several a request (docs/benchmarks.md, "What a request
/// costs").
using connection_executor = boost::asio::strand<boost::asio::io_context::executor_type>;

/// A timer on a connection's strand.
using connection_timer =
    boost::asio::basic_waitable_timer<std::chrono::steady_clock,
                                      boost::asio::wait_traits<std::chrono::steady_clock>,
                                      connection_executor>;

/// Where a new connection runs: the io_context of its I/O thread (the
/// connection gets a strand of it), and what the connection holds until it
/// closes (the chooser counts its connections by it; may be null).
using connection_home = std::pair<boost::asio::io_context::executor_type, std::shared_ptr<void>>;

}  // namespace delayq::server
