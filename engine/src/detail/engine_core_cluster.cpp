// engine_core: clusters (engine_options::cluster). Several engines share a
// sharded store; each holds leases on some shards (shard_leases, renewed by a
// thread of its own every round) and holds and runs only their tasks.
//
// It rides on the horizon's machinery (engine_core_horizon.cpp): a cluster
// engine always runs with a horizon (max_delay when none is set), and "held"
// means "due by the watermark AND of a held shard":
// - a schedule of a task of another shard writes it, then lets go of it
//   (evict_if_far_locked), as of a far task;
// - a shard gained is read in like a page (begin a read, flush the writer,
//   list_due_shard up to the watermark, hold each task unless held or erased
//   meanwhile), so a cancel racing with it stays truthful;
// - a shard lost: its idle records are let go (the new owner reads them from
//   the store); records a write or an attempt is busy with are let go when
//   they settle;
// - the fire path (on_tick) dispatches a due task only while its shard's
//   lease is surely ours (shard_table::valid_token); otherwise it holds it
//   back for a round, after which the shard is renewed (it runs) or lost
//   (it is let go).
// - a shard to give away (another member should own it: lease_round::
//   leaving) is handed over only once no attempt runs on it: no attempt
//   starts on it any more (on_tick holds its tasks back, may_start()
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
#include <algorithm>

#include "delayq/log.hpp"
#include "detail/engine_core.hpp"
#include "detail/task_state.hpp"

