// persistence/sqlite/sqlite_backend.hpp - what the SQLite store's role
// objects share: the database file's connection and its prepared
// statements (under one mutex), the write thread of async_write(), the
// batch write every role that changes tasks or dead letters goes through,
// and the helpers every role uses. Internal.
//
// The roles (sqlite_tasks.hpp, sqlite_dead_letters.hpp,
// sqlite_settings.hpp, sqlite_sequences.hpp, sqlite_schedules.hpp) each
// hold a reference to one backend; role_store (delayq/role_store.hpp), the
// base of sqlite_store, owns them and the backend, and destroys the backend
// last.
#pragma once

#include <utility>

#include <sqlite3.h>

#include <SQLiteCpp/Database.h>
#include <SQLiteCpp/Exception.h>
#include <SQLiteCpp/Statement.h>
#include <SQLiteCpp/Transaction.h>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "delayq/log.hpp"
#include "delayq/record_codec.hpp"
#include "delayq/sqlite_store.hpp"

namespace delayq::detail::sqlite {

// An SQLite error carried to the boundary of a public call.
struct store_failure {
  errc code;
  std::string message;
};

inline errc translate(const SQLite::Exception& e) {
  switch (e.getErrorCode() & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_CANTOPEN: return errc::store_unavailable;
    default: return errc::store_error;
  }
}

inline std::int64_t now_epoch_ms() { return to_epoch_ms(std::chrono::system_clock::now()); }

// A row whose record failed to decode, and why.
struct bad_row {
  std::int64_t rowid = 0;
  std::string_view id;
  std::string why;
};

// SQLite binds at most INT_MAX bytes.
inline void check_record_size(const std::string& record, const std::string& id) {
  if (record.size() > static_cast<std::size_t>(INT_MAX))
    throw store_failure{errc::store_error, "record of task '" + id + "' exceeds 2 GiB"};
}

// A BLOB column's bytes; SQLite returns a null pointer for an empty BLOB.
inline std::string column_bytes(const SQLite::Column& c) {
  const void* p = c.getBlob();  // before getBytes(): SQLite's documented order
  const int n = c.getBytes();
  return n > 0 ? std::string(static_cast<const char*>(p), static_cast<std::size_t>(n))
               : std::string();
}

// Binds bytes as a BLOB, never as NULL: sqlite3_bind_blob() binds NULL for a
// null pointer, which an empty string_view may carry.
inline void bind_bytes(SQLite::Statement& st, int index, std::string_view bytes) {
  if (bytes.size() > static_cast<std::size_t>(INT_MAX))
    throw store_failure{errc::store_error, "a value exceeds 2 GiB"};
  st.bindNoCopy(index, bytes.empty() ? "" : bytes.data(), static_cast<int>(bytes.size()));
}

// Resets a reused statement even when its step threw, so it never holds a
// read lock or stale bindings into the next call.
struct reset_on_exit {
  SQLite::Statement& st;
  ~reset_on_exit() {
    st.tryReset();
    st.clearBindings();
  }
};

/// The prepared statements of the store's connection, one set per role.
/// Each is prepared once, when the store opens (backend::open()).
///
/// Thread safety: use under the backend's mutex only.
struct statements {
  // tasks: writes (sqlite_backend.cpp's apply()) and quarantine
  std::optional<SQLite::Statement> upsert;
  std::optional<SQLite::Statement> erase;
  std::optional<SQLite::Statement> to_quarantine;
  std::optional<SQLite::Statement> erase_rowid;
  std::optional<SQLite::Statement> quarantine_by_id;
  std::optional<SQLite::Statement> due_page;  // list_due(): sqlite_due.cpp
  std::optional<SQLite::Statement> by_id;     // find(): sqlite_due.cpp
  // dead letters
  std::optional<SQLite::Statement> dead_upsert;
  std::optional<SQLite::Statement> dead_erase;
  std::optional<SQLite::Statement> dead_page;
  std::optional<SQLite::Statement> dead_find;
  std::optional<SQLite::Statement> dead_count;
  std::optional<SQLite::Statement> dead_to_quarantine;
  std::optional<SQLite::Statement> dead_erase_rowid;
  // settings
  std::optional<SQLite::Statement> settings_all;
  std::optional<SQLite::Statement> settings_upsert;
  std::optional<SQLite::Statement> settings_erase;
  // sequences
  std::optional<SQLite::Statement> sequence_take;   // allocate()
  std::optional<SQLite::Statement> sequence_raise;  // raise_to()
  // write()'s transaction, prepared once: BEGIN and COMMIT as text were
  // parsed again for every batch.
  std::optional<SQLite::Statement> tx_begin, tx_commit, tx_rollback;
  // schedules (prepared by sqlite_schedules.cpp's prepare_schedules())
  std::optional<SQLite::Statement> schedule_insert, schedule_put, schedule_state, schedule_erase,
      schedule_find, schedule_page, schedule_count;
};

/// Prepares the schedule role's statements on `db` (sqlite_schedules.cpp,
/// next to the SQL's readers).
void prepare_schedules(SQLite::Database& db, statements& st);

/// The store's connection and what goes with it. Every call on the
/// connection (and on `st()`) is made under mutex(); list() alone reads on
/// a connection of its own (sqlite_tasks.cpp).
///
/// Thread safety: write(), async_write(), stop_writes() and the accessors
/// may be called from any thread; db() and st() only under mutex().
class backend {
 public:
  backend(std::string path, sqlite_options options) : path_(std::move(path)), options_(options) {}
  /// Drains and joins the write thread (stop_writes()), then closes the
  /// statements and the connection.
  ~backend() { stop_writes(); }
  backend(const backend&) = delete;
  backend& operator=(const backend&) = delete;

