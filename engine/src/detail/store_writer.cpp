#include "detail/store_writer.hpp"

#include <algorithm>
#include <string_view>
#include <unordered_set>

#include "delayq/log.hpp"

namespace delayq::detail {
namespace {

// Which areas of the store a change rewrites: the live task, the dead letter.
constexpr unsigned live_area = 1, dead_area = 2;

unsigned areas(change_kind k) noexcept {
  switch (k) {
    case change_kind::save:
    case change_kind::remove: return live_area;
    case change_kind::purge: return dead_area;
    case change_kind::bury:
    case change_kind::revive: return live_area | dead_area;
  }
  return live_area | dead_area;
}

store_change change_of(const write_op& op) {
  return store_change{op.what, &op.t, op.error, op.died_at, op.fence};
}

}  // namespace

store_writer::store_writer(task_store& store, options opts, done_fn on_done)
    : store_(store),
      opts_(opts),
      on_done_(std::move(on_done)),
      in_process_(store.in_process()),
      max_in_flight_(std::max<std::size_t>(store.max_writes_in_flight(), 1)),
      direct_(!in_process_ && max_in_flight_ > 1) {
  if (!in_process_) thread_ = std::thread([this] { run(); });
}

store_writer::~store_writer() { stop(); }

std::uint64_t store_writer::hash_id(const std::string& id) noexcept {
  // Two ids with one hash only make the second wait for the first's batch.
  return std::hash<std::string_view>{}(id);
}

bool store_writer::covers(change_kind newer, change_kind older) noexcept {
  return (areas(newer) & areas(older)) == areas(older);
}

store_writer::result store_writer::submit(std::span<write_op> group, bool may_send) {
  if (group.empty()) return result::done;
  if (in_process_) {
    for (write_op& op : group) write_inline(op);
    return result::done;
  }
  std::unique_lock lock(mutex_);
  if (stopped_) {
    // Only the engine's own changes come after stop (late attempts ending).
    lock.unlock();
    for (write_op& op : group) write_inline(op);
    return result::done;
  }
  if (!group.front().must_land && queue_.size() >= opts_.max_queued) return result::busy;
  for (std::size_t i = 0; i < group.size(); ++i) {
    write_op& op = group[i];
    op.id_hash = hash_id(op.t.id);
    op.epoch = epoch_;
    op.group = i == 0 ? static_cast<std::uint32_t>(group.size()) : 0;
    queue_.push_back(std::move(op));
  }
  outstanding_[epoch_] += group.size();
  // Nothing in flight, nobody sending, nothing waiting before this group
  // (kept writes go first, and the thread sends them): the caller sends.
  if (may_send && !sending_ && !pumping_ && in_flight_.empty() && kept_.empty() &&
      queue_.size() == group.size()) {
    sending_ = true;
    return result::send;
  }
  if (direct_) {
    // The caller hands the batch to the store (kick()) when it may go now;
    // a batch in flight sends what gathers when it lands (landed()); only a
    // linger needs the writer thread's timed wait.
    if (!pumping_ && may_send_now(std::chrono::steady_clock::now())) return result::kick;
    // The first change of a linger: the writer thread arms its deadline.
    if (in_flight_.empty() && !sending_ && !pumping_ && queue_.size() == group.size())
      cv_.notify_one();
    return result::queued;
  }
  if (!sending_) cv_.notify_one();
  return result::queued;
}

void store_writer::kick() {
  std::unique_lock lock(mutex_);
  pump(lock, false);
  // What is left with nothing in flight lingers: the writer thread's.
  if (stopping_ || (in_flight_.empty() && !queue_.empty())) cv_.notify_one();
}

// Whether a batch may go out now, for a thread that sends (pump()): nobody
// sends as the sender meanwhile.
bool store_writer::may_send_now(std::chrono::steady_clock::time_point now) const {
  if (sending_ || blocked_ || queue_.empty() || in_flight_.size() >= max_in_flight_) return false;
  // With nothing in flight a batch goes at once (a lone caller pays one
  // round trip, no wait), unless the last batch was several changes and
  // fewer are queued yet: it lingers for them (see options::linger). With
  // batches in flight, another goes only once enough is queued to fill it: a
  // few callers are better served by one batch gathering while the last is
  // made durable (group commit: one fsync for all of them) than by a batch
  // each; a backlog fills the pipeline.
  if (in_flight_.empty())
    return last_batch_ < 2 || queue_.size() >= last_batch_ || now >= linger_until_ || stopping_;
  return queue_.size() >= opts_.pipeline_threshold;
}

void store_writer::pump(std::unique_lock<std::mutex>& lock, bool writer) {
  if (pumping_) return;  // that thread sends what is queued, in order
  pumping_ = true;
  const auto now = std::chrono::steady_clock::now();
  while (may_send_now(now)) {
    std::unique_ptr<batch> b = form_batch();
    settled_.notify_all();  // room in the queue
    if (b->ops.empty()) {
      blocked_ = true;
      break;
    }
    batch* raw = b.get();
    const bool lone = writer && in_flight_.empty() && raw->ops.size() == 1;
    in_flight_.push_back(std::move(b));
    if (lone) {
      // A lone change with nothing in flight is written from the writer
      // thread: the store's own I/O thread would add two thread hand-offs
      // to the one round trip a lone caller pays. Nothing is in flight, so
      // the order of batches holds; what arrives meanwhile gathers.
      write_here(*raw, lock);
      break;
    }
    lock.unlock();
    store_.async_write(raw->changes, [this, raw, sent = std::chrono::steady_clock::now()](
                                         boost::system::error_code ec) {
      landed(raw, ec, note_write(raw->changes.size(), sent, ec));
    });
    lock.lock();
  }
  pumping_ = false;
}

void store_writer::write_here(batch& b, std::unique_lock<std::mutex>& lock) {
  lock.unlock();
  boost::system::error_code ec;
  const auto sent = std::chrono::steady_clock::now();
  store_.write(b.changes, ec);
  const auto took = note_write(b.changes.size(), sent, ec);
  lock.lock();
  b.took = took;
  b.ec = ec;
  b.done = true;
}

void store_writer::landed(batch* raw, boost::system::error_code ec,
                          std::chrono::steady_clock::duration took) {
  std::unique_lock lock(mutex_);
  raw->took = took;
  raw->ec = ec;
  raw->done = true;
  if (!direct_) {
    cv_.notify_one();
    return;
  }
  // Reported, and the next batch handed on, from this thread (see
  // "Hand-offs"); the writer thread is woken only for what needs waiting.
  ++helpers_;
  report(lock);
  pump(lock, false);
  --helpers_;
  // Notified under the lock: once helpers_ is 0 the writer may end, and
  // the writer with it.
  if (stopping_ || retry_now_ || !kept_.empty() || (in_flight_.empty() && !queue_.empty()))
    cv_.notify_one();
}

void store_writer::report(std::unique_lock<std::mutex>& lock) {
  if (reporting_) return;  // that thread reports what is done, in order
  reporting_ = true;
  while (!in_flight_.empty() && in_flight_.front()->done) {
    std::unique_ptr<batch> b = std::move(in_flight_.front());
    in_flight_.pop_front();
    finish(std::move(b), lock);  // unlocked while reporting
  }
  reporting_ = false;
}

void store_writer::send() {
  // One batch: the one that holds the caller's change (and whatever was
  // queued with it). A caller that went on to write what others queued
  // meanwhile would hold its own answer back for them, and could block on a
  // write it never asked for (a removal an executor's success made).
  constexpr int max_rounds = 1;
  std::unique_lock lock(mutex_);
  for (int round = 0; round < max_rounds && !queue_.empty() && !stopped_; ++round) {
    std::unique_ptr<batch> b = form_batch();
    settled_.notify_all();      // room in the queue
    if (b->ops.empty()) break;  // what is queued waits for an id in flight: the thread's
    batch* raw = b.get();
    in_flight_.push_back(std::move(b));
    write_here(*raw, lock);
    // Only ours is in flight (nobody else sent meanwhile): it is the front.
    // Reported here, unless a thread still reports an earlier batch: that
    // one reports ours next.
    report(lock);
  }
  sending_ = false;
  if (direct_) pump(lock, false);  // what gathered meanwhile goes from here
  // What is left (and the kept writes' retries) is the thread's again.
  if (!queue_.empty() || !kept_.empty() || stopping_) cv_.notify_one();
}

void store_writer::write_inline(write_op& op) {
  store_change c = change_of(op);
  if (in_process_) {
    // The engine's wheel is the live store: nothing to write for it, and a
    // requeued task leaves the dead letters without a live copy here.
    if (c.what == change_kind::save || c.what == change_kind::remove) {
      op.ec = {};
      return;
    }
    if (c.what == change_kind::revive) c.what = change_kind::purge;
  }
  const auto sent = std::chrono::steady_clock::now();
  store_.write(std::span(&c, 1), op.ec);
  note_write(1, sent, op.ec);
  if (op.ec)
    log(log_level::error, "store " + store_.describe() + ": writing task " + op.t.id +
                              " failed: " + op.ec.message() +
                              (in_process_ ? "" : " (the engine is stopped: it is not retried)"));
}

void store_writer::wait_for_room() {
  std::unique_lock lock(mutex_);
  settled_.wait(lock, [&] { return queue_.size() < opts_.max_queued || stopped_; });
}

void store_writer::flush() {
  std::unique_lock lock(mutex_);
  if (in_process_ || stopped_) return;
  const std::uint64_t target = epoch_++;
  settled_.wait(lock, [&] { return outstanding_.empty() || outstanding_.begin()->first > target; });
}

std::size_t store_writer::kept() const {
  std::lock_guard lock(mutex_);
  return kept_live_;
}

std::size_t store_writer::queued() const {
  std::lock_guard lock(mutex_);
  return queue_.size();
}

std::chrono::steady_clock::duration store_writer::note_write(
    std::size_t changes, std::chrono::steady_clock::time_point sent,
    const boost::system::error_code& ec) noexcept {
  const auto took = std::chrono::steady_clock::now() - sent;
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(took).count();
  write_latency_.record(us > 0 ? static_cast<std::uint64_t>(us) : 0);
  batch_size_.record(changes);
  if (ec) write_errors_.fetch_add(1, std::memory_order_relaxed);
  // A change the store cannot make (a store without dead letters) is no
  // sign of an outage: the next write would fail the same way.
  last_failed_.store(ec && ec != errc::unsupported, std::memory_order_relaxed);
  return took;
}

void store_writer::metrics(store_metrics& out) const {
  write_latency_.snapshot(out.write_seconds, 1e-6);
  batch_size_.snapshot(out.write_batch_size, 1.0);
  out.write_errors = write_errors_.load(std::memory_order_relaxed);
  {
    std::lock_guard lock(mutex_);
    out.writes_queued = queue_.size();
    out.writes_kept = kept_live_;
  }
  out.outage = out.writes_kept > 0 || last_failed_.load(std::memory_order_relaxed);
}

void store_writer::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
    retry_now_ = !kept_.empty();
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
  std::lock_guard lock(mutex_);
  stopped_ = true;
  if (!kept_.empty())
    log(log_level::error, "store " + store_.describe() + ": " + std::to_string(kept_.size()) +
                              " changes could not be written before the engine stopped; the "
                              "store keeps the tasks as they were (at-least-once: a finished "
                              "task may run again after the next start)");
  settled_.notify_all();
}