namespace delayq::detail {
namespace {

namespace tsw = task_state_word;
constexpr std::size_t shard_page = 1000;

}  // namespace

bool engine_core::may_start(const ready_ref& r) const noexcept {
  if (!cluster_on()) return true;
  const std::uint32_t s = shards_->shard(r.v.id());
  return r.fence != 0 && shards_->valid_token(s, shard_table::clock::now()) == r.fence &&
         !shards_->leaving(s);
}

std::vector<std::uint32_t> engine_core::busy_shards_locked() const {
  std::vector<bool> busy(shards_->size(), false);
  // fences_ also names references still queued: they never start on a
  // leaving or lost shard (may_start()), so only started attempts count.
  for (const auto& [h, token] : fences_)
    if (tsw::state_of(tag(h)) == tsw::running) busy[shards_->shard(wheel_.id(h))] = true;
  std::vector<std::uint32_t> out;
  for (std::uint32_t s = 0; s < busy.size(); ++s)
    if (busy[s]) out.push_back(s);
  return out;
}

bool engine_core::idle_leaving(const std::vector<std::uint32_t>& leaving) const {
  if (leaving.empty()) return false;
  std::lock_guard lock(mutex_);
  const std::vector<std::uint32_t> busy = busy_shards_locked();
  return std::any_of(leaving.begin(), leaving.end(), [&](std::uint32_t s) {
    return shards_->leaving(s) && !std::binary_search(busy.begin(), busy.end(), s);
  });
}

void engine_core::note_leaving_settled() {
  {
    std::lock_guard lock(lease_mutex_);
    handover_check_ = true;
  }
  lease_cv_.notify_all();
}

bool engine_core::owner_check(std::string_view id, boost::system::error_code& ec) const {
  if (!cluster_on() || shards_->valid_token(id) != 0) return true;
  ec = errc::not_owner;
  return false;
}

std::string engine_core::owner_of(std::string_view id) const {
  if (!cluster_on()) return {};
  const std::uint32_t s = shards_->shard(id);
  std::lock_guard lock(members_mutex_);
  if (shards_->valid_token(s, shard_table::clock::now()) != 0) return instance_;
  const std::size_t i = rendezvous_owner(s, members_);
  return i < members_.size() ? members_[i] : std::string{};
}

std::vector<std::string> engine_core::members() const {
  std::lock_guard lock(members_mutex_);
  return members_;
}

void engine_core::set_members(const lease_round& r) {
  // A failed round names no members: the last known stay.
  if (r.members.empty()) return;
  std::lock_guard lock(members_mutex_);
  if (instance_.empty()) instance_ = leases_->options().instance;
  if (members_ != r.members) members_ = r.members;
}

void engine_core::start_cluster_locked(std::int64_t until, const std::function<void(task&&)>& load,
                                       list_summary& summary, boost::system::error_code& ec) {
  const cluster_options& c = *options_.cluster;
  shard_store* const sharded = store_->sharded();  // null: one key space, 0 shards
  if ((sharded ? sharded->shards() : 0) != c.shards) {
    log(log_level::error, "start: " + store_->describe() + " has " +
                              std::to_string(sharded ? sharded->shards() : 0) +
                              " shards, the cluster " + std::to_string(c.shards));
    ec = errc::shard_mismatch;
    return;
  }
  leases_ = sharded->make_shard_leases(c, ec);
  if (ec || !leases_) {
    if (!ec) ec = errc::unsupported;
    leases_.reset();
    return;
  }
  shards_ = std::make_unique<shard_table>(c.shards);
  // Subscribed before the shards are read: a task another instance saves into
  // one of them after its read is then noticed (a notice of a task the read
  // found too is harmless: held ids are skipped).
  listener_ = sharded->listen(ec);
  if (ec) {
    log(log_level::warning, "cluster: " + store_->describe() +
                                " sends no notices of saved tasks (" + ec.message() +
                                "); re-reading the held shards every round instead");
    listener_.reset();
    ec = {};
  }
  const lease_round r = leases_->renew(ec);
  if (ec) {
    boost::system::error_code rec;
    leases_->release_all(rec);
    leases_.reset();
    shards_.reset();
    return;
  }
  // The cadence rounds keep (the lease table may ask for an earlier one when
  // a member lapses): held-back tasks wait this long, a failed round is
  // tried again after it.
  lease_round_ = std::max(std::chrono::milliseconds{1}, c.lease / 3);
  for (const shard_lease& l : r.held) shards_->set(l);
  set_members(r);
  shards_gained_ += r.held.size();
  // Every held shard's tasks due by `until`, one shard after the other.
  for (const shard_lease& l : r.held) {
    due_cursor cursor;
    for (;;) {
      const list_summary page = sharded->list_due_shard(l.shard, cursor, until, 10'000, load, ec);
      if (ec) break;
      summary.tasks += page.tasks;
      summary.quarantined += page.quarantined;
      if (page.tasks + page.quarantined < 10'000) break;
    }
    if (ec) break;
  }
  if (ec) {
    boost::system::error_code rec;
    leases_->release_all(rec);
    leases_.reset();
    shards_.reset();
    return;
  }
  dispatcher_.check_starts();
  log(log_level::info, "cluster: instance " + leases_->options().instance + " holds " +
                           std::to_string(r.held.size()) + " of " + std::to_string(c.shards) +
                           " shards (" + std::to_string(r.members.size()) + " members)");
}

void engine_core::apply_round(const lease_round& r) {
  set_members(r);
  std::vector<std::uint32_t> gained;
  {
    std::lock_guard lock(mutex_);
    for (std::uint32_t s : r.lost) shards_->clear(s);
    shards_lost_ += r.lost.size();
    shards_gained_ += r.gained.size();
    // Before the held leases are set again: a shard lost and taken again in
    // this round (a new token; another instance may have held it between)
    // is let go of too, and read afresh below, so no stale copy of a task
    // the other instance cancelled or ran stays here.
    if (!r.lost.empty()) {
      // Let go of the lost shards' idle records: the new owner runs them from
      // the store. A record a write or an attempt is busy with is let go when
      // it settles (evict_if_far_locked), a pinned one when its call decides.
      std::vector<timer_wheel::handle> drop;
      wheel_.for_each([&](timer_wheel::handle h) {
        if (wheel_.is_indexed(h) && !shards_->held(shards_->shard(wheel_.id(h)))) drop.push_back(h);
      });
      for (timer_wheel::handle h : drop) evict_if_far_locked(h);
    }
    for (const shard_lease& l : r.held) shards_->set(l);
    // Handing over: no attempt starts on a leaving shard from now on. A
    // failed round says nothing about leaving: the flags stay as they were.
    if (!r.members.empty())
      for (const shard_lease& l : r.held)
        shards_->set_leaving(l.shard,
                             std::binary_search(r.leaving.begin(), r.leaving.end(), l.shard));
  }
  for (std::uint32_t s : r.lost) log(log_level::info, "cluster: lost shard " + std::to_string(s));
  // A shard lost and taken again in one round (a new token) is read afresh.
  // The reads run on the reader thread: this one must be back for the next
  // round in time, however large the shards.
  gained = r.gained;
  {
    std::lock_guard lock(lease_mutex_);
    for (std::uint32_t s : unread_shards_)
      if (std::find(gained.begin(), gained.end(), s) == gained.end()) gained.push_back(s);
    unread_shards_.clear();
  }
  queue_shard_reads(gained);
}

void engine_core::queue_shard_reads(const std::vector<std::uint32_t>& shards) {
  if (shards.empty()) return;
  {
    std::lock_guard lock(lease_mutex_);
    for (std::uint32_t s : shards)
      if (std::find(to_read_.begin(), to_read_.end(), s) == to_read_.end()) to_read_.push_back(s);
  }
  reader_cv_.notify_one();
}

void engine_core::queue_held_shard_reads() {
  std::vector<std::uint32_t> held;
  for (std::uint32_t s = 0; s < shards_->size(); ++s)
    if (shards_->held(s)) held.push_back(s);
  queue_shard_reads(held);
}

void engine_core::reader_loop() {
  for (;;) {
    std::uint32_t s = 0;
    {
      std::unique_lock lock(lease_mutex_);
      reader_cv_.wait(lock, [&] { return lease_stop_ || !to_read_.empty(); });
      if (lease_stop_) return;
      s = to_read_.front();
      to_read_.pop_front();
    }
    // Lost meanwhile: its new owner reads it.
    if (!shards_->held(s) || page_in_shard(s)) continue;
    std::lock_guard lock(lease_mutex_);
    if (std::find(unread_shards_.begin(), unread_shards_.end(), s) == unread_shards_.end())
      unread_shards_.push_back(s);
  }
}

bool engine_core::page_in_shard(std::uint32_t s) {
  std::int64_t until = 0;
  std::uint64_t seq = 0;
  std::uint64_t token = 0;
  {
    std::lock_guard lock(mutex_);
    if (state_.load() != run_state::running) return true;
    until = watermark_;
    seq = begin_read_locked();
    token = shards_->token(s);
  }
  // Writes queued before the read began (a schedule of this shard that was
  // let go while another instance held it) land first.
  writer_.flush();
  due_cursor cursor;
  std::vector<task> page;
  rejected_tasks rejected;
  boost::system::error_code ec;
  for (;;) {
    page.clear();
    list_summary got;
    try {
      got = store_->sharded()->list_due_shard(
          s, cursor, until, shard_page, [&](task&& t) { page.push_back(std::move(t)); }, ec);
    } catch (const std::exception&) {
      ec = errc::store_error;
    }
    if (ec) break;
    bool stale = false;
    {
      std::lock_guard lock(mutex_);
      // Lost and taken again since the read began (this thread reads while
      // the lease thread runs rounds): the page may hold tasks another
      // instance ran or cancelled meanwhile, and the regain queued a fresh
      // read of the shard. Nothing of this one is held.
      stale = shards_->token(s) != token;
      if (!stale) {
        quarantined_ += got.quarantined;
        const std::int64_t now = now_ms();
        for (const task& t : page) hold_read_locked(t, seq, now, rejected);
      }
    }
    if (stale) break;
    if (got.tasks + got.quarantined < shard_page) break;
    if (state_.load() != run_state::running) break;  // stopping: no use reading on
  }
  {
    std::lock_guard lock(mutex_);
    end_read_locked(seq);
  }
  quarantine_rejected(rejected);
  if (ec) {
    log(log_level::warning, "cluster: reading shard " + std::to_string(s) + " from " +
                                store_->describe() + " failed: " + ec.message() +
                                "; retrying next round");
    return false;
  }
  return true;
}

void engine_core::lease_loop() {
  using steady = std::chrono::steady_clock;
  auto next = steady::now() + lease_round_;
  for (;;) {
    // Woken before the round is due when an attempt on a leaving shard
    // settled: a round runs at once if that shard can go now (below).
    bool early = false;
    {
      std::unique_lock lock(lease_mutex_);
      lease_cv_.wait_until(lock, next, [&] { return lease_stop_ || handover_check_; });
      if (lease_stop_) return;
      early = handover_check_ && steady::now() < next;
      handover_check_ = false;
    }
    // Every held shard is kept but the leaving ones no attempt is busy with:
    // those are handed over this round, once what their last attempts wrote
    // has landed (the new owner reads the shard from the store).
    std::vector<std::uint32_t> keep;
    std::vector<std::uint32_t> handed;  // the shards that go this round
    // A kept write (a removal that failed and waits for its retry) may be
    // one of a leaving shard's last outcomes, and flush() does not wait for
    // kept writes: no shard leaves until none is kept.
    const bool writes_kept = writer_.kept() > 0;
    {
      std::lock_guard lock(mutex_);
      const std::vector<std::uint32_t> busy = busy_shards_locked();
      for (std::uint32_t s = 0; s < shards_->size(); ++s) {
        if (!shards_->held(s)) continue;
        if (shards_->leaving(s) && !writes_kept && !std::binary_search(busy.begin(), busy.end(), s))
          handed.push_back(s);
        else
          keep.push_back(s);
      }
    }
    if (early && handed.empty()) continue;  // the shards still have attempts: not yet
    if (!handed.empty()) {
      writer_.flush();
      // A write the flush waited for may have failed, and be kept now: the
      // shards stay until it lands.
      if (writer_.kept() > 0) {
        keep.insert(keep.end(), handed.begin(), handed.end());
        std::sort(keep.begin(), keep.end());
      }
    }
    boost::system::error_code ec;
    lease_round r;
    bool threw = false;
    try {
      r = leases_->renew(keep, ec);
    } catch (const std::exception& e) {
      log(log_level::error, std::string("cluster: a lease round failed: ") + e.what());
      ec = errc::store_error;
      threw = true;
    }
    if (ec) log(log_level::warning, "cluster: a lease round failed: " + ec.message());
    const auto returned = steady::now();
    apply_round(r);
    lease_rounds_.fetch_add(1, std::memory_order_relaxed);
    if (!listener_) {
      // No notices: what other instances saved into our shards is found by
      // reading the held shards again, every round, and settings likewise.
      queue_held_shard_reads();
      settings_changed();  // called again next round whatever it returns
    }
    // next_round_in counts from the round's answer: lease/3 after the round
    // began, or sooner when another member's heartbeat lapses first (the
    // takeover of a stalled or dead member's shards). 0: a round that took
    // lease/3 or more; the next runs at once (waiting another lease/3 would
    // let our leases lapse between heartbeats). A round that threw says
    // nothing: try again after lease/3 (the leases still held are kept until
    // their valid_until only).
    next = returned + (threw ? lease_round_ : r.next_round_in);
    // A shard reported leaving that no attempt runs on goes now, in a round of
    // its own, not at the next one: its due tasks are held back from this
    // round until its next owner has read it, so each round waited here would
    // make them that much later (a stalled instance that resumed gets its
    // shards back this way). Not while a write is kept: no shard leaves then.
    if (!r.leaving.empty() && writer_.kept() == 0 && idle_leaving(r.leaving)) next = steady::now();
  }
}

void engine_core::listen_loop() {
  bool resync = false;
  // The listener subscribed in start(), after the application read its
  // settings: a change in between was not noticed, so reread them once.
  // Also set while a reread failed: it is tried again at most once a second
  // (a store that cannot answer would otherwise hold up every batch of task
  // notices by its timeout), and every settings_backstop, since notices are
  // best effort (a PUBLISH lost after its change landed).
  using steady = std::chrono::steady_clock;
  constexpr std::chrono::seconds settings_retry{1};
  constexpr std::chrono::seconds settings_backstop{60};
  bool settings_stale = true;
  auto settings_read_at = steady::now();
  auto settings_retry_at = steady::time_point::min();  // min: at once
  const auto settings_changed_elsewhere = [&] {
    settings_stale = true;
    settings_retry_at = steady::time_point::min();
  };
  for (;;) {
    boost::system::error_code ec;
    std::vector<task_notice> notices;
    try {
      notices = listener_->wait(std::chrono::milliseconds{1000}, ec);
    } catch (const std::exception&) {
      ec = errc::store_error;
    }
    if (ec == errc::not_running) return;
    if (ec) {
      // Notices may have been missed while the connection was down: once it
      // is back (subscribed again), read the held shards and the settings
      // again (up to the watermark).
      if (!resync)
        log(log_level::warning, "cluster: listening for saved tasks failed: " + ec.message());
      resync = true;
      settings_changed_elsewhere();
      std::unique_lock lock(lease_mutex_);
      if (lease_cv_.wait_for(lock, std::chrono::milliseconds{200}, [&] { return lease_stop_; }))
        return;
      continue;
    }
    if (resync) {
      // A read that fails is queued again at the next lease round.
      resync = false;
      queue_held_shard_reads();
    }
    // Setting notices are not tasks: one call for the batch, then the tasks.
    const auto settings_end =
        std::partition(notices.begin(), notices.end(),
                       [](const task_notice& n) { return n.kind == notice_kind::setting; });
    if (settings_end != notices.begin()) {
      notices.erase(notices.begin(), settings_end);
      settings_changed_elsewhere();
    }
    const auto now = steady::now();
    if (now - settings_read_at >= settings_backstop) settings_stale = true;
    if (settings_stale && now >= settings_retry_at) {
      settings_stale = !settings_changed();
      settings_read_at = now;
      settings_retry_at = now + settings_retry;
    }
    if (!notices.empty()) hold_noticed(notices);
  }
}

bool engine_core::settings_changed() {
  if (!options_.on_settings_changed) return true;
  try {
    return options_.on_settings_changed();
  } catch (const std::exception& e) {
    log(log_level::error, std::string("cluster: on_settings_changed threw: ") + e.what());
  } catch (...) {
    log(log_level::error, "cluster: on_settings_changed threw");
  }
  return false;
}

void engine_core::hold_noticed(std::vector<task_notice>& notices) {
  std::vector<std::string> ids;
  std::uint64_t seq = 0;
  {
    std::lock_guard lock(mutex_);
    if (state_.load() != run_state::running) return;
    for (task_notice& n : notices)
      if (n.shard < shards_->size() && shards_->held(n.shard) && n.due_ms <= watermark_ &&
          wheel_.find(n.id) == timer_wheel::npos)
        ids.push_back(std::move(n.id));
    if (ids.empty()) return;
    seq = begin_read_locked();
  }
  // As fault_in(): writes queued before the read (the removal of a task that
  // just ran here) land first, and an id erased meanwhile is not held again.
  writer_.flush();
  boost::system::error_code ec;
  std::vector<std::optional<task>> found;
  try {
    found = store_->find(ids, ec);
  } catch (const std::exception&) {
    ec = errc::store_error;
  }
  rejected_tasks rejected;
  {
    std::lock_guard lock(mutex_);
    if (!ec) {
      const std::int64_t now = now_ms();
      for (std::optional<task>& t : found)
        if (t && to_epoch_ms(t->due) <= watermark_) hold_read_locked(*t, seq, now, rejected);
    }
    end_read_locked(seq);
  }
  quarantine_rejected(rejected);
  if (ec) {
    // The tasks are in the store: read the shards again once it answers.
    log(log_level::warning, "cluster: reading noticed tasks failed: " + ec.message());
    std::lock_guard lock(lease_mutex_);
    for (const std::string& id : ids) {
      const std::uint32_t s = shards_->shard(id);
      if (std::find(unread_shards_.begin(), unread_shards_.end(), s) == unread_shards_.end())
        unread_shards_.push_back(s);
    }
  }
}

void engine_core::stop_cluster() {
  std::lock_guard stopping(cluster_stop_mutex_);  // one joins the threads, the next finds none
  {
    std::lock_guard lock(lease_mutex_);
    lease_stop_ = true;
  }
  lease_cv_.notify_all();
  reader_cv_.notify_all();
  if (listener_) listener_->close();
  if (listen_thread_.joinable()) listen_thread_.join();
  if (lease_thread_.joinable()) lease_thread_.join();
  if (reader_thread_.joinable()) reader_thread_.join();
  if (!leases_) return;
  // A stop whose drain timed out leaves attempts running: their shards are
  // not released (the others would run those tasks beside them) but left
  // to expire after one lease.
  std::vector<std::uint32_t> busy;
  {
    std::lock_guard lock(mutex_);
    busy = busy_shards_locked();
  }
  // Outcomes settled since stop()'s flush land before the release.
  writer_.flush();
  if (!busy.empty())
    log(log_level::warning, "cluster: " + std::to_string(busy.size()) +
                                " shards still have attempts running: their leases are left to "
                                "expire rather than released");
  boost::system::error_code ec;
  try {
    leases_->release_all(busy, ec);
  } catch (const std::exception&) {
    ec = errc::store_error;
  }
  if (ec)
    log(log_level::warning,
        "cluster: releasing the leases failed (they expire after one lease): " + ec.message());
  std::lock_guard lock(mutex_);
  for (std::uint32_t s = 0; s < shards_->size(); ++s) shards_->clear(s);
  leases_.reset();
}

}  // namespace delayq::detail
