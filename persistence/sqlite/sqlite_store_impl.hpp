// persistence/sqlite/sqlite_store_impl.hpp - what a sqlite_store holds: its
// connection and prepared statements (under a mutex), the write thread of
// async_write(), and the helpers every part of the store uses. Internal:
// shared by sqlite_store.cpp and sqlite_due.cpp.
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

namespace delayq {
namespace detail::sqlite {

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

}  // namespace detail::sqlite

struct sqlite_store::impl {
  using store_failure = detail::sqlite::store_failure;
  using bad_row = detail::sqlite::bad_row;

  std::string path;
  sqlite_options options;
  std::mutex mutex;
  std::optional<SQLite::Database> db;
  std::optional<SQLite::Statement> upsert;
  std::optional<SQLite::Statement> erase;
  std::optional<SQLite::Statement> to_quarantine;
  std::optional<SQLite::Statement> erase_rowid;
  std::optional<SQLite::Statement> dead_upsert;
  std::optional<SQLite::Statement> dead_erase;
  std::optional<SQLite::Statement> dead_page;
  std::optional<SQLite::Statement> dead_find;
  std::optional<SQLite::Statement> dead_count;
  std::optional<SQLite::Statement> dead_to_quarantine;
  std::optional<SQLite::Statement> dead_erase_rowid;
  std::optional<SQLite::Statement> quarantine_by_id;
  std::optional<SQLite::Statement> settings_all;
  std::optional<SQLite::Statement> settings_upsert;
  std::optional<SQLite::Statement> settings_erase;
  std::optional<SQLite::Statement> sequence_take;   // allocate()
  std::optional<SQLite::Statement> sequence_raise;  // raise_to()
  std::optional<SQLite::Statement> due_page;        // list_due(): sqlite_due.cpp
  std::optional<SQLite::Statement> by_id;           // find(): sqlite_due.cpp
  // write()'s transaction, prepared once: BEGIN and COMMIT as text were
  // parsed again for every batch.
  std::optional<SQLite::Statement> tx_begin, tx_commit, tx_rollback;
  // schedule_store (sqlite_schedules.cpp)
  std::optional<SQLite::Statement> schedule_insert, schedule_put, schedule_state, schedule_erase,
      schedule_find, schedule_page, schedule_count;
  void prepare_schedules();

  // The write thread of async_write(): batches in the order given.
  struct queued_write {
    std::span<const store_change> changes;
    std::function<void(boost::system::error_code)> done;
  };
  std::mutex write_mutex;
  std::condition_variable write_cv;
  std::deque<queued_write> write_queue;
  bool write_stop = false;
  std::thread write_thread;

  std::string name() const { return "sqlite:" + path; }

  // Writes what is queued, one batch at a time, until stopped and drained.
  void run_writes(sqlite_store& store) {
    std::unique_lock lock(write_mutex);
    for (;;) {
      write_cv.wait(lock, [&] { return write_stop || !write_queue.empty(); });
      if (write_queue.empty()) return;  // stopping, and nothing is left
      queued_write w = std::move(write_queue.front());
      write_queue.pop_front();
      lock.unlock();
      boost::system::error_code ec;
      store.write(w.changes, ec);
      try {
        w.done(ec);
      } catch (const std::exception& e) {
        log(log_level::error, name() + ": a write's completion threw: " + e.what());
      } catch (...) {
        log(log_level::error, name() + ": a write's completion threw");
      }
      lock.lock();
    }
  }

  void stop_writes() {
    {
      std::lock_guard lock(write_mutex);
      write_stop = true;
    }
    write_cv.notify_one();
    if (write_thread.joinable()) write_thread.join();
  }

