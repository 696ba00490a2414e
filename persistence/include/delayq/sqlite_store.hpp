// delayq/sqlite_store.hpp - a task_store in an embedded SQLite database file,
// put together from role objects (delayq/role_store.hpp).
#pragma once

#include <utility>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "delayq/role_store.hpp"

namespace delayq {

namespace detail::sqlite {
class backend;
}  // namespace detail::sqlite

/// How sqlite_store opens its database.
struct sqlite_options {
  /// PRAGMA synchronous, under WAL journaling. What each level risks is in
  /// docs/persistence.md: in short, `full` and `extra` lose nothing that save()
  /// acknowledged even on power loss; `normal` may lose the last acknowledged
  /// batches on power loss (not on a process crash); `off` may lose them, or
  /// corrupt the file, on an OS crash or power loss.
  enum class synchronous_level { off, normal, full, extra };

  /// URI: `?synchronous=off|normal|full|extra`. sqlite_store::synchronous()
  /// reads back the level in effect.
  synchronous_level synchronous = synchronous_level::full;
  /// How long a call waits for a lock held by another connection (another
  /// process on the same file) before failing with errc::store_unavailable.
  /// URI: `?busy_timeout_ms=N`.
  std::chrono::milliseconds busy_timeout{5000};
  /// list() logs its progress (at info level) every this many records, so a
  /// long recovery shows it is moving; 0 never logs.
  std::size_t list_progress_every = 250'000;
  /// When true (the default), async_write() hands each batch to a thread of
  /// the store's own and returns, and max_writes_in_flight() is 2: the engine
  /// forms and settles batches while SQLite commits the one before
  /// (pipelining). When false, async_write() writes on the calling thread.
  bool write_thread = true;
};

/// A task_store kept in one SQLite database file (WAL mode), for a single
/// host without a Redis server, put together from role objects
/// (delayq/role_store.hpp): the live tasks, dead letters, settings,
/// sequences and schedules, each a role over the one connection they share.
///
/// Each write() batch is one `BEGIN IMMEDIATE` transaction, committed before
/// the call returns and rolled back on any error (a constraint, a trigger, a
/// full disk, a lock held past busy_timeout): all or nothing, whatever mix
/// of kinds it holds. Durable on return as `synchronous` defines
/// (docs/persistence.md). save(), remove() and the dead-letter role's
/// bury(), revive() and purge() are one-kind batches of write().
/// async_write(), with sqlite_options::write_thread, queues the batch for
/// the store's write thread (started on first use, joined by the destructor
/// after it wrote everything queued), which writes batches one at a time in
/// the order given and calls `done` there; max_writes_in_flight() is then
/// 2, else 1. list() streams the table through one SELECT on a read
/// connection of its own (a snapshot; bounded memory), decoding as it goes,
/// and moves undecodable records to the `quarantine` table, as quarantine()
/// does on request (list_due() and find() too). list_due() reads one page,
/// one SELECT on the store's connection: `WHERE (due_ms, id) > cursor AND
/// due_ms <= until ORDER BY due_ms, id LIMIT limit`, a seek in the
/// (due_ms, id) index (ids are TEXT under the BINARY collation: bytewise).
/// describe() is "sqlite:" followed by the path as given.
///
/// The roles: dead_letters() in the `dead_letters` table, settings() in
/// `settings`, sequences() in `sequences`, schedules() in `schedules`; no
/// sharded(). Schema and guarantees: docs/persistence.md, "SQLite".
///
/// Example:
/// \code
///   auto store = std::make_unique<delayq::sqlite_store>("/var/lib/app/delayq.db");
///   store->save(std::span{&t, 1});
///   boost::system::error_code ec;
///   const std::size_t dead = store->dead_letters()->count_dead(ec);
/// \endcode
///
/// Errors: SQLite's "busy", "locked" and "cannot open" become
/// errc::store_unavailable; every other SQLite error becomes
/// errc::store_error, with SQLite's message logged through delayq::log().
///
/// Thread safety: the store and its roles are safe to call from any thread;
/// calls are serialized by one mutex. list() reads on a connection of its
/// own and calls its sink without holding that mutex (list_due() too, after
/// reading its page), so a sink may call back into the store. async_write()
/// completions run on the store's write thread.
class sqlite_store final : public role_store {
 public:
  /// Opens (creating if needed) the database at `path` and brings its schema
  /// to the current version. Throws boost::system::system_error.
  explicit sqlite_store(const std::string& path, sqlite_options options = {});

  /// Error-code form of the constructor: null and `ec` set on failure; when
  /// `message` is not null it receives the reason.
  static std::unique_ptr<sqlite_store> open(const std::string& path, sqlite_options options,
                                            boost::system::error_code& ec,
                                            std::string* message = nullptr);

  /// Lets the write thread write what is queued, then destroys the roles
  /// and closes the database.
  ~sqlite_store() override;
  sqlite_store(const sqlite_store&) = delete;
  sqlite_store& operator=(const sqlite_store&) = delete;

  /// The `synchronous` level in effect on the store's connection, read back
  /// with `PRAGMA synchronous` (what sqlite_options asked for, unless SQLite
  /// refused it). Errors as above.
  sqlite_options::synchronous_level synchronous(boost::system::error_code& ec);
  /// Throwing form of synchronous().
  sqlite_options::synchronous_level synchronous();

  /// The schema version (PRAGMA user_version) this build creates and reads.
  /// Opening a file of an older version migrates it (1 -> 2 adds the
  /// dead-letter table, 2 -> 3 the settings table, 3 -> 4 replaces the
  /// index on tasks(due_ms) with one on (due_ms, id), list_due()'s order,
  /// 4 -> 5 adds the sequences table, 5 -> 6 the schedules table).
  static constexpr int schema_version = 6;

 private:
  explicit sqlite_store(std::shared_ptr<detail::sqlite::backend> backend);

  // What the roles share; owned by role_store (its roles' `backend`), which
  // outlives this pointer.
  detail::sqlite::backend* backend_;
};

}  // namespace delayq
