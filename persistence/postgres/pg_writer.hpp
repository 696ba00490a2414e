// persistence/postgres/pg_writer.hpp - async_write() of the PostgreSQL
// store: a connection of its own in pipeline mode, driven by a private
// thread, on which batches travel back to back. Internal.
//
// A batch (the statements of one transaction, pg_batch.hpp, encoded on the
// submitting thread) goes on the wire as soon as it is submitted, followed
// by its Sync, whatever is still waiting for an answer: batch k+1 is parsed
// and run while batch k's COMMIT waits for its WAL flush. The server answers
// in order; the thread matches each Sync to the oldest open batch and calls
// its `done` there, in submission order, exactly once, after COMMIT.
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
//   the thread dials once more and sends every open batch again, in order
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
// The destructor lets the thread finish every batch submitted (each within
// command_timeout, or failed at once when the server cannot be reached).
#pragma once

#include <utility>

#include <atomic>
#include <boost/system/error_code.hpp>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "pg_batch.hpp"
#include "pg_pool.hpp"

namespace delayq::detail::pg {

/// Thread safety: submit() from any thread.
class write_pipeline {
 public:
  using done_fn = std::function<void(boost::system::error_code)>;

  /// `calls` (its options, names and backoff) and `sql` must outlive the
  /// pipeline. The thread starts at once; the connection is dialled with
  /// the first batch.
  write_pipeline(pool& calls, const schema_sql& sql, std::uint32_t shards,
                 const std::atomic<int>& gen);
  ~write_pipeline();
  write_pipeline(const write_pipeline&) = delete;
  write_pipeline& operator=(const write_pipeline&) = delete;

  /// Encodes `changes` and queues them; `done` runs on the pipeline's
  /// thread (or here, for a batch that cannot be encoded). `changes` stay
  /// valid until then.
  void submit(std::span<const store_change> changes, done_fn done);

 private:
  struct open_batch {
    write_batch batch;
    std::span<const store_change> changes;
    done_fn done;
    // What each query result of the pipeline belongs to: a prepare (its
    // name) or a statement (its index).
    std::vector<std::pair<std::string_view, std::size_t>> expected;
    std::size_t at = 0;        // the expected result being read
    bool have_result = false;  // of expected[at]
    std::vector<result_ptr> results;
    std::optional<pg_failure> error;
    bool sent = false;     // all of it reached the socket
    bool retried = false;  // sent again after a lost connection
    int conflicts = 0;     // sent again after a serialization failure or deadlock

    // Forgets what a sending of it left, before it is sent again.
    void unsend() {
      sent = false;
      expected.clear();
      at = 0;
      have_result = false;
      results.clear();
      error.reset();
    }
  };

  void run();
  void wait(int timeout_ms);
  void start_fresh();
  void append(open_batch& b);
  void flush();
  void read();
  void complete_front();
  void forget_prepare(std::string_view name);
  void fail_open(const std::string& why, bool timed_out);
  // Dials again and sends every open batch again; false when it cannot.
  bool resend_open(const std::string& why);

  pool& calls_;
  const schema_sql& sql_;
  std::uint32_t shards_;
  const std::atomic<int>& gen_;
  std::unique_ptr<connection> conn_;
  std::set<std::string, std::less<>> prepares_sent_;  // on conn_, answered or not
  int wake_fd_ = -1;

  std::mutex mutex_;
  std::deque<std::unique_ptr<open_batch>> queue_;  // submitted, not taken yet
  bool stopping_ = false;

  // The thread's own.
  std::deque<std::unique_ptr<open_batch>> fresh_, open_;
  bool unflushed_ = false;
  std::chrono::steady_clock::time_point last_progress_{};

  std::thread thread_;
};

}  // namespace delayq::detail::pg
