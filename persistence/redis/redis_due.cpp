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
using due_item = backend::due_item;

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

// The arguments of one call of the page script after `after`, kept alive
// while its command refers to them.
struct due_call_args {
  std::string from, until, count;
  due_call_args(const due_cursor& after, std::int64_t until_ms, std::size_t limit)
      : from(after.id.empty() && after.due_ms == INT64_MIN ? std::string("-inf")
                                                           : std::to_string(after.due_ms)),
        until(std::to_string(until_ms)),
        count(std::to_string(limit)) {}
};

// One call of the page script over `keys` (EVAL, or EVALSHA of the script
// the server loaded on `c`).
command due_call(connection& c, bool eval, const detail::redis::store_keys& keys,
                 const due_cursor& after, const due_call_args& a) {
  command call;
  if (eval)
    call.arg("EVAL").arg(detail::redis::due_script);
  else
    call.arg("EVALSHA").arg(detail::redis::due_sha(c));
  call.arg("2").arg(keys.tasks).arg(keys.due).arg(a.from).arg(after.id).arg(a.until).arg(a.count);
  return call;
}

// The page script's reply: (id, score, record) triples in order, each as a
// due_item (a record that does not decode keeps its bytes and why); `last`
// is the page's last (score, id), the next page's cursor.
void parse_due_reply(const redisReply* r, std::vector<backend::due_item>& items,
                     std::optional<due_cursor>& last) {
  if (r->type == REDIS_REPLY_ERROR) throw_server_error("list_due", r);
  if (r->type != REDIS_REPLY_ARRAY || r->elements % 3 != 0)
    throw redis_failure{errc::store_error, "unexpected list_due reply"};
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
    backend::due_item item{score_ms(r->element[i + 1]), std::string(id), std::move(t), {}, {}};
    if (!item.t) {
      item.raw = std::string(raw);
      item.why = std::move(why);
    }
    items.push_back(std::move(item));
  }
}

// Quarantines the items of `items` that did not decode (on `c`, under the
// backend's mutex): how many there were. Counted whether or not the script
// moved each (it does not when another writer replaced the record since
// the page was read): tasks + quarantined is what a caller compares with
// its limit to know the range is done.
std::size_t quarantine_bad(backend& m, connection& c, const detail::redis::store_keys& keys,
                           const std::vector<backend::due_item>& items) {
  std::vector<backend::bad_record> bad;
  for (const backend::due_item& item : items)
    if (!item.t) bad.push_back({item.id, item.raw, item.why});
  m.quarantine(c, keys.tasks, keys.due, keys.quarantine, keys.quarantine_reason, bad,
               "record of task");
  return bad.size();
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
  const due_call_args args(after, until_ms, limit);
  std::vector<due_item> items;
  std::optional<due_cursor> last;
  {
    std::lock_guard lock(m.mutex);
    m.conn.run(p.slot, "list_due", ec, [&](connection& c) {
      // The body may run again after a redirect: start from nothing.
      items.clear();
      last.reset();
      summary = {};
      for (const bool eval : {false, true}) {
        auto replies = c.exchange({due_call(c, eval, p.keys, after, args)});
        if (!eval && detail::redis::is_noscript(replies[0].get())) {
          log(log_level::warning,
              m.name + ": the server lost the list_due script (NOSCRIPT); using EVAL");
          continue;
        }
        parse_due_reply(replies[0].get(), items, last);
        break;
      }
      // The caller decides what to quarantine (list_due_merged()). Else
      // quarantined before any task of the page reaches the sink.
      if (!read) summary.quarantined = quarantine_bad(m, c, p.keys, items);
    });
  }
  if (ec) return {};
  if (last) after = std::move(*last);
  if (read) {
    for (const due_item& item : items) ++(item.t ? summary.tasks : summary.quarantined);
    *read = std::move(items);
    return summary;
  }
  for (due_item& item : items)
    if (item.t) out.push_back(std::move(*item.t));
  summary.tasks = out.size();
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

std::vector<list_summary> detail::redis::shards_role::list_due_shards(
    std::span<const std::uint32_t> shards, std::span<due_cursor> after, std::int64_t until_ms,
    std::size_t limit, const std::function<void(std::size_t, task&&)>& sink,
    boost::system::error_code& ec) {
  ec = {};
  backend& m = b_;
  const std::size_t n = std::min(shards.size(), after.size());
  for (std::size_t i = 0; i < n; ++i)
    if (shards[i] >= m.shards()) {
      ec = errc::shard_mismatch;
      return {};
    }
  // A Redis Cluster spreads the shards' slots over its nodes: one at a time.
  if (m.opts.cluster || n <= 1 || limit == 0)
    return shard_store::list_due_shards(shards, after, until_ms, limit, sink, ec);
  std::vector<due_call_args> args;
  args.reserve(n);
  for (std::size_t i = 0; i < n; ++i) args.emplace_back(after[i], until_ms, limit);
  std::vector<std::vector<due_item>> items(n);
  std::vector<std::optional<due_cursor>> last(n);
  std::vector<list_summary> out(n);
  {
    std::lock_guard lock(m.mutex);
    // Every shard's page in one round trip: the calls are pipelined.
    m.conn.run(m.slot, "list_due", ec, [&](connection& c) {
      for (std::size_t i = 0; i < n; ++i) {
        items[i].clear();
        last[i].reset();
        out[i] = {};
      }
      for (const bool eval : {false, true}) {
        std::vector<command> calls;
        calls.reserve(n);
        for (std::size_t i = 0; i < n; ++i)
          calls.push_back(due_call(c, eval, m.parts[shards[i]].keys, after[i], args[i]));
        auto replies = c.exchange(calls);
        if (!eval && std::any_of(replies.begin(), replies.end(), [](const auto& r) {
              return detail::redis::is_noscript(r.get());
            })) {
          log(log_level::warning,
              m.name + ": the server lost the list_due script (NOSCRIPT); using EVAL");
          continue;
        }
        for (std::size_t i = 0; i < n; ++i) parse_due_reply(replies[i].get(), items[i], last[i]);
        break;
      }
      for (std::size_t i = 0; i < n; ++i)
        out[i].quarantined = quarantine_bad(m, c, m.parts[shards[i]].keys, items[i]);
    });
  }
  if (ec) return {};
  for (std::size_t i = 0; i < n; ++i) {
    if (last[i]) after[i] = std::move(*last[i]);
    for (due_item& item : items[i]) {
      if (!item.t) continue;
      ++out[i].tasks;
      sink(i, std::move(*item.t));
    }
  }
  return out;
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
