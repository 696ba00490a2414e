// persistence/redis/write_pipeline.hpp - the Redis store's async_write(): a
// connection of its own, driven by a private I/O thread, on which batches
// are pipelined. Internal.
//
// A batch (one call of the write script, scripts.hpp) is appended to the
// connection's output as soon as it is submitted, whatever is still
// waiting for a reply, so batch k+1 travels while the server runs and
// fsyncs batch k. Redis answers in order; the thread matches each reply to
// the oldest open batch and calls its `done` there, in submission order,
// exactly once.
//
// Failures, per batch and truthful:
// - an error reply fails exactly its batch (the script changed nothing);
// - NOSCRIPT (the server's script cache was flushed): that batch and every
//   later open one are sent again as EVAL, in order, and the replies to
//   their first sending are discarded. Running a batch twice is harmless
//   (scripts.hpp), and the last run of every batch is in submission order;
// - the server closed the connection: when no open batch was wholly sent
//   (none can have run), they are sent once more, in order, on a new
//   connection; otherwise (and when that fails too, or the connection was
//   lost another way) each open batch fails with errc::outcome_unknown when
//   all its bytes had reached the socket (the server may have run it just
//   before it went away) and errc::store_unavailable when not. A batch that
//   may have run is never sent again: in a cluster another instance may
//   have acted on its first run meanwhile (issue 33: a task saved, run and
//   removed by its owner came back). A connection the server closed while
//   idle is noticed (a peek) and dialled anew before a batch goes out;
// - no reply and no progress for link_check, and a side dial of the server
//   that fails (link_probe.hpp: the server cannot be reached), or no reply
//   and no progress for command_timeout: each open batch fails
//   with errc::outcome_unknown when all its bytes had reached the socket
//   (the server may still run it) and errc::store_unavailable when not (an
//   incomplete command never runs); the connection is dropped, and the next
//   dial kills it on the server.
// - in a Redis Cluster (cluster_router.hpp): MOVED for a batch drops the
//   connection (with the replies still due on it: the old node runs none of
//   the later batches either, since the slot left it) and sends that batch
//   and every later open one again, in order, to the new owner; ASK does the
//   same towards the node it names, each batch behind an ASKING, until
//   every open batch has its answer (then the owner again); TRYAGAIN /
//   CLUSTERDOWN send them again after a short pause, and fail them as above
//   once that has gone on for command_timeout. After TRYAGAIN / CLUSTERDOWN
//   a later batch may already have run on that node before its earlier one
//   runs again: harmless, since the engine never has two batches about one
//   id in flight and a batch's effect does not depend on what was stored
//   (scripts.hpp). A master that cannot be dialled makes the pipeline read
//   the slot map again (a failover) before it fails the batches. A batch redirected more than
//   max_redirects times fails with errc::store_error. Each node's connection loads the write script
//   at its handshake (NOSCRIPT is handled as above anyway).
// The next batch dials again (with the store's backoff: within it, batches
// fail at once with errc::store_unavailable).
//
// The destructor lets the thread finish every batch submitted (each within
// command_timeout, or failed at once when the server cannot be reached),
// then joins it.
#pragma once

#include <utility>

#include <boost/system/error_code.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <optional>

#include "cluster_router.hpp"
#include "connection.hpp"
#include "link_probe.hpp"
#include "scripts.hpp"

namespace delayq::detail::redis {

class write_pipeline {
 public:
  using done_fn = std::function<void(boost::system::error_code)>;

  /// `opts` must outlive the pipeline. Every batch writes keys of hash
  /// `slot`. The thread starts at once; the connection is dialled with the
  /// first batch.
  write_pipeline(const redis_options& opts, std::string store_name, unsigned slot);
  ~write_pipeline();
  write_pipeline(const write_pipeline&) = delete;
  write_pipeline& operator=(const write_pipeline&) = delete;

  /// Queues `batch`; `done` runs on the pipeline's thread. Thread-safe.
  void submit(std::unique_ptr<write_batch> batch, done_fn done);

 private:
  struct open_batch {
    std::unique_ptr<write_batch> batch;
    done_fn done;
    std::uint64_t end = 0;       // stream offset just past its last byte
    bool maybe_applied = false;  // all its bytes reached a socket once
    bool retried = false;        // sent again after a lost connection
    bool evaled = false;         // sent as EVAL (after NOSCRIPT)
    int redirects = 0;           // MOVED / ASK replies it got
  };
  struct expected_reply {
    open_batch* batch;
    bool discard;  // the reply to a sending that was superseded
  };

  void run();
  bool connected() const noexcept { return cur_ && cur_->connected(); }
  connection& conn() noexcept { return *cur_; }
  void dial();
  void on_redirect(const cluster_redirect& r);
  void start_fresh();
  void append(open_batch& b, bool eval);
  void flush();
  void read();
  void on_reply(redisReply* r);
  void on_lost(int saved_errno, bool eof, bool timed_out, const std::string& why);
  bool resend_all(bool retry);
  void fail_open(const std::string& why, bool timed_out);
  void complete(boost::system::error_code ec);
  void wait(int timeout_ms);
  bool link_holds(std::chrono::steady_clock::time_point now);

  const redis_options& opts_;
  std::string name_;
  unsigned slot_;
  cluster_router router_;
  connection* cur_ = nullptr;  // the connection in use, of router_
  connection* ask_ = nullptr;  // after an ASK: the node it named
  bool asking_ = false;        // cur_ is ask_: each batch goes behind an ASKING
  std::optional<std::chrono::steady_clock::time_point> unstable_since_;  // TRYAGAIN since
  std::chrono::milliseconds pause_{10};
  int wake_fd_ = -1;

  std::mutex mutex_;
  std::deque<std::unique_ptr<open_batch>> queue_;  // submitted, not yet taken
  bool stopping_ = false;

  // The I/O thread's own.
  std::deque<std::unique_ptr<open_batch>> fresh_;
  std::deque<std::unique_ptr<open_batch>> open_;
  std::deque<expected_reply> expected_;
  std::string out_;
  std::size_t out_sent_ = 0;       // bytes of out_ already written
  std::uint64_t stream_base_ = 0;  // stream offset of out_[0]
  std::chrono::steady_clock::time_point last_progress_{};
  link_probe probe_;  // the side dial of a late reply
  std::chrono::steady_clock::time_point probe_started_{}, checked_at_{};

  std::thread thread_;
};

}  // namespace delayq::detail::redis