void store_writer::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    report(lock);
    if (!kept_.empty() && (retry_now_ || std::chrono::steady_clock::now() >= next_retry_)) {
      // Oldest first, ahead of everything queued: all of it is newer.
      for (auto it = kept_.rbegin(); it != kept_.rend(); ++it) queue_.push_front(std::move(*it));
      kept_.clear();
      kept_ids_.clear();
      retry_now_ = false;
      blocked_ = false;
    }
    pump(lock, true);
    const auto ended = [&] {
      return stopping_ && queue_.empty() && in_flight_.empty() && !retry_now_ && helpers_ == 0 &&
             !reporting_ && !pumping_ && !sending_;
    };
    if (ended()) return;
    // When the thread must look again with nothing arriving: a kept write's
    // retry, the end of a linger (nothing in flight, changes queued, nobody
    // else sending them).
    const auto deadline = [&] {
      auto at = std::chrono::steady_clock::time_point::max();
      if (!kept_.empty()) at = next_retry_;
      if (in_flight_.empty() && !queue_.empty() && !blocked_ && !sending_ && !pumping_)
        at = std::min(at, linger_until_);
      return at;
    };
    const auto wake = deadline();
    const auto ready = [&] {
      const bool room =
          !sending_ && !pumping_ && !blocked_ && !queue_.empty() &&
          in_flight_.size() < max_in_flight_ &&
          (in_flight_.empty() ? last_batch_ < 2 || queue_.size() >= last_batch_ || stopping_
                              : queue_.size() >= opts_.pipeline_threshold);
      // An earlier deadline than the one slept for: the first change of a
      // linger, a write kept by another thread (direct_).
      return (!reporting_ && !in_flight_.empty() && in_flight_.front()->done) || room ||
             retry_now_ || ended() || deadline() < wake;
    };
    if (wake == std::chrono::steady_clock::time_point::max())
      cv_.wait(lock, ready);
    else
      cv_.wait_until(lock, wake, ready);
  }
}

