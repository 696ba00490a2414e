// The ownership of an engine in a cluster (engine_options::cluster). Several
// engines share a sharded store; each holds leases on some shards
// (shard_leases, renewed by a thread of its own every round) and holds and
// runs only their tasks.
//
// It rides on the horizon pager: a cluster engine always runs with a horizon
// (max_delay when none is set), and "held" means "due by the watermark AND of
// a held shard":
// - a schedule of a task of another shard writes it, then lets go of it
//   (evict_if_far_locked), as of a far task;
// - a shard gained is read in like a page (begin a read, flush the writer,
//   list_due_shards up to the watermark, hold each task unless held or erased
//   meanwhile), so a cancel racing with it stays truthful;
// - a shard lost: its idle records are let go (the new owner reads them from
//   the store); records a write or an attempt is busy with are let go when
//   they settle;
// - the fire path (may_fire_locked) dispatches a due task only while its
//   shard's lease is surely ours (shard_table::valid_token); otherwise it
//   holds it back for a round, after which the shard is renewed (it runs) or
//   lost (it is let go).
// - a shard to give away (another member should own it: lease_round::
//   leaving) is handed over only once no attempt runs on it: no attempt
//   starts on it any more (may_fire_locked holds its tasks back, may_start()
//   withholds the queued ones), and the lease thread keeps it (renew's keep)
//   while busy_shards_locked() names it, then flushes the writer so the
//   outcomes of its last attempts land before the release. Without this the
//   new owner would read a task whose attempt is still running here, or
//   whose removal has not landed, and run it again. The release comes in a
//   round of its own as soon as the shard is idle (settle() wakes the lease
//   thread), not at the next round: the shard's due tasks wait meanwhile.
// - an attempt starts only while its lease is surely ours and still the one
//   it was dispatched under (may_start()): a reference that waited in the
//   ready queue through a stall past the lease does not start after it.
// Calls naming an id of a shard not held answer errc::not_owner.
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "delayq/shard_leases.hpp"
#include "delayq/shard_store.hpp"
#include "delayq/task_store.hpp"
#include "detail/ownership.hpp"
#include "detail/shard_table.hpp"

namespace delayq::detail {

/// Thread safety: as ownership.
class cluster_ownership final : public ownership {
 public:
  cluster_ownership(const engine_options& options, task_store& store, host& h);
  ~cluster_ownership() override;

  bool owns_all() const noexcept override { return false; }
  void start_locked(std::int64_t until, const load_fn& load, list_summary& summary,
                    boost::system::error_code& ec) override;
  void run() override;
  void stop() override;
  void add_stats(engine_stats& s) const override;
  std::string owner_of(std::string_view id) const override;
  std::vector<std::string> members() const override;

  bool check(std::string_view id, boost::system::error_code& ec) const override;
  bool fence_for(std::string_view id, std::uint64_t& fence,
                 boost::system::error_code& ec) const override;
  std::uint64_t token_for(std::string_view id) const noexcept override {
    return shards_ ? shards_->valid_token(id) : 0;
  }
  std::uint64_t held_token(std::string_view id) const noexcept override {
    return shards_ ? shards_->token(shards_->shard(id)) : 0;
  }
  bool owns(std::string_view id) const noexcept override {
    return !shards_ || shards_->held(shards_->shard(id));
  }

  std::uint64_t may_fire_locked(record_id r, std::string_view id,
                                std::chrono::steady_clock::time_point now) override;
  std::chrono::milliseconds hold_back() const noexcept override {
    return std::max(lease_round_, std::chrono::milliseconds{1});
  }
  bool may_start(std::string_view id, std::uint64_t fence) const noexcept override;
  std::uint64_t fence_of_locked(record_id r) const noexcept override;
  std::uint64_t take_fence_locked(record_id r) noexcept override;
  bool attempt_settled_locked(std::string_view id) noexcept override;
  void handover_check() override;

  bool page_by_shard(std::vector<std::uint32_t>& shards) const override;

 private:
  void apply_round(const lease_round& r);
  void set_members(const lease_round& r);  // for owner_of()
  // Under the lock: the shards an attempt started on and has not settled,
  // ascending. Such a shard is not given away.
  std::vector<std::uint32_t> busy_shards_locked() const;
  // Whether a shard in `leaving` (ascending) is still leaving and no attempt
  // runs on it: it can be handed over now. Takes the lock.
  bool idle_leaving(const std::vector<std::uint32_t>& leaving) const;
  // Reads the tasks of `shards` due at or before the watermark into the
  // wheel (as the pager does), all of them together; returns the shards
  // whose read failed (the store could not be read).
  std::vector<std::uint32_t> page_in_shards(const std::vector<std::uint32_t>& shards);
  void lease_loop();
  // The listener thread: holds the tasks other instances save into the
  // held shards (task_store::listen()), as fault_in() would.
  void listen_loop();
  // The shard reader thread: reads the shards queued by queue_shard_reads(),
  // all those queued at once together (page_in_shards). A failed read is
  // queued again at the next lease round (unread_shards_).
  void reader_loop();
  void queue_shard_reads(const std::vector<std::uint32_t>& shards);
  void queue_held_shard_reads();
  void hold_noticed(std::vector<task_notice>& notices);
  // Calls engine_options::on_settings_changed, if any: false when it failed
  // (returned false or threw; a throw is logged), so it is called again.
  bool settings_changed();
  void fail_start();

  const engine_options& options_;
  task_store& store_;
  host& host_;

  // The lease table, its view for the fire path, and the thread that renews
  // the leases every round.
  std::unique_ptr<shard_leases> leases_;
  std::unique_ptr<shard_table> shards_;
  std::chrono::milliseconds lease_round_{0};
  std::thread lease_thread_;
  std::mutex lease_mutex_;
  std::mutex stop_mutex_;  // stop() and ~engine may both stop the cluster
  std::condition_variable lease_cv_;
  bool lease_stop_ = false;
  // Set (under lease_mutex_) when an attempt on a leaving shard settled: the
  // lease thread then hands over at once the shards no attempt runs on any
  // more, rather than at its next round.
  bool handover_check_ = false;
  std::unique_ptr<task_listener> listener_;  // null: the store sends no notices
  std::thread listen_thread_;
  std::vector<std::uint32_t>
      unread_shards_;  // gained, not read yet (the store failed); under lease_mutex_
  // Shards to read in, in order, none twice (under lease_mutex_), and the
  // thread that reads them: a large shard read on the lease thread would
  // hold up the renewals past the leases' valid_until.
  std::deque<std::uint32_t> to_read_;
  std::condition_variable reader_cv_;
  std::thread reader_thread_;
  std::atomic<std::uint64_t> shards_gained_{0}, shards_lost_{0}, lease_rounds_{0};
  // For owner_of(): the live members of the last answered round, sorted,
  // and this instance's name (leases_ goes at stop; these stay).
  mutable std::mutex members_mutex_;
  std::vector<std::string> members_;
  std::string instance_;
  // The token of the shard's lease when a record was dispatched (records of
  // several tables, each under its own lock: so under fences_mutex_ too):
  // its attempt's outcome writes carry it as their fence.
  mutable spin_mutex fences_mutex_;
  std::unordered_map<record_id, std::uint64_t> fences_;
};

}  // namespace delayq::detail
