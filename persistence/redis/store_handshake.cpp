// persistence/redis/store_handshake.cpp - the store's part of each
// connection's handshake (see store_handshake.hpp).
#include "store_handshake.hpp"

#include <charconv>

#include "key_schema.hpp"
#include "scripts.hpp"

namespace delayq::detail::redis {
namespace {

// One script, so that a store created by two processes at once records one
// shard count: the creator (whoever set `layout` first) also sets `shards`.
// A store created before shard counts existed (or with 0) has no `shards`
// field: it reads as 0, and a count of 0 writes none, so the meta key of
// an unsharded store is what it always was. ARGV: layout, shards, whether
// this connection may create the key ('1').
const char* const layout_script =
    "local created = ARGV[3] == '1' and redis.call('HSETNX', KEYS[1], 'layout', ARGV[1]) == 1 "
    "if created and ARGV[2] ~= '0' then redis.call('HSET', KEYS[1], 'shards', ARGV[2]) end "
    "return redis.call('HMGET', KEYS[1], 'layout', 'shards')";

}  // namespace

std::shared_ptr<const store_handshake> store_handshake::writer(const redis_options& opts) {
  return std::make_shared<const store_handshake>(opts, true);
}

std::shared_ptr<const store_handshake> store_handshake::reader(const redis_options& opts) {
  return std::make_shared<const store_handshake>(opts, false);
}

store_handshake::store_handshake(const redis_options& opts, bool writer)
    : writer_(writer),
      cluster_(opts.cluster),
      mind_shards_(writer && !opts.ignore_shard_count),
      prefix_(opts.prefix),
      key_meta_(store_keys(opts.prefix).meta),
      layout_(std::to_string(redis_store::layout_version)),
      shards_(std::to_string(opts.shards)),
      scripts_{opts.shards != 0 ? sharded_write_script : write_script, due_script} {}

std::span<const char* const> store_handshake::scripts() const noexcept {
  if (!writer_) return {};
  return scripts_;
}

bool store_handshake::check_command(command& out) const {
  // In a cluster the meta key lives on one node: the store checks it there.
  if (cluster_) return false;
  out = layout_command();
  return true;
}

command store_handshake::layout_command() const {
  command c;
  c.arg("EVAL")
      .arg(layout_script)
      .arg("1")
      .arg(key_meta_)
      .arg(layout_)
      .arg(shards_)
      .arg(mind_shards_ ? "1" : "0");
  return c;
}

void store_handshake::check_reply(const redisReply* r) const {
  if (r->type == REDIS_REPLY_ERROR) throw_server_error("key layout check", r);
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 2)
    throw redis_failure{errc::store_error, "unexpected reply to the key layout check"};
  // No meta key yet, and this connection may not create it (a lease table
  // or a list() before the store): nothing to compare.
  if (r->element[0]->type == REDIS_REPLY_NIL) return;
  const std::string stored = reply_text(r->element[0]);
  int stored_layout = 0;
  std::from_chars(stored.data(), stored.data() + stored.size(), stored_layout);
  if (stored_layout != redis_store::layout_version)
    throw redis_failure{errc::store_error, "key layout version '" + stored + "' in " + key_meta_ +
                                               " is not " + layout_ + ", the one this build uses"};
  // A store opened to move records between the layouts reads and writes
  // the key space its options name, whatever count the meta key records.
  if (!mind_shards_) return;
  const std::string stored_shards =
      r->element[1]->type == REDIS_REPLY_NIL ? std::string("0") : reply_text(r->element[1]);
  if (stored_shards != shards_)
    throw redis_failure{errc::shard_mismatch,
                        "the store under prefix '" + prefix_ + "' was created with " +
                            stored_shards + " shards (" + key_meta_ + "), not the " + shards_ +
                            " these options ask for (redis_options::shards)"};
}

void check_store_layout(connection& c, const redis_options& opts) {
  const store_handshake handshake(opts, true);
  auto replies = c.exchange({handshake.layout_command()});
  handshake.check_reply(replies[0].get());
}

}  // namespace delayq::detail::redis
