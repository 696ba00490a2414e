// delayq/task_store.hpp - the interface every persistence backend implements:
// the live tasks. Dead letters, settings, sequences and shards are roles a
// store may offer besides (dead_letter_store.hpp, settings_store.hpp,
// sequence_store.hpp, shard_store.hpp).
#pragma once

#include <utility>

#include <boost/asio/any_io_executor.hpp>
#include <boost/system/error_code.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "delayq/dead_letter_store.hpp"
#include "delayq/error.hpp"
#include "delayq/sequence_store.hpp"
#include "delayq/settings_store.hpp"
#include "delayq/task.hpp"

namespace delayq {

class shard_store;     // delayq/shard_store.hpp: only a cluster store needs it
class schedule_store;  // delayq/schedule_store.hpp: recurring schedules

/// What list() found.
struct list_summary {
  std::size_t tasks = 0;        ///< Records decoded and handed to the sink.
  std::size_t quarantined = 0;  ///< Records that could not be decoded and were
                                ///< moved to the store's quarantine area.
};

/// A position in the order list_due() reads in: by due time, then by id
/// (bytewise). The default is before every task.
struct due_cursor {
  std::int64_t due_ms = std::numeric_limits<std::int64_t>::min();  ///< ms since the Unix epoch
  std::string id;                                                  ///< "" sorts before every id
};

/// What one change of a write() batch does to the store.
enum class change_kind : std::uint8_t {
  save,    ///< Upsert the live task `*task`.
  remove,  ///< Delete the live task `task->id` (absent: nothing to do).
  bury,    ///< Delete the live task `task->id` and upsert the dead letter
           ///< {*task, error, died_at}.
  revive,  ///< Delete the dead letter `task->id` and upsert `*task` as live.
  purge,   ///< Delete the dead letter `task->id` (absent: nothing to do).
};

/// One change of a write() batch. Points at memory the caller keeps valid
/// until the call returns (async_write(): until `done` was called).
struct store_change {
  change_kind what = change_kind::save;
  /// Every kind: the task (remove and purge read only its id).
  const delayq::task* task = nullptr;
  /// bury: why the last attempt failed.
  std::string_view error;
  /// bury: when the task died.
  std::chrono::system_clock::time_point died_at{};
  /// A sharded store (shard_store, task_store::sharded()) only: the fencing token the
  /// writer holds on the shard of `task->id` (shard_lease::token), or 0 for
  /// an unfenced change. The store applies a fenced change only while the
  /// shard's lease still carries that token; see write().
  std::uint64_t fence = 0;
  /// Set by a sharded store's write() that reports errc::lease_lost: true on
  /// every change of a shard part it refused (those did not land; every
  /// change left false did). A store that reports lease_lost without setting
  /// any leaves the caller to assume every fenced change was refused and
  /// every unfenced one may not have landed.
  mutable bool refused = false;
};

/// Where tasks live while they wait: the engine saves a task before it
/// acknowledges a schedule, and removes it only after its executor succeeded.
///
/// A store is a plain key-value set of tasks keyed by `task::id`. That is
/// all a store must implement. It may offer more, each a role of its own that
/// it inherits and hands out through an accessor here (null: not offered):
/// - dead_letters(): a dead-letter area keyed the same way (dead_letter_store);
/// - settings(): a few named values (settings_store);
/// - sequences(): named counters that never hand a number out twice
///   (sequence_store);
/// - sharded(): shards, leases and notices for a cluster (shard_store);
/// - schedules(): recurring schedules (schedule_store).
/// The engine works with a store that offers none of them; what it does
/// without each is said at the accessor.
///
/// Contract for implementers:
/// - `write` applies a batch of changes in order, atomically (all or
///   nothing), and returns only once it is durable by the store's own
///   definition (see docs/persistence.md). On error nothing of the batch is
///   visible, except with errc::outcome_unknown: the store cannot tell (it
///   timed out), and the whole batch may still land later.
/// - `save` and `remove` (and the dead-letter role's `bury`, `revive` and
///   `purge`) are the one-kind forms of `write`, with the same guarantees.
///   A store without dead_letters() answers a batch with a bury, revive or
///   purge change errc::unsupported (the default write() does).
/// - `list` streams every stored task to `sink` (any order), without loading
///   the whole set into one reply. A record that cannot be decoded is moved
///   to a quarantine area, counted in the summary and never deleted or thrown.
/// - No third-party exception escapes: errors come back as `ec`
///   (errc::store_unavailable, errc::store_error, errc::outcome_unknown).
///
/// The engine orders its writes: a change to an id is handed to the store
/// only after every earlier change to that id was written or failed, so a
/// store needs no per-id ordering of its own. Batches given to async_write()
/// must be applied in the order they were given.
///
/// Thread safety: the engine writes from one thread (its writer), and reads
/// (start(), dead-letter queries, settings) from the calling threads; it
/// never needs a store to be safe for concurrent calls unless the store says
/// max_writes_in_flight() > 1 or is shared outside the engine. The stores
/// delayq ships are safe to call from any thread.
class task_store {
 public:
  virtual ~task_store() = default;

