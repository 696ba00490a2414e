// delayq/shard_store.hpp - the cluster role a task_store may offer: shards,
// their leases and the notices of saved tasks (docs/scale-out.md).
#pragma once

#include <utility>

#include <boost/system/error_code.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "delayq/shard_leases.hpp"
#include "delayq/task.hpp"
#include "delayq/task_listener.hpp"
#include "delayq/task_store.hpp"

namespace delayq {

/// A store that several engines share as a cluster: tasks are split into
/// shards by shard_of(id, shards()), and each engine holds leases on some
/// shards and runs only their tasks.
///
/// A store offers it by deriving from both task_store and shard_store and
/// answering task_store::sharded() with `this`, when it was opened with a
/// sharded layout (redis_store answers null for an unsharded one). An engine
/// with engine_options::cluster refuses to start on a store that answers
/// null (errc::shard_mismatch: it has 0 shards), as on one whose shards()
/// differs from cluster_options::shards.
///
/// In a sharded store task_store::write() is atomic per shard (one shard's
/// changes of a batch land all or nothing), not across shards: a batch that
/// fails after another shard's part landed reports errc::outcome_unknown
/// (write() again: batches are idempotent). A shard's part whose fenced
/// changes (store_change::fence) carry a token the shard's lease no longer
/// carries is refused whole, and write() reports errc::lease_lost once the
/// other shards' parts are applied.
///
/// listen() lives here rather than in task_store or settings_store: its
/// notices name the shard of each saved task, only a sharded store sends
/// them, and only a cluster of engines (the engine's cluster mode and
/// delayq-server --cluster through it) consumes them.
///
/// Thread safety: as the store's (task_store); the engine calls these from
/// its lease and read threads while other threads write.
class shard_store {
 public:
  virtual ~shard_store() = default;

  /// How many shards the store splits tasks into (at least 1). Every engine
  /// of a cluster opens the store with the same count; a store created with
  /// another count refuses to open (errc::shard_mismatch).
  virtual std::uint32_t shards() const noexcept = 0;

  /// A lease table on this store for one instance (`cluster.shards` must
  /// equal shards(): errc::shard_mismatch otherwise).
  virtual std::unique_ptr<shard_leases> make_shard_leases(const cluster_options& cluster,
                                                          boost::system::error_code& ec) = 0;

  /// task_store::list_due() over one shard: the same contract, for the tasks
  /// with shard_of(id, shards()) == shard only (errc::shard_mismatch when
  /// `shard` is not below shards()).
  virtual list_summary list_due_shard(std::uint32_t shard, due_cursor& after, std::int64_t until_ms,
                                      std::size_t limit, const std::function<void(task&&)>& sink,
                                      boost::system::error_code& ec) = 0;

  /// list_due_shard() for several shards at once, in one round trip where
  /// the store can: what an engine reads when it takes over shards, so
  /// that a slow store link costs one round trip for all of them, not one
  /// each. `after[i]` is `shards[i]`'s cursor, advanced as list_due_shard()
  /// advances it; `sink(i, t)` gets `shards[i]`'s tasks; element i of the
  /// result is `shards[i]`'s summary. An error fails the whole call (`ec`
  /// set, an empty result; the cursors and what the sink got are then not
  /// to be relied on). Default: list_due_shard() for each shard in turn.
  virtual std::vector<list_summary> list_due_shards(
      std::span<const std::uint32_t> shards, std::span<due_cursor> after, std::int64_t until_ms,
      std::size_t limit, const std::function<void(std::size_t, task&&)>& sink,
      boost::system::error_code& ec) {
    ec = {};
    std::vector<list_summary> out;
    out.reserve(shards.size());
    for (std::size_t i = 0; i < shards.size() && i < after.size(); ++i) {
      out.push_back(list_due_shard(
          shards[i], after[i], until_ms, limit, [&](task&& t) { sink(i, std::move(t)); }, ec));
      if (ec) return {};
    }
    return out;
  }

  /// A listener for the notices of saved tasks and changed settings
  /// (task_listener), on a connection of its own. Optional even here: the
  /// default answers null and errc::unsupported, and the engine then reads
  /// its held shards again every lease round instead.
  virtual std::unique_ptr<task_listener> listen(boost::system::error_code& ec) {
    ec = errc::unsupported;
    return nullptr;
  }
};

}  // namespace delayq
