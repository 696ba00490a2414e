// persistence/roles/strand_pipeline.hpp - the parts a store's write
// pipeline needs to run as handlers on an Asio strand: its lifetime (the
// batches not yet answered, the handlers running), a socket watched in the
// reactor, and the thread of its own that dials. Internal: shared by the
// PostgreSQL (postgres/pg_writer.cpp) and Redis (redis/write_pipeline.cpp)
// pipelines, which differ in their protocol and their failures only.
//
// The shape both follow. A pipeline keeps its state in a `core`, held by
// shared_ptr by every handler, so that a handler still queued in an
// io_context after the pipeline is gone finds memory that is still there,
// sees pipeline_life::closed, and does nothing. The core's strand runs on
// the io_context the store was given (task_store::drive_writes_on()), or on
// own_thread's io_context when none was. A dial blocks, so it always runs
// on own_thread and hands the connection back to the strand.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include <fcntl.h>
#include <unistd.h>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/strand.hpp>

#include "delayq/log.hpp"

namespace delayq::detail {

/// The batches a pipeline has not answered and the handlers running in it.
/// Thread-safe.
class pipeline_life {
 public:
  /// Every handler runs inside one: none runs once the pipeline is closed,
  /// and close() waits for the ones running when it closed.
  class scope {
   public:
    explicit scope(pipeline_life& l) : l_(l) {
      std::lock_guard lock(l.m_);
      ok_ = !l.closed_;
      if (ok_) ++l.running_;
    }
    ~scope() {
      if (!ok_) return;
      std::lock_guard lock(l_.m_);
      if (--l_.running_ == 0) l_.idle_.notify_all();
    }
    scope(const scope&) = delete;
    scope& operator=(const scope&) = delete;
    /// False once the pipeline closed: the handler must do nothing.
    bool ok() const noexcept { return ok_; }

   private:
    pipeline_life& l_;
    bool ok_ = false;
  };

  /// A batch was submitted.
  void submitted() {
    std::lock_guard lock(m_);
    ++pending_;
  }
  /// Calls a batch's `done` (what it throws is logged, never let out of
  /// the handler), then counts the batch answered.
  template <class Done>
  void finish(Done& done, boost::system::error_code ec, const std::string& name) {
    try {
      done(ec);
    } catch (const std::exception& e) {
      log(log_level::error, name + ": a write's completion threw: " + e.what());
    } catch (...) {
      log(log_level::error, name + ": a write's completion threw");
    }
    std::lock_guard lock(m_);
    if (--pending_ == 0) idle_.notify_all();
  }
  /// Runs `f` unless closed, under the lock close() takes: a job `f` posts
  /// is never posted after close() returned.
  template <class F>
  void unless_closed(F&& f) {
    std::lock_guard lock(m_);
    if (!closed_) f();
  }

  /// The pipeline's destructor: waits for every batch submitted to be
  /// answered (each ends within its deadlines), for ever when the pipeline
  /// drives itself (`foreign` false). On an executor given, which may have
  /// stopped, it gives up `limit` after it found it stopped (`stopped`,
  /// checked every 100 ms; null when its kind of context cannot tell: then
  /// `limit` after it began): the batches left are logged and dropped,
  /// their `done` never called. Then closes, and waits for the handlers
  /// running.
  void close(bool foreign, const std::function<bool()>& stopped, std::chrono::milliseconds limit,
             const std::string& name) {
    std::unique_lock lock(m_);
    const auto idle = [&] { return pending_ == 0; };
    if (!foreign) {
      idle_.wait(lock, idle);
    } else {
      std::optional<std::chrono::steady_clock::time_point> since;
      while (!idle_.wait_for(lock, std::chrono::milliseconds{100}, idle)) {
        const auto now = std::chrono::steady_clock::now();
        if (stopped && !stopped()) {
          since.reset();
          continue;
        }
        if (!since) since = now;
        if (now - *since < limit) continue;
        log(log_level::error, name + ": " + std::to_string(pending_) +
                                  " write(s) unconfirmed when the store closed (its io_context "
                                  "stopped): dropped, their outcome unknown");
        break;
      }
    }
    closed_ = true;
    // A handler still running (the one whose completion let the wait above
    // end, say) finishes before the store it may read goes.
    idle_.wait(lock, [&] { return running_ == 0; });
  }

