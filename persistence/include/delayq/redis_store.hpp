// delayq/redis_store.hpp - a task_store in a Redis server.
#pragma once

#include <utility>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "delayq/role_store.hpp"

namespace delayq {

namespace detail::redis {
struct backend;
}  // namespace detail::redis

/// Where the Redis server is and how to talk to it: all a connection of the
/// store reads (redis_options, below, adds the keys it keeps there).
///
/// Thread safety: a plain value.
struct redis_connection_options {
  std::string host = "127.0.0.1";
  unsigned port = 6379;
  /// When not empty, connect to this Unix socket instead of host:port.
  std::string unix_socket;
  int db = 0;
  /// A Redis Cluster (redis-cluster://): `seeds` are the nodes to ask for
  /// the slot map; host and port are the first seed.
  bool cluster = false;
  std::vector<std::pair<std::string, unsigned>> seeds;
  /// With a password: `AUTH user password` when user is set, else
  /// `AUTH password`.
  std::string user;
  std::string password;
  /// Bounds one connection attempt.
  std::chrono::milliseconds connect_timeout{2000};
  /// Bounds each read or write on the socket during a call.
  std::chrono::milliseconds command_timeout{5000};
  /// A reply late by this much makes the connection dial the server once
  /// more on the side (bounded by connect_timeout), and again after each
  /// further link_check: when that dial fails, the server cannot be
  /// reached, and the call fails at once as if command_timeout had passed
  /// (a write errc::outcome_unknown, a read errc::store_unavailable), so an
  /// instance cut off from Redis does not hang its callers for
  /// command_timeout. A server that is only slow or paused still accepts
  /// the dial, and the call waits on. Zero: never check.
  std::chrono::milliseconds link_check{250};

  /// The server's address without credentials: "HOST:PORT", the socket
  /// path, or for a cluster the seeds joined with ','.
  std::string address() const;
};

/// What a store keeps on that server, and how: the key prefix and the shard
/// layout. The store's connections never read these (but for the client
/// name); the store checks them against `{PREFIX}:meta` when it opens.
///
/// Thread safety: a plain value.
struct redis_key_layout {
  /// Keys are `{PREFIX}:tasks`, `{PREFIX}:due`, ... (see docs/persistence.md).
  std::string prefix = "delayq";
  /// 0: one key space under `{PREFIX}` (the layout of a store that is not a
  /// cluster store). N (1-16384, URI option `shards=N`): the per-task keys are
  /// split into N key spaces `{PREFIX:s}:tasks`, ... with s = shard_of(id, N),
  /// for a cluster of engines (docs/scale-out.md, "Keys"). Recorded in
  /// `{PREFIX}:meta` when the store is created; opening a store with another
  /// count fails with errc::shard_mismatch.
  std::uint32_t shards = 0;
  /// For moving a store's tasks from one layout to the other (migrate_to_shards()
  /// in open_store.hpp, `delayqctl migrate-shards`): when true, the store opens
  /// the key space `shards` names (0: the unsharded one) whatever shard count
  /// `{PREFIX}:meta` records, and never creates `{PREFIX}:meta` itself (the
  /// layout version is still checked). Not a URI option. Leave it false
  /// otherwise: the shard-count check is what keeps a server without
  /// --cluster and a cluster from sharing one store without seeing each
  /// other's tasks.
  bool ignore_shard_count = false;
};

/// Where and how redis_store connects, and the keys it keeps there: both
/// halves (redis_connection_options, redis_key_layout), each field reached
/// by its own name (`options.host`, `options.prefix`). Usually parsed from a
/// URI:
///
///   redis://[[USER]:PASSWORD@]HOST[:PORT][/DB][?OPTIONS]
///   unix://[[USER]:PASSWORD@]/PATH/TO/SOCKET[?db=N&OPTIONS]
///   redis-cluster://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...][?OPTIONS]
///
/// HOST is a name, an IPv4 address or a bracketed IPv6 address; PORT
/// defaults to 6379 and DB to 0. USER and PASSWORD may be percent-encoded.
/// OPTIONS, joined with '&': `prefix=NAME` (key prefix, default "delayq",
/// characters [A-Za-z0-9._-]), `connect_timeout_ms=N`, `command_timeout_ms=N`,
/// `link_check_ms=N` (0 turns the check off),
/// `shards=N` (1-16384, redis_options::shards), and for unix:// also `db=N`. Anything else is
/// errc::invalid_store_uri.
///
/// redis-cluster:// names seed nodes of a Redis Cluster: the store asks any
/// of them for the slot map (CLUSTER SLOTS) and then talks to the master of
/// each hash slot it uses, following MOVED and ASK (docs/persistence.md,
/// "Redis Cluster"). A cluster has only database 0: a `/DB` path or a `db`
/// option is errc::invalid_store_uri.
///
/// Thread safety: a plain value.
struct redis_options : redis_connection_options, redis_key_layout {
  /// Parses a redis://, unix:// or redis-cluster:// URI; on failure sets `ec` to
  /// errc::invalid_store_uri and, when `message` is not null, says why.
  static redis_options parse(std::string_view uri, boost::system::error_code& ec,
                             std::string* message = nullptr);
  /// Throwing form of parse(): boost::system::system_error with the reason.
  static redis_options parse(std::string_view uri);

