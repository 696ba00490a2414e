// delayq/task_listener.hpp - the notices a sharded store sends of saved
// tasks and changed settings (shard_store::listen()).
#pragma once

#include <utility>

#include <boost/system/error_code.hpp>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace delayq {

/// What a task_notice announces.
enum class notice_kind : std::uint8_t {
  task,     ///< A live task was saved: shard, due_ms and id are set.
  setting,  ///< A setting was saved or erased: id is its key (shard, due_ms 0).
};

/// A saved task, or a changed setting, as a sharded store announces it
/// (shard_store::listen()).
struct task_notice {
  std::uint32_t shard = 0;  ///< shard_of(id, shards())
  std::int64_t due_ms = 0;  ///< the saved task's due time, ms since the Unix epoch
  std::string id;           ///< the task's id, or the setting's key
  notice_kind kind = notice_kind::task;
};

/// Receives the notices a sharded store sends for every live task saved
/// (schedule, reschedule, retry, revive) and every setting saved or erased,
/// from any instance: how the owner of a shard learns of a task another
/// instance wrote to it, and every instance of a setting another one changed,
/// without reading the store in a loop. Delivery is best effort (Redis pub/sub): a listener
/// whose connection broke missed what was sent meanwhile, and wait() says so
/// with an error, after which the caller re-reads what it holds.
///
/// Thread safety: wait() from one thread at a time; close() from any thread,
/// also during a wait().
class task_listener {
 public:
  virtual ~task_listener() = default;
  /// Waits up to `timeout` and returns the notices received (none when the
  /// time ran out). errc::store_unavailable when the connection broke (the
  /// next wait() reconnects); errc::not_running after close().
  virtual std::vector<task_notice> wait(std::chrono::milliseconds timeout,
                                        boost::system::error_code& ec) = 0;
  /// Makes a wait() in progress, and every later one, return errc::not_running.
  virtual void close() noexcept = 0;
};

}  // namespace delayq
