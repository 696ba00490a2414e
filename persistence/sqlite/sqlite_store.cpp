#include "delayq/sqlite_store.hpp"

#include <sqlite3.h>

#include <SQLiteCpp/Database.h>
#include <SQLiteCpp/Exception.h>
#include <SQLiteCpp/Statement.h>
#include <SQLiteCpp/Transaction.h>
#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string_view>
#include <vector>

#include "delayq/log.hpp"
#include "delayq/record_codec.hpp"

namespace delayq {
namespace {

// Rows and bytes list() reads per page. A page is read under the store's
// mutex with no user code running, then handed to the sink with the
// statement reset, so the sink may call back into the store and memory stays
// bounded whatever the table holds.
constexpr std::size_t page_rows = 1000;
constexpr std::size_t page_bytes = 8u << 20;

// An SQLite error carried to the boundary of a public call.
struct store_failure {
  errc code;
  std::string message;
};

errc translate(const SQLite::Exception& e) {
  switch (e.getErrorCode() & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_CANTOPEN: return errc::store_unavailable;
    default: return errc::store_error;
  }
}

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
    default:
      throw store_failure{errc::store_error,
                          "no migration to schema version " + std::to_string(version)};
  }
}

std::int64_t now_epoch_ms() { return to_epoch_ms(std::chrono::system_clock::now()); }

struct row {
  std::int64_t rowid = 0;
  std::string id;
  std::string record;
};

// A row whose record failed to decode, and why.
struct bad_row {
  std::int64_t rowid = 0;
  std::string_view id;
  std::string why;
};

// Decodes a dead-letter record read under `id`; a record filed under
// another id is as corrupt as one that does not decode.
std::optional<dead_letter> decode_dead(std::string_view id, std::string_view raw,
                                       std::string& why) {
  boost::system::error_code dec;
  dead_letter d = decode_dead_letter(raw, dec, &why);
  if (dec) return std::nullopt;
  if (d.task.id != id) {
    why = "record holds id '" + d.task.id + "'";
    return std::nullopt;
  }
  return d;
}

// SQLite binds at most INT_MAX bytes.
void check_record_size(const std::string& record, const std::string& id) {
  if (record.size() > static_cast<std::size_t>(INT_MAX))
    throw store_failure{errc::store_error, "record of task '" + id + "' exceeds 2 GiB"};
}

// OFFSET and LIMIT take signed 64-bit values.
std::int64_t clamp_to_int64(std::size_t n) {
  return static_cast<std::int64_t>(
      std::min<std::uint64_t>(n, static_cast<std::uint64_t>(INT64_MAX)));
}

}  // namespace

struct sqlite_store::impl {
  std::string path;
  sqlite_options options;
  std::mutex mutex;
  std::optional<SQLite::Database> db;
  std::optional<SQLite::Statement> upsert;
  std::optional<SQLite::Statement> erase;
  std::optional<SQLite::Statement> page;
  std::optional<SQLite::Statement> to_quarantine;
  std::optional<SQLite::Statement> erase_rowid;
  std::optional<SQLite::Statement> dead_upsert;
  std::optional<SQLite::Statement> dead_erase;
  std::optional<SQLite::Statement> dead_page;
  std::optional<SQLite::Statement> dead_find;
  std::optional<SQLite::Statement> dead_count;
  std::optional<SQLite::Statement> dead_to_quarantine;
  std::optional<SQLite::Statement> dead_erase_rowid;

  std::string name() const { return "sqlite:" + path; }

  // Runs `body` and turns any SQLite exception into `ec` plus a log line.
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

  // Every prepared statement, for resetting them before the database.
  void drop_statements() {
    for (auto* st :
         {&dead_erase_rowid, &dead_to_quarantine, &dead_count, &dead_find, &dead_page, &dead_erase,
          &dead_upsert, &erase_rowid, &to_quarantine, &page, &erase, &upsert})
      st->reset();
  }
};

sqlite_store::sqlite_store(no_open, const std::string& path, sqlite_options options)
    : impl_(std::make_unique<impl>()) {
  impl_->path = path;
  impl_->options = options;
}

sqlite_store::sqlite_store(const std::string& path, sqlite_options options)
    : sqlite_store(no_open{}, path, options) {
  boost::system::error_code ec;
  std::string message;
  open_database(ec, message);
  if (ec) throw boost::system::system_error(ec, "delayq: " + impl_->name() + ": " + message);
}

