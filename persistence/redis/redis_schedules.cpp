// redis_store's schedule_store role. Four keys per key space (the store's
// `{PREFIX}`, or in the sharded layout the shard of the schedule's id,
// `{PREFIX:s}`), so every script touches one hash slot:
//   {P}:schedules        hash   id -> definition bytes
//   {P}:schedules:state  hash   id -> state bytes
//   {P}:schedules:rev    hash   id -> revision (an integer)
//   {P}:schedules:ids    zset   id, score 0: id order for list_schedules()
// A write is one script per key space, each change a compare-and-set on the
// revision. insert_absent() (clusters) is one script per shard: HSETNX-like
// on the task hash, ZADD, and the notice of a saved task.
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "connection.hpp"
#include "delayq/log.hpp"
#include "delayq/record_codec.hpp"
#include "delayq/redis_store.hpp"
#include "redis_backend.hpp"
#include "redis_schedules.hpp"

namespace delayq {

using detail::redis::backend;

using detail::redis::command;
using detail::redis::connection;
using detail::redis::redis_failure;
using detail::redis::throw_server_error;

namespace {

// The types the keys may have: a key of another type (someone SET it)
// fails the call before anything is written.
constexpr const char* check_types_lua = R"lua(
local want = {'hash', 'hash', 'hash', 'zset'}
for i = 1, 4 do
  local t = redis.call('TYPE', KEYS[i]).ok
  if t ~= 'none' and t ~= want[i] then
    return redis.error_reply('WRONGTYPE delayq: ' .. KEYS[i] .. ' is a ' .. t .. '; nothing was written')
  end
end
)lua";

// ARGV: per change five values: kind (p put, s state, e erase), id, the
// expected revision (decimal), definition, state. Returns one 0/1 a change.
// A change that finds the revision one past the expected one and the bytes
// it would write answers 1: it is its own earlier run, sent again after a
// lost connection.
const std::string write_lua = std::string(check_types_lua) + R"lua(
local out = {}
for i = 1, #ARGV, 5 do
  local kind, id, exp, def, st = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  local cur = redis.call('HGET', KEYS[3], id) or '0'
  local ok = 0
  if cur == exp then
    if kind == 'p' then
      redis.call('HSET', KEYS[1], id, def)
      redis.call('HSET', KEYS[2], id, st)
      redis.call('HINCRBY', KEYS[3], id, 1)
      redis.call('ZADD', KEYS[4], 0, id)
      ok = 1
    elseif kind == 's' and cur ~= '0' then
      redis.call('HSET', KEYS[2], id, st)
      redis.call('HINCRBY', KEYS[3], id, 1)
      ok = 1
    elseif kind == 'e' and cur ~= '0' then
      redis.call('HDEL', KEYS[1], id)
      redis.call('HDEL', KEYS[2], id)
      redis.call('HDEL', KEYS[3], id)
      redis.call('ZREM', KEYS[4], id)
      ok = 1
    end
  elseif kind ~= 'e' and cur == tostring(tonumber(exp) + 1) and
         redis.call('HGET', KEYS[2], id) == st and
         (kind == 's' or redis.call('HGET', KEYS[1], id) == def) then
    ok = 1
  end
  out[#out + 1] = ok
end
return out
)lua";

// ARGV: the ids. Returns four values an id: id, definition, state, revision
// (false when absent).
constexpr const char* find_lua = R"lua(
local out = {}
for i = 1, #ARGV do
  local id = ARGV[i]
  out[#out + 1] = id
  out[#out + 1] = redis.call('HGET', KEYS[1], id)
  out[#out + 1] = redis.call('HGET', KEYS[2], id)
  out[#out + 1] = redis.call('HGET', KEYS[3], id)
end
return out
)lua";

// ARGV[1] the id after which to start ('' from the first), ARGV[2] limit.
// Returns four values a schedule, as find_lua.
// Three HMGETs for the page rather than three HGETs an id: a page of 1,000
// is a few calls, not 3,000 (pages are at most page_cap ids: unpack() of
// Redis's Lua takes at most 8,000 values).
constexpr const char* page_lua = R"lua(
local from = '-'
if ARGV[1] ~= '' then from = '(' .. ARGV[1] end
local ids = redis.call('ZRANGEBYLEX', KEYS[4], from, '+', 'LIMIT', 0, tonumber(ARGV[2]))
local out = {}
if #ids == 0 then return out end
local defs = redis.call('HMGET', KEYS[1], unpack(ids))
local states = redis.call('HMGET', KEYS[2], unpack(ids))
local revs = redis.call('HMGET', KEYS[3], unpack(ids))
for i, id in ipairs(ids) do
  if defs[i] then
    out[#out + 1] = id
    out[#out + 1] = defs[i]
    out[#out + 1] = states[i]
    out[#out + 1] = revs[i]
  end
end
return out
)lua";
constexpr std::size_t page_cap = 5000;

// KEYS[1] tasks, KEYS[2] due; ARGV[1] the notice channel ('' for none),
// ARGV[2] the shard, then per task: id, record, due ms. Stores each task
// whose id has no record, ZADDs it, and announces it. Returns how many.
constexpr const char* insert_lua = R"lua(
local n = 0
for i = 3, #ARGV, 3 do
  local id, rec, due = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if redis.call('HEXISTS', KEYS[1], id) == 0 then
    redis.call('HSET', KEYS[1], id, rec)
    redis.call('ZADD', KEYS[2], due, id)
    if ARGV[1] ~= '' then
      redis.call('PUBLISH', ARGV[1], ARGV[2] .. ' ' .. due .. ' ' .. id)
    end
    n = n + 1
  end
end
return n
)lua";

struct schedule_keys {
  std::string def, state, rev, ids;
  explicit schedule_keys(const detail::redis::store_keys& k)
      : def(k.schedules),
        state(k.schedules + ":state"),
        rev(k.schedules + ":rev"),
        ids(k.schedules + ":ids") {}
};

// The keys of every key space of the store, in the order of its parts.
std::vector<schedule_keys> keys_of(const backend& m) {
  std::vector<schedule_keys> keys;
  keys.reserve(m.parts.size());
  for (const backend::part& p : m.parts) keys.emplace_back(p.keys);
  return keys;
}

command eval_on(const char* script, const schedule_keys& k) {
  command c;
  c.arg("EVAL").arg(script).arg("4").arg(k.def).arg(k.state).arg(k.rev).arg(k.ids);
  return c;
}

std::string bulk(const redisReply* r) {
  return r->type == REDIS_REPLY_STRING ? std::string(r->str, r->len) : std::string();
}

// Reads the id/definition/state/revision quadruples of a script's reply.
void read_records(const redisReply* r, std::vector<std::optional<schedule_record>>& out) {
  if (r->type == REDIS_REPLY_ERROR) throw_server_error("schedules", r);
  if (r->type != REDIS_REPLY_ARRAY || r->elements % 4 != 0)
    throw redis_failure{errc::store_error, "unexpected reply to a schedules script"};
  for (std::size_t i = 0; i < r->elements; i += 4) {
    const redisReply* def = r->element[i + 1];
    if (def->type != REDIS_REPLY_STRING) {
      out.emplace_back();
      continue;
    }
    schedule_record rec;
    rec.id = bulk(r->element[i]);
    rec.definition = bulk(def);
    rec.state = bulk(r->element[i + 2]);
    const std::string rev = bulk(r->element[i + 3]);
    rec.revision = rev.empty() ? 0 : std::stoull(rev);
    out.emplace_back(std::move(rec));
  }
}

// A page of at most `limit` schedules of one key space whose ids come after
// `after`, in id order. The caller holds the store's mutex.
std::vector<schedule_record> read_page(detail::redis::cluster_router& conn, unsigned slot,
                                       const detail::redis::store_keys& keys,
                                       std::string_view after, std::size_t limit,
                                       boost::system::error_code& ec) {
  const schedule_keys k(keys);  // outlives c, which points into it
  command c = eval_on(page_lua, k);
  const std::string cap = std::to_string(limit);
  c.arg(after).arg(cap);
  std::vector<std::optional<schedule_record>> got;
  conn.run(slot, "list_schedules", ec, [&](connection& cn) {
    got.clear();
    auto replies = cn.exchange({c});
    read_records(replies[0].get(), got);
  });
  std::vector<schedule_record> out;
  if (ec) return out;
  out.reserve(got.size());
  for (auto& r : got)
    if (r) out.push_back(std::move(*r));
  return out;
}

}  // namespace

void detail::redis::schedules_role::write_schedules(std::span<const schedule_write> changes,
                                                    boost::system::error_code& ec) {
  backend& m = b_;
  ec = {};
  for (const schedule_write& w : changes) w.applied = false;
  // One script per key space, each change in its place of the batch.
  std::map<const backend::part*, std::vector<std::size_t>> by_part;
  for (std::size_t i = 0; i < changes.size(); ++i) by_part[&m.part_of(changes[i].id)].push_back(i);
  std::lock_guard lock(m.mutex);
  for (const auto& [p, which] : by_part) {
    const schedule_keys k(p->keys);
    std::vector<std::string> expected;
    expected.reserve(which.size());
    for (std::size_t i : which) expected.push_back(std::to_string(changes[i].expected));
    command c;
    c.arg("EVAL").arg(write_lua).arg("4").arg(k.def).arg(k.state).arg(k.rev).arg(k.ids);
    for (std::size_t j = 0; j < which.size(); ++j) {
      const schedule_write& w = changes[which[j]];
      c.arg(w.what == schedule_write::kind::put     ? "p"
            : w.what == schedule_write::kind::state ? "s"
                                                    : "e")
          .arg(w.id)
          .arg(expected[j])
          .arg(w.definition)
          .arg(w.state);
    }
    m.conn.run(p->slot, "write_schedules", ec, [&](connection& conn) {
      auto replies = conn.exchange({c}, true);
      const redisReply* r = replies[0].get();
      if (r->type == REDIS_REPLY_ERROR) throw_server_error("write_schedules", r);
      if (r->type != REDIS_REPLY_ARRAY || r->elements != which.size())
        throw redis_failure{errc::store_error, "unexpected reply to write_schedules"};
      for (std::size_t j = 0; j < which.size(); ++j)
        changes[which[j]].applied =
            r->element[j]->type == REDIS_REPLY_INTEGER && r->element[j]->integer == 1;
    });
    if (ec) return;
  }
}

std::vector<std::optional<schedule_record>> detail::redis::schedules_role::find_schedules(
    std::span<const std::string> ids, boost::system::error_code& ec) {
  backend& m = b_;
  ec = {};
  std::vector<std::optional<schedule_record>> out(ids.size());
  std::map<const backend::part*, std::vector<std::size_t>> by_part;
  for (std::size_t i = 0; i < ids.size(); ++i) by_part[&m.part_of(ids[i])].push_back(i);
  std::lock_guard lock(m.mutex);
  for (const auto& [p, which] : by_part) {
    const schedule_keys k(p->keys);
    command c = eval_on(find_lua, k);
    for (std::size_t i : which) c.arg(ids[i]);
    std::vector<std::optional<schedule_record>> got;
    m.conn.run(p->slot, "find_schedules", ec, [&](connection& conn) {
      got.clear();
      auto replies = conn.exchange({c});
      read_records(replies[0].get(), got);
      if (got.size() != which.size())
        throw redis_failure{errc::store_error, "unexpected reply to find_schedules"};
    });
    if (ec) return {};
    for (std::size_t j = 0; j < which.size(); ++j) out[which[j]] = std::move(got[j]);
  }
  return out;
}

std::vector<schedule_record> detail::redis::schedules_role::list_schedules(
    std::string_view after, std::size_t limit, boost::system::error_code& ec) {
  backend& m = b_;
  ec = {};
  std::vector<schedule_record> out;
  if (limit == 0) return out;
  // Sharded: a page of every shard, merged; the first `limit` of their
  // union in id order is exact (a shard's full page already holds `limit`
  // ids before anything it did not return). Longer than page_cap: pages
  // of page_cap until the shard has given `limit` or ran out.
  std::lock_guard lock(m.mutex);
  for (const backend::part& p : m.parts) {
    std::string from(after);
    std::size_t taken = 0;
    while (taken < limit) {
      const std::size_t want = std::min(limit - taken, page_cap);
      auto got = read_page(m.conn, p.slot, p.keys, from, want, ec);
      if (ec) return {};
      taken += got.size();
      const bool last = got.size() < want;
      if (!last) from = got.back().id;
      for (auto& r : got) out.push_back(std::move(r));
      if (last) break;
    }
  }
  std::sort(out.begin(), out.end(),
            [](const schedule_record& a, const schedule_record& b) { return a.id < b.id; });
  if (out.size() > limit) out.resize(limit);
  return out;
}

void detail::redis::schedules_role::scan_schedules(
    std::size_t page, const std::function<void(std::vector<schedule_record>&)>& visit,
    boost::system::error_code& ec) {
  backend& m = b_;
  ec = {};
  page = std::clamp<std::size_t>(page, 1, page_cap);
  // On one server, the first page of every key space in one round trip
  // (as count_schedules(): in the sharded layout that is 32 round trips
  // fewer, each of which a slowed link makes long); a key space with more
  // goes on alone. A Redis Cluster routes each key space to its node.
  const bool together = !m.opts.cluster && m.parts.size() > 1;
  std::vector<std::vector<schedule_record>> firsts(m.parts.size());
  if (together) {
    const std::vector<schedule_keys> keys = keys_of(m);
    const std::string cap = std::to_string(page);
    std::vector<command> cmds;
    for (const schedule_keys& k : keys) {
      cmds.push_back(eval_on(page_lua, k));
      cmds.back().arg("").arg(cap);
    }
    std::vector<std::vector<std::optional<schedule_record>>> got(m.parts.size());
    {
      std::lock_guard lock(m.mutex);
      m.conn.run(m.slot, "list_schedules", ec, [&](connection& cn) {
        for (auto& g : got) g.clear();
        auto replies = cn.exchange(cmds);
        for (std::size_t i = 0; i < replies.size(); ++i) read_records(replies[i].get(), got[i]);
      });
    }
    if (ec) return;
    for (std::size_t i = 0; i < got.size(); ++i)
      for (auto& r : got[i])
        if (r) firsts[i].push_back(std::move(*r));
  }
  for (std::size_t i = 0; i < m.parts.size(); ++i) {
    const backend::part& p = m.parts[i];
    std::string after;
    for (bool first = true;; first = false) {
      std::vector<schedule_record> got;
      if (first && together) {
        got = std::move(firsts[i]);
      } else {
        // Not held while `visit` runs: other callers go on between pages.
        std::lock_guard lock(m.mutex);
        got = read_page(m.conn, p.slot, p.keys, after, page, ec);
      }
      if (ec) return;
      const bool last = got.size() < page;
      if (!last) after = got.back().id;
      if (!got.empty()) visit(got);
      if (last) break;
    }
  }
}

std::size_t detail::redis::schedules_role::count_schedules(boost::system::error_code& ec) {
  backend& m = b_;
  ec = {};
  const std::vector<schedule_keys> keys = keys_of(m);
  std::size_t total = 0;
  std::lock_guard lock(m.mutex);
  // On one server, every key space's ZCARD in one round trip: a round trip
  // each held the connection for 32 of them in the sharded layout, and a
  // link slowed to 100-300 ms a chunk for 13 s, while the reads of the
  // shards this instance had just taken over waited (issue 33). A Redis
  // Cluster routes each key space to its node.
  const std::size_t group = m.opts.cluster ? 1 : m.parts.size();
  for (std::size_t first = 0; first < m.parts.size(); first += group) {
    std::vector<command> cmds;
    for (std::size_t i = first; i < first + group; ++i)
      cmds.push_back(command().arg("ZCARD").arg(keys[i].ids));
    std::size_t here = 0;
    m.conn.run(m.parts[first].slot, "count_schedules", ec, [&](connection& conn) {
      here = 0;
      auto replies = conn.exchange(cmds);
      for (const auto& reply : replies) {
        const redisReply* r = reply.get();
        if (r->type == REDIS_REPLY_ERROR) throw_server_error("ZCARD", r);
        if (r->type != REDIS_REPLY_INTEGER || r->integer < 0)
          throw redis_failure{errc::store_error, "unexpected ZCARD reply"};
        here += static_cast<std::size_t>(r->integer);
      }
    });
    if (ec) return 0;
    total += here;
  }
  return total;
}

void detail::redis::schedules_role::insert_absent(std::span<const task> tasks,
                                                  boost::system::error_code& ec) {
  backend& m = b_;
  ec = {};
  std::map<const backend::part*, std::vector<std::size_t>> by_part;
  for (std::size_t i = 0; i < tasks.size(); ++i) by_part[&m.part_of(tasks[i].id)].push_back(i);
  std::lock_guard lock(m.mutex);
  for (const auto& [p, which] : by_part) {
    std::vector<std::string> records, dues;
    records.reserve(which.size());
    dues.reserve(which.size());
    for (std::size_t i : which) {
      records.push_back(encode_task(tasks[i]));
      dues.push_back(std::to_string(to_epoch_ms(tasks[i].due)));
    }
    const std::string shard = std::to_string(p->shard.shard);
    command c;
    c.arg("EVAL").arg(insert_lua).arg("2").arg(p->keys.tasks).arg(p->keys.due);
    c.arg(m.shards() == 0 ? std::string_view() : std::string_view(p->shard.channel)).arg(shard);
    for (std::size_t j = 0; j < which.size(); ++j)
      c.arg(tasks[which[j]].id).arg(records[j]).arg(dues[j]);
    // Running it twice is running it once: a task stored by the first run
    // is left alone by the second.
    m.conn.run(p->slot, "insert_absent", ec, [&](connection& conn) {
      auto replies = conn.exchange({c}, true);
      if (replies[0]->type == REDIS_REPLY_ERROR)
        throw_server_error("insert_absent", replies[0].get());
    });
    if (ec) return;
  }
}

}  // namespace delayq
