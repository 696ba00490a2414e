// persistence/sqlite/sqlite_due.cpp - the tasks role's list_due() and
// find() (sqlite_tasks.hpp): what an engine with a horizon reads.
//
// Both read on the store's own connection under its mutex, a bounded amount
// (one page of `limit` rows, or the ids asked for), and quarantine what does
// not decode before letting the mutex go. list_due() hands the page to its
// sink after that, without the mutex, so a sink may call back into the store
// (as with list()). A page is one SELECT, a seek in the (due_ms, id) index
// (schema version 4) and `limit` steps; opening a read connection per page,
// as list() does for its one long scan, would cost more than the page.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sqlite_tasks.hpp"

namespace delayq::detail::sqlite {
namespace {

struct due_row {
  std::int64_t rowid = 0;
  std::string id;
  std::int64_t due_ms = 0;
  std::string record;
};

// The live record read under `id`, or nothing (and why) when it is corrupt.
std::optional<task> decode_live(std::string_view id, std::string_view raw, std::string& why) {
  boost::system::error_code dec;
  task t = decode_stored_task(id, raw, dec, &why);
  if (dec) return std::nullopt;
  return t;
}

}  // namespace

list_summary tasks_role::list_due(due_cursor& after, std::int64_t until_ms, std::size_t limit,
                                  const std::function<void(task&&)>& sink,
                                  boost::system::error_code& ec) {
  ec = {};
  list_summary summary;
  if (limit == 0) return summary;
  std::vector<task> page;
  {
    std::lock_guard lock(b_.mutex());
    b_.guarded("list_due", ec, [&] {
      std::vector<due_row> rows;
      {
        SQLite::Statement& st = *b_.st().due_page;
        reset_on_exit reset{st};
        st.bind(1, after.due_ms);
        st.bind(2, after.id);
        st.bind(3, until_ms);
        st.bind(4, static_cast<std::int64_t>(
                       std::min<std::uint64_t>(limit, static_cast<std::uint64_t>(INT64_MAX))));
        while (st.executeStep()) {
          due_row r;
          r.rowid = st.getColumn(0).getInt64();
          r.id = st.getColumn(1).getString();
          r.due_ms = st.getColumn(2).getInt64();
          r.record = column_bytes(st.getColumn(3));
          rows.push_back(std::move(r));
        }
      }
      std::vector<bad_row> bad;
      page.reserve(rows.size());
      for (const due_row& r : rows) {
        std::string why;
        if (auto t = decode_live(r.id, r.record, why))
          page.push_back(std::move(*t));
        else
          bad.push_back({r.rowid, r.id, std::move(why)});
      }
      // Moved before any task of the page reaches the sink, as list() does.
      b_.quarantine(*b_.st().to_quarantine, *b_.st().erase_rowid, bad, "record of task");
      summary.quarantined = bad.size();
      if (!rows.empty()) after = due_cursor{rows.back().due_ms, std::move(rows.back().id)};
    });
  }
  if (ec) return {};
  summary.tasks = page.size();
  for (task& t : page) sink(std::move(t));
  return summary;
}

std::vector<std::optional<task>> tasks_role::find(std::span<const std::string> ids,
                                                  boost::system::error_code& ec) {
  ec = {};
  std::vector<std::optional<task>> out;
  if (ids.empty()) return out;
  std::lock_guard lock(b_.mutex());
  b_.guarded("find", ec, [&] {
    out.assign(ids.size(), std::nullopt);
    std::vector<bad_row> bad;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      std::int64_t rowid = 0;
      std::string record;
      {
        SQLite::Statement& st = *b_.st().by_id;
        reset_on_exit reset{st};
        st.bind(1, ids[i]);
        if (!st.executeStep()) continue;
        rowid = st.getColumn(0).getInt64();
        record = column_bytes(st.getColumn(1));
      }
      std::string why;
      out[i] = decode_live(ids[i], record, why);
      // An id asked for twice is quarantined once.
      if (!out[i] &&
          std::none_of(bad.begin(), bad.end(), [&](const bad_row& b) { return b.rowid == rowid; }))
        bad.push_back({rowid, ids[i], std::move(why)});
    }
    b_.quarantine(*b_.st().to_quarantine, *b_.st().erase_rowid, bad, "record of task");
  });
  if (ec) out.clear();
  return out;
}

}  // namespace delayq::detail::sqlite