std::unique_ptr<sqlite_store> sqlite_store::open(const std::string& path, sqlite_options options,
                                                 boost::system::error_code& ec,
                                                 std::string* message) {
  std::unique_ptr<sqlite_store> store(new sqlite_store(no_open{}, path, options));
  std::string why;
  store->open_database(ec, why);
  if (ec) {
    if (message) *message = std::move(why);
    return nullptr;
  }
  return store;
}

sqlite_store::~sqlite_store() = default;

void sqlite_store::open_database(boost::system::error_code& ec, std::string& message) {
  impl& m = *impl_;
  ec = {};
  try {
    if (m.path.empty()) throw store_failure{errc::store_unavailable, "empty database path"};
    const auto busy_ms = m.options.busy_timeout.count();
    m.db.emplace(m.path, SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE,
                 static_cast<int>(std::clamp<decltype(busy_ms)>(busy_ms, 0, INT_MAX)));
    const std::string mode = m.db->execAndGet("PRAGMA journal_mode=WAL").getString();
    if (mode != "wal")
      log(log_level::warning, m.name() + ": journal_mode is '" + mode + "', not 'wal'");
    m.db->exec(std::string("PRAGMA synchronous=") + pragma_value(m.options.synchronous));

    int version = m.db->execAndGet("PRAGMA user_version").getInt();
    while (version < schema_version) {
      // Another process may be migrating the same file: take the write lock
      // first, then look again.
      SQLite::Transaction tx(*m.db, SQLite::TransactionBehavior::IMMEDIATE);
      version = m.db->execAndGet("PRAGMA user_version").getInt();
      if (version >= schema_version) break;
      migrate_to(*m.db, version + 1);
      m.db->exec("PRAGMA user_version=" + std::to_string(version + 1));
      tx.commit();
      ++version;
    }
    if (version > schema_version)
      throw store_failure{errc::store_error, "schema version " + std::to_string(version) +
                                                 " is newer than this build understands (" +
                                                 std::to_string(schema_version) + ")"};

    m.upsert.emplace(*m.db,
                     "INSERT INTO tasks(id, due_ms, record) VALUES(?1, ?2, ?3) "
                     "ON CONFLICT(id) DO UPDATE SET due_ms = excluded.due_ms, "
                     "record = excluded.record");
    m.erase.emplace(*m.db, "DELETE FROM tasks WHERE id = ?1");
    m.page.emplace(*m.db,
                   "SELECT rowid, id, record FROM tasks WHERE rowid > ?1 ORDER BY rowid LIMIT ?2");
    m.to_quarantine.emplace(*m.db,
                            "INSERT INTO quarantine(id, raw, reason, quarantined_at) "
                            "SELECT id, record, ?2, ?3 FROM tasks WHERE rowid = ?1");
    m.erase_rowid.emplace(*m.db, "DELETE FROM tasks WHERE rowid = ?1");
    m.dead_upsert.emplace(*m.db,
                          "INSERT INTO dead_letters(id, died_at_ms, record) VALUES(?1, ?2, ?3) "
                          "ON CONFLICT(id) DO UPDATE SET died_at_ms = excluded.died_at_ms, "
                          "record = excluded.record");
    m.dead_erase.emplace(*m.db, "DELETE FROM dead_letters WHERE id = ?1");
    m.dead_page.emplace(*m.db,
                        "SELECT rowid, id, record FROM dead_letters "
                        "ORDER BY died_at_ms, id LIMIT ?2 OFFSET ?1");
    m.dead_find.emplace(*m.db, "SELECT rowid, record FROM dead_letters WHERE id = ?1");
    m.dead_count.emplace(*m.db, "SELECT count(*) FROM dead_letters");
    m.dead_to_quarantine.emplace(
        *m.db,
        "INSERT INTO quarantine(id, raw, reason, quarantined_at, source) "
        "SELECT id, record, ?2, ?3, 'dead_letters' FROM dead_letters WHERE rowid = ?1");
    m.dead_erase_rowid.emplace(*m.db, "DELETE FROM dead_letters WHERE rowid = ?1");
  } catch (const SQLite::Exception& e) {
    ec = make_error_code(translate(e));
    message =
        std::string(e.what()) + " (SQLite code " + std::to_string(e.getExtendedErrorCode()) + ")";
  } catch (const store_failure& f) {
    ec = make_error_code(f.code);
    message = f.message;
  }
  if (ec) {
    log(log_level::error, m.name() + ": open failed: " + message);
    // Statements must go before the database they were prepared on.
    m.drop_statements();
    m.db.reset();
  }
}

