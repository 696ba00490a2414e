#include "delayq/error.hpp"

#include <string>

namespace delayq {
namespace {

class category final : public boost::system::error_category {
 public:
  const char* name() const noexcept override { return "delayq"; }

  std::string message(int value) const override {
    switch (static_cast<errc>(value)) {
      case errc::ok: return "success";
      case errc::invalid_type: return "invalid task type (1-128 characters from [A-Za-z0-9._:-])";
      case errc::unknown_type: return "no executor registered for this task type";
      case errc::invalid_id:
        return "invalid task id (1-256 bytes, no spaces or control characters)";
      case errc::invalid_delay: return "invalid delay (negative, or due before the epoch)";
      case errc::due_too_far: return "due time is further away than engine_options::max_delay";
      case errc::payload_too_large: return "payload is larger than engine_options::max_payload";
      case errc::duplicate_id: return "a task with this id is pending (on_conflict::reject)";
      case errc::queue_full: return "engine_options::max_pending tasks are pending already";
      case errc::not_running: return "the engine is not running (not started, or stopped)";
      case errc::store_unavailable: return "the task store cannot be reached";
      case errc::store_error: return "the task store reported an error";
      case errc::corrupt_record: return "a stored record could not be decoded";
      case errc::invalid_store_uri: return "unsupported store URI";
      case errc::already_started: return "the engine was started already";
      case errc::invalid_options: return "invalid engine options";
      case errc::unsupported: return "the task store does not support this operation";
      case errc::outcome_unknown:
        return "the task store did not answer in time: the write may or may not have been applied";
      case errc::busy: return "too many store writes are queued; try again later";
      case errc::type_full: return "the task type holds its most pending tasks already";
      case errc::attempt_ended:
        return "the attempt had ended already (timed out or reported before); the report was "
               "ignored";
      case errc::not_found:
        return "no pending task has this id (unknown, finished, cancelled or dead)";
      case errc::already_triggered:
        return "the task is triggered already (count reached, or due, running or retrying)";
      case errc::not_count_triggered: return "the task was scheduled without a trigger count";
      case errc::invalid_signal: return "a signal must add at least 1";
      case errc::invalid_cluster_options:
        return "invalid cluster options (shards 1-16384, lease 200 ms to 10 min, instance name "
               "up to 128 bytes of printable ASCII without spaces)";
      case errc::lease_lost:
        return "shard lease lost: another instance holds the shard now (fenced write refused)";
      case errc::not_owner: return "the task's shard is held by another instance";
      case errc::shard_mismatch:
        return "the store's shard layout does not match the shard count asked for";
      case errc::invalid_ttr: return "a task's ttr must be 0 to 4294967295 ms";
      case errc::invalid_schedule:
        return "the schedule is invalid (a bad cron expression, time zone, interval, start or "
               "end; check_schedule() says which)";
    }
    return "unknown delayq error " + std::to_string(value);
  }
};

}  // namespace

const boost::system::error_category& delayq_category() noexcept {
  static const category instance;
  return instance;
}

}  // namespace delayq
