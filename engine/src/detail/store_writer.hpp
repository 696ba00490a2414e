// The engine's only way to change its store: a pipelined group commit.
//
// The engine hands every change (a write_op) to submit() while holding its
// own lock, so the queue holds changes in the order the engine decided them.
// A writer thread takes everything queued, turns it into one batch and gives
// it to task_store::async_write(). With nothing in flight a batch goes at
// once (a lone change pays one round trip, no added wait); with a batch in
// flight the next one gathers everything that arrives meanwhile (group
// commit), and only a backlog of at least pipeline_threshold changes goes
// out while others are still in flight, as far as the store allows
// (max_writes_in_flight(): Redis pipelines, SQLite does not). After a batch
// of several changes landed, the next one lingers up to `linger` (and at most
// a quarter of that batch's write) for as many to be queued again, so that
// callers who each wait for their write keep sharing one durable write
// (MySQL's group commit delay, bounded). When a batch's outcome is known the
// writer reports each of its ops to the engine (on_done: on the writer
// thread, or as "Hand-offs" says), exactly once.
//
// Hand-offs. A store that pipelines (max_writes_in_flight() > 1: its
// async_write() queues the batch for a thread of its own) is driven without
// the writer thread in the way: a change submitted while the writer may send
// (nothing in flight, no linger pending) is handed to async_write() by the
// submitting thread itself once it let go of the engine's locks (kick()),
// and a batch's completion reports it, and hands the next batch on, from the
// store's thread. A durable change then crosses one thread and comes back:
// the caller's, the store's. The writer thread keeps what needs waiting:
// lingers, kept writes' retries, and the stop.
//
// Order per id. At most one batch holding a change to a given id is in
// flight at a time: a change to an id whose earlier change is still in flight
// waits for the next batch. So a batch that fails can never be overtaken by a
// newer change to the same id that succeeds, and the store sees the changes
// to one id in the engine's order even across failures and reconnections.
//
// Changes that must land. Some changes nobody waits for (the removal after a
// success, a retry's new attempt count, a dead letter): when their batch
// fails they are reported once, with the error, and also kept. Kept changes
// go out again every second while there are any, and at once, in front of
// it, when a newer change to the same id is sent; unless that newer change
// covers them (it rewrites every area they touch: live task, dead letter),
// in which case they are moot and dropped. A kept bury is therefore not lost
// to a later save of the same id (the save covers only the live area), and a
// kept removal never lands after a newer save.
//
// Fenced changes (a cluster's attempt outcomes). A batch refused with
// errc::lease_lost (some shard's lease moved on since the attempt started)
// drops its fenced changes (reported with that error, never kept) and writes
// the others again at once (the store refuses a shard's part whole, and
// batches are idempotent).
//
// A store that says in_process() keeps no live tasks: live changes complete
// at once with nothing written, dead-letter changes are written on the
// caller's thread (a requeue becomes a purge), and there is no writer thread.
#pragma once

#include <atomic>
#include <boost/system/error_code.hpp>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "delayq/engine_metrics.hpp"
#include "delayq/task.hpp"
#include "delayq/task_store.hpp"
#include "detail/type_counters.hpp"

namespace delayq::detail {

/// What the engine keeps with an op for when its outcome comes back (a
/// waiting caller, a completion handler, what to restore on failure).
struct op_context {
  virtual ~op_context() = default;
};

/// One change for the store, and the engine's note of why it was made.
struct write_op {
  change_kind what = change_kind::save;
  /// save, revive, bury: the task; remove, purge: only its id is read.
  task t;
  std::string error;                                // bury
  std::chrono::system_clock::time_point died_at{};  // bury
  /// Nobody waits for it: keep it and write it again until it lands.
  bool must_land = false;
  /// A sharded store: the fencing token of the task's shard
  /// (store_change::fence), 0 for none. A fenced change the store refuses
  /// with errc::lease_lost is dropped, not kept: the shard's new owner runs
  /// the task again.
  std::uint64_t fence = 0;
  /// The outcome, set by the writer before the op is reported.
  boost::system::error_code ec;

  /// The engine's, opaque to the writer: the change this op carries
  /// (changes/change.hpp), handed back with the op's outcome.
  std::unique_ptr<op_context> ctx;
  /// Called (by the engine, outside its lock) with the first outcome; a
  /// kept copy does not carry it.
  std::function<void(boost::system::error_code)> on_stored;

