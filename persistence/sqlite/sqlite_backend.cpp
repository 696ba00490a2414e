// persistence/sqlite/sqlite_backend.cpp - see sqlite_backend.hpp: opening
// the file (schema migrations, statements), the batch write and the write
// thread.
#include "sqlite_backend.hpp"

#include <algorithm>

namespace delayq::detail::sqlite {
namespace {

const char* pragma_value(sqlite_options::synchronous_level level) {
  switch (level) {
    case sqlite_options::synchronous_level::off: return "OFF";
    case sqlite_options::synchronous_level::normal: return "NORMAL";
    case sqlite_options::synchronous_level::full: return "FULL";
    case sqlite_options::synchronous_level::extra: return "EXTRA";
  }
  return "FULL";
}

// Schema migrations: migrate_to(db, n) takes a database at version n - 1 to
// version n inside the caller's transaction. Each case is kept as it shipped:
// a new schema version adds a case, it never edits an old one.
void migrate_to(SQLite::Database& db, int version) {
  switch (version) {
    case 1:
      db.exec(
          "CREATE TABLE tasks ("
          "  id TEXT PRIMARY KEY NOT NULL,"
          "  due_ms INTEGER NOT NULL,"
          "  record BLOB NOT NULL);"
          "CREATE INDEX tasks_due_ms ON tasks(due_ms);"
          "CREATE TABLE quarantine ("
          "  id TEXT NOT NULL,"
          "  raw BLOB,"
          "  reason TEXT NOT NULL,"
          "  quarantined_at INTEGER NOT NULL);"
          "CREATE INDEX quarantine_id ON quarantine(id);");
      return;
    case 2:
      // Dead letters, and where a quarantined record came from.
      db.exec(
          "CREATE TABLE dead_letters ("
          "  id TEXT PRIMARY KEY NOT NULL,"
          "  died_at_ms INTEGER NOT NULL,"
          "  record BLOB NOT NULL);"
          "CREATE INDEX dead_letters_died_at ON dead_letters(died_at_ms, id);"
          "ALTER TABLE quarantine ADD COLUMN source TEXT NOT NULL DEFAULT 'tasks';");
      return;
    case 3:
      // Named settings shared by every engine on the file, byte-exact.
      db.exec(
          "CREATE TABLE settings ("
          "  key BLOB PRIMARY KEY NOT NULL,"
          "  value BLOB NOT NULL) WITHOUT ROWID;");
      return;
    case 4:
      // list_due() reads in (due_ms, id) order from a cursor: with the
      // index on due_ms alone SQLite sorts each run of equal due times by id
      // and walks a run from its start on every page, so a page in a run of
      // R tasks cost O(R). On (due_ms, id) a page is a seek and `limit`
      // steps. It replaces the old index, which it serves in full.
      db.exec(
          "CREATE INDEX tasks_due_ms_id ON tasks(due_ms, id);"
          "DROP INDEX tasks_due_ms;");
      return;
    case 5:
      // Named sequences (sequence_store): `next` is the next number to hand
      // out, at most 2^63 - 1 (SQLite's integers are signed).
      db.exec(
          "CREATE TABLE sequences ("
          "  name BLOB PRIMARY KEY NOT NULL,"
          "  next INTEGER NOT NULL) WITHOUT ROWID;");
      return;
    case 6:
      // Recurring schedules (schedule_store): the engine's bytes under an
      // id, and a revision every write is conditioned on.
      db.exec(
          "CREATE TABLE schedules ("
          "  id TEXT PRIMARY KEY NOT NULL,"
          "  revision INTEGER NOT NULL,"
          "  definition BLOB NOT NULL,"
          "  state BLOB NOT NULL) WITHOUT ROWID;");
      return;
    default:
      throw store_failure{errc::store_error,
                          "no migration to schema version " + std::to_string(version)};
  }
}

}  // namespace

void backend::open(boost::system::error_code& ec, std::string& message) {
  constexpr int schema_version = sqlite_store::schema_version;
  ec = {};
  try {
    if (path_.empty()) throw store_failure{errc::store_unavailable, "empty database path"};
    const auto busy_ms = options_.busy_timeout.count();
    db_.emplace(path_, SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE,
                static_cast<int>(std::clamp<decltype(busy_ms)>(busy_ms, 0, INT_MAX)));
    SQLite::Database& db = *db_;
    const std::string mode = db.execAndGet("PRAGMA journal_mode=WAL").getString();
    if (mode != "wal")
      log(log_level::warning, name() + ": journal_mode is '" + mode + "', not 'wal'");
    db.exec(std::string("PRAGMA synchronous=") + pragma_value(options_.synchronous));

    int version = db.execAndGet("PRAGMA user_version").getInt();
    while (version < schema_version) {
      // Another process may be migrating the same file: take the write lock
      // first, then look again.
      SQLite::Transaction tx(db, SQLite::TransactionBehavior::IMMEDIATE);
      version = db.execAndGet("PRAGMA user_version").getInt();
      if (version >= schema_version) break;
      migrate_to(db, version + 1);
      db.exec("PRAGMA user_version=" + std::to_string(version + 1));
      tx.commit();
      ++version;
    }
    if (version > schema_version)
      throw store_failure{errc::store_error, "schema version " + std::to_string(version) +
                                                 " is newer than this build understands (" +
                                                 std::to_string(schema_version) + ")"};

    statements& m = st_;
    m.upsert.emplace(db,
                     "INSERT INTO tasks(id, due_ms, record) VALUES(?1, ?2, ?3) "
                     "ON CONFLICT(id) DO UPDATE SET due_ms = excluded.due_ms, "
                     "record = excluded.record");
    m.erase.emplace(db, "DELETE FROM tasks WHERE id = ?1");
    m.tx_begin.emplace(db, "BEGIN IMMEDIATE");
    m.tx_commit.emplace(db, "COMMIT");
    m.tx_rollback.emplace(db, "ROLLBACK");
    m.to_quarantine.emplace(db,
                            "INSERT INTO quarantine(id, raw, reason, quarantined_at) "
                            "SELECT id, record, ?2, ?3 FROM tasks WHERE rowid = ?1");
    m.erase_rowid.emplace(db, "DELETE FROM tasks WHERE rowid = ?1");
    m.dead_upsert.emplace(db,
                          "INSERT INTO dead_letters(id, died_at_ms, record) VALUES(?1, ?2, ?3) "
                          "ON CONFLICT(id) DO UPDATE SET died_at_ms = excluded.died_at_ms, "
                          "record = excluded.record");
    m.dead_erase.emplace(db, "DELETE FROM dead_letters WHERE id = ?1");
    m.dead_page.emplace(db,
                        "SELECT rowid, id, record FROM dead_letters "
                        "ORDER BY died_at_ms, id LIMIT ?2 OFFSET ?1");
    m.dead_find.emplace(db, "SELECT rowid, record FROM dead_letters WHERE id = ?1");
    m.dead_count.emplace(db, "SELECT count(*) FROM dead_letters");
    m.dead_to_quarantine.emplace(
        db,
        "INSERT INTO quarantine(id, raw, reason, quarantined_at, source) "
        "SELECT id, record, ?2, ?3, 'dead_letters' FROM dead_letters WHERE rowid = ?1");
    m.dead_erase_rowid.emplace(db, "DELETE FROM dead_letters WHERE rowid = ?1");
    m.quarantine_by_id.emplace(db,
                               "INSERT INTO quarantine(id, raw, reason, quarantined_at, source) "
                               "SELECT id, record, ?2, ?3, 'tasks' FROM tasks WHERE id = ?1");
    m.settings_all.emplace(db, "SELECT key, value FROM settings ORDER BY key");
    m.settings_upsert.emplace(db,
                              "INSERT INTO settings(key, value) VALUES(?1, ?2) "
                              "ON CONFLICT(key) DO UPDATE SET value = excluded.value");
    m.settings_erase.emplace(db, "DELETE FROM settings WHERE key = ?1");
    // One statement each, so one implicit transaction: the file's write lock
    // makes them atomic against every connection, in this process or not.
    // The WHERE keeps `next` an integer (past 2^63 - 1 SQLite would make it
    // a float): no row comes back then.
    m.sequence_take.emplace(db,
                            "INSERT INTO sequences(name, next) VALUES(?1, 1 + ?2) "
                            "ON CONFLICT(name) DO UPDATE SET next = next + ?2 "
                            "WHERE next <= 9223372036854775807 - ?2 "
                            "RETURNING next - ?2");
    m.sequence_raise.emplace(db,
                             "INSERT INTO sequences(name, next) VALUES(?1, ?2) "
                             "ON CONFLICT(name) DO UPDATE SET next = max(next, excluded.next)");
    // Ids are TEXT under the default BINARY collation: compared with
    // memcmp(), then by length, which is the bytewise order list_due()
    // promises. The row value comparison seeks in the (due_ms, id) index.
    m.due_page.emplace(db,
                       "SELECT rowid, id, due_ms, record FROM tasks "
                       "WHERE (due_ms, id) > (?1, ?2) AND due_ms <= ?3 "
                       "ORDER BY due_ms, id LIMIT ?4");
    m.by_id.emplace(db, "SELECT rowid, record FROM tasks WHERE id = ?1");
    prepare_schedules(db, m);  // sqlite_schedules.cpp
  } catch (const SQLite::Exception& e) {
    ec = make_error_code(translate(e));
    message =
        std::string(e.what()) + " (SQLite code " + std::to_string(e.getExtendedErrorCode()) + ")";
  } catch (const store_failure& f) {
    ec = make_error_code(f.code);
    message = f.message;
  }
  if (ec) {
    log(log_level::error, name() + ": open failed: " + message);
    // Statements must go before the database they were prepared on.
    drop_statements();
    db_.reset();
  }
}

void backend::drop_statements() {
  statements& m = st_;
  for (auto* st : {&m.by_id,        &m.due_page,         &m.settings_erase,   &m.settings_upsert,
                   &m.settings_all, &m.quarantine_by_id, &m.dead_erase_rowid, &m.dead_to_quarantine,
                   &m.dead_count,   &m.dead_find,        &m.dead_page,        &m.dead_erase,
                   &m.dead_upsert,  &m.erase_rowid,      &m.to_quarantine,    &m.erase,
                   &m.upsert,       &m.sequence_take,    &m.sequence_raise,   &m.tx_begin,
                   &m.tx_commit,    &m.tx_rollback})
    st->reset();
}

void backend::exec_with_id(SQLite::Statement& st, const std::string& id) {
  reset_on_exit reset{st};
  st.bind(1, id);
  st.exec();
}

void backend::exec_upsert(SQLite::Statement& st, const std::string& id, std::int64_t ms,
                          const std::string& record) {
  reset_on_exit reset{st};
  st.bind(1, id);
  st.bind(2, ms);
  st.bindNoCopy(3, record.data(), static_cast<int>(record.size()));
  st.exec();
}

void backend::quarantine(SQLite::Statement& copy, SQLite::Statement& erase,
                         const std::vector<bad_row>& bad, const char* kind) {
  if (bad.empty()) return;
  SQLite::Transaction tx(*db_, SQLite::TransactionBehavior::IMMEDIATE);
  const std::int64_t now = now_epoch_ms();
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

void backend::apply(const store_change& c, std::string& record) {
  if (c.task == nullptr) throw store_failure{errc::store_error, "a change without a task"};
  const task& t = *c.task;
  statements& m = st_;
  switch (c.what) {
    case change_kind::save:
      record = encode_task(t);
      check_record_size(record, t.id);
      exec_upsert(*m.upsert, t.id, to_epoch_ms(t.due), record);
      return;
    case change_kind::remove: exec_with_id(*m.erase, t.id); return;
    case change_kind::bury:
      exec_with_id(*m.erase, t.id);
      record = encode_dead_letter(dead_letter{t, std::string(c.error), c.died_at});
      check_record_size(record, t.id);
      exec_upsert(*m.dead_upsert, t.id, to_epoch_ms(c.died_at), record);
      return;
    case change_kind::revive:
      exec_with_id(*m.dead_erase, t.id);
      record = encode_task(t);
      check_record_size(record, t.id);
      exec_upsert(*m.upsert, t.id, to_epoch_ms(t.due), record);
      return;
    case change_kind::purge: exec_with_id(*m.dead_erase, t.id); return;
  }
  throw store_failure{errc::store_error, "unknown change kind"};
}

void backend::write(std::span<const store_change> changes, boost::system::error_code& ec) {
  ec = {};
  if (changes.empty()) return;
  std::lock_guard lock(mutex_);
  guarded("write", ec, [&] {
    // One transaction for the whole batch: an exception anywhere before the
    // commit rolls every change back (the guard's destructor).
    struct transaction {
      statements& m;
      bool open = false;
      ~transaction() {
        if (!open) return;
        reset_on_exit reset{*m.tx_rollback};
        m.tx_rollback->tryExecuteStep();
      }
    } tx{st_};
    {
      reset_on_exit reset{*st_.tx_begin};
      st_.tx_begin->exec();
    }
    tx.open = true;
    std::string record;
    for (const store_change& c : changes) apply(c, record);
    reset_on_exit reset{*st_.tx_commit};
    st_.tx_commit->exec();
    tx.open = false;
  });
}

void backend::async_write(std::span<const store_change> changes,
                          std::function<void(boost::system::error_code)> done) {
  if (!options_.write_thread) {
    boost::system::error_code ec;
    write(changes, ec);
    done(ec);
    return;
  }
  {
    std::lock_guard lock(write_mutex_);
    if (!write_thread_.joinable()) write_thread_ = std::thread([this] { run_writes(); });
    write_queue_.push_back({changes, std::move(done)});
  }
  write_cv_.notify_one();
}

void backend::run_writes() {
  std::unique_lock lock(write_mutex_);
  for (;;) {
    write_cv_.wait(lock, [&] { return write_stop_ || !write_queue_.empty(); });
    if (write_queue_.empty()) return;  // stopping, and nothing is left
    queued_write w = std::move(write_queue_.front());
    write_queue_.pop_front();
    lock.unlock();
    boost::system::error_code ec;
    write(w.changes, ec);
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

void backend::stop_writes() {
  {
    std::lock_guard lock(write_mutex_);
    write_stop_ = true;
  }
  write_cv_.notify_one();
  if (write_thread_.joinable()) write_thread_.join();
}

}  // namespace delayq::detail::sqlite
