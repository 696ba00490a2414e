// persistence/redis/store_handshake.hpp - what redis_store adds to the
// handshake of each of its connections: its scripts, loaded at every dial,
// and the check of its key layout in `{PREFIX}:meta`. Internal.
//
// The layout check writes the layout version (and, for a sharded store, the
// shard count) to the meta key unless there is one, and checks it is this
// build's (errc::store_error) and that the shard count is the options'
// (errc::shard_mismatch). Only a writer's handshake (the store's own
// connections: its calls and its write pipeline) creates the meta key and
// minds the count, and not even a writer's of a store opened with
// redis_options::ignore_shard_count; a reader's (a lease table, a list(),
// the layout tools) only checks the version of a meta key that exists.
// In a Redis Cluster the meta key lives on one node only, so the handshake
// leaves the check out and the store runs check_store_layout() through its
// router instead.
#pragma once

#include <utility>

#include <array>
#include <memory>
#include <span>
#include <string>

#include "connection.hpp"

namespace delayq::detail::redis {

/// Thread safety: immutable after construction; shared by the connections
/// of one router.
class store_handshake final : public handshake_extension {
 public:
  /// The store's own connections: load the write and due scripts (their
  /// SHA1s: write_sha(), due_sha()), create the meta key, mind the shard
  /// count.
  static std::shared_ptr<const store_handshake> writer(const redis_options& opts);
  /// Any other connection under the store's prefix: no scripts, and only
  /// the version of an existing meta key is checked.
  static std::shared_ptr<const store_handshake> reader(const redis_options& opts);

  store_handshake(const redis_options& opts, bool writer);

  std::span<const char* const> scripts() const noexcept override;
  bool check_command(command& out) const override;
  void check_reply(const redisReply* r) const override;

  /// The layout check's command, in cluster mode too.
  command layout_command() const;

  /// Indexes of writer()'s scripts, for connection::script_sha().
  static constexpr std::size_t write_script_index = 0;
  static constexpr std::size_t due_script_index = 1;

 private:
  bool writer_;
  bool cluster_;
  bool mind_shards_;  // writer_ && !ignore_shard_count
  std::string prefix_;
  std::string key_meta_;
  std::string layout_;  // redis_store::layout_version, as text
  std::string shards_;  // opts.shards, as text
  std::array<const char*, 2> scripts_{};
};

/// The SHA1 of the write script (the sharded one for a sharded store) on a
/// connection of a writer() handshake.
inline const std::string& write_sha(const connection& c) noexcept {
  return c.script_sha(store_handshake::write_script_index);
}
/// The SHA1 of the list_due() page script on a connection of a writer()
/// handshake.
inline const std::string& due_sha(const connection& c) noexcept {
  return c.script_sha(store_handshake::due_script_index);
}

/// Runs a writer's layout check on `c`: in a cluster, where the handshake
/// leaves it out. Throws redis_failure.
void check_store_layout(connection& c, const redis_options& opts);

}  // namespace delayq::detail::redis
