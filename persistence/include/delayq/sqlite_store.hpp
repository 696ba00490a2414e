// delayq/sqlite_store.hpp - a task_store in an embedded SQLite database file.
#pragma once

#include <utility>

#include <chrono>
#include <memory>
#include <string>

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

  synchronous_level synchronous = synchronous_level::full;
  /// How long a call waits for a lock held by another connection (another
  /// process on the same file) before failing with errc::store_unavailable.
  std::chrono::milliseconds busy_timeout{5000};
};

/// A task_store kept in one SQLite database file (WAL mode), for a single
/// host without a Redis server.
///
/// Each save(), remove(), bury(), revive() and purge() is one write
/// transaction (all or nothing);
/// list() reads the table in pages of bounded size and moves undecodable
/// records to the `quarantine` table. Schema and guarantees:
/// docs/persistence.md.
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
/// serialized by one mutex. list() calls its sink without holding that mutex,
/// so a sink may call back into the store.
class sqlite_store final : public task_store {
 public:
  using task_store::bury;
  using task_store::count_dead;
  using task_store::find_dead;
  using task_store::list;
  using task_store::list_dead;
  using task_store::purge;
  using task_store::remove;
  using task_store::revive;
  using task_store::save;

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

  void save(std::span<const task> tasks, boost::system::error_code& ec) override;
  void remove(std::span<const std::string> ids, boost::system::error_code& ec) override;
  list_summary list(const std::function<void(task&&)>& sink,
                    boost::system::error_code& ec) override;
  /// "sqlite:" followed by the path as given.
  std::string describe() const override;

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
  /// dead-letter table).
  static constexpr int schema_version = 2;

 private:
  struct impl;
  struct no_open {};
  sqlite_store(no_open, const std::string& path, sqlite_options options);
  void open_database(boost::system::error_code& ec, std::string& message);

  std::unique_ptr<impl> impl_;
};

}  // namespace delayq
