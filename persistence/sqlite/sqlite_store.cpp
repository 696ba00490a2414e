#include "delayq/sqlite_store.hpp"

#include "sqlite_store_impl.hpp"

#include <sqlite3.h>

#include <SQLiteCpp/Database.h>
#include <SQLiteCpp/Exception.h>
#include <SQLiteCpp/Statement.h>
#include <SQLiteCpp/Transaction.h>
#include <algorithm>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <limits>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

#include "delayq/log.hpp"
#include "delayq/record_codec.hpp"

namespace delayq {
namespace {

using detail::sqlite::bad_row;
using detail::sqlite::now_epoch_ms;
using detail::sqlite::store_failure;
using detail::sqlite::translate;

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

sqlite_options::synchronous_level level_of(int pragma) {
  using level = sqlite_options::synchronous_level;
  switch (pragma) {
    case 0: return level::off;
    case 1: return level::normal;
    case 3: return level::extra;
    default: return level::full;
  }
}

// A BLOB column's bytes; SQLite returns a null pointer for an empty BLOB.
std::string column_bytes(const SQLite::Column& c) {
  const void* p = c.getBlob();  // before getBytes(): SQLite's documented order
  const int n = c.getBytes();
  return n > 0 ? std::string(static_cast<const char*>(p), static_cast<std::size_t>(n))
               : std::string();
}

// Binds bytes as a BLOB, never as NULL: sqlite3_bind_blob() binds NULL for a
// null pointer, which an empty string_view may carry.
void bind_bytes(SQLite::Statement& st, int index, std::string_view bytes) {
  if (bytes.size() > static_cast<std::size_t>(INT_MAX))
    throw store_failure{errc::store_error, "a value exceeds 2 GiB"};
  st.bindNoCopy(index, bytes.empty() ? "" : bytes.data(), static_cast<int>(bytes.size()));
}

struct row {
  std::int64_t rowid = 0;
  std::string id;
  std::string record;
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

// OFFSET and LIMIT take signed 64-bit values.
std::int64_t clamp_to_int64(std::size_t n) {
  return static_cast<std::int64_t>(
      std::min<std::uint64_t>(n, static_cast<std::uint64_t>(INT64_MAX)));
}

}  // namespace

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

sqlite_store::~sqlite_store() { impl_->stop_writes(); }

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
    m.tx_begin.emplace(*m.db, "BEGIN IMMEDIATE");
    m.tx_commit.emplace(*m.db, "COMMIT");
    m.tx_rollback.emplace(*m.db, "ROLLBACK");
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
    m.quarantine_by_id.emplace(*m.db,
                               "INSERT INTO quarantine(id, raw, reason, quarantined_at, source) "
                               "SELECT id, record, ?2, ?3, 'tasks' FROM tasks WHERE id = ?1");
    m.settings_all.emplace(*m.db, "SELECT key, value FROM settings ORDER BY key");
    m.settings_upsert.emplace(*m.db,
                              "INSERT INTO settings(key, value) VALUES(?1, ?2) "
                              "ON CONFLICT(key) DO UPDATE SET value = excluded.value");
    m.settings_erase.emplace(*m.db, "DELETE FROM settings WHERE key = ?1");
    // One statement each, so one implicit transaction: the file's write lock
    // makes them atomic against every connection, in this process or not.
    // The WHERE keeps `next` an integer (past 2^63 - 1 SQLite would make it
    // a float): no row comes back then.
    m.sequence_take.emplace(*m.db,
                            "INSERT INTO sequences(name, next) VALUES(?1, 1 + ?2) "
                            "ON CONFLICT(name) DO UPDATE SET next = next + ?2 "
                            "WHERE next <= 9223372036854775807 - ?2 "
                            "RETURNING next - ?2");
    m.sequence_raise.emplace(*m.db,
                             "INSERT INTO sequences(name, next) VALUES(?1, ?2) "
                             "ON CONFLICT(name) DO UPDATE SET next = max(next, excluded.next)");
    // Ids are TEXT under the default BINARY collation: compared with
    // memcmp(), then by length, which is the bytewise order list_due()
    // promises. The row value comparison seeks in the (due_ms, id) index.
    m.due_page.emplace(*m.db,
                       "SELECT rowid, id, due_ms, record FROM tasks "
                       "WHERE (due_ms, id) > (?1, ?2) AND due_ms <= ?3 "
                       "ORDER BY due_ms, id LIMIT ?4");
    m.by_id.emplace(*m.db, "SELECT rowid, record FROM tasks WHERE id = ?1");
    m.prepare_schedules();  // sqlite_schedules.cpp
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

void sqlite_store::write(std::span<const store_change> changes, boost::system::error_code& ec) {
  impl& m = *impl_;
  ec = {};
  if (changes.empty()) return;
  std::lock_guard lock(m.mutex);
  m.guarded("write", ec, [&] {
    // One transaction for the whole batch: an exception anywhere before the
    // commit rolls every change back (the guard's destructor).
    struct transaction {
      impl& m;
      bool open = false;
      ~transaction() {
        if (!open) return;
        impl::reset_on_exit reset{*m.tx_rollback};
        m.tx_rollback->tryExecuteStep();
      }
    } tx{m};
    {
      impl::reset_on_exit reset{*m.tx_begin};
      m.tx_begin->exec();
    }
    tx.open = true;
    std::string record;
    for (const store_change& c : changes) m.apply(c, record);
    impl::reset_on_exit reset{*m.tx_commit};
    m.tx_commit->exec();
    tx.open = false;
  });
}

void sqlite_store::async_write(std::span<const store_change> changes,
                               std::function<void(boost::system::error_code)> done) {
  impl& m = *impl_;
  if (!m.options.write_thread) {
    boost::system::error_code ec;
    write(changes, ec);
    done(ec);
    return;
  }
  {
    std::lock_guard lock(m.write_mutex);
    if (!m.write_thread.joinable())
      m.write_thread = std::thread([this] { impl_->run_writes(*this); });
    m.write_queue.push_back({changes, std::move(done)});
  }
  m.write_cv.notify_one();
}

std::size_t sqlite_store::max_writes_in_flight() const noexcept {
  return impl_->options.write_thread ? 2 : 1;
}

void sqlite_store::save(std::span<const task> tasks, boost::system::error_code& ec) {
  std::vector<store_change> changes;
  changes.reserve(tasks.size());
  for (const task& t : tasks) changes.push_back({change_kind::save, &t, {}, {}});
  write(changes, ec);
}

namespace {
// Changes of one kind that name only ids (remove, purge): the tasks they
// point at hold nothing but the id.
void id_changes(std::span<const std::string> ids, change_kind what, std::vector<task>& holders,
                std::vector<store_change>& changes) {
  holders.resize(ids.size());
  changes.reserve(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    holders[i].id = ids[i];
    changes.push_back({what, &holders[i], {}, {}});
  }
}
}  // namespace

void sqlite_store::remove(std::span<const std::string> ids, boost::system::error_code& ec) {
  std::vector<task> holders;
  std::vector<store_change> changes;
  id_changes(ids, change_kind::remove, holders, changes);
  write(changes, ec);
}

list_summary sqlite_store::list(const std::function<void(task&&)>& sink,
                                boost::system::error_code& ec) {
  impl& m = *impl_;
  ec = {};
  list_summary summary;
  // One SELECT on a read connection of its own: in WAL mode it reads one
  // snapshot while this store's connection keeps writing (a sink may call
  // back into the store), and it holds one row at a time, so memory stays
  // bounded whatever the table holds. Statements are declared after the
  // connection so they are finalized first.
  std::optional<SQLite::Database> reader;
  std::optional<SQLite::Statement> rows;
  m.guarded("list", ec, [&] {
    const auto busy_ms = m.options.busy_timeout.count();
    reader.emplace(m.path, SQLite::OPEN_READONLY,
                   static_cast<int>(std::clamp<decltype(busy_ms)>(busy_ms, 0, INT_MAX)));
    rows.emplace(*reader, "SELECT rowid, id, record FROM tasks");
  });
  if (ec) return summary;

  const std::size_t every = m.options.list_progress_every;
  const auto t0 = std::chrono::steady_clock::now();
  std::size_t read = 0;
  auto seconds = [&] {
    return std::to_string(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  };
  while (true) {
    bool have = false;
    std::optional<task> good;
    m.guarded("list", ec, [&] {
      have = rows->executeStep();
      if (!have) return;
      ++read;
      const SQLite::Column rec = rows->getColumn(2);
      const void* p = rec.getBlob();
      const std::string_view raw(static_cast<const char*>(p),
                                 p ? static_cast<std::size_t>(rec.getBytes()) : 0);
      const SQLite::Column id_col = rows->getColumn(1);
      const char* id_text = id_col.getText();
      const std::string_view id(id_text, static_cast<std::size_t>(id_col.getBytes()));
      boost::system::error_code dec;
      std::string why;
      task t = decode_stored_task(id, raw, dec, &why);
      if (!dec) {
        good.emplace(std::move(t));
        return;
      }
      // Moved at once, before any later task reaches the sink, on the
      // store's own connection (the reader's snapshot is unaffected).
      const std::string owned_id(id);
      std::lock_guard lock(m.mutex);
      m.quarantine(*m.to_quarantine, *m.erase_rowid,
                   {{rows->getColumn(0).getInt64(), owned_id, std::move(why)}}, "record of task");
      ++summary.quarantined;
    });
    if (ec || !have) break;
    if (every != 0 && read % every == 0)
      log(log_level::info,
          m.name() + ": list: " + std::to_string(read) + " records read in " + seconds() + " s");
    if (good) {
      ++summary.tasks;
      sink(std::move(*good));
    }
  }
  if (!ec && every != 0 && read >= every)
    log(log_level::info, m.name() + ": list: done, " + std::to_string(summary.tasks) +
                             " tasks and " + std::to_string(summary.quarantined) +
                             " quarantined in " + seconds() + " s");
  return summary;
}

void sqlite_store::quarantine(std::string_view id, std::string_view reason,
                              boost::system::error_code& ec) {
  impl& m = *impl_;
  ec = {};
  std::lock_guard lock(m.mutex);
  m.guarded("quarantine", ec, [&] {
    SQLite::Transaction tx(*m.db, SQLite::TransactionBehavior::IMMEDIATE);
    const std::string key(id);
    int copied = 0;
    {
      SQLite::Statement& st = *m.quarantine_by_id;
      impl::reset_on_exit reset{st};
      st.bind(1, key);
      st.bind(2, std::string(reason));
      st.bind(3, now_epoch_ms());
      copied = st.exec();
    }
    if (copied == 0) return;  // nothing stored under `id`: the tx rolls back, empty
    impl::exec_with_id(*m.erase, key);
    tx.commit();
    log(log_level::error, m.name() + ": quarantined task '" + key + "': " + std::string(reason));
  });
}

std::string sqlite_store::describe() const { return impl_->name(); }

void sqlite_store::bury(std::span<const dead_letter> letters, boost::system::error_code& ec) {
  std::vector<store_change> changes;
  changes.reserve(letters.size());
  for (const dead_letter& d : letters)
    changes.push_back({change_kind::bury, &d.task, d.error, d.died_at});
  write(changes, ec);
}

void sqlite_store::revive(std::span<const task> tasks, boost::system::error_code& ec) {
  std::vector<store_change> changes;
  changes.reserve(tasks.size());
  for (const task& t : tasks) changes.push_back({change_kind::revive, &t, {}, {}});
  write(changes, ec);
}

void sqlite_store::purge(std::span<const std::string> ids, boost::system::error_code& ec) {
  std::vector<task> holders;
  std::vector<store_change> changes;
  id_changes(ids, change_kind::purge, holders, changes);
  write(changes, ec);
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

std::vector<std::pair<std::string, std::string>> sqlite_store::load_settings(
    boost::system::error_code& ec) {
  impl& m = *impl_;
  std::vector<std::pair<std::string, std::string>> out;
  std::lock_guard lock(m.mutex);
  m.guarded("load_settings", ec, [&] {
    SQLite::Statement& st = *m.settings_all;
    impl::reset_on_exit reset{st};
    while (st.executeStep())
      out.emplace_back(column_bytes(st.getColumn(0)), column_bytes(st.getColumn(1)));
  });
  if (ec) out.clear();
  return out;
}

void sqlite_store::save_setting(std::string_view key, std::string_view value,
                                boost::system::error_code& ec) {
  impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  m.guarded("save_setting", ec, [&] {
    SQLite::Statement& st = *m.settings_upsert;
    impl::reset_on_exit reset{st};
    bind_bytes(st, 1, key);
    bind_bytes(st, 2, value);
    st.exec();
  });
}

bool sqlite_store::erase_setting(std::string_view key, boost::system::error_code& ec) {
  impl& m = *impl_;
  bool erased = false;
  std::lock_guard lock(m.mutex);
  m.guarded("erase_setting", ec, [&] {
    SQLite::Statement& st = *m.settings_erase;
    impl::reset_on_exit reset{st};
    bind_bytes(st, 1, key);
    erased = st.exec() > 0;
  });
  return erased && !ec;
}

std::uint64_t sqlite_store::allocate(std::string_view name, std::uint64_t count,
                                     boost::system::error_code& ec) {
  ec = {};
  constexpr auto most = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  if (!valid_sequence_call(name, count) || count >= most) {
    ec = errc::invalid_options;
    return 0;
  }
  impl& m = *impl_;
  std::uint64_t first = 0;
  std::lock_guard lock(m.mutex);
  m.guarded("allocate", ec, [&] {
    SQLite::Statement& st = *m.sequence_take;
    impl::reset_on_exit reset{st};
    bind_bytes(st, 1, name);
    st.bind(2, static_cast<std::int64_t>(count));
    if (!st.executeStep())
      throw store_failure{errc::invalid_options,
                          "sequence '" + std::string(name) + "' would pass 2^63 - 1"};
    first = static_cast<std::uint64_t>(st.getColumn(0).getInt64());
  });
  return ec ? 0 : first;
}

void sqlite_store::raise_to(std::string_view name, std::uint64_t next,
                            boost::system::error_code& ec) {
  ec = {};
  if (!valid_sequence_call(name, 1) ||
      next > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    ec = errc::invalid_options;
    return;
  }
  impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  m.guarded("raise_to", ec, [&] {
    SQLite::Statement& st = *m.sequence_raise;
    impl::reset_on_exit reset{st};
    bind_bytes(st, 1, name);
    st.bind(2, static_cast<std::int64_t>(next));
    st.exec();
  });
}

sqlite_options::synchronous_level sqlite_store::synchronous(boost::system::error_code& ec) {
  impl& m = *impl_;
  int value = 2;
  std::lock_guard lock(m.mutex);
  m.guarded("synchronous", ec, [&] { value = m.db->execAndGet("PRAGMA synchronous").getInt(); });
  return level_of(value);
}

sqlite_options::synchronous_level sqlite_store::synchronous() {
  boost::system::error_code ec;
  const auto level = synchronous(ec);
  detail::throw_if(ec, "delayq: sqlite_store synchronous");
  return level;
}

}  // namespace delayq
