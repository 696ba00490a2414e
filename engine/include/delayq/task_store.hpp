// delayq/task_store.hpp - the interface every persistence backend implements.
#pragma once

#include <utility>

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

#include "delayq/error.hpp"
#include "delayq/shard_leases.hpp"
#include "delayq/task.hpp"

namespace delayq {

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
  /// A sharded store (task_store::shards() > 0) only: the fencing token the
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

/// What a task_notice announces.
enum class notice_kind : std::uint8_t {
  task,     ///< A live task was saved: shard, due_ms and id are set.
  setting,  ///< A setting was saved or erased: id is its key (shard, due_ms 0).
};

/// A saved task, or a changed setting, as a sharded store announces it
/// (task_store::listen()).
struct task_notice {
  std::uint32_t shard = 0;  ///< shard_of(id, shards())
  std::int64_t due_ms = 0;  ///< the saved task's due time, ms since the Unix epoch
  std::string id;           ///< the task's id, or the setting's key
  notice_kind kind = notice_kind::task;
};

/// Receives the notices a sharded store sends for every live task saved
/// (schedule, reschedule, retry, revive) and every setting saved or erased,
/// from any instance: how the owner of a shard learns of a task another
/// instance wrote to it, and every instance of a setting another one changed,
/// without reading the store in a loop. Delivery is best effort (Redis pub/sub): a listener
/// whose connection broke missed what was sent meanwhile, and wait() says so
/// with an error, after which the caller re-reads what it holds.
///
/// Thread safety: wait() from one thread at a time; close() from any thread,
/// also during a wait().
class task_listener {
 public:
  virtual ~task_listener() = default;
  /// Waits up to `timeout` and returns the notices received (none when the
  /// time ran out). errc::store_unavailable when the connection broke (the
  /// next wait() reconnects); errc::not_running after close().
  virtual std::vector<task_notice> wait(std::chrono::milliseconds timeout,
                                        boost::system::error_code& ec) = 0;
  /// Makes a wait() in progress, and every later one, return errc::not_running.
  virtual void close() noexcept = 0;
};

/// Where tasks live while they wait: the engine saves a task before it
/// acknowledges a schedule, and removes it only after its executor succeeded.
///
/// A store is a plain key-value set of tasks keyed by `task::id`, plus a
/// dead-letter area keyed the same way and a few named settings.
///
/// Contract for implementers:
/// - `write` applies a batch of changes in order, atomically (all or
///   nothing), and returns only once it is durable by the store's own
///   definition (see docs/persistence.md). On error nothing of the batch is
///   visible, except with errc::outcome_unknown: the store cannot tell (it
///   timed out), and the whole batch may still land later.
/// - `save`, `remove`, `bury`, `revive` and `purge` are the one-kind forms
///   of `write`, with the same guarantees.
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
  /// splits the batch into runs of one kind and calls save(), remove(),
  /// bury(), revive() or purge() for each run: atomic per run only, so a
  /// store that can do better (every store delayq ships) overrides it.
  virtual void write(std::span<const store_change> changes, boost::system::error_code& ec);

  /// Starts write() of `changes` and returns; calls `done` exactly once with
  /// the outcome, from any thread (a store with an I/O thread of its own calls
  /// it there). `changes` and what they point at stay valid until then.
  /// Batches are applied in the order they were given; at most
  /// max_writes_in_flight() are outstanding at once. `done` must not call
  /// back into the store. The default calls write() on the calling thread,
  /// then `done`.
  virtual void async_write(std::span<const store_change> changes,
                           std::function<void(boost::system::error_code)> done);

  /// How many async_write() batches may be outstanding at once: more than
  /// one lets batch k+1 travel while batch k is being made durable
  /// (pipelining). Default 1.
  virtual std::size_t max_writes_in_flight() const noexcept { return 1; }

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

  // ---- clusters (docs/scale-out.md) ---------------------------------------
  // Several engines share a sharded store: tasks are split into shards by
  // shard_of(id, shards()), and each engine holds leases on some shards and
  // runs only their tasks. In a sharded store write() is atomic per shard
  // (one shard's changes of a batch land all or nothing), not across
  // shards: a batch that fails after another shard's part landed reports
  // errc::outcome_unknown (write() again: batches are idempotent). A shard's
  // part whose fenced changes (store_change::fence) carry a token the
  // shard's lease no longer carries is refused whole, and write() reports
  // errc::lease_lost once the other shards' parts are applied.

  /// How many shards the store splits tasks into: 0 for a store that keeps
  /// one key space (not a cluster store). Every engine of a cluster opens the
  /// store with the same count; a store created with another count refuses
  /// to open (errc::shard_mismatch).
  virtual std::uint32_t shards() const noexcept { return 0; }

  /// A lease table on this store for one instance (`cluster.shards` must
  /// equal shards()). Default: null and errc::unsupported.
  virtual std::unique_ptr<shard_leases> make_shard_leases(const cluster_options& cluster,
                                                          boost::system::error_code& ec) {
    (void)cluster;
    ec = errc::unsupported;
    return nullptr;
  }

  /// A listener for the notices of saved tasks and changed settings
  /// (task_listener), on a connection of its own. Default: null and
  /// errc::unsupported.
  virtual std::unique_ptr<task_listener> listen(boost::system::error_code& ec) {
    ec = errc::unsupported;
    return nullptr;
  }