  /// Applies `changes` in order as one atomic, durable batch. The default
  /// splits the batch into runs of one kind and calls save(), remove(), or
  /// dead_letters()'s bury(), revive() or purge() for each run (without
  /// dead_letters(): errc::unsupported for such a run): atomic per run only,
  /// so a store that can do better (every store delayq ships) overrides it.
  virtual void write(std::span<const store_change> changes, boost::system::error_code& ec);

  /// Starts write() of `changes` and returns; calls `done` exactly once with
  /// the outcome, from any thread (a store with an I/O thread of its own calls
  /// it there). `changes` and what they point at stay valid until then.
  /// Batches are applied in the order they were given; at most
  /// max_writes_in_flight() are outstanding at once. `done` may call
  /// async_write() again (the engine hands its next batch on from there) and
  /// nothing else of the store. The default calls write() on the calling
  /// thread, then `done`.
  virtual void async_write(std::span<const store_change> changes,
                           std::function<void(boost::system::error_code)> done);

  /// How many async_write() batches may be outstanding at once: more than
  /// one lets batch k+1 travel while batch k is being made durable
  /// (pipelining). Default 1. A store that answers more than one must only
  /// queue the batch in async_write() and return, and call `done` from a
  /// thread of its own: the engine then calls async_write() from the threads
  /// that made the changes (an application's, delayq-server's I/O threads)
  /// and reports each batch from `done`, with no thread of its own between.
  virtual std::size_t max_writes_in_flight() const noexcept { return 1; }

  /// Asks a store that pipelines to wait for its writes' answers on `io`
  /// (its socket in that io_context's reactor) and to call async_write()'s
  /// `done` there, instead of on a thread of its own: a write submitted on
  /// one of `io`'s threads then crosses no other thread (delayq-server hands
  /// it the io_context its engine runs on). Call it before the first
  /// async_write(); later calls are ignored. The io_context must keep
  /// running while writes are outstanding, and nothing may wait for a write
  /// on a thread of it: an engine call that waits for its write
  /// (engine::stop(), close(), the blocking schedule calls) made from a
  /// handler of `io` would wait for ever. Close the engine (engine::close())
  /// before `io` stops. The default ignores it; so does SQLite's store.
  /// PostgreSQL's and Redis's (unsharded) drive their write pipeline there.
  virtual void drive_writes_on(boost::asio::any_io_executor io) { (void)io; }

  /// Upserts `tasks` as one atomic, durable batch.
  virtual void save(std::span<const task> tasks, boost::system::error_code& ec) = 0;

  /// Deletes the tasks with these ids; unknown ids are not an error.
  virtual void remove(std::span<const std::string> ids, boost::system::error_code& ec) = 0;

  /// Calls `sink` once per stored task. Quarantines undecodable records.
  virtual list_summary list(const std::function<void(task&&)>& sink,
                            boost::system::error_code& ec) = 0;

  // ---- the horizon --------------------------------------------------------
  // An engine with a horizon (engine_options::horizon) holds only the tasks
  // due soon and leaves the rest in the store: it reads them in pages, in due
  // order, as time advances (list_due), and looks a task up by id when a call
  // names one it does not hold (find). A store without them (the defaults:
  // errc::unsupported) makes the engine hold every task.

  /// Streams the live tasks after `after` in (due_ms, id) order whose due
  /// time is at most `until_ms`, at most `limit` records, to `sink`; sets
  /// `after` to the last record read (handed on or quarantined). Fewer than
  /// `limit` records read (tasks + quarantined) means the range is done.
  /// Undecodable records are quarantined, as in list(). A record written or
  /// removed during a scan of many pages may or may not be seen; every record
  /// present through the whole scan is seen once.
  virtual list_summary list_due(due_cursor& after, std::int64_t until_ms, std::size_t limit,
                                const std::function<void(task&&)>& sink,
                                boost::system::error_code& ec) {
    (void)after;
    (void)until_ms;
    (void)limit;
    (void)sink;
    ec = errc::unsupported;
    return {};
  }

