// persistence/redis/scripts.cpp - the Lua scripts of redis_store and the
// encoding of a write() batch (see scripts.hpp).
#include "scripts.hpp"

#include <algorithm>
#include <charconv>

#include "delayq/record_codec.hpp"
#include "delayq/redis_shard_leases.hpp"

namespace delayq::detail::redis {

// Checks first, writes after: see scripts.hpp for why the order matters.
const char* const write_script = R"lua(-- delayq write batch, layout 1
local n = #ARGV
if n % 4 ~= 0 then
  return redis.error_reply('ERR delayq: write script needs 4 arguments per change')
end
local live, dead = false, false
for i = 1, n, 4 do
  local k = ARGV[i]
  if k == 's' or k == 'r' then live = true
  elseif k == 'p' then dead = true
  elseif k == 'b' or k == 'v' then live = true; dead = true
  else return redis.error_reply('ERR delayq: unknown change kind ' .. k) end
  if (k == 's' or k == 'b' or k == 'v') and not tonumber(ARGV[i + 3]) then
    return redis.error_reply('ERR delayq: bad score for ' .. ARGV[i + 1])
  end
end
local function check(key, want)
  local t = redis.call('TYPE', key)['ok']
  if t ~= 'none' and t ~= want then
    return redis.error_reply('WRONGTYPE delayq: ' .. key .. ' holds a ' .. t .. ', not a ' ..
                             want .. '; nothing of the batch was written')
  end
end
local err = (live and (check(KEYS[1], 'hash') or check(KEYS[2], 'zset'))) or
            (dead and (check(KEYS[3], 'hash') or check(KEYS[4], 'zset')))
if err then return err end
-- Runs of changes of one kind go out as one variadic command per key
-- (HSET/ZADD of many pairs, HDEL/ZREM of many ids), at most 1000 changes a
-- command: the same effects in the same order, at a fraction of the cost of
-- one call per change (each call is also one command in the AOF).
local i = 1
while i <= n do
  local k = ARGV[i]
  local ids, records, scores = {}, {}, {}
  while i <= n and ARGV[i] == k and #ids < 1000 do
    local id = ARGV[i + 1]
    ids[#ids + 1] = id
    records[#records + 1] = id
    records[#records + 1] = ARGV[i + 2]
    scores[#scores + 1] = ARGV[i + 3]
    scores[#scores + 1] = id
    i = i + 4
  end
  if k == 'r' or k == 'b' then
    redis.call('HDEL', KEYS[1], unpack(ids))
    redis.call('ZREM', KEYS[2], unpack(ids))
  elseif k == 'p' or k == 'v' then
    redis.call('HDEL', KEYS[3], unpack(ids))
    redis.call('ZREM', KEYS[4], unpack(ids))
  end
  if k == 's' or k == 'v' then
    redis.call('HSET', KEYS[1], unpack(records))
    redis.call('ZADD', KEYS[2], unpack(scores))
  elseif k == 'b' then
    redis.call('HSET', KEYS[3], unpack(records))
    redis.call('ZADD', KEYS[4], unpack(scores))
  end
end
return n / 4
)lua";

// The sharded layout's write script: the same checks and writes, plus the
// fence and the notices (scripts.hpp). The fence is checked with the other
// arguments, before any write: a shard's part whose token is stale writes
// nothing. Each token is read once per call.
const std::string sharded_write_script_text =
    std::string("-- delayq write batch, sharded, layout 1\n") + redis_fence_lua + R"lua(
local n = #ARGV
if n < 2 or (n - 2) % 5 ~= 0 then
  return redis.error_reply('ERR delayq: write script needs 5 arguments per change')
end
local channel, shard = ARGV[1], ARGV[2]
local live, dead = false, false
local fenced = {}
for i = 3, n, 5 do
  local k = ARGV[i]
  if k == 's' or k == 'r' then live = true
  elseif k == 'p' then dead = true
  elseif k == 'b' or k == 'v' then live = true; dead = true
  else return redis.error_reply('ERR delayq: unknown change kind ' .. k) end
  if (k == 's' or k == 'b' or k == 'v') and not tonumber(ARGV[i + 3]) then
    return redis.error_reply('ERR delayq: bad score for ' .. ARGV[i + 1])
  end
  local f = ARGV[i + 4]
  if f ~= '' and not fenced[f] then
    if not KEYS[5] then
      return redis.error_reply('ERR delayq: a fenced change needs the lease key')
    end
    if not delayq_fence(KEYS[5], f) then
      -- Counted where it happened, for whoever checks that stale writers
      -- were refused (the fault harness, an operator): field fence_refused
      -- of the shard's lease hash, which no lease script reads or removes.
      redis.call('HINCRBY', KEYS[5], 'fence_refused', 1)
      return redis.error_reply('DELAYQFENCE delayq: the lease of shard ' .. shard ..
                               ' no longer carries token ' .. f ..
                               '; nothing of the shard\'s part was written')
    end
    fenced[f] = true
  end
end
local function check(key, want)
  local t = redis.call('TYPE', key)['ok']
  if t ~= 'none' and t ~= want then
    return redis.error_reply('WRONGTYPE delayq: ' .. key .. ' holds a ' .. t .. ', not a ' ..
                             want .. '; nothing of the batch was written')
  end
end
local err = (live and (check(KEYS[1], 'hash') or check(KEYS[2], 'zset'))) or
            (dead and (check(KEYS[3], 'hash') or check(KEYS[4], 'zset')))
if err then return err end
local i = 3
while i <= n do
  local k = ARGV[i]
  local ids, records, scores = {}, {}, {}
  while i <= n and ARGV[i] == k and #ids < 1000 do
    local id = ARGV[i + 1]
    ids[#ids + 1] = id
    records[#records + 1] = id
    records[#records + 1] = ARGV[i + 2]
    scores[#scores + 1] = ARGV[i + 3]
    scores[#scores + 1] = id
    i = i + 5
  end
  if k == 'r' or k == 'b' then
    redis.call('HDEL', KEYS[1], unpack(ids))
    redis.call('ZREM', KEYS[2], unpack(ids))
  elseif k == 'p' or k == 'v' then
    redis.call('HDEL', KEYS[3], unpack(ids))
    redis.call('ZREM', KEYS[4], unpack(ids))
  end
  if k == 's' or k == 'v' then
    redis.call('HSET', KEYS[1], unpack(records))
    redis.call('ZADD', KEYS[2], unpack(scores))
    for j = 1, #ids do
      redis.call('PUBLISH', channel, shard .. ' ' .. scores[2 * j - 1] .. ' ' .. ids[j])
    end
  elseif k == 'b' then
    redis.call('HSET', KEYS[3], unpack(records))
    redis.call('ZADD', KEYS[4], unpack(scores))
  end
end
return (n - 2) / 5
)lua";
const char* const sharded_write_script = sharded_write_script_text.c_str();

// The type checks come first here too, so a wrong-typed key never leaves a
// record half moved.
#define DELAYQ_QUARANTINE_CHECKS                                                       \
  "for i, want in ipairs({'hash', 'zset', 'hash', 'hash'}) do "                        \
  "  local t = redis.call('TYPE', KEYS[i])['ok'] "                                     \
  "  if t ~= 'none' and t ~= want then "                                               \
  "    return redis.error_reply('WRONGTYPE delayq: ' .. KEYS[i] .. ' holds a ' .. t) " \
  "  end "                                                                             \
  "end "

const char* const quarantine_script = DELAYQ_QUARANTINE_CHECKS
    "local raw = redis.call('HGET', KEYS[1], ARGV[1]) "
    "if raw ~= ARGV[2] then return 0 end "
    "redis.call('HSET', KEYS[3], ARGV[1], raw) "
    "redis.call('HSET', KEYS[4], ARGV[1], ARGV[3]) "
    "redis.call('HDEL', KEYS[1], ARGV[1]) "
    "redis.call('ZREM', KEYS[2], ARGV[1]) "
    "return 1";

const char* const quarantine_id_script = DELAYQ_QUARANTINE_CHECKS
    "local raw = redis.call('HGET', KEYS[1], ARGV[1]) "
    "if not raw then return 0 end "
    "redis.call('HSET', KEYS[3], ARGV[1], raw) "
    "redis.call('HSET', KEYS[4], ARGV[1], ARGV[2]) "
    "redis.call('HDEL', KEYS[1], ARGV[1]) "
    "redis.call('ZREM', KEYS[2], ARGV[1]) "
    "return 1";

#undef DELAYQ_QUARANTINE_CHECKS

// Ranks are passed to redis.call() as Lua numbers, which it formats with
// "%.14g": exact below 1e14 members. HMGET and ZRANGE go 1000 at a time,
// as the write script's variadic calls do, to stay far below Lua's limit on
// unpack()'s results.
const char* const due_script = R"lua(-- delayq list_due page, layout 1
local tasks, due = KEYS[1], KEYS[2]
local after, id = ARGV[1], ARGV[2]
local until_ms, limit = tonumber(ARGV[3]), tonumber(ARGV[4])
if not tonumber(after) or not until_ms or not limit then
  return redis.error_reply('ERR delayq: bad list_due arguments')
end
-- a <= b, bytewise. Lua's own string comparison goes through strcoll(),
-- and Redis takes LC_COLLATE from its environment.
local function le(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a <= #b
end
local start = false
if id ~= '' then
  local s = redis.call('ZSCORE', due, id)
  if s and tonumber(s) == tonumber(after) then start = redis.call('ZRANK', due, id) + 1 end
end
if not start then
  -- The cursor's member is gone (or the cursor names none): the first rank
  -- after it is past the members scored below the cursor's due time and past
  -- those of its run whose id is not after the cursor's. The run is sorted
  -- bytewise by Redis: search it.
  local lo = redis.call('ZCOUNT', due, '-inf', '(' .. after)
  local hi = lo + redis.call('ZCOUNT', due, after, after)
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if le(redis.call('ZRANGE', due, mid, mid)[1], id) then lo = mid + 1 else hi = mid end
  end
  start = lo
end
local card = redis.call('ZCARD', due)
local out, got = {}, 0
while got < limit and start < card do
  local stop = math.min(start + math.min(limit - got, 1000), card) - 1
  local r = redis.call('ZRANGE', due, start, stop, 'WITHSCORES')
  local ids, past = {}, false
  for i = 1, #r, 2 do
    if tonumber(r[i + 1]) > until_ms then past = true; break end
    ids[#ids + 1] = r[i]
    out[#out + 1] = r[i]
    out[#out + 1] = r[i + 1]
    out[#out + 1] = false
  end
  if #ids > 0 then
    local records = redis.call('HMGET', tasks, unpack(ids))
    local base = #out - 3 * #ids
    for k = 1, #ids do
      if records[k] then
        out[base + 3 * k] = records[k]
        got = got + 1
      end
    end
  end
  start = start + #ids
  if past or #ids == 0 then break end
end
return out
)lua";

const char* const drop_dangling_script =
    "if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 0 end "
    "return redis.call('ZREM', KEYS[2], ARGV[1])";

namespace {

void append_count(std::string& out, char type, std::size_t n) {
  char buf[24];
  const auto end = std::to_chars(buf, buf + sizeof buf, n).ptr;
  out.push_back(type);
  out.append(buf, end);
  out.append("\r\n", 2);
}

void append_score(std::string& out, std::chrono::system_clock::time_point t) {
  char buf[24];
  const auto end = std::to_chars(buf, buf + sizeof buf, to_epoch_ms(t)).ptr;
  append_bulk(out, std::string_view(buf, static_cast<std::size_t>(end - buf)));
}

}  // namespace

const char* const sequence_raise_script =
    "local cur = redis.call('HGET', KEYS[1], ARGV[1]) "
    "local want = ARGV[2] "
    "if cur and (#cur > #want or (#cur == #want and cur >= want)) then return 0 end "
    "redis.call('HSET', KEYS[1], ARGV[1], want) "
    "return 1";

command quarantine_call(const char* script, const std::string& hash, const std::string& index,
                        const std::string& q, const std::string& q_reason) {
  command c;
  c.arg("EVAL").arg(script).arg("4").arg(hash).arg(index).arg(q).arg(q_reason);
  return c;
}

void append_bulk(std::string& out, std::string_view arg) {
  append_count(out, '$', arg.size());
  out.append(arg);
  out.append("\r\n", 2);
}

write_batch::write_batch(const store_keys& keys, std::span<const store_change> changes,
                         const shard_part* shard)
    : changes_(changes.size()), script_(shard ? sharded_write_script : write_script) {
  // Records dominate the size; 64 bytes of framing and id per change besides.
  tail_.reserve(256 + changes.size() * 64);
  const bool fenced = shard && std::any_of(changes.begin(), changes.end(),
                                           [](const store_change& c) { return c.fence != 0; });
  append_bulk(tail_, fenced ? "5" : "4");
  append_bulk(tail_, keys.tasks);
  append_bulk(tail_, keys.due);
  append_bulk(tail_, keys.dead);
  append_bulk(tail_, keys.dead_by_time);
  args_ = 5;
  if (fenced) {
    append_bulk(tail_, shard->lease_key);
    ++args_;
  }
  if (shard) {
    append_bulk(tail_, shard->channel);
    append_bulk(tail_, std::to_string(shard->shard));
    args_ += 2;
  }
  for (const store_change& c : changes) {
    const task& t = *c.task;
    switch (c.what) {
      case change_kind::save:
      case change_kind::revive:
        append_bulk(tail_, c.what == change_kind::save ? "s" : "v");
        append_bulk(tail_, t.id);
        append_bulk(tail_, encode_task(t));
        append_score(tail_, t.due);
        break;
      case change_kind::bury:
        append_bulk(tail_, "b");
        append_bulk(tail_, t.id);
        append_bulk(tail_, encode_dead_letter(dead_letter{t, std::string(c.error), c.died_at}));
        append_score(tail_, c.died_at);
        break;
      case change_kind::remove:
      case change_kind::purge:
        append_bulk(tail_, c.what == change_kind::remove ? "r" : "p");
        append_bulk(tail_, t.id);
        append_bulk(tail_, "");
        append_bulk(tail_, "");
        break;
    }
    args_ += 4;
    if (shard) {
      append_bulk(tail_, c.fence != 0 ? std::to_string(c.fence) : std::string());
      ++args_;
    }
  }
}

std::string write_batch::head(std::string_view sha) const {
  std::string out;
  append_count(out, '*', 2 + args_);
  append_bulk(out, "EVALSHA");
  append_bulk(out, sha);
  return out;
}

std::string write_batch::eval_head() const {
  std::string out;
  append_count(out, '*', 2 + args_);
  append_bulk(out, "EVAL");
  append_bulk(out, script_);
  return out;
}

}  // namespace delayq::detail::redis
