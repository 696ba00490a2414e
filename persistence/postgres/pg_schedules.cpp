// persistence/postgres/pg_schedules.cpp - see pg_schedules.hpp.
#include "pg_schedules.hpp"

#include <algorithm>
#include <limits>
#include <unordered_map>

#include "delayq/record_codec.hpp"
#include "delayq/shard_leases.hpp"

namespace delayq::detail::pg {
namespace {

// A revision as the int8 column holds it: one past int64's range can never
// be stored, so it can match nothing (the change is simply not applied).
std::int64_t revision_arg(std::uint64_t r) {
  constexpr auto most = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max() - 1);
  return static_cast<std::int64_t>(std::min(r, most));
}

schedule_record read_record(const PGresult* r, int row) {
  schedule_record rec;
  rec.id = std::string(get_bytes(r, row, 0));
  rec.definition = std::string(get_bytes(r, row, 1));
  rec.state = std::string(get_bytes(r, row, 2));
  rec.revision = static_cast<std::uint64_t>(get_int8(r, row, 3));
  return rec;
}

// A boolean result column in binary: one byte.
bool get_bool(const PGresult* r, int row, int col) {
  const std::string_view v = get_bytes(r, row, col);
  return v.size() == 1 && v[0] != 0;
}

}  // namespace

void schedules_role::write_schedules(std::span<const schedule_write> changes,
                                     boost::system::error_code& ec) {
  ec = {};
  for (const schedule_write& w : changes) w.applied = false;
  if (changes.empty()) return;
  const schema_sql& sql = b_.sql();
  b_.calls().run("write_schedules", true, ec, [&](connection& c) {
    std::vector<statement> stmts(changes.size());
    for (std::size_t i = 0; i < changes.size(); ++i) {
      const schedule_write& w = changes[i];
      statement& s = stmts[i];
      const std::int64_t expected = revision_arg(w.expected);
      switch (w.what) {
        case schedule_write::kind::put:
          if (w.expected == 0) {
            s = {"dq_hc", sql.schedule_create, {}};
            s.args.bytea(w.id).bytea(w.definition).bytea(w.state);
          } else {
            s = {"dq_hr", sql.schedule_replace, {}};
            s.args.bytea(w.id).bytea(w.definition).bytea(w.state).int8(expected);
          }
          break;
        case schedule_write::kind::state:
          s = {"dq_hs", sql.schedule_state, {}};
          s.args.bytea(w.id).bytea(w.state).int8(expected);
          break;
        case schedule_write::kind::erase:
          s = {"dq_he", sql.schedule_erase, {}};
          s.args.bytea(w.id).int8(expected);
          break;
      }
    }
    const auto r = c.exchange(stmts, true);
    for (std::size_t i = 0; i < changes.size(); ++i) {
      const PGresult* res = r[i].get();
      changes[i].applied = changes[i].what == schedule_write::kind::erase
                               ? PQntuples(res) > 0
                               : PQntuples(res) == 1 && get_bool(res, 0, 0);
    }
  });
  if (ec)
    for (const schedule_write& w : changes) w.applied = false;
}

std::vector<std::optional<schedule_record>> schedules_role::find_schedules(
    std::span<const std::string> ids, boost::system::error_code& ec) {
  ec = {};
  std::vector<std::optional<schedule_record>> out(ids.size());
  if (ids.empty()) return out;
  b_.calls().run("find_schedules", false, ec, [&](connection& c) {
    std::fill(out.begin(), out.end(), std::nullopt);
    std::vector<std::string_view> views(ids.begin(), ids.end());
    statement s{"dq_hf", b_.sql().schedule_find, {}};
    s.args.bytea_array(views);
    const auto r = c.exchange(std::span{&s, 1}, false);
    std::unordered_map<std::string_view, schedule_record> found;
    for (int i = 0; i < PQntuples(r[0].get()); ++i) {
      schedule_record rec = read_record(r[0].get(), i);
      const std::string_view key = get_bytes(r[0].get(), i, 0);
      found.emplace(key, std::move(rec));
    }
    // The same id asked twice gets its record twice.
    for (std::size_t i = 0; i < ids.size(); ++i)
      if (auto it = found.find(ids[i]); it != found.end()) out[i] = it->second;
  });
  if (ec) return {};
  return out;
}

std::vector<schedule_record> schedules_role::list_schedules(std::string_view after,
                                                            std::size_t limit,
                                                            boost::system::error_code& ec) {
  ec = {};
  std::vector<schedule_record> out;
  if (limit == 0) return out;
  b_.calls().run("list_schedules", false, ec, [&](connection& c) {
    out.clear();
    statement s{"dq_hp", b_.sql().schedule_page, {}};
    // bytea orders bytewise, as the engine orders ids; "" is before all.
    s.args.bytea(after).int8(static_cast<std::int64_t>(std::min<std::size_t>(limit, 100000)));
    const auto r = c.exchange(std::span{&s, 1}, false);
    out.reserve(static_cast<std::size_t>(PQntuples(r[0].get())));
    for (int i = 0; i < PQntuples(r[0].get()); ++i) out.push_back(read_record(r[0].get(), i));
  });
  if (ec) out.clear();
  return out;
}

std::size_t schedules_role::count_schedules(boost::system::error_code& ec) {
  ec = {};
  std::size_t n = 0;
  b_.calls().run("count_schedules", false, ec, [&](connection& c) {
    statement s{"dq_hn", b_.sql().schedule_count, {}};
    const auto r = c.exchange(std::span{&s, 1}, false);
    n = static_cast<std::size_t>(get_int8(r[0].get(), 0, 0));
  });
  return ec ? 0 : n;
}

void schedules_role::insert_absent(std::span<const task> tasks, boost::system::error_code& ec) {
  ec = {};
  if (tasks.empty()) return;
  const std::uint32_t shards = b_.shards();
  std::vector<std::string> records, lines;
  std::vector<std::string_view> ids, record_views, line_views;
  std::vector<std::int32_t> task_shards;
  std::vector<std::int64_t> dues;
  records.reserve(tasks.size());
  lines.reserve(tasks.size());
  for (const task& t : tasks) {
    const std::uint32_t shard = shards == 0 ? 0 : shard_of(t.id, shards);
    records.push_back(encode_task(t));
    dues.push_back(to_epoch_ms(t.due));
    lines.push_back(task_notice_line(shard, dues.back(), t.id));
    task_shards.push_back(static_cast<std::int32_t>(shard));
  }
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    ids.push_back(tasks[i].id);
    record_views.push_back(records[i]);
    line_views.push_back(lines[i]);
  }
  // Only a cluster's layout has listeners to tell.
  const std::string_view channel = shards == 0 ? std::string_view() : b_.sql().channel;
  const int gen = b_.gen();
  // Running it twice is running it once: a task stored by the first run is
  // left alone by the second. A generation that rotated meanwhile is still
  // right (pg_backend.hpp, gen()).
  b_.calls().run("insert_absent", true, ec, [&](connection& c) {
    statement s{gen == 0 ? "dq_ia0" : "dq_ia1", b_.sql().insert_absent_gen[gen], {}};
    s.args.int4_array(task_shards)
        .bytea_array(ids)
        .int8_array(dues)
        .bytea_array(record_views)
        .text_array(line_views)
        .text(channel);
    c.exchange(std::span{&s, 1}, true);
  });
  if (!ec) b_.note_writes(tasks.size());
}

}  // namespace delayq::detail::pg