  /// Opens (creating if needed) the database, migrates its schema to
  /// sqlite_store::schema_version and prepares every statement. On failure
  /// sets `ec` and `message`, logs, and leaves no connection open.
  void open(boost::system::error_code& ec, std::string& message);

  const std::string& path() const noexcept { return path_; }
  const sqlite_options& options() const noexcept { return options_; }
  /// "sqlite:" followed by the path as given.
  std::string name() const { return "sqlite:" + path_; }
  std::mutex& mutex() noexcept { return mutex_; }
  SQLite::Database& db() noexcept { return *db_; }
  statements& st() noexcept { return st_; }

  /// One batch as one `BEGIN IMMEDIATE` ... `COMMIT`, rolled back whole on
  /// any error (delayq/sqlite_store.hpp). Takes the mutex.
  void write(std::span<const store_change> changes, boost::system::error_code& ec);
  /// With sqlite_options::write_thread: queues the batch for the write
  /// thread (started on first use), which writes the batches one at a time
  /// in order and calls `done` there. Without it: write(), then `done`.
  void async_write(std::span<const store_change> changes,
                   std::function<void(boost::system::error_code)> done);
  /// Lets the write thread write everything queued, then joins it.
  /// Idempotent.
  void stop_writes();

  /// Runs `body` and turns any SQLite exception into `ec` plus a log line.
  template <class Body>
  void guarded(const char* what, boost::system::error_code& ec, Body&& body) {
    ec = {};
    try {
      body();
    } catch (const SQLite::Exception& e) {
      ec = make_error_code(translate(e));
      log(log_level::error, name() + ": " + what + " failed: " + e.what() + " (SQLite code " +
                                std::to_string(e.getExtendedErrorCode()) + ")");
    } catch (const store_failure& f) {
      ec = make_error_code(f.code);
      log(log_level::error, name() + ": " + what + " failed: " + f.message);
    }
  }

  /// Runs a statement whose only parameter is an id (?1).
  static void exec_with_id(SQLite::Statement& st, const std::string& id);
  /// Runs an upsert statement: ?1 id, ?2 time in epoch ms, ?3 the record.
  static void exec_upsert(SQLite::Statement& st, const std::string& id, std::int64_t ms,
                          const std::string& record);

  /// Moves the bad rows into `quarantine` in one IMMEDIATE transaction:
  /// `copy` (?1 rowid, ?2 reason, ?3 now) copies a row there, `erase` (?1
  /// rowid) deletes it from its table. Logs each as "quarantined
  /// undecodable KIND 'ID'". Call under the mutex, with no statement of
  /// that table stepping.
  void quarantine(SQLite::Statement& copy, SQLite::Statement& erase,
                  const std::vector<bad_row>& bad, const char* kind);

 private:
  // A batch of async_write() waiting for the write thread.
  struct queued_write {
    std::span<const store_change> changes;
    std::function<void(boost::system::error_code)> done;
  };

  // Writes what is queued, one batch at a time, until stopped and drained.
  void run_writes();
  // Applies one change of a write() batch, inside the caller's transaction.
  // `record` is scratch space kept across the batch.
  void apply(const store_change& c, std::string& record);
  // Every prepared statement a failed open() made, reset before the
  // connection is closed.
  void drop_statements();

  std::string path_;
  sqlite_options options_;
  std::mutex mutex_;
  std::optional<SQLite::Database> db_;
  // Declared after the connection they were prepared on: finalized first.
  statements st_;

  std::mutex write_mutex_;
  std::condition_variable write_cv_;
  std::deque<queued_write> write_queue_;
  bool write_stop_ = false;
  // Last: a thread that writes through the members above is joined (by the
  // destructor) before any of them goes.
  std::thread write_thread_;
};

}  // namespace delayq::detail::sqlite