  // The writer's.
  std::uint32_t group = 1;  // the first op of a group: how many go in one batch with it
  std::uint64_t id_hash = 0;
  std::uint64_t epoch = 0;
  bool report = true;  // false for a kept copy: its first outcome was reported already
};

/// Thread safety: every member is safe to call from any thread; on_done runs
/// with no lock of the writer held, one batch at a time and in the order the
/// batches were sent, on the writer thread, the store's completion thread (a
/// pipelining store), or the caller's (send(), kick(), in_process()), and may
/// call submit().
class store_writer {
 public:
  struct options {
    /// Ops queued and not yet sent before submit() refuses ops someone waits
    /// for (must-land ops are always taken: dropping one would lose it).
    std::size_t max_queued = 100'000;
    /// Most ops in one batch.
    std::size_t max_batch = 4096;
    /// Ops queued before a batch goes out while others are in flight.
    std::size_t pipeline_threshold = 256;
    /// After a batch of several changes landed, how long the next batch may
    /// wait for as many to be queued again (their callers coming back with
    /// their next change), so they share one durable write instead of
    /// splitting into two. Never after a lone change, and never longer than
    /// a quarter of what the last batch's write took: waiting pays for a
    /// write that costs an fsync (SQLite, PostgreSQL, Redis with appendfsync
    /// always), not for one about as cheap as the wait (Redis's everysec,
    /// about 110 us a write with eight busy connections: the full 150 us,
    /// or half the write, cost them a fifth of their cycles).
    std::chrono::microseconds linger{150};
    /// How long kept ops wait before they are written again.
    std::chrono::milliseconds retry_interval{1000};
  };
  using done_fn = std::function<void(std::span<write_op> ops)>;

  store_writer(task_store& store, options opts, done_fn on_done);
  ~store_writer();
  store_writer(const store_writer&) = delete;
  store_writer& operator=(const store_writer&) = delete;

  /// Whether live changes are written at all (false for an in_process() store).
  bool persists_live() const noexcept { return !in_process_; }

  enum class result {
    queued,  ///< Taken: on_done reports it later.
    done,    ///< Written (or nothing to write) on this thread: op.ec is the outcome.
    busy,    ///< Refused: max_queued ops are waiting and nobody would keep this one.
    send,    ///< Taken, and the caller is the sender now: it must call send().
    kick,    ///< Taken; the caller must call kick() once it holds no lock of the engine.
  };
  /// Hands `group` to the writer, to be written in one batch (atomically);
  /// its ops are moved from when queued. Call it in the order the changes
  /// must be applied (under the engine's lock). A group is refused (busy)
  /// only when its first op is not must_land.
  ///
  /// `may_send`: the caller may write the store itself. When nothing is in
  /// flight or being sent, it then becomes the sender (result::send) and
  /// must call send() once it holds no lock of the engine: its change pays
  /// one store write and no thread hand-off; the changes others queue while
  /// it writes go out together in the thread's next batch (group commit).
  result submit(std::span<write_op> group, bool may_send = false);

  /// The sender's write (after result::send): writes what is queued, the
  /// caller's change among it, as one batch on this thread and reports it
  /// (on_done, here); the writer thread takes whatever is queued meanwhile.
  /// Call it holding no lock.
  void send();

  /// After result::kick: hands what is queued to the store's async_write()
  /// from this thread, as the writer thread would (a pipelining store only:
  /// it returns at once, and the outcome is reported from the store's
  /// thread). Call it holding no lock.
  void kick();

  /// Blocks until fewer than max_queued ops wait (for callers that chose to
  /// wait rather than get errc::busy). Never call it under the engine's lock.
  void wait_for_room();

  /// Blocks until every op submitted before the call was reported (kept ops
  /// whose store is down are not waited for).
  void flush();

  /// Writes everything queued, tries the kept ops once more, waits for all
  /// of it, and stops the writer thread. Later submits are written on the
  /// caller's thread. Idempotent.
  void stop();

  /// Ops kept for retry (their store write failed), until their retry lands
  /// (or is dropped: a newer change rewrote them, or a lease was lost).
  std::size_t kept() const;
  /// Ops queued and not yet sent.
  std::size_t queued() const;
  /// Write latency and size histograms, errors, and whether the store is out
  /// (ops kept for retry, or the last write failed).
  void metrics(store_metrics& out) const;