 private:
  std::mutex m_;
  std::condition_variable idle_;
  std::size_t pending_ = 0;  // submitted, `done` not called yet
  std::size_t running_ = 0;  // handlers inside a scope
  bool closed_ = false;
};

/// A dial for batches not yet sent failed: none of them happened. Logs
/// why, and fails each (a queue of pointers to batches with a `done`), in
/// order.
template <class Queue>
void fail_unsent(Queue& fresh, pipeline_life& life, const std::string& name, const std::string& why,
                 boost::system::error_code ec) {
  log(log_level::error, name + ": async write failed: " + why);
  while (!fresh.empty()) {
    auto b = std::move(fresh.front());
    fresh.pop_front();
    life.finish(b->done, ec, name);
  }
}

/// Whether the context `ex` runs on has stopped, for pipeline_life::close():
/// an io_context's executor (as io_context::get_executor() gives it) can
/// tell; null for any other.
inline std::function<bool()> stopped_probe(const boost::asio::any_io_executor& ex) {
  const auto* io = ex.target<boost::asio::io_context::executor_type>();
  if (!io) return nullptr;
  return [ctx = &io->context()] { return ctx->stopped(); };
}

/// A connection's socket, watched in the strand's reactor. The reactor
/// watches a duplicate: the client library may close its own descriptor
/// when the server goes, and the number may be reused before the pipeline
/// lets go; the duplicate stays the pipeline's until release(). Only
/// async_wait is used: the library does its own reads and writes. Not
/// thread-safe: the strand's.
class socket_watch {
 public:
  using strand_type = boost::asio::strand<boost::asio::any_io_executor>;
  using wait_type = boost::asio::posix::stream_descriptor::wait_type;

  explicit socket_watch(strand_type strand) : strand_(std::move(strand)) {}

  /// Watches `fd` (duplicated) instead of what was watched; false when it
  /// cannot be duplicated (or is -1).
  bool watch(int fd) {
    release();
    const int mine = fd < 0 ? -1 : ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (mine < 0) return false;
    try {
      socket_.emplace(strand_, mine);  // registers it with the reactor
    } catch (const boost::system::system_error&) {
      ::close(mine);
      return false;
    }
    return true;
  }
  bool watching() const noexcept { return socket_.has_value(); }

  /// Takes the duplicate out of the reactor and closes it (before the
  /// library closes its own, so that a close with a reset still resets).
  /// Waits queued on it end and find the generation moved on.
  void release() noexcept {
    if (socket_) {
      boost::system::error_code ignored;
      socket_->close(ignored);
      socket_.reset();
    }
    ++gen_;
    reading_ = writing_ = false;
  }

  /// Queues a wait for `what`, unless one is queued on this socket already;
  /// `then()` runs on the strand when it ends (or is aborted). Queueing a
  /// wait re-arms the descriptor in epoll (EPOLL_CTL_MOD in Boost 1.74),
  /// which reports a socket that is ready already: no edge is lost. `then`
  /// holds what keeps this object alive (the pipeline's core).
  template <class Then>
  void wait(wait_type what, Then then) {
    bool& flag = what == wait_type::wait_write ? writing_ : reading_;
    if (flag || !socket_) return;
    flag = true;
    socket_->async_wait(
        what, [this, what, gen = gen_, then = std::move(then)](boost::system::error_code) mutable {
          // A wait that ends after the socket was replaced leaves the new
          // one's flag alone.
          if (gen == gen_) (what == wait_type::wait_write ? writing_ : reading_) = false;
          then();
        });
  }

  /// Reads what the socket holds into `buf`, unless a read (or a wait for
  /// reading) is queued already; `then(ec, n, current)` runs on the strand
  /// when it ends, `current` false for a read of a socket since replaced
  /// (whose bytes must be dropped). For a pipeline that does its own reads:
  /// unlike a wait, a read is tried at once and then left in the reactor
  /// as it stands, with no epoll_ctl each time (Boost 1.74 re-arms the
  /// descriptor for each wait). The descriptor becomes non-blocking, and
  /// with it the duplicated one (they share their flags).
  template <class Then>
  void read(boost::asio::mutable_buffer buf, Then then) {
    if (reading_ || !socket_) return;
    reading_ = true;
    socket_->async_read_some(buf, [this, gen = gen_, then = std::move(then)](
                                      boost::system::error_code ec, std::size_t n) mutable {
      const bool current = gen == gen_;
      if (current) reading_ = false;
      then(ec, n, current);
    });
  }

 private:
  strand_type strand_;
  std::optional<boost::asio::posix::stream_descriptor> socket_;
  std::uint64_t gen_ = 0;
  bool reading_ = false, writing_ = false;
};

/// A pipeline's own thread: it runs every dial, and the strand too when no
/// io_context was given. Thread-safe.
class own_thread {
 public:
  own_thread() : work_(boost::asio::make_work_guard(io_)), thread_([this] { io_.run(); }) {}
  ~own_thread() { join(); }
  own_thread(const own_thread&) = delete;
  own_thread& operator=(const own_thread&) = delete;

  boost::asio::io_context& io() noexcept { return io_; }
  /// Ends the thread once nothing is queued on it (a dial under way
  /// finishes first).
  void join() {
    work_.reset();
    if (thread_.joinable()) thread_.join();
  }

 private:
  boost::asio::io_context io_{1};
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
  std::thread thread_;
};

}  // namespace delayq::detail