std::unique_ptr<store_writer::batch> store_writer::form_batch() {
  auto b = std::make_unique<batch>();
  std::vector<write_op> deferred;
  std::unordered_set<std::uint64_t> deferred_ids;
  while (!queue_.empty() && b->ops.size() < opts_.max_batch) {
    // A group sits contiguous at the front of the queue and goes as a whole.
    const std::size_t n =
        std::min<std::size_t>(std::max<std::uint32_t>(queue_.front().group, 1), queue_.size());
    bool wait = false;
    for (std::size_t k = 0; k < n && !wait; ++k) {
      const std::uint64_t h = queue_[k].id_hash;
      // An earlier change to this id is in flight (or waits behind one).
      wait = in_flight_ids_.count(h) != 0 || (!deferred_ids.empty() && deferred_ids.count(h) != 0);
    }
    for (std::size_t k = 0; k < n; ++k) {
      write_op op = std::move(queue_.front());
      queue_.pop_front();
      const std::uint64_t h = op.id_hash;
      if (wait) {
        deferred_ids.insert(h);
        deferred.push_back(std::move(op));
        continue;
      }
      if (auto kept = kept_ids_.find(h); kept != kept_ids_.end()) {
        // Failed changes to this id go first, in their order, unless this one
        // rewrites everything they touch.
        auto out = kept_.begin();
        for (auto it = kept_.begin(); it != kept_.end(); ++it) {
          if (it->id_hash != h) {
            if (out != it) *out = std::move(*it);
            ++out;
          } else if (!covers(op.what, it->what)) {
            b->ops.push_back(std::move(*it));
          } else {
            --kept_live_;  // moot: `op` rewrites all it touched
          }
        }
        kept_.erase(out, kept_.end());
        kept_ids_.erase(kept);
      }
      b->ops.push_back(std::move(op));
    }
  }
  for (auto it = deferred.rbegin(); it != deferred.rend(); ++it) queue_.push_front(std::move(*it));
  b->changes.reserve(b->ops.size());
  for (write_op& op : b->ops) {
    ++in_flight_ids_[op.id_hash];
    b->changes.push_back(change_of(op));
  }
  return b;
}

