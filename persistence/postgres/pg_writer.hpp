// persistence/postgres/pg_writer.hpp - async_write() of the PostgreSQL
// store: a connection of its own in pipeline mode, on which batches travel
// back to back. Internal.
//
// A batch (the statements of one transaction, pg_batch.hpp, encoded on the
// submitting thread) goes on the wire as soon as it is submitted, followed
// by its Sync, whatever is still waiting for an answer: batch k+1 is parsed
// and run while batch k's COMMIT waits for its WAL flush. The server answers
// in order; the pipeline matches each Sync to the oldest open batch and
// calls its `done`, in submission order, exactly once, after COMMIT.
//
// Failures, per batch and truthful:
// - an error the server answered (a SQLSTATE) fails its batch alone: its
//   transaction rolled back, the batches before and after are unaffected;
//   but a serialization failure or a deadlock (a row the generation rotation
//   moved under it, a fence's lock against a lease round: pg_rotation.hpp)
//   sends the batch again, behind the others, up to three times. Two
//   batches in flight never hold a change to the same id (the engine's
//   writer sees to it), so the later ones landing first changes nothing;
// - the connection broke (the server restarted, or ended the connection):
//   the pipeline dials once more and sends every open batch again, in order
//   (every batch is idempotent: pg_batch.hpp); if that fails too, or the
//   batches were sent again already, each open batch fails as below;
// - nothing moved for command_timeout, or the connection broke twice: each
//   open batch fails with errc::outcome_unknown when all of it had reached
//   the socket (the server may have committed it) and
//   errc::store_unavailable when not (an incomplete pipeline never
//   commits). A timeout sends a cancel request first. The engine keeps what
//   must land and writes it again.
// The next batch dials again, obeying the pool's backoff (within it,
// batches fail at once with errc::store_unavailable).
//
// Where it runs. The pipeline is driven by handlers on a strand: of the
// io_context given (task_store::drive_writes_on(): delayq-server hands it
// its engine's), or of one of its own, run by a thread of its own. With an
// io_context given, the connection's socket waits in that io_context's
// reactor: a batch submitted on a thread of it is sent there as soon as the
// submitting handler returns, and its `done` runs there too, so the write
// crosses no other thread. Only a dial, which blocks, runs on the
// pipeline's own thread and hands the connection back to the strand. The
// reactor watches a duplicate of the socket, which the pipeline closes
// before libpq closes its own.
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

#include <utility>

#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/system/error_code.hpp>
#include <functional>
#include <memory>
#include <span>

#include "../roles/strand_pipeline.hpp"
#include "pg_batch.hpp"
#include "pg_pool.hpp"

namespace delayq::detail::pg {

/// Thread safety: submit() from any thread.
class write_pipeline {
 public:
  using done_fn = std::function<void(boost::system::error_code)>;

  /// `calls` (its options, names and backoff) and `sql` must outlive the
  /// pipeline. `io`: the executor to drive it on (above), or none for a
  /// thread of its own. The connection is dialled with the first batch.
  write_pipeline(pool& calls, const schema_sql& sql, std::uint32_t shards,
                 const std::atomic<int>& gen, boost::asio::any_io_executor io = {});
  ~write_pipeline();
  write_pipeline(const write_pipeline&) = delete;
  write_pipeline& operator=(const write_pipeline&) = delete;

  /// Encodes `changes` and queues them; `done` runs on the pipeline's
  /// strand (or here, for a batch that cannot be encoded). `changes` stay
  /// valid until then.
  void submit(std::span<const store_change> changes, done_fn done);

 private:
  struct core;
  own_thread own_;  // the dials' thread (and the strand's, without an executor given)
  std::shared_ptr<core> core_;
};

}  // namespace delayq::detail::pg