  /// The live tasks with these ids: element i is `ids[i]`'s task, or empty
  /// when none is stored under it. An undecodable record is quarantined and
  /// reported as empty.
  virtual std::vector<std::optional<task>> find(std::span<const std::string> ids,
                                                boost::system::error_code& ec) {
    (void)ids;
    ec = errc::unsupported;
    return {};
  }

  /// Moves the live record stored under `id` to the quarantine area with
  /// `reason`, as list() does with a record it cannot decode: for a record
  /// that decodes but that the engine cannot accept (an id it rejects, say).
  /// Nothing stored under `id` is not an error. Default: errc::unsupported
  /// (the engine then skips such a record at every start, with a warning).
  virtual void quarantine(std::string_view id, std::string_view reason,
                          boost::system::error_code& ec) {
    (void)id;
    (void)reason;
    ec = errc::unsupported;
  }

  // ---- the roles a store may offer ----------------------------------------
  // Each answers null here; a store with the role inherits its interface and
  // overrides the accessor to return `this`. A store answers the same for
  // its whole life.

  /// The dead-letter area (dead_letter_store), or null. Without it the
  /// engine keeps a task that ran out of attempts live, as it was stored
  /// (docs/failure-handling.md), counts no dead letters, and its dead-letter
  /// calls answer errc::unsupported.
  virtual dead_letter_store* dead_letters() noexcept { return nullptr; }

  /// The named settings (settings_store), or null. The engine never needs
  /// them; delayq-server answers what needs them with errc::unsupported.
  virtual settings_store* settings() noexcept { return nullptr; }

  /// The named sequences (sequence_store), or null. The engine never needs
  /// them; delayq-server's beanstalkd listener takes its job ids from them.
  virtual sequence_store* sequences() noexcept { return nullptr; }

  /// The cluster role (shard_store, delayq/shard_store.hpp), or null: a store
  /// that keeps one key space. An engine with engine_options::cluster refuses
  /// to start on it (errc::shard_mismatch: 0 shards).
  virtual shard_store* sharded() noexcept { return nullptr; }

  /// The recurring schedules (schedule_store, delayq/schedule_store.hpp), or
  /// null. Without it the engine's schedule calls answer errc::unsupported.
  virtual schedule_store* schedules() noexcept { return nullptr; }

  /// Whether the store lives in this process's memory and keeps nothing the
  /// engine's own memory does not (memory_store). The engine then takes the
  /// live tasks out of it at start() and keeps them in its wheel only:
  /// schedule, cancel and firing write nothing to it, and it holds dead
  /// letters (and settings) only, when it offers them. Default: false.
  virtual bool in_process() const noexcept { return false; }

  /// A human-readable name for logs and errors, e.g. "memory:" or
  /// "redis://127.0.0.1:6379/0". Never contains a password.
  virtual std::string describe() const = 0;

  /// Throwing form of write(): throws boost::system::system_error.
  void write(std::span<const store_change> changes) {
    boost::system::error_code ec;
    write(changes, ec);
    detail::throw_if(ec, "delayq: store write");
  }
  /// Throwing form of save().
  void save(std::span<const task> tasks) {
    boost::system::error_code ec;
    save(tasks, ec);
    detail::throw_if(ec, "delayq: store save");
  }
  /// Throwing form of remove().
  void remove(std::span<const std::string> ids) {
    boost::system::error_code ec;
    remove(ids, ec);
    detail::throw_if(ec, "delayq: store remove");
  }
  /// Throwing form of list().
  list_summary list(const std::function<void(task&&)>& sink) {
    boost::system::error_code ec;
    auto summary = list(sink, ec);
    detail::throw_if(ec, "delayq: store list");
    return summary;
  }
};

/// `store.dead_letters()`, or null with `ec` set to errc::unsupported when
/// the store has no dead letters: what a caller that needs them answers then.
inline dead_letter_store* dead_letters_of(task_store& store,
                                          boost::system::error_code& ec) noexcept {
  dead_letter_store* const d = store.dead_letters();
  if (!d) ec = errc::unsupported;
  return d;
}

/// `store.settings()`, or null with `ec` set to errc::unsupported when the
/// store keeps no settings.
inline settings_store* settings_of(task_store& store, boost::system::error_code& ec) noexcept {
  settings_store* const s = store.settings();
  if (!s) ec = errc::unsupported;
  return s;
}

/// `store.sequences()`, or null with `ec` set to errc::unsupported when the
/// store keeps no sequences.
inline sequence_store* sequences_of(task_store& store, boost::system::error_code& ec) noexcept {
  sequence_store* const s = store.sequences();
  if (!s) ec = errc::unsupported;
  return s;
}

}  // namespace delayq