void store_writer::finish(std::unique_ptr<batch> b, std::unique_lock<std::mutex>& lock) {
  blocked_ = false;  // its ids are free again
  last_batch_ = b->ops.size();
  // At most a quarter of the write it would save (options::linger).
  linger_until_ = std::chrono::steady_clock::now() +
                  std::min<std::chrono::steady_clock::duration>(opts_.linger, b->took / 4);
  for (const write_op& op : b->ops) {
    auto it = in_flight_ids_.find(op.id_hash);
    if (--it->second == 0) in_flight_ids_.erase(it);
  }
  std::vector<write_op> reported;
  reported.reserve(b->ops.size());
  if (b->ec == errc::lease_lost) {
    // A sharded store marks the changes of the shard parts it refused; the
    // others landed and are done (writing them again could bring back a task
    // another instance has run and removed since). A store that marks none
    // leaves every change in doubt: fenced ones are dropped, the others
    // written again.
    const bool marked = std::any_of(b->changes.begin(), b->changes.end(),
                                    [](const store_change& c) { return c.refused; });
    std::vector<write_op> again;
    std::size_t dropped = 0;
    // An op that is done: reported, or, a kept copy, no longer kept.
    const auto ended = [&](write_op& op) {
      if (op.report)
        reported.push_back(std::move(op));
      else
        --kept_live_;
    };
    for (std::size_t i = 0; i < b->ops.size(); ++i) {
      write_op& op = b->ops[i];
      if (marked && !b->changes[i].refused) {
        op.ec = {};
        ended(op);
        continue;
      }
      if (op.fence == 0) {
        again.push_back(std::move(op));
        continue;
      }
      ++dropped;
      op.ec = b->ec;
      ended(op);
    }
    log(log_level::warning, "store " + store_.describe() + ": " + std::to_string(dropped) +
                                " outcome writes of attempts on shards this instance no longer "
                                "holds were refused (lease lost); their new owner runs those "
                                "tasks again");
    // In front of the queue: nothing newer about their ids was sent meanwhile.
    for (auto it = again.rbegin(); it != again.rend(); ++it) queue_.push_front(std::move(*it));
    if (!again.empty()) cv_.notify_all();
    b->ec = {};
    b->ops.clear();
  }
  const bool keep = b->ec && b->ec != errc::unsupported;  // waiting will not grow an operation
  if (b->ec)
    log(log_level::error, "store " + store_.describe() + ": writing a batch of " +
                              std::to_string(b->ops.size()) +
                              " changes failed: " + b->ec.message() +
                              (keep ? "; changes nobody waits for are kept" : ""));
  for (write_op& op : b->ops) {
    op.ec = b->ec;
    if (!op.report) --kept_live_;  // landed, or kept again below
    if (keep && op.must_land) {
      if (kept_.empty()) next_retry_ = std::chrono::steady_clock::now() + opts_.retry_interval;
      write_op k;
      k.what = op.what;
      k.t = op.report ? op.t : std::move(op.t);
      k.error = op.report ? op.error : std::move(op.error);
      k.died_at = op.died_at;
      k.must_land = true;
      k.fence = op.fence;
      k.id_hash = op.id_hash;
      k.report = false;
      ++kept_ids_[k.id_hash];
      kept_.push_back(std::move(k));
      ++kept_live_;
    }
    if (op.report) reported.push_back(std::move(op));
  }
  if (reported.empty()) return;
  lock.unlock();
  on_done_(reported);
  lock.lock();
  for (const write_op& op : reported) {
    auto it = outstanding_.find(op.epoch);
    if (it != outstanding_.end() && --it->second == 0) outstanding_.erase(it);
  }
  settled_.notify_all();
}

}  // namespace delayq::detail
