// persistence/sqlite/sqlite_schedules.cpp - the SQLite store's schedules
// role (sqlite_schedules.hpp): the `schedules` table (schema version 6).
// Every write is conditioned on the stored revision, inside one IMMEDIATE
// transaction per write_schedules() call, so two connections (two
// processes on one file) never both apply a change meant for one revision.
#include <SQLiteCpp/Transaction.h>

#include <climits>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sqlite_schedules.hpp"

namespace delayq::detail::sqlite {
namespace {

void bind_text(SQLite::Statement& st, int index, std::string_view text) {
  st.bindNoCopy(index, text.empty() ? "" : text.data(), static_cast<int>(text.size()));
}

}  // namespace

void prepare_schedules(SQLite::Database& db, statements& st) {
  st.schedule_insert.emplace(db,
                             "INSERT INTO schedules(id, revision, definition, state) "
                             "VALUES(?1, 1, ?2, ?3) ON CONFLICT(id) DO NOTHING");
  st.schedule_put.emplace(
      db,
      "UPDATE schedules SET revision = revision + 1, definition = ?2, state = ?3 "
      "WHERE id = ?1 AND revision = ?4");
  st.schedule_state.emplace(db,
                            "UPDATE schedules SET revision = revision + 1, state = ?2 "
                            "WHERE id = ?1 AND revision = ?3");
  st.schedule_erase.emplace(db, "DELETE FROM schedules WHERE id = ?1 AND revision = ?2");
  st.schedule_find.emplace(db, "SELECT definition, state, revision FROM schedules WHERE id = ?1");
  // TEXT under the BINARY collation: memcmp(), then length, the byte order
  // list_schedules() promises.
  st.schedule_page.emplace(db,
                           "SELECT id, definition, state, revision FROM schedules "
                           "WHERE id > ?1 ORDER BY id LIMIT ?2");
  st.schedule_count.emplace(db, "SELECT count(*) FROM schedules");
}

void schedules_role::write_schedules(std::span<const schedule_write> changes,
                                     boost::system::error_code& ec) {
  ec = {};
  if (changes.empty()) return;
  std::lock_guard lock(b_.mutex());
  b_.guarded("write_schedules", ec, [&] {
    for (const schedule_write& w : changes) w.applied = false;
    SQLite::Transaction tx(b_.db(), SQLite::TransactionBehavior::IMMEDIATE);
    std::vector<bool> applied(changes.size(), false);
    for (std::size_t i = 0; i < changes.size(); ++i) {
      const schedule_write& w = changes[i];
      if (w.expected > static_cast<std::uint64_t>(INT64_MAX)) continue;
      const auto expected = static_cast<std::int64_t>(w.expected);
      SQLite::Statement* st = nullptr;
      switch (w.what) {
        case schedule_write::kind::put:
          st = w.expected == 0 ? &*b_.st().schedule_insert : &*b_.st().schedule_put;
          break;
        case schedule_write::kind::state:
          if (w.expected == 0) continue;
          st = &*b_.st().schedule_state;
          break;
        case schedule_write::kind::erase:
          if (w.expected == 0) continue;
          st = &*b_.st().schedule_erase;
          break;
      }
      reset_on_exit reset{*st};
      bind_text(*st, 1, w.id);
      switch (w.what) {
        case schedule_write::kind::put:
          bind_bytes(*st, 2, w.definition);
          bind_bytes(*st, 3, w.state);
          if (w.expected != 0) st->bind(4, expected);
          break;
        case schedule_write::kind::state:
          bind_bytes(*st, 2, w.state);
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

std::vector<std::optional<schedule_record>> schedules_role::find_schedules(
    std::span<const std::string> ids, boost::system::error_code& ec) {
  std::vector<std::optional<schedule_record>> out;
  std::lock_guard lock(b_.mutex());
  b_.guarded("find_schedules", ec, [&] {
    out.clear();
    for (const std::string& id : ids) {
      SQLite::Statement& st = *b_.st().schedule_find;
      reset_on_exit reset{st};
      bind_text(st, 1, id);
      if (!st.executeStep()) {
        out.emplace_back();
        continue;
      }
      schedule_record r;
      r.id = id;
      r.definition = column_bytes(st.getColumn(0));
      r.state = column_bytes(st.getColumn(1));
      r.revision = static_cast<std::uint64_t>(st.getColumn(2).getInt64());
      out.emplace_back(std::move(r));
    }
  });
  if (ec) out.clear();
  return out;
}

std::vector<schedule_record> schedules_role::list_schedules(std::string_view after,
                                                            std::size_t limit,
                                                            boost::system::error_code& ec) {
  std::vector<schedule_record> out;
  if (limit == 0) {
    ec = {};
    return out;
  }
  std::lock_guard lock(b_.mutex());
  b_.guarded("list_schedules", ec, [&] {
    out.clear();
    SQLite::Statement& st = *b_.st().schedule_page;
    reset_on_exit reset{st};
    bind_text(st, 1, after);
    st.bind(2, static_cast<std::int64_t>(std::min<std::size_t>(limit, INT64_MAX)));
    while (st.executeStep()) {
      schedule_record r;
      r.id = st.getColumn(0).getString();
      r.definition = column_bytes(st.getColumn(1));
      r.state = column_bytes(st.getColumn(2));
      r.revision = static_cast<std::uint64_t>(st.getColumn(3).getInt64());
      out.push_back(std::move(r));
    }
  });
  if (ec) out.clear();
  return out;
}

std::size_t schedules_role::count_schedules(boost::system::error_code& ec) {
  std::size_t n = 0;
  std::lock_guard lock(b_.mutex());
  b_.guarded("count_schedules", ec, [&] {
    SQLite::Statement& st = *b_.st().schedule_count;
    reset_on_exit reset{st};
    if (st.executeStep()) n = static_cast<std::size_t>(st.getColumn(0).getInt64());
  });
  return ec ? 0 : n;
}

}  // namespace delayq::detail::sqlite
