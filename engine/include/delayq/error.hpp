// delayq/error.hpp - error codes of the delayq engine and its stores.
#pragma once

#include "delayq/detail/boost_cxx20.hpp"  // first: Boost 1.74 + C++20

#include <boost/system/error_code.hpp>
#include <boost/system/system_error.hpp>
#include <type_traits>

namespace delayq {

/// Every error the engine and its stores report. Values are stable: they are
/// part of the API and may be logged or compared by number.
enum class errc {
  ok = 0,
  /// The task type is empty, too long, or has characters outside
  /// [A-Za-z0-9._:-].
  invalid_type = 1,
  /// No executor is registered for the task type (and the engine was not
  /// told to accept unregistered types).
  unknown_type = 2,
  /// The task id is too long or has control characters or spaces.
  invalid_id = 3,
  /// A negative delay, or a due time before the epoch.
  invalid_delay = 4,
  /// The due time is further away than engine_options::max_delay.
  due_too_far = 5,
  /// The payload is larger than engine_options::max_payload.
  payload_too_large = 6,
  /// A task with this id is pending and the call asked on_conflict::reject.
  duplicate_id = 7,
  /// engine_options::max_pending tasks are pending already.
  queue_full = 8,
  /// The engine is not running: start() was not called, or stop() was.
  not_running = 9,
  /// The store cannot be reached (connection refused, timed out, lost).
  store_unavailable = 10,
  /// The store answered with an error (disk full, wrong type, bad schema).
  store_error = 11,
  /// A stored record could not be decoded (corrupt, truncated, unknown
  /// version). It is quarantined, never deleted.
  corrupt_record = 12,
  /// A store URI that open_store() does not understand.
  invalid_store_uri = 13,
  /// start() was called twice.
  already_started = 14,
  /// The engine options are inconsistent (zero tick, zero slots, ...).
  invalid_options = 15,
  /// The store does not implement this operation (a custom store that
  /// predates dead letters, for instance).
  unsupported = 16,
  /// The store did not answer in time: the write may or may not have been
  /// applied, and may still be applied later. Nothing was kept in memory;
  /// retrying the same call with the same caller-given id is safe
  /// (on_conflict::keep or replace). See docs/persistence.md.
  outcome_unknown = 17,
  /// Too many store writes are queued and not yet sent
  /// (engine_options::max_queued_writes); try again later.
  busy = 18,
  /// The task type holds its most pending tasks already
  /// (engine_options::type_capacity).
  type_full = 19,
  /// An asynchronous attempt reported its end after it had ended already
  /// (its timeout passed first, or it was reported before); the report was
  /// ignored. See attempt_completion.
  attempt_ended = 20,
  /// No pending task has this id: it never existed, or it finished, was
  /// cancelled or became a dead letter (engine::signal()).
  not_found = 21,
  /// The task's trigger count was reached already, or it is due, running or
  /// retrying: a signal changes nothing any more (engine::signal()).
  already_triggered = 22,
  /// The task was scheduled without a trigger count, so signals mean nothing
  /// to it (engine::signal()).
  not_count_triggered = 23,
  /// A signal of 0 (engine::signal() takes n >= 1).
  invalid_signal = 24,
  /// cluster_options out of range: shards not 1-16384, a lease not 200 ms
  /// to 10 min, or an instance name not 1-128 bytes of printable ASCII
  /// without spaces (delayq/shard_leases.hpp).
  invalid_cluster_options = 25,
  /// A write fenced by a shard lease token (store_change::fence) that the
  /// shard's lease no longer carries: another instance took the shard.
  /// Nothing of that shard's part of the batch was written.
  lease_lost = 26,
  /// A call named a task of a shard this instance does not hold a lease on
  /// (engine_options::cluster); the instance that holds it can answer.
  not_owner = 27,
  /// The store's key layout does not match the shard count asked for (a
  /// store opened with another `shards` than the one it was created with).
  shard_mismatch = 28,
  /// A task's ttr (schedule_options::ttr) below 0 or above 2^32 - 1 ms.
  invalid_ttr = 29,
  /// A recurring schedule that cannot be: a bad cron expression, time zone,
  /// interval, start or end (check_schedule() says which field and why).
  invalid_schedule = 30,
};

/// The category of delayq::errc. Thread-safe: a stateless singleton.
const boost::system::error_category& delayq_category() noexcept;

inline boost::system::error_code make_error_code(errc e) noexcept {
  return {static_cast<int>(e), delayq_category()};
}

namespace detail {
/// Throws boost::system::system_error when ec is set; the shared tail of every
/// throwing overload.
inline void throw_if(const boost::system::error_code& ec, const char* what) {
  if (ec) throw boost::system::system_error(ec, what);
}
}  // namespace detail

}  // namespace delayq

namespace boost::system {
template <>
struct is_error_code_enum<delayq::errc> : std::true_type {};
}  // namespace boost::system