void sqlite_store::save(std::span<const task> tasks, boost::system::error_code& ec) {
  impl& m = *impl_;
  ec = {};
  if (tasks.empty()) return;
  std::lock_guard lock(m.mutex);
  m.guarded("save", ec, [&] {
    SQLite::Transaction tx(*m.db, SQLite::TransactionBehavior::IMMEDIATE);
    SQLite::Statement& st = *m.upsert;
    std::string record;
    for (const task& t : tasks) {
      record = encode_task(t);
      check_record_size(record, t.id);
      impl::exec_upsert(st, t.id, to_epoch_ms(t.due), record);
    }
    tx.commit();
  });
}

void sqlite_store::remove(std::span<const std::string> ids, boost::system::error_code& ec) {
  impl& m = *impl_;
  ec = {};
  if (ids.empty()) return;
  std::lock_guard lock(m.mutex);
  m.guarded("remove", ec, [&] {
    SQLite::Transaction tx(*m.db, SQLite::TransactionBehavior::IMMEDIATE);
    for (const std::string& id : ids) impl::exec_with_id(*m.erase, id);
    tx.commit();
  });
}

list_summary sqlite_store::list(const std::function<void(task&&)>& sink,
                                boost::system::error_code& ec) {
  impl& m = *impl_;
  ec = {};
  list_summary summary;
  std::int64_t after = 0;  // rowids start at 1
  std::vector<row> rows;
  std::vector<task> good;
  while (true) {
    rows.clear();
    good.clear();
    bool more = false;
    {
      std::lock_guard lock(m.mutex);
      m.guarded("list", ec, [&] {
        {
          SQLite::Statement& st = *m.page;
          impl::reset_on_exit reset{st};
          st.bind(1, after);
          st.bind(2, static_cast<std::int64_t>(page_rows));
          std::size_t bytes = 0;
          while (st.executeStep()) {
            row r;
            r.rowid = st.getColumn(0).getInt64();
            r.id = st.getColumn(1).getString();
            const SQLite::Column rec = st.getColumn(2);
            r.record.assign(static_cast<const char*>(rec.getBlob()),
                            static_cast<std::size_t>(rec.getBytes()));
            bytes += r.record.size();
            rows.push_back(std::move(r));
            if (bytes >= page_bytes) break;
          }
          more = !rows.empty();
        }
        // Decode with the statement reset; move the bad rows in one
        // transaction before any sink runs, so a throwing sink cannot leave
        // them half-moved.
        std::vector<bad_row> bad;
        for (const row& r : rows) {
          boost::system::error_code dec;
          std::string why;
          task t = decode_task(r.record, dec, &why);
          if (!dec && t.id != r.id) {
            dec = make_error_code(errc::corrupt_record);
            why = "record holds id '" + t.id + "'";
          }
          if (dec)
            bad.push_back({r.rowid, r.id, std::move(why)});
          else
            good.push_back(std::move(t));
        }
        m.quarantine(*m.to_quarantine, *m.erase_rowid, bad, "record of task");
        summary.quarantined += bad.size();
      });
    }
    if (ec || !more) break;
    after = rows.back().rowid;
    for (task& t : good) {
      ++summary.tasks;
      sink(std::move(t));
    }
  }
  return summary;
}

std::string sqlite_store::describe() const { return impl_->name(); }

void sqlite_store::bury(std::span<const dead_letter> letters, boost::system::error_code& ec) {
  impl& m = *impl_;
  ec = {};
  if (letters.empty()) return;
  std::lock_guard lock(m.mutex);
  m.guarded("bury", ec, [&] {
    SQLite::Transaction tx(*m.db, SQLite::TransactionBehavior::IMMEDIATE);
    std::string record;
    for (const dead_letter& d : letters) {
      impl::exec_with_id(*m.erase, d.task.id);
      record = encode_dead_letter(d);
      check_record_size(record, d.task.id);
      impl::exec_upsert(*m.dead_upsert, d.task.id, to_epoch_ms(d.died_at), record);
    }
    tx.commit();
  });
}

