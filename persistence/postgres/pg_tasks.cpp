// persistence/postgres/pg_tasks.cpp - the tasks role (pg_tasks.hpp) but
// list(), which is in pg_list.cpp.
#include "pg_tasks.hpp"

#include <limits>
#include <unordered_map>

#include "../roles/change_batches.hpp"
#include "delayq/log.hpp"

namespace delayq::detail::pg {

void tasks_role::write(std::span<const store_change> changes, boost::system::error_code& ec) {
  b_.write(changes, ec);
}

void tasks_role::async_write(std::span<const store_change> changes,
                             std::function<void(boost::system::error_code)> done) {
  if (changes.empty()) {
    done({});
    return;
  }
  b_.note_writes(changes.size());
  b_.writer().submit(changes, std::move(done));
}

void tasks_role::save(std::span<const task> tasks, boost::system::error_code& ec) {
  b_.write(roles::task_changes(tasks, change_kind::save), ec);
}

void tasks_role::remove(std::span<const std::string> ids, boost::system::error_code& ec) {
  std::vector<task> holders;
  b_.write(roles::id_changes(ids, change_kind::remove, holders), ec);
}

// Inside a pool call: moves the row `id` to the quarantine table when it
// still holds `raw` (null: whatever it holds). Throws pg_failure.
void tasks_role::quarantine_on(connection& c, std::string_view id, const std::string_view* raw,
                               std::string_view reason) {
  const std::string text = to_text(reason);
  statement s{"dq_ql", b_.sql().quarantine_live, {}};
  s.args.bytea(id).text(text).int8(now_ms());
  if (raw)
    s.args.bytea(*raw);
  else
    s.args.null_bytea();
  const auto out = c.exchange(std::span{&s, 1}, true);
  if (out[0] && std::string_view(PQcmdTuples(out[0].get())) != "0")
    log(log_level::error,
        b_.name() + ": quarantined undecodable record of task '" + std::string(id) + "': " + text);
}

bool tasks_role::quarantine_row(std::string_view id, const std::string_view* raw,
                                std::string_view reason, boost::system::error_code& ec) {
  b_.calls().run("quarantine", true, ec, [&](connection& c) { quarantine_on(c, id, raw, reason); });
  return !ec;
}

void tasks_role::quarantine(std::string_view id, std::string_view reason,
                            boost::system::error_code& ec) {
  ec = {};
  quarantine_row(id, nullptr, reason, ec);
}

list_summary tasks_role::list_due(due_cursor& after, std::int64_t until_ms, std::size_t limit,
                                  const std::function<void(task&&)>& sink,
                                  boost::system::error_code& ec) {
  return due_pages(b_.shards() == 0 ? 0 : -1, after, until_ms, limit, sink, ec);
}

list_summary tasks_role::due_pages(std::int64_t shard, due_cursor& after, std::int64_t until_ms,
                                   std::size_t limit, const std::function<void(task&&)>& sink,
                                   boost::system::error_code& ec) {
  ec = {};
  list_summary summary;
  if (limit == 0) return summary;
  const auto lim = static_cast<std::int64_t>(
      std::min<std::uint64_t>(limit, static_cast<std::uint64_t>(INT64_MAX)));
  std::vector<task> page;
  due_cursor last = after;
  b_.calls().run("list_due", false, ec, [&](connection& c) {
    page.clear();
    summary = {};
    last = after;
    statement s;
    if (shard >= 0) {
      s = {"dq_dp", b_.sql().due_page, {}};
      s.args.int4(static_cast<std::int32_t>(shard));
    } else {
      s = {"dq_dpa", b_.sql().due_page_all, {}};
      s.args.int4(static_cast<std::int32_t>(b_.shards()));
    }
    s.args.int8(after.due_ms).bytea(after.id).int8(until_ms).int8(lim);
    const auto out = c.exchange(std::span{&s, 1}, false);
    const PGresult* r = out[0].get();
    const int n = PQntuples(r);
    page.reserve(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
      const std::string_view id = get_bytes(r, i, 1);
      const std::string_view raw = get_bytes(r, i, 2);
      last = due_cursor{get_int8(r, i, 0), std::string(id)};
      std::string why;
      if (auto t = decode_live(id, raw, why)) {
        page.push_back(std::move(*t));
      } else {
        // Quarantined before any task of the page reaches the sink.
        quarantine_on(c, id, &raw, why);
        ++summary.quarantined;
      }
    }
  });
  if (ec) return {};
  summary.tasks = page.size();
  after = std::move(last);
  // No connection held: the sink may call back into the store.
  for (task& t : page) sink(std::move(t));
  return summary;
}

std::vector<std::optional<task>> tasks_role::find(std::span<const std::string> ids,
                                                  boost::system::error_code& ec) {
  ec = {};
  std::vector<std::optional<task>> found(ids.size());
  if (ids.empty()) return found;
  std::vector<std::string_view> views(ids.begin(), ids.end());
  b_.calls().run("find", false, ec, [&](connection& c) {
    for (auto& f : found) f.reset();
    statement s{"dq_fd", b_.sql().find, {}};
    s.args.bytea_array(views);
    const auto out = c.exchange(std::span{&s, 1}, false);
    const PGresult* r = out[0].get();
    std::unordered_map<std::string_view, std::string_view> rows;
    for (int i = 0; i < PQntuples(r); ++i) rows.emplace(get_bytes(r, i, 0), get_bytes(r, i, 1));
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const auto it = rows.find(ids[i]);
      if (it == rows.end()) continue;
      std::string why;
      found[i] = decode_live(ids[i], it->second, why);
      if (!found[i]) quarantine_on(c, ids[i], &it->second, why);
    }
  });
  if (ec) return {};
  return found;
}

}  // namespace delayq::detail::pg
