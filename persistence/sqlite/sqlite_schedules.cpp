// sqlite_store's schedule_store role: the `schedules` table (schema version
// 6). Every write is conditioned on the stored revision, inside one
// IMMEDIATE transaction per write_schedules() call, so two connections (two
// processes on one file) never both apply a change meant for one revision.
#include <SQLiteCpp/Transaction.h>

#include <climits>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "delayq/sqlite_store.hpp"
#include "sqlite_store_impl.hpp"

namespace delayq {
namespace {

std::string column_blob(const SQLite::Column& c) {
  const void* p = c.getBlob();  // before getBytes(): SQLite's documented order
  const int n = c.getBytes();
  return n > 0 ? std::string(static_cast<const char*>(p), static_cast<std::size_t>(n))
               : std::string();
}

// Binds bytes as a BLOB (never NULL, which an empty view's pointer may be).
void bind_blob(SQLite::Statement& st, int index, std::string_view bytes) {
  if (bytes.size() > static_cast<std::size_t>(INT_MAX))
    throw detail::sqlite::store_failure{errc::store_error, "a value exceeds 2 GiB"};
  st.bindNoCopy(index, bytes.empty() ? "" : bytes.data(), static_cast<int>(bytes.size()));
}

void bind_text(SQLite::Statement& st, int index, std::string_view text) {
  st.bindNoCopy(index, text.empty() ? "" : text.data(), static_cast<int>(text.size()));
}

}  // namespace

void sqlite_store::impl::prepare_schedules() {
  schedule_insert.emplace(*db,
                          "INSERT INTO schedules(id, revision, definition, state) "
                          "VALUES(?1, 1, ?2, ?3) ON CONFLICT(id) DO NOTHING");
  schedule_put.emplace(*db,
                       "UPDATE schedules SET revision = revision + 1, definition = ?2, state = ?3 "
                       "WHERE id = ?1 AND revision = ?4");
  schedule_state.emplace(*db,
                         "UPDATE schedules SET revision = revision + 1, state = ?2 "
                         "WHERE id = ?1 AND revision = ?3");
  schedule_erase.emplace(*db, "DELETE FROM schedules WHERE id = ?1 AND revision = ?2");
  schedule_find.emplace(*db, "SELECT definition, state, revision FROM schedules WHERE id = ?1");
  // TEXT under the BINARY collation: memcmp(), then length, the byte order
  // list_schedules() promises.
  schedule_page.emplace(*db,
                        "SELECT id, definition, state, revision FROM schedules "
                        "WHERE id > ?1 ORDER BY id LIMIT ?2");
  schedule_count.emplace(*db, "SELECT count(*) FROM schedules");
}

void sqlite_store::write_schedules(std::span<const schedule_write> changes,
                                   boost::system::error_code& ec) {
  impl& m = *impl_;
  ec = {};
  if (changes.empty()) return;
  std::lock_guard lock(m.mutex);
  m.guarded("write_schedules", ec, [&] {
    for (const schedule_write& w : changes) w.applied = false;
    SQLite::Transaction tx(*m.db, SQLite::TransactionBehavior::IMMEDIATE);
    std::vector<bool> applied(changes.size(), false);
    for (std::size_t i = 0; i < changes.size(); ++i) {
      const schedule_write& w = changes[i];
      if (w.expected > static_cast<std::uint64_t>(INT64_MAX)) continue;
      const auto expected = static_cast<std::int64_t>(w.expected);
      SQLite::Statement* st = nullptr;
      switch (w.what) {
        case schedule_write::kind::put:
          st = w.expected == 0 ? &*m.schedule_insert : &*m.schedule_put;
          break;
        case schedule_write::kind::state:
          if (w.expected == 0) continue;
          st = &*m.schedule_state;
          break;
        case schedule_write::kind::erase:
          if (w.expected == 0) continue;
          st = &*m.schedule_erase;
          break;
      }
      impl::reset_on_exit reset{*st};
      bind_text(*st, 1, w.id);
      switch (w.what) {
        case schedule_write::kind::put:
          bind_blob(*st, 2, w.definition);
          bind_blob(*st, 3, w.state);
          if (w.expected != 0) st->bind(4, expected);
          break;
        case schedule_write::kind::state:
          bind_blob(*st, 2, w.state);
          st->bind(3, expected);
          break;
        case schedule_write::kind::erase: st->bind(2, expected); break;
      }
      applied[i] = st->exec() == 1;
    }
    tx.commit();
    // Only once committed: a rolled-back batch applied nothing.
    for (std::size_t i = 0; i < changes.size(); ++i) changes[i].applied = applied[i];
  });
}

std::vector<std::optional<schedule_record>> sqlite_store::find_schedules(
    std::span<const std::string> ids, boost::system::error_code& ec) {
  impl& m = *impl_;
  std::vector<std::optional<schedule_record>> out;
  std::lock_guard lock(m.mutex);
  m.guarded("find_schedules", ec, [&] {
    out.clear();
    for (const std::string& id : ids) {
      SQLite::Statement& st = *m.schedule_find;
      impl::reset_on_exit reset{st};
      bind_text(st, 1, id);
      if (!st.executeStep()) {
        out.emplace_back();
        continue;
      }
      schedule_record r;
      r.id = id;
      r.definition = column_blob(st.getColumn(0));
      r.state = column_blob(st.getColumn(1));
      r.revision = static_cast<std::uint64_t>(st.getColumn(2).getInt64());
      out.emplace_back(std::move(r));
    }
  });
  if (ec) out.clear();
  return out;
}

std::vector<schedule_record> sqlite_store::list_schedules(std::string_view after, std::size_t limit,
                                                          boost::system::error_code& ec) {
  impl& m = *impl_;
  std::vector<schedule_record> out;
  if (limit == 0) {
    ec = {};
    return out;
  }
  std::lock_guard lock(m.mutex);
  m.guarded("list_schedules", ec, [&] {
    out.clear();
    SQLite::Statement& st = *m.schedule_page;
    impl::reset_on_exit reset{st};
    bind_text(st, 1, after);
    st.bind(2, static_cast<std::int64_t>(std::min<std::size_t>(limit, INT64_MAX)));
    while (st.executeStep()) {
      schedule_record r;
      r.id = st.getColumn(0).getString();
      r.definition = column_blob(st.getColumn(1));
      r.state = column_blob(st.getColumn(2));
      r.revision = static_cast<std::uint64_t>(st.getColumn(3).getInt64());
      out.push_back(std::move(r));
    }
  });
  if (ec) out.clear();
  return out;
}

std::size_t sqlite_store::count_schedules(boost::system::error_code& ec) {
  impl& m = *impl_;
  std::size_t n = 0;
  std::lock_guard lock(m.mutex);
  m.guarded("count_schedules", ec, [&] {
    SQLite::Statement& st = *m.schedule_count;
    impl::reset_on_exit reset{st};
    if (st.executeStep()) n = static_cast<std::size_t>(st.getColumn(0).getInt64());
  });
  return ec ? 0 : n;
}

}  // namespace delayq