void sqlite_store::revive(std::span<const task> tasks, boost::system::error_code& ec) {
  impl& m = *impl_;
  ec = {};
  if (tasks.empty()) return;
  std::lock_guard lock(m.mutex);
  m.guarded("revive", ec, [&] {
    SQLite::Transaction tx(*m.db, SQLite::TransactionBehavior::IMMEDIATE);
    std::string record;
    for (const task& t : tasks) {
      impl::exec_with_id(*m.dead_erase, t.id);
      record = encode_task(t);
      check_record_size(record, t.id);
      impl::exec_upsert(*m.upsert, t.id, to_epoch_ms(t.due), record);
    }
    tx.commit();
  });
}

void sqlite_store::purge(std::span<const std::string> ids, boost::system::error_code& ec) {
  impl& m = *impl_;
  ec = {};
  if (ids.empty()) return;
  std::lock_guard lock(m.mutex);
  m.guarded("purge", ec, [&] {
    SQLite::Transaction tx(*m.db, SQLite::TransactionBehavior::IMMEDIATE);
    for (const std::string& id : ids) impl::exec_with_id(*m.dead_erase, id);
    tx.commit();
  });
}

std::size_t sqlite_store::count_dead(boost::system::error_code& ec) {
  impl& m = *impl_;
  ec = {};
  std::size_t n = 0;
  std::lock_guard lock(m.mutex);
  m.guarded("count_dead", ec, [&] {
    SQLite::Statement& st = *m.dead_count;
    impl::reset_on_exit reset{st};
    if (st.executeStep()) n = static_cast<std::size_t>(st.getColumn(0).getInt64());
  });
  return n;
}

std::optional<dead_letter> sqlite_store::find_dead(std::string_view id,
                                                   boost::system::error_code& ec) {
  impl& m = *impl_;
  ec = {};
  std::optional<dead_letter> found;
  std::lock_guard lock(m.mutex);
  m.guarded("find_dead", ec, [&] {
    row r;
    {
      SQLite::Statement& st = *m.dead_find;
      impl::reset_on_exit reset{st};
      st.bind(1, std::string(id));
      if (!st.executeStep()) return;
      r.rowid = st.getColumn(0).getInt64();
      const SQLite::Column rec = st.getColumn(1);
      r.record.assign(static_cast<const char*>(rec.getBlob()),
                      static_cast<std::size_t>(rec.getBytes()));
    }
    std::string why;
    found = decode_dead(id, r.record, why);
    if (!found)
      m.quarantine(*m.dead_to_quarantine, *m.dead_erase_rowid, {{r.rowid, id, std::move(why)}},
                   "dead-letter record of task");
  });
  if (ec) found.reset();
  return found;
}

std::vector<dead_letter> sqlite_store::list_dead(std::size_t offset, std::size_t limit,
                                                 boost::system::error_code& ec) {
  impl& m = *impl_;
  ec = {};
  std::vector<dead_letter> out;
  if (limit == 0) return out;
  std::lock_guard lock(m.mutex);
  m.guarded("list_dead", ec, [&] {
    std::vector<row> rows;
    while (true) {
      out.clear();
      rows.clear();
      {
        SQLite::Statement& st = *m.dead_page;
        impl::reset_on_exit reset{st};
        st.bind(1, clamp_to_int64(offset));
        st.bind(2, clamp_to_int64(limit));
        while (st.executeStep()) {
          row r;
          r.rowid = st.getColumn(0).getInt64();
          r.id = st.getColumn(1).getString();
          const SQLite::Column rec = st.getColumn(2);
          r.record.assign(static_cast<const char*>(rec.getBlob()),
                          static_cast<std::size_t>(rec.getBytes()));
          rows.push_back(std::move(r));
        }
      }
      std::vector<bad_row> bad;
      out.reserve(rows.size());
      for (const row& r : rows) {
        std::string why;
        if (auto d = decode_dead(r.id, r.record, why))
          out.push_back(std::move(*d));
        else
          bad.push_back({r.rowid, r.id, std::move(why)});
      }
      if (bad.empty()) return;
      m.quarantine(*m.dead_to_quarantine, *m.dead_erase_rowid, bad, "dead-letter record of task");
      // The quarantined rows no longer count toward the offset: read the
      // page again so that it, and the pages after it, skip no good letter.
      // Every pass that gets here deleted rows, so this ends.
    }
  });
  if (ec) out.clear();
  return out;
}

}  // namespace delayq