  // Runs `body` and turns any SQLite exception into `ec` plus a log line.
  template <class Body>
  void guarded(const char* what, boost::system::error_code& ec, Body&& body) {
    ec = {};
    try {
      body();
    } catch (const SQLite::Exception& e) {
      ec = make_error_code(detail::sqlite::translate(e));
      log(log_level::error, name() + ": " + what + " failed: " + e.what() + " (SQLite code " +
                                std::to_string(e.getExtendedErrorCode()) + ")");
    } catch (const store_failure& f) {
      ec = make_error_code(f.code);
      log(log_level::error, name() + ": " + what + " failed: " + f.message);
    }
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

  // Runs a statement whose only parameter is an id (?1).
  static void exec_with_id(SQLite::Statement& st, const std::string& id) {
    reset_on_exit reset{st};
    st.bind(1, id);
    st.exec();
  }

  // Runs an upsert statement: ?1 id, ?2 time in epoch ms, ?3 the record.
  static void exec_upsert(SQLite::Statement& st, const std::string& id, std::int64_t ms,
                          const std::string& record) {
    reset_on_exit reset{st};
    st.bind(1, id);
    st.bind(2, ms);
    st.bindNoCopy(3, record.data(), static_cast<int>(record.size()));
    st.exec();
  }

  // Moves the bad rows into `quarantine` in one IMMEDIATE transaction:
  // `copy` (?1 rowid, ?2 reason, ?3 now) copies a row there, `erase` (?1
  // rowid) deletes it from its table. Logs each as "quarantined undecodable
  // KIND 'ID'". Call with no statement of that table stepping.
  void quarantine(SQLite::Statement& copy, SQLite::Statement& erase,
                  const std::vector<bad_row>& bad, const char* kind) {
    if (bad.empty()) return;
    SQLite::Transaction tx(*db, SQLite::TransactionBehavior::IMMEDIATE);
    const std::int64_t now = detail::sqlite::now_epoch_ms();
    for (const bad_row& b : bad) {
      {
        reset_on_exit reset{copy};
        copy.bind(1, b.rowid);
        copy.bind(2, b.why);
        copy.bind(3, now);
        copy.exec();
      }
      reset_on_exit reset{erase};
      erase.bind(1, b.rowid);
      erase.exec();
    }
    tx.commit();
    for (const bad_row& b : bad)
      log(log_level::error,
          name() + ": quarantined undecodable " + kind + " '" + std::string(b.id) + "': " + b.why);
  }

  // Applies one change of a write() batch, inside the caller's transaction.
  // `record` is scratch space kept across the batch.
  void apply(const store_change& c, std::string& record) {
    if (c.task == nullptr) throw store_failure{errc::store_error, "a change without a task"};
    const task& t = *c.task;
    switch (c.what) {
      case change_kind::save:
        record = encode_task(t);
        detail::sqlite::check_record_size(record, t.id);
        exec_upsert(*upsert, t.id, to_epoch_ms(t.due), record);
        return;
      case change_kind::remove: exec_with_id(*erase, t.id); return;
      case change_kind::bury:
        exec_with_id(*erase, t.id);
        record = encode_dead_letter(dead_letter{t, std::string(c.error), c.died_at});
        detail::sqlite::check_record_size(record, t.id);
        exec_upsert(*dead_upsert, t.id, to_epoch_ms(c.died_at), record);
        return;
      case change_kind::revive:
        exec_with_id(*dead_erase, t.id);
        record = encode_task(t);
        detail::sqlite::check_record_size(record, t.id);
        exec_upsert(*upsert, t.id, to_epoch_ms(t.due), record);
        return;
      case change_kind::purge: exec_with_id(*dead_erase, t.id); return;
    }
    throw store_failure{errc::store_error, "unknown change kind"};
  }

  // Every prepared statement, for resetting them before the database.
  void drop_statements() {
    for (auto* st : {&by_id,        &due_page,         &settings_erase,   &settings_upsert,
                     &settings_all, &quarantine_by_id, &dead_erase_rowid, &dead_to_quarantine,
                     &dead_count,   &dead_find,        &dead_page,        &dead_erase,
                     &dead_upsert,  &erase_rowid,      &to_quarantine,    &erase,
                     &upsert,       &sequence_take,    &sequence_raise,   &tx_begin,
                     &tx_commit,    &tx_rollback})
      st->reset();
  }
};

}  // namespace delayq
