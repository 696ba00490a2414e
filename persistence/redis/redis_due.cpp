// detail::redis::tasks_role::list_due() and find(): what an engine with a horizon reads.
//
// list_due(): one call of the page script (scripts.hpp, due_script) per
// page: EVALSHA, EVAL when the server lost the script. The script reads
// the page atomically (ids, scores and records of one moment); undecodable
// records are quarantined after it with the quarantine script (which moves
// a record only if it still holds the bytes read). find(): one HMGET.
// Both run on the store's connection under its mutex, routed to the node of
// the store's slot like every other call; list_due() calls its sink after
// letting the mutex go, so a sink may call back into the store.
#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "connection.hpp"
#include "delayq/log.hpp"
#include "delayq/record_codec.hpp"
#include "redis_backend.hpp"
#include "redis_shards.hpp"
#include "redis_tasks.hpp"
#include "scripts.hpp"

namespace delayq {

using detail::redis::backend;
namespace {

using detail::redis::command;
using detail::redis::connection;
using detail::redis::redis_failure;
using detail::redis::throw_server_error;

// The live record read under `id`, or nothing (and why) when it is corrupt.
std::optional<task> decode_live(std::string_view id, std::string_view raw, std::string& why) {
  boost::system::error_code dec;
  task t = decode_stored_task(id, raw, dec, &why);
  if (dec) return std::nullopt;
  return t;
}

// A score as the script returns it (Redis's text of a double; our scores are
// whole milliseconds) as a due time. Out-of-range scores saturate.
std::int64_t score_ms(const redisReply* r) {
  if (r->type != REDIS_REPLY_STRING)
    throw redis_failure{errc::store_error, "unexpected score in a list_due reply"};
  double d = 0;
  const auto [end, err] = std::from_chars(r->str, r->str + r->len, d);
  if (err != std::errc{} || end != r->str + r->len || std::isnan(d))
    throw redis_failure{errc::store_error, "unparsable score in a list_due reply"};
  if (d <= -9223372036854775808.0) return INT64_MIN;
  if (d >= 9223372036854775808.0) return INT64_MAX;
  return static_cast<std::int64_t>(d);
}

}  // namespace

list_summary detail::redis::backend::list_due_part(const part& p, due_cursor& after,
                                                   std::int64_t until_ms, std::size_t limit,
                                                   std::vector<task>& out,
                                                   boost::system::error_code& ec,
                                                   std::vector<due_item>* read) {
  ec = {};
  backend& m = *this;
  list_summary summary;
  out.clear();
  if (limit == 0) return summary;
  // '-inf' keeps the default cursor before every score; with an id, the
  // cursor names a (score, id) and must be the number.
  const std::string from = after.id.empty() && after.due_ms == INT64_MIN
                               ? std::string("-inf")
                               : std::to_string(after.due_ms);
  const std::string until = std::to_string(until_ms);
  const std::string count = std::to_string(limit);
  std::vector<task> page;
  std::optional<due_cursor> last;
  {
    std::lock_guard lock(m.mutex);
    m.conn.run(p.slot, "list_due", ec, [&](connection& c) {
      // The body may run again after a redirect: start from nothing.
      page.clear();
      last.reset();
      summary = {};
      if (read) read->clear();
      detail::redis::reply_ptr reply;
      for (const bool eval : {false, true}) {
        command call;
        if (eval)
          call.arg("EVAL").arg(detail::redis::due_script);
        else
          call.arg("EVALSHA").arg(detail::redis::due_sha(c));
        call.arg("2")
            .arg(p.keys.tasks)
            .arg(p.keys.due)
            .arg(from)
            .arg(after.id)
            .arg(until)
            .arg(count);
        auto replies = c.exchange({std::move(call)});
        if (!eval && detail::redis::is_noscript(replies[0].get())) {
          log(log_level::warning,
              m.name + ": the server lost the list_due script (NOSCRIPT); using EVAL");
          continue;
        }
        reply = std::move(replies[0]);
        break;
      }
      const redisReply* r = reply.get();
      if (r->type == REDIS_REPLY_ERROR) throw_server_error("list_due", r);
      if (r->type != REDIS_REPLY_ARRAY || r->elements % 3 != 0)
        throw redis_failure{errc::store_error, "unexpected list_due reply"};
      std::vector<backend::bad_record> bad;
      for (std::size_t i = 0; i < r->elements; i += 3) {
        const redisReply* id_r = r->element[i];
        const redisReply* rec = r->element[i + 2];
        if (id_r->type != REDIS_REPLY_STRING)
          throw redis_failure{errc::store_error, "unexpected id in a list_due reply"};
        const std::string_view id(id_r->str, id_r->len);
        if (i + 3 == r->elements) last = due_cursor{score_ms(r->element[i + 1]), std::string(id)};
        if (rec->type == REDIS_REPLY_NIL) continue;  // an index entry without a record
        if (rec->type != REDIS_REPLY_STRING)
          throw redis_failure{errc::store_error, "unexpected record in a list_due reply"};
        const std::string_view raw(rec->str, rec->len);
        std::string why;
        auto t = decode_live(id, raw, why);
        if (read) {
          // The caller decides what to quarantine (list_due_merged()).
          due_item item{score_ms(r->element[i + 1]), std::string(id), std::move(t), {}, {}};
          if (!item.t) {
            item.raw = std::string(raw);
            item.why = std::move(why);
          }
          read->push_back(std::move(item));
        } else if (t) {
          page.push_back(std::move(*t));
        } else {
          bad.push_back({id, raw, std::move(why)});
        }
      }
      if (read) return;
      // Quarantined before any task of the page reaches the sink. Counted
      // whether or not the script moved it (it does not when another writer
      // replaced the record since the page was read): tasks + quarantined
      // is what the caller compares with `limit` to know the range is done.
      m.quarantine(c, p.keys.tasks, p.keys.due, p.keys.quarantine, p.keys.quarantine_reason, bad,
                   "record of task");
      summary.quarantined = bad.size();
    });
  }
  if (ec) return {};
  if (last) after = std::move(*last);
  if (read) {
    for (const due_item& item : *read) ++(item.t ? summary.tasks : summary.quarantined);
    return summary;
  }
  summary.tasks = page.size();
  out = std::move(page);
  return summary;
}

list_summary detail::redis::tasks_role::list_due(due_cursor& after, std::int64_t until_ms,
                                                 std::size_t limit,
                                                 const std::function<void(task&&)>& sink,
                                                 boost::system::error_code& ec) {
  backend& m = b_;
  std::vector<task> page;
  list_summary summary = m.shards() == 0
                             ? m.list_due_part(m.parts[0], after, until_ms, limit, page, ec)
                             : m.list_due_merged(after, until_ms, limit, page, ec);
  if (ec) return {};
  for (task& t : page) sink(std::move(t));
  return summary;
}

list_summary detail::redis::shards_role::list_due_shard(std::uint32_t shard, due_cursor& after,
                                                        std::int64_t until_ms, std::size_t limit,
                                                        const std::function<void(task&&)>& sink,
                                                        boost::system::error_code& ec) {
  backend& m = b_;
  if (shard >= m.shards()) {
    ec = errc::shard_mismatch;
    return {};
  }
  std::vector<task> page;
  const list_summary summary = m.list_due_part(m.parts[shard], after, until_ms, limit, page, ec);
  if (ec) return {};
  for (task& t : page) sink(std::move(t));
  return summary;
}

std::vector<std::optional<task>> detail::redis::tasks_role::find(std::span<const std::string> ids,
                                                                 boost::system::error_code& ec) {
  ec = {};
  backend& m = b_;
  std::vector<std::optional<task>> out(ids.size());
  if (ids.empty()) return out;
  // The indexes of `ids` by part, each part's in the order given: one HMGET
  // per part (one in all, unsharded).
  std::map<const backend::part*, std::vector<std::size_t>> by_part;
  for (std::size_t i = 0; i < ids.size(); ++i) by_part[&m.part_of(ids[i])].push_back(i);
  std::lock_guard lock(m.mutex);
  for (const auto& [p, which] : by_part) {
    m.conn.run(p->slot, "find", ec, [&](connection& c) {
      for (std::size_t i : which) out[i].reset();
      command hmget;
      hmget.arg("HMGET").arg(p->keys.tasks);
      for (std::size_t i : which) hmget.arg(ids[i]);
      auto replies = c.exchange({std::move(hmget)});
      const redisReply* r = replies[0].get();
      if (r->type == REDIS_REPLY_ERROR) throw_server_error("HMGET", r);
      if (r->type != REDIS_REPLY_ARRAY || r->elements != which.size())
        throw redis_failure{errc::store_error, "unexpected HMGET reply"};
      std::vector<backend::bad_record> bad;
      for (std::size_t k = 0; k < which.size(); ++k) {
        const std::size_t i = which[k];
        const redisReply* rec = r->element[k];
        if (rec->type == REDIS_REPLY_NIL) continue;
        if (rec->type != REDIS_REPLY_STRING)
          throw redis_failure{errc::store_error, "unexpected HMGET reply"};
        const std::string_view raw(rec->str, rec->len);
        std::string why;
        out[i] = decode_live(ids[i], raw, why);
        // An id asked for twice is quarantined once.
        if (!out[i] &&
            std::none_of(bad.begin(), bad.end(), [&](const auto& b) { return b.id == ids[i]; }))
          bad.push_back({ids[i], raw, std::move(why)});
      }
      m.quarantine(c, p->keys.tasks, p->keys.due, p->keys.quarantine, p->keys.quarantine_reason,
                   bad, "record of task");
    });
    if (ec) {
      out.clear();
      return out;
    }
  }
  return out;
}

}  // namespace delayq