 private:
  struct batch {
    std::vector<write_op> ops;
    std::vector<store_change> changes;
    boost::system::error_code ec;
    std::chrono::steady_clock::duration took{};  // from send to outcome
    bool done = false;
  };

  static std::uint64_t hash_id(const std::string& id) noexcept;
  static bool covers(change_kind newer, change_kind older) noexcept;
  void run();
  // Under mutex_: whether a batch may go out now (no sender, no id in flight
  // in the way, room in flight, no linger pending). pump() alone sends.
  bool may_send_now(std::chrono::steady_clock::time_point now) const;
  // Under mutex_ (released while sending): sends batches while may_send_now();
  // `writer`: the writer thread, which writes a lone change itself.
  void pump(std::unique_lock<std::mutex>& lock, bool writer);
  // Under mutex_ (released while reporting): reports the batches at the
  // front of in_flight_ that are done, unless another thread is at it.
  void report(std::unique_lock<std::mutex>& lock);
  // Under mutex_ (released while writing): writes `b`, in flight already,
  // with store_.write() on this thread, and marks it done.
  void write_here(batch& b, std::unique_lock<std::mutex>& lock);
  // An async_write() completion, on the store's thread.
  void landed(batch* raw, boost::system::error_code ec, std::chrono::steady_clock::duration took);
  // Under mutex_: moves queued ops into a new batch (see "Order per id").
  std::unique_ptr<batch> form_batch();
  // Under mutex_ (released while reporting): a batch's outcome came back.
  void finish(std::unique_ptr<batch> b, std::unique_lock<std::mutex>& lock);
  void write_inline(write_op& op);
  void note_reported(const write_op& op);
  // A write of `changes` changes that took from `sent` to now, and its outcome,
  // counted; returns what it took.
  std::chrono::steady_clock::duration note_write(std::size_t changes,
                                                 std::chrono::steady_clock::time_point sent,
                                                 const boost::system::error_code& ec) noexcept;

  task_store& store_;
  const options opts_;
  const done_fn on_done_;
  const bool in_process_;
  const std::size_t max_in_flight_;
  const bool direct_;  // a pipelining store: see "Hand-offs"

  mutable std::mutex mutex_;
  std::condition_variable cv_;       // wakes the writer thread
  std::condition_variable settled_;  // an op was reported, or room appeared
  std::deque<write_op> queue_;
  std::deque<std::unique_ptr<batch>> in_flight_;  // sent, oldest first
  std::size_t arrived_ = 0;                       // batches in in_flight_ that are done
  std::unordered_map<std::uint64_t, std::uint32_t> in_flight_ids_;
  std::vector<write_op> kept_;  // oldest first
  std::unordered_map<std::uint64_t, std::uint32_t> kept_ids_;
  // Kept ops not landed (nor dropped) yet: in kept_, or queued again, or in
  // flight. kept() counts these, not kept_: an op on its retry is still
  // unwritten, and a shard must not be handed over meanwhile.
  std::size_t kept_live_ = 0;
  std::chrono::steady_clock::time_point next_retry_{};
  std::size_t last_batch_ = 0;  // ops in the batch that landed last
  std::chrono::steady_clock::time_point linger_until_{};
  // flush(): ops are counted per epoch until reported.
  std::uint64_t epoch_ = 0;
  std::map<std::uint64_t, std::size_t> outstanding_;
  bool sending_ = false;    // a caller is the sender (send()): nobody else sends
  bool pumping_ = false;    // a thread is in pump(): batches go out in one order
  bool reporting_ = false;  // a thread is in report(): batches are reported in one order
  bool blocked_ = false;    // everything queued waits for an id in flight
  // Threads other than the writer's in landed(): the writer thread ends only
  // once none is left.
  std::size_t helpers_ = 0;
  bool stopping_ = false;
  bool stopped_ = false;
  bool retry_now_ = false;
  // Metrics: atomics, since in-process stores write on the callers' threads.
  fixed_histogram<15> write_latency_{store_write_us};
  fixed_histogram<13> batch_size_{store_batch_changes};
  std::atomic<std::uint64_t> write_errors_{0};
  std::atomic<bool> last_failed_{false};
  std::thread thread_;  // last: started once everything above is set
};

}  // namespace delayq::detail