  /// list_due() over one shard of a sharded store: the same contract, for
  /// the tasks with shard_of(id, shards()) == shard only. Default:
  /// errc::unsupported.
  virtual list_summary list_due_shard(std::uint32_t shard, due_cursor& after, std::int64_t until_ms,
                                      std::size_t limit, const std::function<void(task&&)>& sink,
                                      boost::system::error_code& ec) {
    (void)shard;
    (void)after;
    (void)until_ms;
    (void)limit;
    (void)sink;
    ec = errc::unsupported;
    return {};
  }

  // ---- settings -----------------------------------------------------------
  // A few named values kept beside the tasks and shared by every engine on
  // the store (delayq-server keeps its push targets here). Keys are 1-256
  // bytes, values at most 64 KiB. A store that listens (listen()) announces
  // every change with a notice_kind::setting notice, after it is durable.
  // Defaults: errc::unsupported.

  /// Every setting, sorted by key.
  virtual std::vector<std::pair<std::string, std::string>> load_settings(
      boost::system::error_code& ec) {
    ec = errc::unsupported;
    return {};
  }
  /// Upserts one setting, durably.
  virtual void save_setting(std::string_view key, std::string_view value,
                            boost::system::error_code& ec) {
    (void)key;
    (void)value;
    ec = errc::unsupported;
  }
  /// Deletes one setting and returns whether there was one (false on an
  /// error); an unknown key is not an error. delayq-server answers a DELETE
  /// of a push target 204 or 404 from it. A store that retries a call whose
  /// answer was lost may find the key gone by its own first try: it then
  /// answers false for a key it erased.
  virtual bool erase_setting(std::string_view key, boost::system::error_code& ec) {
    (void)key;
    ec = errc::unsupported;
    return false;
  }

  // ---- dead letters -------------------------------------------------------
  // A dead letter lives in an area of its own, apart from the live tasks
  // that list() streams. The defaults fail with errc::unsupported so that a
  // store written before dead letters still compiles; the engine then keeps
  // such tasks live (see docs/failure-handling.md). Every store that ships
  // with delayq implements them.

  /// Atomically, for each letter: removes the live task with its id and
  /// stores the letter (an upsert by id) in the dead-letter area.
  virtual void bury(std::span<const dead_letter> letters, boost::system::error_code& ec) {
    (void)letters;
    ec = errc::unsupported;
  }

  /// Dead letters ordered by `died_at`, then id; skips `offset`, returns at
  /// most `limit`. Undecodable records are quarantined, as in list().
  virtual std::vector<dead_letter> list_dead(std::size_t offset, std::size_t limit,
                                             boost::system::error_code& ec) {
    (void)offset;
    (void)limit;
    ec = errc::unsupported;
    return {};
  }

  /// The dead letter with this id, if there is one.
  virtual std::optional<dead_letter> find_dead(std::string_view id, boost::system::error_code& ec) {
    (void)id;
    ec = errc::unsupported;
    return std::nullopt;
  }

  /// Atomically deletes the dead letters with the ids of `tasks` and saves
  /// `tasks` as live tasks (an upsert): how a dead letter is requeued.
  virtual void revive(std::span<const task> tasks, boost::system::error_code& ec) {
    (void)tasks;
    ec = errc::unsupported;
  }

  /// Deletes dead letters; unknown ids are not an error.
  virtual void purge(std::span<const std::string> ids, boost::system::error_code& ec) {
    (void)ids;
    ec = errc::unsupported;
  }

  /// How many dead letters the store holds.
  virtual std::size_t count_dead(boost::system::error_code& ec) {
    ec = errc::unsupported;
    return 0;
  }

  /// Whether the store lives in this process's memory and keeps nothing the
  /// engine's own memory does not (memory_store). The engine then takes the
  /// live tasks out of it at start() and keeps them in its wheel only:
  /// schedule, cancel and firing write nothing to it, and it holds dead
  /// letters (and settings) only. Default: false.
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
  /// Throwing forms of the dead-letter calls.
  void bury(std::span<const dead_letter> letters) {
    boost::system::error_code ec;
    bury(letters, ec);
    detail::throw_if(ec, "delayq: store bury");
  }
  std::vector<dead_letter> list_dead(std::size_t offset, std::size_t limit) {
    boost::system::error_code ec;
    auto out = list_dead(offset, limit, ec);
    detail::throw_if(ec, "delayq: store list_dead");
    return out;
  }
  std::optional<dead_letter> find_dead(std::string_view id) {
    boost::system::error_code ec;
    auto out = find_dead(id, ec);
    detail::throw_if(ec, "delayq: store find_dead");
    return out;
  }
  void revive(std::span<const task> tasks) {
    boost::system::error_code ec;
    revive(tasks, ec);
    detail::throw_if(ec, "delayq: store revive");
  }
  void purge(std::span<const std::string> ids) {
    boost::system::error_code ec;
    purge(ids, ec);
    detail::throw_if(ec, "delayq: store purge");
  }
  std::size_t count_dead() {
    boost::system::error_code ec;
    auto n = count_dead(ec);
    detail::throw_if(ec, "delayq: store count_dead");
    return n;
  }

  /// Throwing form of list().
  list_summary list(const std::function<void(task&&)>& sink) {
    boost::system::error_code ec;
    auto summary = list(sink, ec);
    detail::throw_if(ec, "delayq: store list");
    return summary;
  }
};

}  // namespace delayq
