// redis_store::list_due() and find(): what an engine with a horizon reads.
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
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "connection.hpp"
#include "delayq/log.hpp"
#include "delayq/record_codec.hpp"
#include "redis_store_impl.hpp"
#include "scripts.hpp"

namespace delayq {
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

list_summary redis_store::list_due(due_cursor& after, std::int64_t until_ms, std::size_t limit,
                                   const std::function<void(task&&)>& sink,
                                   boost::system::error_code& ec) {
  ec = {};
  impl& m = *impl_;
  list_summary summary;
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
    m.conn.run(m.slot, "list_due", ec, [&](connection& c) {
      // The body may run again after a redirect: start from nothing.
      page.clear();
      last.reset();
      summary = {};
      detail::redis::reply_ptr reply;
      for (const bool eval : {false, true}) {
        command call;
        if (eval)
          call.arg("EVAL").arg(detail::redis::due_script);
        else
          call.arg("EVALSHA").arg(c.due_sha());
        call.arg("2")
            .arg(m.keys.tasks)
            .arg(m.keys.due)
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
      std::vector<impl::bad_record> bad;
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
        if (auto t = decode_live(id, raw, why))
          page.push_back(std::move(*t));
        else
          bad.push_back({id, raw, std::move(why)});
      }
      // Quarantined before any task of the page reaches the sink. Counted
      // whether or not the script moved it (it does not when another writer
      // replaced the record since the page was read): tasks + quarantined
      // is what the caller compares with `limit` to know the range is done.
      m.quarantine(c, m.keys.tasks, m.keys.due, m.keys.quarantine, m.keys.quarantine_reason, bad,
                   "record of task");
      summary.quarantined = bad.size();
    });
  }
  if (ec) return {};
  if (last) after = std::move(*last);
  summary.tasks = page.size();
  for (task& t : page) sink(std::move(t));
  return summary;
}

std::vector<std::optional<task>> redis_store::find(std::span<const std::string> ids,
                                                   boost::system::error_code& ec) {
  ec = {};
  impl& m = *impl_;
  std::vector<std::optional<task>> out;
  if (ids.empty()) return out;
  std::lock_guard lock(m.mutex);
  m.conn.run(m.slot, "find", ec, [&](connection& c) {
    out.assign(ids.size(), std::nullopt);
    command hmget;
    hmget.arg("HMGET").arg(m.keys.tasks);
    for (const std::string& id : ids) hmget.arg(id);
    auto replies = c.exchange({std::move(hmget)});
    const redisReply* r = replies[0].get();
    if (r->type == REDIS_REPLY_ERROR) throw_server_error("HMGET", r);
    if (r->type != REDIS_REPLY_ARRAY || r->elements != ids.size())
      throw redis_failure{errc::store_error, "unexpected HMGET reply"};
    std::vector<impl::bad_record> bad;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const redisReply* rec = r->element[i];
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
    m.quarantine(c, m.keys.tasks, m.keys.due, m.keys.quarantine, m.keys.quarantine_reason, bad,
                 "record of task");
  });
  if (ec) out.clear();
  return out;
}

}  // namespace delayq
