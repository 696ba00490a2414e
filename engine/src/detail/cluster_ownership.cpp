// cluster_ownership: the lease rounds, the shard reads and the store's
// notices of an engine in a cluster (cluster_ownership.hpp explains how it
// rides on the horizon pager).
#include "detail/cluster_ownership.hpp"

#include <algorithm>

#include "delayq/log.hpp"
#include "detail/validation.hpp"

namespace delayq::detail {
namespace {

constexpr std::size_t shard_page = 1000;

}  // namespace

std::unique_ptr<ownership> make_ownership(const engine_options& options, task_store& store,
                                          ownership::host& host) {
  if (options.cluster) return std::make_unique<cluster_ownership>(options, store, host);
  return std::make_unique<single_node_ownership>();
}

cluster_ownership::cluster_ownership(const engine_options& options, task_store& store, host& h)
    : options_(options), store_(store), host_(h) {}

cluster_ownership::~cluster_ownership() { stop(); }

void cluster_ownership::run() {
  if (!shards_) return;
  if (!lease_thread_.joinable()) lease_thread_ = std::thread([this] { lease_loop(); });
  if (!reader_thread_.joinable()) reader_thread_ = std::thread([this] { reader_loop(); });
  if (listener_ && !listen_thread_.joinable())
    listen_thread_ = std::thread([this] { listen_loop(); });
}

void cluster_ownership::add_stats(engine_stats& s) const {
  if (shards_) {
    s.shards_held = shards_->held_count();
    s.shards_leaving = shards_->leaving_count();
  }
  s.shards_gained = shards_gained_.load(std::memory_order_relaxed);
  s.shards_lost = shards_lost_.load(std::memory_order_relaxed);
  s.lease_rounds = lease_rounds_.load(std::memory_order_relaxed);
}

bool cluster_ownership::fence_for(std::string_view id, std::uint64_t& fence,
                                  boost::system::error_code& ec) const {
  fence = shards_ ? shards_->valid_token(id) : 0;
  if (!shards_ || fence != 0) return true;
  ec = errc::not_owner;
  return false;
}

std::uint64_t cluster_ownership::may_fire_locked(record_id r, std::string_view id,
                                                 std::chrono::steady_clock::time_point now) {
  if (!shards_) return 1;
  const std::uint32_t s = shards_->shard(id);
  const std::uint64_t token = shards_->valid_token(s, now);
  // Not surely ours now, or being handed over: the next round decides.
  if (token == 0 || shards_->leaving(s)) return 0;
  std::lock_guard lock(fences_mutex_);
  fences_[r] = token;  // its outcome writes carry it (settle)
  return token;
}

std::uint64_t cluster_ownership::fence_of_locked(record_id r) const noexcept {
  std::lock_guard lock(fences_mutex_);
  if (fences_.empty()) return 0;
  const auto it = fences_.find(r);
  return it == fences_.end() ? 0 : it->second;
}

std::uint64_t cluster_ownership::take_fence_locked(record_id r) noexcept {
  std::lock_guard lock(fences_mutex_);
  if (fences_.empty()) return 0;
  const auto it = fences_.find(r);
  if (it == fences_.end()) return 0;
  const std::uint64_t fence = it->second;
  fences_.erase(it);
  return fence;
}

bool cluster_ownership::attempt_settled_locked(std::string_view id) noexcept {
  // The last attempt on a shard being handed over may be this one: the lease
  // thread looks again now rather than at its next round.
  return shards_ && shards_->leaving_count() != 0 && shards_->leaving(shards_->shard(id));
}

bool cluster_ownership::page_by_shard(std::vector<std::uint32_t>& shards) const {
  // A shard gained after this list was taken is read whole by its gain
  // (which sees the new watermark: the lease thread reads it after setting
  // the shard).
  if (!shards_) return false;
  for (std::uint32_t s = 0; s < shards_->size(); ++s)
    if (shards_->held(s)) shards.push_back(s);
  return true;
}

bool cluster_ownership::may_start(std::string_view id, std::uint64_t fence) const noexcept {
  if (!shards_) return true;
  const std::uint32_t s = shards_->shard(id);
  return fence != 0 && shards_->valid_token(s, shard_table::clock::now()) == fence &&
         !shards_->leaving(s);
}

std::vector<std::uint32_t> cluster_ownership::busy_shards_locked() const {
  std::vector<bool> busy(shards_->size(), false);
  // fences_ also names references still queued: they never start on a
  // leaving or lost shard (may_start()), so only started attempts count.
  std::lock_guard lock(fences_mutex_);
  for (const auto& [r, token] : fences_) {
    const std::string_view id = host_.running_id_locked(r);
    if (!id.empty()) busy[shards_->shard(id)] = true;
  }
  std::vector<std::uint32_t> out;
  for (std::uint32_t s = 0; s < busy.size(); ++s)
    if (busy[s]) out.push_back(s);
  return out;
}

bool cluster_ownership::idle_leaving(const std::vector<std::uint32_t>& leaving) const {
  if (leaving.empty()) return false;
  std::lock_guard lock(host_.mutex());
  const std::vector<std::uint32_t> busy = busy_shards_locked();
  return std::any_of(leaving.begin(), leaving.end(), [&](std::uint32_t s) {
    return shards_->leaving(s) && !std::binary_search(busy.begin(), busy.end(), s);
  });
}

void cluster_ownership::handover_check() {
  {
    std::lock_guard lock(lease_mutex_);
    handover_check_ = true;
  }
  lease_cv_.notify_all();
}

bool cluster_ownership::check(std::string_view id, boost::system::error_code& ec) const {
  if (!shards_ || shards_->valid_token(id) != 0) return true;
  ec = errc::not_owner;
  return false;
}

std::string cluster_ownership::owner_of(std::string_view id) const {
  if (!shards_) return {};
  const std::uint32_t s = shards_->shard(id);
  std::lock_guard lock(members_mutex_);
  if (shards_->valid_token(s, shard_table::clock::now()) != 0) return instance_;
  const std::size_t i = rendezvous_owner(s, members_);
  return i < members_.size() ? members_[i] : std::string{};
}

std::vector<std::string> cluster_ownership::members() const {
  std::lock_guard lock(members_mutex_);
  return members_;
}

void cluster_ownership::set_members(const lease_round& r) {
  // A failed round names no members: the last known stay.
  if (r.members.empty()) return;
  std::lock_guard lock(members_mutex_);
  if (instance_.empty()) instance_ = leases_->options().instance;
  if (members_ != r.members) members_ = r.members;
}

void cluster_ownership::start_locked(std::int64_t until, const load_fn& load, list_summary& summary,
                                     boost::system::error_code& ec) {
  const cluster_options& c = *options_.cluster;
  std::string why;
  c.validate(ec, &why);
  if (ec) {
    log(log_level::error, "start: engine_options::cluster: " + why);
    return;
  }
  shard_store* const sharded = store_.sharded();  // null: one key space, 0 shards
  if ((sharded ? sharded->shards() : 0) != c.shards) {
    log(log_level::error, "start: " + store_.describe() + " has " +
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
    log(log_level::warning, "cluster: " + store_.describe() + " sends no notices of saved tasks (" +
                                ec.message() + "); re-reading the held shards every round instead");
    listener_.reset();
    ec = {};
  }
  // A start that fails after the first lease round lets go of what it won
  // (the other members need not wait for the leases to expire).
  const auto give_up = [this] {
    boost::system::error_code ignored;
    leases_->release_all(ignored);
    leases_.reset();
    shards_.reset();
  };
  const lease_round r = leases_->renew(ec);
  if (ec) {
    give_up();
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
    give_up();
    return;
  }
  host_.check_starts();
  log(log_level::info, "cluster: instance " + leases_->options().instance + " holds " +
                           std::to_string(r.held.size()) + " of " + std::to_string(c.shards) +
                           " shards (" + std::to_string(r.members.size()) + " members)");
}

void cluster_ownership::apply_round(const lease_round& r) {
  set_members(r);
  std::vector<std::uint32_t> gained;
  {
    std::lock_guard lock(host_.mutex());
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
      host_.let_go_unowned_locked();
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
  // Attempts the executors hold without having begun (a task waiting for a
  // consumer) would hold a leaving shard for as long as nobody takes them:
  // they are asked to give those of lost and leaving shards back.
  if ((!r.lost.empty() || !r.leaving.empty()) && options_.on_attempts_stale) {
    try {
      options_.on_attempts_stale();
    } catch (const std::exception& e) {
      log(log_level::error, std::string("cluster: on_attempts_stale threw: ") + e.what());
    } catch (...) {
      log(log_level::error, "cluster: on_attempts_stale threw");
    }
  }
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

void cluster_ownership::queue_shard_reads(const std::vector<std::uint32_t>& shards) {
  if (shards.empty()) return;
  {
    std::lock_guard lock(lease_mutex_);
    for (std::uint32_t s : shards)
      if (std::find(to_read_.begin(), to_read_.end(), s) == to_read_.end()) to_read_.push_back(s);
  }
  reader_cv_.notify_one();
}

void cluster_ownership::queue_held_shard_reads() {
  std::vector<std::uint32_t> held;
  for (std::uint32_t s = 0; s < shards_->size(); ++s)
    if (shards_->held(s)) held.push_back(s);
  queue_shard_reads(held);
}

void cluster_ownership::reader_loop() {
  for (;;) {
    std::vector<std::uint32_t> batch;
    {
      std::unique_lock lock(lease_mutex_);
      reader_cv_.wait(lock, [&] { return lease_stop_ || !to_read_.empty(); });
      if (lease_stop_) return;
      batch.assign(to_read_.begin(), to_read_.end());
      to_read_.clear();
    }
    // Lost meanwhile: its new owner reads it.
    std::erase_if(batch, [&](std::uint32_t s) { return !shards_->held(s); });
    if (batch.empty()) continue;
    std::vector<std::uint32_t> failed = page_in_shards(batch);
    // One shard the store cannot read (a key of the wrong type, a corrupt
    // reply) fails the call that reads them together: those are read once
    // more each on its own, so the others are not held up with it.
    if (batch.size() > 1 && failed.size() > 1)
      std::erase_if(failed, [&](std::uint32_t s) { return page_in_shards({s}).empty(); });
    std::lock_guard lock(lease_mutex_);
    for (std::uint32_t s : failed)
      if (std::find(unread_shards_.begin(), unread_shards_.end(), s) == unread_shards_.end())
        unread_shards_.push_back(s);
  }
}

std::vector<std::uint32_t> cluster_ownership::page_in_shards(
    const std::vector<std::uint32_t>& shards) {
  const std::size_t n = shards.size();
  std::int64_t until = 0;
  std::uint64_t seq = 0;
  std::vector<std::uint64_t> tokens(n);
  {
    std::lock_guard lock(host_.mutex());
    if (!host_.running()) return {};
    until = host_.watermark_locked();
    seq = host_.begin_read_locked();
    for (std::size_t k = 0; k < n; ++k) tokens[k] = shards_->token(shards[k]);
  }
  // Writes queued before the read began (a schedule of one of these shards
  // that was let go while another instance held it) land first: one flush
  // for every shard read together.
  host_.flush_writes();
  std::vector<due_cursor> cursors(n);
  std::vector<std::vector<task>> pages(n);
  std::vector<std::size_t> open;  // the shards with more to read, by index
  // Token 0: lost since the reader looked; its new owner reads it.
  for (std::size_t k = 0; k < n; ++k)
    if (tokens[k] != 0) open.push_back(k);
  host::rejected_tasks rejected;
  std::vector<std::uint32_t> failed;
  boost::system::error_code ec;
  while (!open.empty()) {
    // A page of every shard still open, in one round trip where the store
    // can (list_due_shards()): a takeover of many shards over a slow link
    // costs one round trip, not one a shard (issue 33).
    std::vector<std::uint32_t> which;
    std::vector<due_cursor> at;
    for (std::size_t k : open) {
      which.push_back(shards[k]);
      at.push_back(cursors[k]);
      pages[k].clear();
    }
    std::vector<list_summary> got;
    try {
      got = store_.sharded()->list_due_shards(
          which, at, until, shard_page,
          [&](std::size_t i, task&& t) { pages[open[i]].push_back(std::move(t)); }, ec);
    } catch (const std::exception&) {
      ec = errc::store_error;
    }
    if (!ec && got.size() != open.size()) ec = errc::store_error;
    if (ec) {
      for (std::size_t k : open) failed.push_back(shards[k]);
      break;
    }
    std::vector<std::size_t> more;
    {
      std::lock_guard lock(host_.mutex());
      const std::int64_t now = now_ms();
      for (std::size_t i = 0; i < open.size(); ++i) {
        const std::size_t k = open[i];
        cursors[k] = at[i];
        // Lost and taken again since the read began (this thread reads
        // while the lease thread runs rounds): the page may hold tasks
        // another instance ran or cancelled meanwhile, and the regain
        // queued a fresh read of the shard. Nothing of this one is held.
        if (shards_->token(shards[k]) != tokens[k]) continue;
        host_.count_quarantined_locked(got[i].quarantined);
        for (const task& t : pages[k]) host_.hold_read_locked(t, seq, now, rejected);
        if (got[i].tasks + got[i].quarantined >= shard_page) more.push_back(k);
      }
    }
    open = std::move(more);
    if (!host_.running()) break;  // stopping: no use reading on
  }
  {
    std::lock_guard lock(host_.mutex());
    host_.end_read_locked(seq);
  }
  host_.quarantine_rejected(rejected);
  if (!failed.empty()) {
    std::string list;
    for (std::uint32_t s : failed) list += (list.empty() ? "" : " ") + std::to_string(s);
    log(log_level::warning, "cluster: reading shards " + list + " from " + store_.describe() +
                                " failed: " + ec.message() + "; retrying next round");
  }
  return failed;
}

void cluster_ownership::lease_loop() {
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
    const bool writes_kept = host_.writes_kept() > 0;
    {
      std::lock_guard lock(host_.mutex());
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
      host_.flush_writes();
      // A write the flush waited for may have failed, and be kept now: the
      // shards stay until it lands.
      if (host_.writes_kept() > 0) {
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
    if (!r.leaving.empty() && host_.writes_kept() == 0 && idle_leaving(r.leaving))
      next = steady::now();
  }
}

void cluster_ownership::listen_loop() {
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

bool cluster_ownership::settings_changed() {
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

void cluster_ownership::hold_noticed(std::vector<task_notice>& notices) {
  std::vector<std::string> ids;
  std::uint64_t seq = 0;
  {
    std::lock_guard lock(host_.mutex());
    if (!host_.running()) return;
    for (task_notice& n : notices)
      if (n.shard < shards_->size() && shards_->held(n.shard) &&
          n.due_ms <= host_.watermark_locked() && !host_.held_locked(n.id))
        ids.push_back(std::move(n.id));
    if (ids.empty()) return;
    seq = host_.begin_read_locked();
  }
  // As fault_in(): writes queued before the read (the removal of a task that
  // just ran here) land first, and an id erased meanwhile is not held again.
  host_.flush_writes();
  boost::system::error_code ec;
  std::vector<std::optional<task>> found;
  try {
    found = store_.find(ids, ec);
  } catch (const std::exception&) {
    ec = errc::store_error;
  }
  host::rejected_tasks rejected;
  {
    std::lock_guard lock(host_.mutex());
    if (!ec) {
      const std::int64_t now = now_ms();
      for (std::optional<task>& t : found)
        if (t && to_epoch_ms(t->due) <= host_.watermark_locked())
          host_.hold_read_locked(*t, seq, now, rejected);
    }
    host_.end_read_locked(seq);
  }
  host_.quarantine_rejected(rejected);
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

void cluster_ownership::stop() {
  std::lock_guard stopping(stop_mutex_);  // one joins the threads, the next finds none
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
    std::lock_guard lock(host_.mutex());
    busy = busy_shards_locked();
  }
  // Outcomes settled since stop()'s flush land before the release.
  host_.flush_writes();
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
  std::lock_guard lock(host_.mutex());
  for (std::uint32_t s = 0; s < shards_->size(); ++s) shards_->clear(s);
  leases_.reset();
}

}  // namespace delayq::detail
