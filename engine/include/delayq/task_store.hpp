// delayq/task_store.hpp - the interface every persistence backend implements.
#pragma once

#include <utility>

#include <boost/system/error_code.hpp>
#include <cstddef>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "delayq/error.hpp"
#include "delayq/task.hpp"

namespace delayq {

/// What list() found.
struct list_summary {
  std::size_t tasks = 0;        ///< Records decoded and handed to the sink.
  std::size_t quarantined = 0;  ///< Records that could not be decoded and were
                                ///< moved to the store's quarantine area.
};

/// Where tasks live while they wait: the engine saves a task before it
/// acknowledges a schedule, and removes it only after its executor succeeded.
///
/// A store is a plain key-value set of tasks keyed by `task::id`. The engine
/// orders its calls: for one id, a later call always starts after an earlier
/// one returned, so a store needs no per-id ordering of its own.
///
/// Contract for implementers:
/// - `save` upserts the whole batch atomically (all or nothing) and returns
///   only once it is durable by the store's own definition (see
///   docs/persistence.md). On error nothing of the batch may be visible.
/// - `remove` deletes the ids that exist and ignores the others.
/// - `list` streams every stored task to `sink` (any order), without loading
///   the whole set into one reply. A record that cannot be decoded is moved to
///   a quarantine area, counted in the summary and never deleted or thrown.
/// - No third-party exception escapes: errors come back as `ec`
///   (errc::store_unavailable, errc::store_error).
///
/// Thread safety: the engine calls a store from one thread at a time, unless
/// the store says inline_writes(); a store need not be thread-safe unless it
/// says that or is shared outside the engine.
class task_store {
 public:
  virtual ~task_store() = default;

  /// Upserts `tasks` as one atomic, durable batch.
  virtual void save(std::span<const task> tasks, boost::system::error_code& ec) = 0;

  /// Deletes the tasks with these ids; unknown ids are not an error.
  virtual void remove(std::span<const std::string> ids, boost::system::error_code& ec) = 0;

  /// Calls `sink` once per stored task. Quarantines undecodable records.
  virtual list_summary list(const std::function<void(task&&)>& sink,
                            boost::system::error_code& ec) = 0;

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

  /// Whether this store's writes are cheap, in-memory and never fail
  /// transiently (no I/O, no outage to wait out). The engine then calls
  /// save(), remove(), bury(), revive() and purge() directly, on the calling
  /// thread and while holding its own lock, instead of queueing them for its
  /// group-commit writer: no thread hand-off, no batch, and the store sees
  /// the changes to one id in exactly the order the engine made them. A
  /// store that says true must be safe to call from several threads at once
  /// and must never call back into the engine. Default: false (Redis,
  /// SQLite and any store that does I/O).
  virtual bool inline_writes() const noexcept { return false; }

  /// A human-readable name for logs and errors, e.g. "memory:" or
  /// "redis://127.0.0.1:6379/0". Never contains a password.
  virtual std::string describe() const = 0;

  /// Throwing form of save(): throws boost::system::system_error.
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