  /// The URI without the password (the user is kept), e.g.
  /// "redis://127.0.0.1:6379/0", "unix:///run/redis.sock?db=2&prefix=app" or
  /// "redis-cluster://10.0.0.1:7000,10.0.0.2:7000".
  std::string describe() const;
};

/// What the key space of one prefix holds, layout by layout, as
/// redis_store::inspect_layout() and redis_store::claim_shards() read it:
/// the shard count `{PREFIX}:meta` records and how many records the
/// unsharded layout (`{PREFIX}:tasks`, `{PREFIX}:dead`) still holds. A
/// store a server without --cluster wrote has `shards` 0 and its records
/// there; a store moved to the sharded layout by migrate_to_shards() has
/// `shards` N and none there; N with some there is a move that did not
/// finish.
///
/// Thread safety: a plain value.
struct redis_layout {
  /// `{PREFIX}:meta` exists: a store was opened under the prefix.
  bool created = false;
  /// The shard count `{PREFIX}:meta` records: 0 for an unsharded store, or
  /// when there is none.
  std::uint32_t shards = 0;
  /// Live tasks in `{PREFIX}:tasks` (HLEN: undecodable records count too).
  std::size_t unsharded_tasks = 0;
  /// Dead letters in `{PREFIX}:dead`.
  std::size_t unsharded_dead = 0;

  /// No task and no dead letter in the unsharded layout.
  bool unsharded_empty() const noexcept { return unsharded_tasks == 0 && unsharded_dead == 0; }
};

/// A task_store in Redis: a hash of encoded records plus a sorted set of due
/// times (and the same pair for dead letters), under one Redis Cluster hash
/// tag so every key of a store lives in one slot. Layout and guarantees:
/// docs/persistence.md. Put together from role objects over one connection
/// (delayq/role_store.hpp): the live tasks, dead letters (`{PREFIX}:dead`,
/// `{PREFIX}:dead:by_time`), settings (`{PREFIX}:settings`), sequences
/// (`{PREFIX}:sequences`), schedules, and in the sharded layout
/// (redis_options::shards > 0) the shards; each role's accessor answers it.
///
/// Writes. Every batch of write() and async_write() (and every save(),
/// remove(), bury(), revive() and purge()) is one call of one Lua script
/// (EVALSHA, EVAL when the server lost it), which checks the type of every
/// key the batch touches before it writes anything: a batch lands whole or
/// not at all. write() runs on the store's connection; async_write()
/// pipelines batches on a second connection, up to max_writes_in_flight() at
/// once, and calls `done` in order: on the io_context named to
/// drive_writes_on() (delayq-server names its engine's), else on a private
/// I/O thread.
/// A call returns (or `done` runs) once Redis replied, which with
/// `appendfsync always` is after the batch was fsynced to the AOF.
///
/// The sharded layout (redis_options::shards > 0; docs/scale-out.md). Every
/// per-task key is split into `shards` key spaces `{PREFIX:s}:...`; write()
/// sends one call of the write script per shard touched (pipelined on one
/// server; one shard after another on a Redis Cluster), each atomic, and
/// checks fencing tokens against `{PREFIX:s}:lease` (the shards role,
/// sharded()). When parts of a batch fail: any failure but a stale token,
/// with some part landed (or unknown), is errc::outcome_unknown; otherwise
/// that failure; a stale token with every other part landed is
/// errc::lease_lost. async_write() runs write() on the calling thread
/// (max_writes_in_flight() 1): the pipeline is per slot.
///
/// Connections. When a connection is lost (EOF, reset, I/O error) the next
/// call reconnects; a call that finds its connection had been closed by the
/// server reconnects once and sends again, transparently (a batch run twice
/// leaves the store as if run once). When reconnecting fails, calls fail
/// fast with errc::store_unavailable and the store waits a growing backoff
/// (100 ms doubling up to 5 s) before dialling again. Reconnects are logged
/// at warning level, never with the password. list() reads on a connection
/// of its own, opened for the call.
///
/// Redis Cluster (redis-cluster://). Each of those connections goes to the
/// master of the store's hash slot, found with CLUSTER SLOTS; MOVED and ASK
/// are followed (at most 5 in one call, then errc::store_error), TRYAGAIN
/// and CLUSTERDOWN waited out for up to command_timeout (then
/// errc::store_unavailable), and the write pipeline sends redirected batches
/// again, in order, to the new owner. Limits (one slot per store, no
/// replica reads, writes lost by a failover to a lagging replica):
/// docs/redis-cluster.md.
///
/// Example:
/// \code
///   delayq::redis_store
///   store(delayq::redis_options::parse("redis://10.0.0.5:6379/2?prefix=billing"));
///   store.save(std::span{&t, 1});
///   store.dead_letters()->count_dead(ec);
/// \endcode
///
/// Errors: errc::outcome_unknown when a write got no reply within
/// command_timeout: the batch may or may not have landed, and may still land (the
/// connection is dropped and killed on the server at the next dial);
/// retrying the same changes is safe. errc::store_unavailable when the
/// server cannot be reached, a read does not answer within command_timeout,
/// or the connection is lost and cannot be restored before the request was
/// sent, and for the error replies that mean "not now" (LOADING, BUSY,
/// MASTERDOWN, TRYAGAIN, CLUSTERDOWN); errc::store_error for every other
/// error reply (wrong password, a key of the wrong type, OOM, READONLY, ...)
/// and for a key layout newer than this build. The server's message is
/// logged.
///
/// Thread safety: all members are safe to call from any thread. Calls on the
/// store's connection are serialized by one mutex; async_write() only
/// queues. list() calls its sink without holding any lock of the store, so a
/// sink may call back into the store.
class redis_store final : public role_store {
 public:
  /// How many async_write() batches the pipeline keeps in flight (1 in the
  /// sharded layout, where a batch may span several slots).
  static constexpr std::size_t writes_in_flight = 16;

