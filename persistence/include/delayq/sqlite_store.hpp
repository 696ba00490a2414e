// delayq/sqlite_store.hpp - a task_store in an embedded SQLite database file.
#pragma once

#include <utility>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "delayq/dead_letter_store.hpp"
#include "delayq/schedule_store.hpp"
#include "delayq/sequence_store.hpp"
#include "delayq/settings_store.hpp"
#include "delayq/task_store.hpp"

namespace delayq {

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
/// host without a Redis server.
///
/// Each write() batch is one `BEGIN IMMEDIATE` transaction, committed before
/// the call returns and rolled back on any error: all or nothing, whatever
/// mix of kinds it holds. save(), remove(), bury(), revive() and purge() are
/// one-kind batches of write(). list() streams the table through one SELECT
/// on a read connection of its own (a snapshot; bounded memory), decoding as
/// it goes, and moves undecodable records to the `quarantine` table, as
/// quarantine() does on request (list_due() and find() too). Settings live in
/// the `settings` table, sequences in the `sequences` table.
/// Schema and guarantees: docs/persistence.md.
///
/// Example:
/// \code
///   auto store = std::make_unique<delayq::sqlite_store>("/var/lib/app/delayq.db");
///   store->save(std::span{&t, 1});
/// \endcode
///
/// Errors: SQLite's "busy", "locked" and "cannot open" become
/// errc::store_unavailable; every other SQLite error becomes
/// errc::store_error, with SQLite's message logged through delayq::log().
///
/// Thread safety: all members are safe to call from any thread; calls are
/// serialized by one mutex. list() reads on a connection of its own and
/// calls its sink without holding that mutex, so a sink may call back into
/// the store. async_write() completions run on the store's write thread.
class sqlite_store final : public task_store,
                           public dead_letter_store,
                           public settings_store,
                           public sequence_store,
                           public schedule_store {
 public:
  using dead_letter_store::bury;
  using dead_letter_store::count_dead;
  using dead_letter_store::find_dead;
  using dead_letter_store::list_dead;
  using dead_letter_store::purge;
  using dead_letter_store::revive;
  using task_store::list;
  using task_store::remove;
  using task_store::save;
  using task_store::write;

  /// Opens (creating if needed) the database at `path` and brings its schema
  /// to the current version. Throws boost::system::system_error.
  explicit sqlite_store(const std::string& path, sqlite_options options = {});

  /// Error-code form of the constructor: null and `ec` set on failure; when
  /// `message` is not null it receives the reason.
  static std::unique_ptr<sqlite_store> open(const std::string& path, sqlite_options options,
                                            boost::system::error_code& ec,
                                            std::string* message = nullptr);

  ~sqlite_store() override;
  sqlite_store(const sqlite_store&) = delete;
  sqlite_store& operator=(const sqlite_store&) = delete;

  /// Applies the batch in one `BEGIN IMMEDIATE` ... `COMMIT`; on any error
  /// (a constraint, a trigger, a full disk, a lock held past busy_timeout)
  /// rolls the whole batch back, so nothing of it is visible. Durable on
  /// return as `synchronous` defines (docs/persistence.md).
  void write(std::span<const store_change> changes, boost::system::error_code& ec) override;
  /// With sqlite_options::write_thread: queues the batch for the store's
  /// write thread (started on first use, joined by the destructor after it
  /// wrote everything queued) and returns; the thread writes batches one at a
  /// time in the order given, each as write() does, and calls `done` there.
  /// Without it: write() on the calling thread, then `done`.
  void async_write(std::span<const store_change> changes,
                   std::function<void(boost::system::error_code)> done) override;
  /// 2 with sqlite_options::write_thread, else 1.
  std::size_t max_writes_in_flight() const noexcept override;
  void save(std::span<const task> tasks, boost::system::error_code& ec) override;
  void remove(std::span<const std::string> ids, boost::system::error_code& ec) override;
  list_summary list(const std::function<void(task&&)>& sink,
                    boost::system::error_code& ec) override;
  /// One page: one SELECT on the store's connection, `WHERE (due_ms, id) >
  /// cursor AND due_ms <= until ORDER BY due_ms, id LIMIT limit`: a seek in
  /// the (due_ms, id) index and `limit` steps (ids are TEXT under the BINARY
  /// collation: bytewise). The
  /// page is read and its undecodable rows quarantined under the store's
  /// mutex; the sink runs after, without it, so it may call back into the
  /// store. Errors as above; on error `after` is unchanged and nothing
  /// reaches the sink.
  list_summary list_due(due_cursor& after, std::int64_t until_ms, std::size_t limit,
                        const std::function<void(task&&)>& sink,
                        boost::system::error_code& ec) override;
  /// One primary-key lookup per id, under the store's mutex.
  std::vector<std::optional<task>> find(std::span<const std::string> ids,
                                        boost::system::error_code& ec) override;
  /// Moves the live row `id` to the `quarantine` table (source 'tasks')
  /// with `reason`, in one transaction; nothing stored under `id` is not an
  /// error.
  void quarantine(std::string_view id, std::string_view reason,
                  boost::system::error_code& ec) override;
  /// "sqlite:" followed by the path as given.
  std::string describe() const override;
  /// this: dead letters and settings live in tables of their own (below).
  dead_letter_store* dead_letters() noexcept override { return this; }
  delayq::settings_store* settings() noexcept override { return this; }
  /// this: sequences live in the `sequences` table (below).
  delayq::sequence_store* sequences() noexcept override { return this; }
  /// this: recurring schedules live in the `schedules` table (below).
  delayq::schedule_store* schedules() noexcept override { return this; }

  // Settings live in the `settings` table (schema version 3), keys and values
  // as BLOBs; load_settings() returns them sorted by key bytes. Each
  // save_setting() and erase_setting() is one committed transaction.
  std::vector<std::pair<std::string, std::string>> load_settings(
      boost::system::error_code& ec) override;
  void save_setting(std::string_view key, std::string_view value,
                    boost::system::error_code& ec) override;
  bool erase_setting(std::string_view key, boost::system::error_code& ec) override;

  // Sequences live in the `sequences` table (schema version 5), one row per
  // name holding the next number to hand out. allocate() and raise_to() are
  // each one statement, so one transaction under the file's write lock:
  // atomic against every connection, in this process or another. A
  // sequence ends at 2^63 - 1 (SQLite's integers are signed):
  // errc::invalid_options past it.
  std::uint64_t allocate(std::string_view name, std::uint64_t count,
                         boost::system::error_code& ec) override;
  void raise_to(std::string_view name, std::uint64_t next, boost::system::error_code& ec) override;

  // Schedules live in the `schedules` table (schema version 6): id, revision,
  // definition and state. write_schedules() is one IMMEDIATE transaction,
  // each change an INSERT, UPDATE or DELETE conditioned on the revision.
  void write_schedules(std::span<const schedule_write> changes,
                       boost::system::error_code& ec) override;
  std::vector<std::optional<schedule_record>> find_schedules(
      std::span<const std::string> ids, boost::system::error_code& ec) override;
  std::vector<schedule_record> list_schedules(std::string_view after, std::size_t limit,
                                              boost::system::error_code& ec) override;
  std::size_t count_schedules(boost::system::error_code& ec) override;

  /// The `synchronous` level in effect on the store's connection, read back
  /// with `PRAGMA synchronous` (what sqlite_options asked for, unless SQLite
  /// refused it). Errors as above.
  sqlite_options::synchronous_level synchronous(boost::system::error_code& ec);
  /// Throwing form of synchronous().
  sqlite_options::synchronous_level synchronous();

  // Dead letters live in the `dead_letters` table (schema version 2). bury,
  // revive and purge are each one write transaction; list_dead reads one page
  // ordered by (died_at_ms, id) and, like find_dead, moves an undecodable
  // record to `quarantine` (source 'dead_letters'). Errors as above.
  void bury(std::span<const dead_letter> letters, boost::system::error_code& ec) override;
  std::vector<dead_letter> list_dead(std::size_t offset, std::size_t limit,
                                     boost::system::error_code& ec) override;
  std::optional<dead_letter> find_dead(std::string_view id, boost::system::error_code& ec) override;
  void revive(std::span<const task> tasks, boost::system::error_code& ec) override;
  void purge(std::span<const std::string> ids, boost::system::error_code& ec) override;
  std::size_t count_dead(boost::system::error_code& ec) override;

  /// The schema version (PRAGMA user_version) this build creates and reads.
  /// Opening a file of an older version migrates it (1 -> 2 adds the
  /// dead-letter table, 2 -> 3 the settings table, 3 -> 4 replaces the
  /// index on tasks(due_ms) with one on (due_ms, id), list_due()'s order,
  /// 4 -> 5 adds the sequences table).
  static constexpr int schema_version = 6;

 private:
  struct impl;
  struct no_open {};
  sqlite_store(no_open, const std::string& path, sqlite_options options);
  void open_database(boost::system::error_code& ec, std::string& message);

  std::unique_ptr<impl> impl_;
};

}  // namespace delayq
