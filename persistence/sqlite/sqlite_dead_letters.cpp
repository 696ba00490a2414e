// persistence/sqlite/sqlite_dead_letters.cpp - see sqlite_dead_letters.hpp.
#include "sqlite_dead_letters.hpp"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "../roles/dead_record.hpp"

namespace delayq::detail::sqlite {
using roles::decode_dead;
namespace {

struct row {
  std::int64_t rowid = 0;
  std::string id;
  std::string record;
};

// OFFSET and LIMIT take signed 64-bit values.
std::int64_t clamp_to_int64(std::size_t n) {
  return static_cast<std::int64_t>(
      std::min<std::uint64_t>(n, static_cast<std::uint64_t>(INT64_MAX)));
}

}  // namespace

std::size_t dead_letters_role::count_dead(boost::system::error_code& ec) {
  ec = {};
  std::size_t n = 0;
  std::lock_guard lock(b_.mutex());
  b_.guarded("count_dead", ec, [&] {
    SQLite::Statement& st = *b_.st().dead_count;
    reset_on_exit reset{st};
    if (st.executeStep()) n = static_cast<std::size_t>(st.getColumn(0).getInt64());
  });
  return n;
}

std::optional<dead_letter> dead_letters_role::find_dead(std::string_view id,
                                                        boost::system::error_code& ec) {
  ec = {};
  std::optional<dead_letter> found;
  std::lock_guard lock(b_.mutex());
  b_.guarded("find_dead", ec, [&] {
    row r;
    {
      SQLite::Statement& st = *b_.st().dead_find;
      reset_on_exit reset{st};
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
      b_.quarantine(*b_.st().dead_to_quarantine, *b_.st().dead_erase_rowid,
                    {{r.rowid, id, std::move(why)}}, "dead-letter record of task");
  });
  if (ec) found.reset();
  return found;
}

std::vector<dead_letter> dead_letters_role::list_dead(std::size_t offset, std::size_t limit,
                                                      boost::system::error_code& ec) {
  ec = {};
  std::vector<dead_letter> out;
  if (limit == 0) return out;
  std::lock_guard lock(b_.mutex());
  b_.guarded("list_dead", ec, [&] {
    std::vector<row> rows;
    while (true) {
      out.clear();
      rows.clear();
      {
        SQLite::Statement& st = *b_.st().dead_page;
        reset_on_exit reset{st};
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
      b_.quarantine(*b_.st().dead_to_quarantine, *b_.st().dead_erase_rowid, bad,
                    "dead-letter record of task");
      // The quarantined rows no longer count toward the offset: read the
      // page again so that it, and the pages after it, skip no good letter.
      // Every pass that gets here deleted rows, so this ends.
    }
  });
  if (ec) out.clear();
  return out;
}

}  // namespace delayq::detail::sqlite