  /// Connects (AUTH, SELECT, checks the key layout version). Throws
  /// boost::system::system_error.
  explicit redis_store(redis_options options);

  /// Error-code form of the constructor: null and `ec` set on failure; when
  /// `message` is not null it receives the reason.
  static std::unique_ptr<redis_store> open(redis_options options, boost::system::error_code& ec,
                                           std::string* message = nullptr);

  /// Waits for every async_write() batch given to finish (each within
  /// command_timeout; `done` runs for each, exactly once), then closes.
  ~redis_store() override;
  redis_store(const redis_store&) = delete;
  redis_store& operator=(const redis_store&) = delete;

  /// The options the store was opened with.
  const redis_options& options() const noexcept;

  // ---- switching a store to the sharded layout (docs/scale-out.md) --------

  /// Reads `{PREFIX}:meta` and counts the records of the unsharded layout
  /// (redis_layout) in one read-only script on the node of `{PREFIX}`,
  /// without creating anything; `options.shards` is not used. Errors as the
  /// constructor's (errc::store_unavailable, errc::store_error, the latter
  /// also for a key layout version this build does not know).
  static redis_layout inspect_layout(const redis_options& options, boost::system::error_code& ec,
                                     std::string* message = nullptr);

  /// Records `options.shards` (1-16384) in `{PREFIX}:meta` as the store's
  /// shard count, in one script (atomic against every other script on the
  /// store), when the meta key records none (or does not exist) and, with
  /// `only_if_empty`, the unsharded layout holds no record. From then on
  /// the store opens with that count only. Returns the layout as the script
  /// left it: `shards` is options.shards when it was recorded now or before,
  /// else what stopped it (another count recorded, or 0 with records in the
  /// unsharded layout). Moves no record: migrate_to_shards() does that.
  /// Errors as inspect_layout(); errc::invalid_cluster_options when
  /// `options.shards` is 0.
  static redis_layout claim_shards(const redis_options& options, bool only_if_empty,
                                   boost::system::error_code& ec, std::string* message = nullptr);

  /// The version of the key layout this build writes to `{PREFIX}:meta`.
  static constexpr int layout_version = 1;

 private:
  explicit redis_store(std::shared_ptr<detail::redis::backend> backend);

  // What the roles share; owned by role_store (its roles' `backend`), which
  // outlives this pointer.
  detail::redis::backend* backend_;
};

}  // namespace delayq
