// persistence/redis/write_pipeline.hpp - the Redis store's async_write(): a
// connection of its own on which batches are pipelined, driven by handlers
// on a strand. Internal.
//
// A batch (one call of the write script, scripts.hpp) is appended to the
// connection's output as soon as it is submitted, whatever is still
// waiting for a reply, so batch k+1 travels while the server runs and
// fsyncs batch k. Redis answers in order; the pipeline matches each reply
// to the oldest open batch and calls its `done`, in submission order,
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
// Where it runs (as PostgreSQL's, pg_writer.hpp; the parts both share are in
// ../roles/strand_pipeline.hpp). The pipeline is driven by handlers on a
// strand: of the io_context given (task_store::drive_writes_on():
// delayq-server hands it its engine's), or of one of its own, run by a
// thread of its own. With an io_context given, the connection's socket
// waits in that io_context's reactor: a batch submitted on a thread of it is
// sent there as soon as the submitting handler returns, and its `done` runs
// there too, so the write crosses no other thread. What blocks runs on the
// pipeline's own thread, and hands the connection back to the strand: a
// dial (with its handshake), reading the cluster's slot map after a MOVED or
// a failed dial, and the pause after TRYAGAIN / CLUSTERDOWN. The side dial
// of link_probe.hpp does not block: its socket waits in the reactor too.
//
// The destructor lets the pipeline finish every batch submitted (each within
// command_timeout, or failed at once when the server cannot be reached). On
// an io_context given, that needs the io_context running: a destructor that
// finds it stopped waits 2 x command_timeout + 1 s more, logs the batches
// left and drops them without calling their `done`. Never destroy the
// pipeline from its own `done`, or from any handler of the io_context it
// runs on: it would wait for itself (and, on an io_context of one thread,
// drop what is left).
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/system/error_code.hpp>
#include <functional>
#include <memory>
#include <string>

#include "../roles/strand_pipeline.hpp"
#include "scripts.hpp"

namespace delayq::detail::redis {

/// Thread safety: submit() from any thread.
class write_pipeline {
 public:
  using done_fn = std::function<void(boost::system::error_code)>;

  /// Every batch writes keys of hash `slot`. `io`: the executor to drive it
  /// on (above), or none for a thread of its own. The connection is
  /// dialled with the first batch.
  write_pipeline(const redis_options& opts, std::string store_name, unsigned slot,
                 boost::asio::any_io_executor io = {});
  ~write_pipeline();
  write_pipeline(const write_pipeline&) = delete;
  write_pipeline& operator=(const write_pipeline&) = delete;

  /// Queues `batch`; `done` runs on the pipeline's strand. Thread-safe.
  void submit(std::unique_ptr<write_batch> batch, done_fn done);

 private:
  struct core;
  own_thread own_;  // the dials' thread (and the strand's, without an executor given)
  std::shared_ptr<core> core_;
};

}  // namespace delayq::detail::redis
