// persistence/redis/lease_scripts.cpp - the Lua scripts of the shard lease
// table (see lease_scripts.hpp).
#include "lease_scripts.hpp"

#include "delayq/redis_shard_leases.hpp"

namespace delayq {

const char* const redis_fence_lua =
    "local function delayq_fence(lease_key, token) "
    "  return redis.call('HGET', lease_key, 'token') == token "
    "end ";

}  // namespace delayq

namespace delayq::detail::redis {
namespace {

// The server's clock in ms. Numbers go back to Redis through '%.0f': Lua
// 5.1's tostring() switches to exponent notation past 14 digits.
#define DELAYQ_LEASE_PROLOGUE                                              \
  "if redis.replicate_commands then redis.replicate_commands() end "       \
  "local t = redis.call('TIME') "                                          \
  "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) " \
  "local function ms(x) return string.format('%.0f', x) end "

// A live lease is never taken, not even by another process under the same
// instance name (a restart while the old process is only stalled): that one
// may still fire the shard's tasks. Only this very incarnation gets its live
// lease back, with the same token: a retried acquire changes nothing.
const char* const acquire_lua = DELAYQ_LEASE_PROLOGUE
    "local l = redis.call('HMGET', KEYS[1], 'owner', 'incarnation', 'expires_ms', 'token') "
    "local expires = tonumber(l[3]) or 0 "
    "if l[1] and expires > now then "
    "  if l[1] ~= ARGV[1] or l[2] ~= ARGV[3] then return 0 end "
    "  redis.call('HSET', KEYS[1], 'expires_ms', ms(now + tonumber(ARGV[2]))) "
    "  return tonumber(l[4]) "
    "end "
    "local token = redis.call('HINCRBY', KEYS[1], 'token', 1) "
    "redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'incarnation', ARGV[3], "
    "           'expires_ms', ms(now + tonumber(ARGV[2]))) "
    "return token";

const char* const renew_lua = DELAYQ_LEASE_PROLOGUE
    "local l = redis.call('HMGET', KEYS[1], 'owner', 'token', 'incarnation') "
    "if l[1] ~= ARGV[1] or l[2] ~= ARGV[2] or l[3] ~= ARGV[4] then return 0 end "
    "redis.call('HSET', KEYS[1], 'expires_ms', ms(now + tonumber(ARGV[3]))) "
    "return 1";

const char* const release_lua =
    "local l = redis.call('HMGET', KEYS[1], 'owner', 'token', 'incarnation') "
    "if l[1] ~= ARGV[1] or l[2] ~= ARGV[2] or l[3] ~= ARGV[3] then return 0 end "
    "redis.call('HDEL', KEYS[1], 'owner', 'incarnation', 'expires_ms') "
    "return 1";

const char* const members_lua = DELAYQ_LEASE_PROLOGUE
    "redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ms(now)) "
    "redis.call('ZADD', KEYS[1], ms(now + tonumber(ARGV[2])), ARGV[1]) "
    "return {ms(now), redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')}";

const char* const leave_lua = "return redis.call('ZREM', KEYS[1], ARGV[1])";

#undef DELAYQ_LEASE_PROLOGUE

}  // namespace

const char* lease_script_text(lease_script s) noexcept {
  switch (s) {
    case lease_script::acquire: return acquire_lua;
    case lease_script::renew: return renew_lua;
    case lease_script::release: return release_lua;
    case lease_script::members: return members_lua;
    case lease_script::leave: return leave_lua;
  }
  return "";
}

}  // namespace delayq::detail::redis
