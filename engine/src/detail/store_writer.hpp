// Group commit in front of a task_store.
//
// Every change the engine makes to the store goes through here, in the order
// the engine decided it (callers enqueue while holding the engine's lock), and
// is written in batches: whoever leads while no write is in progress takes
// everything queued so far and writes it with as few store calls as the order
// allows; ops queued meanwhile wait for the next batch. A caller that waits
// for its ops (wait(), flush()) leads when nobody else writes, so a lone
// caller writes inline with no thread hop, and many concurrent callers share
// one round trip (the LevelDB / MySQL group-commit scheme).
//
// Changes nobody waits for (the removal after a success, a dead letter, an
// attempt count saved while stopping) are submit()ted instead: the caller
// returns at once and a flusher thread owned by the writer leads a batch
// whenever such ops are queued and no write is in flight. So a worker never
// waits for the store after its executor returned, and removals that pile up
// during one write go out together in the next. They must still land: when
// their write fails, because the store is down, they are kept and written
// again by retry_failed() (the engine calls it every second while any are
// kept; the flusher calls on_kept to say so), unless a later change to the
// same id made them moot. Ordinary batches do not carry them: while the store
// is down that would repeat every kept write, and its error lines, once per
// finished attempt.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "delayq/log.hpp"
#include "delayq/task_store.hpp"

namespace delayq::detail {

/// Thread safety: all members are safe to call from any thread.
class store_writer {
 public:
  enum class kind {
    save,    // upsert a live task
    remove,  // delete a live task
    bury,    // live task -> dead letter
    revive,  // dead letter -> live task
    purge,   // delete a dead letter
  };

  struct op {
    kind what;
    dead_letter d;  // the task is in d.task; error and died_at for bury only
    bool must_land = false;
    boost::system::error_code ec;  // the outcome, once written
    const std::string& id() const { return d.task.id; }
  };

  /// One group of changes written together.
  struct batch {
    std::vector<op> ops;
    bool done = false;
    bool carry_failed = false;  // its leader writes the kept ops first
  };

  /// Where one queued op can be found, to wait for its outcome.
  struct ticket {
    std::shared_ptr<batch> b;
    std::size_t first = 0;  // ops [first, last) belong to the caller
    std::size_t last = 0;
  };

  /// `background`: run the flusher thread that writes submit()ted ops (not
  /// needed by a store whose writes are inline). `on_kept` is called on that
  /// thread, without the writer's lock, after a batch it wrote left ops kept
  /// for retry_failed(); it must not block on the writer.
  store_writer(task_store& store, bool background, std::function<void()> on_kept = {})
      : store_(store), on_kept_(std::move(on_kept)) {
    if (background) {
      flusher_running_ = true;
      flusher_ = std::thread([this] { run_flusher(); });
    }
  }

  store_writer(const store_writer&) = delete;
  store_writer& operator=(const store_writer&) = delete;

  ~store_writer() { stop_flusher(); }

  /// Queues ops (cheap: call it under the engine's lock, so the store sees
  /// changes in the order the engine made them).
  ticket enqueue(std::vector<op> ops) {
    std::lock_guard lock(mutex_);
    return enqueue_locked(std::move(ops));
  }

  /// Queues one op of kind `what` for task `t`.
  ticket enqueue(kind what, task t, bool must_land = false) {
    return enqueue(one_op(what, std::move(t), must_land));
  }

  /// Queues ops nobody waits for (made must_land) and returns at once: the
  /// flusher writes them with the next batch. Returns false when there is no
  /// flusher (none asked for, or stopped): the caller must flush() itself.
  bool submit(std::vector<op> ops) {
    std::lock_guard lock(mutex_);
    for (op& o : ops) o.must_land = true;
    enqueue_locked(std::move(ops));
    if (!flusher_running_) return false;
    background_queued_ = true;
    if (!writing_) flusher_cv_.notify_one();
    return true;
  }

  /// Queues one op of kind `what` for task `t`, as submit().
  bool submit(kind what, task t) { return submit(one_op(what, std::move(t), true)); }

 private:
  static std::vector<op> one_op(kind what, task t, bool must_land) {
    std::vector<op> one(1);
    one[0].what = what;
    one[0].d.task = std::move(t);
    one[0].must_land = must_land;
    return one;
  }

  ticket enqueue_locked(std::vector<op> ops) {
    if (!open_) open_ = std::make_shared<batch>();
    ticket t{open_, open_->ops.size(), open_->ops.size() + ops.size()};
    for (op& o : ops) {
      // A newer change to an id makes a failed older one moot.
      if (!failed_.empty()) drop_failed(o.id());
      open_->ops.push_back(std::move(o));
    }
    return t;
  }

 public:
  /// Blocks until the batch holding `t` is written; returns the first error
  /// among the caller's ops. Never call it while holding the engine's lock.
  boost::system::error_code wait(const ticket& t) {
    std::unique_lock lock(mutex_);
    while (!t.b->done) {
      if (!writing_)
        lead(lock);
      else
        cv_.wait(lock);
    }
    for (std::size_t i = t.first; i < t.last; ++i)
      if (t.b->ops[i].ec) return t.b->ops[i].ec;
    return {};
  }

  /// Blocks until every op queued before the call is written (the batch
  /// holding the newest of them is done), not until the queue is empty: ops
  /// queued meanwhile by others are not waited for.
  void flush() {
    std::unique_lock lock(mutex_);
    // A copy: leading moves open_ away.
    const std::shared_ptr<batch> target = open_ ? open_ : in_flight_;
    wait_batch(lock, target);
  }

  /// Writes the kept ops that failed earlier, with whatever is queued, and
  /// waits for that batch.
  void retry_failed() {
    std::unique_lock lock(mutex_);
    if (failed_.empty()) return;
    if (!open_) open_ = std::make_shared<batch>();
    open_->carry_failed = true;
    const std::shared_ptr<batch> target = open_;
    wait_batch(lock, target);
  }

  /// Writes until nothing is queued, carrying the kept ops once (for stop():
  /// nobody queues new work by then, so this ends).
  void drain() {
    std::unique_lock lock(mutex_);
    if (!failed_.empty()) {
      if (!open_) open_ = std::make_shared<batch>();
      open_->carry_failed = true;
    }
    while (open_ || writing_) {
      if (!writing_)
        lead(lock);
      else
        cv_.wait(lock);
    }
  }

  /// Stops the flusher thread and drains the queue on the calling thread.
  /// Afterwards submit() returns false. Idempotent.
  void stop_flusher() {
    {
      std::lock_guard lock(mutex_);
      flusher_running_ = false;
      flusher_cv_.notify_all();
    }
    if (flusher_.joinable()) flusher_.join();
    drain();
  }

  // ---- inline writes ------------------------------------------------------
  // For a store whose writes are inline (task_store::inline_writes()): the
  // engine calls these under its own lock instead of enqueue() + wait(). They
  // write at once on the calling thread; an error is logged and returned,
  // never kept for a retry (such a store has no outage to wait out).

  boost::system::error_code save_now(std::span<const task> tasks) {
    return now("save", tasks.size(), [&](auto& ec) { store_.save(tasks, ec); });
  }
  boost::system::error_code remove_now(const std::string& id) {
    return now("remove", 1, [&](auto& ec) { store_.remove(std::span(&id, 1), ec); });
  }
  boost::system::error_code bury_now(const dead_letter& d) {
    return now("bury", 1, [&](auto& ec) { store_.bury(std::span(&d, 1), ec); });
  }
  boost::system::error_code revive_now(const task& t) {
    return now("revive", 1, [&](auto& ec) { store_.revive(std::span(&t, 1), ec); });
  }
  boost::system::error_code purge_now(const std::string& id) {
    return now("purge", 1, [&](auto& ec) { store_.purge(std::span(&id, 1), ec); });
  }

  /// Whether some op that must land is waiting for the store to come back.
  bool has_failed() {
    std::lock_guard lock(mutex_);
    return !failed_.empty();
  }

 private:
  // One inline write of `n` items: runs `write(ec)`, logs a failure.
  template <class Write>
  boost::system::error_code now(const char* what, std::size_t n, Write&& write) {
    boost::system::error_code ec;
    write(ec);
    report(what, n, ec);
    return ec;
  }

  // Leads or waits until `target` (if any) is written.
  void wait_batch(std::unique_lock<std::mutex>& lock, std::shared_ptr<batch> target) {
    if (!target) return;
    while (!target->done) {
      if (!writing_)
        lead(lock);
      else
        cv_.wait(lock);
    }
  }

  // The flusher: leads a batch whenever submitted ops are queued and no write
  // is in flight, until stop_flusher().
  void run_flusher() {
    std::unique_lock lock(mutex_);
    for (;;) {
      flusher_cv_.wait(lock,
                       [&] { return !flusher_running_ || (background_queued_ && !writing_); });
      if (!flusher_running_) return;
      lead(lock);
      if (!failed_.empty() && on_kept_) {
        lock.unlock();
        on_kept_();
        lock.lock();
      }
    }
  }

  void drop_failed(const std::string& id) {
    std::erase_if(failed_, [&](const op& o) { return o.id() == id; });
  }

  // Called with the lock held and no write in progress.
  void lead(std::unique_lock<std::mutex>& lock) {
    std::shared_ptr<batch> mine = std::move(open_);
    open_.reset();
    background_queued_ = false;  // this batch takes them
    if (!mine) return;
    in_flight_ = mine;
    // Failed ops go first: everything queued after them is newer.
    std::vector<op> retried;
    if (mine->carry_failed) {
      retried = std::move(failed_);
      failed_.clear();
    }
    writing_ = true;
    lock.unlock();
    const std::size_t n_retried = retried.size();
    if (n_retried > 0) {
      for (op& o : mine->ops) retried.push_back(std::move(o));
      mine->ops = std::move(retried);
    }
    write(mine->ops);
    lock.lock();
    // Keep what must land and did not; give the caller's ops back in place.
    std::vector<op> kept;
    for (op& o : mine->ops)
      // A store that lacks an operation will not grow it by waiting.
      if (o.ec && o.must_land && o.ec != errc::unsupported) kept.push_back(o);
    for (op& o : kept) failed_.push_back(std::move(o));
    if (n_retried > 0) mine->ops.erase(mine->ops.begin(), mine->ops.begin() + n_retried);
    mine->done = true;
    in_flight_.reset();
    writing_ = false;
    cv_.notify_all();
    if (background_queued_) flusher_cv_.notify_one();
  }

  // Writes `ops` with as few store calls as their order allows. Saves and
  // removes touch only live tasks, and several on one id reduce to the last
  // (save-then-remove is a removal, remove-then-save a save), so a run of
  // them becomes one save() and one remove(). Dead-letter ops are rare and
  // written one kind-run at a time, in order, between such runs.
  void write(std::vector<op>& ops) {
    std::size_t i = 0;
    while (i < ops.size()) {
      std::size_t j = i;
      const bool live = ops[i].what == kind::save || ops[i].what == kind::remove;
      while (j < ops.size() && (live ? (ops[j].what == kind::save || ops[j].what == kind::remove)
                                     : ops[j].what == ops[i].what))
        ++j;
      if (live)
        write_live(ops, i, j);
      else
        write_dead(ops, i, j);
      i = j;
    }
  }

  void write_live(std::vector<op>& ops, std::size_t from, std::size_t to) {
    if (to - from == 1) {  // the common lone caller: no deduplication to do
      op& o = ops[from];
      if (o.what == kind::save)
        store_.save(std::span<const task>(&o.d.task, 1), o.ec);
      else
        store_.remove(std::span<const std::string>(&o.d.task.id, 1), o.ec);
      report(o.what == kind::save ? "save" : "remove", 1, o.ec);
      return;
    }
    std::unordered_map<std::string_view, std::size_t> last;
    last.reserve(to - from);
    for (std::size_t i = from; i < to; ++i) last[ops[i].id()] = i;
    std::vector<task> saves;
    std::vector<std::string> removes;
    for (std::size_t i = from; i < to; ++i) {
      if (last[ops[i].id()] != i) continue;
      if (ops[i].what == kind::save)
        saves.push_back(ops[i].d.task);
      else
        removes.push_back(ops[i].id());
    }
    boost::system::error_code save_ec, remove_ec;
    if (!saves.empty()) store_.save(saves, save_ec);
    if (!removes.empty()) store_.remove(removes, remove_ec);
    report("save", saves.size(), save_ec);
    report("remove", removes.size(), remove_ec);
    // An op dropped for a later one on its id shares that op's outcome.
    for (std::size_t i = from; i < to; ++i)
      ops[i].ec = ops[last[ops[i].id()]].what == kind::save ? save_ec : remove_ec;
  }

  void write_dead(std::vector<op>& ops, std::size_t from, std::size_t to) {
    boost::system::error_code ec;
    const kind what = ops[from].what;
    if (what == kind::bury) {
      std::vector<dead_letter> letters;
      for (std::size_t i = from; i < to; ++i) letters.push_back(ops[i].d);
      store_.bury(letters, ec);
      report("bury", letters.size(), ec);
    } else if (what == kind::revive) {
      std::vector<task> tasks;
      for (std::size_t i = from; i < to; ++i) tasks.push_back(ops[i].d.task);
      store_.revive(tasks, ec);
      report("revive", tasks.size(), ec);
    } else {
      std::vector<std::string> ids;
      for (std::size_t i = from; i < to; ++i) ids.push_back(ops[i].id());
      store_.purge(ids, ec);
      report("purge", ids.size(), ec);
    }
    for (std::size_t i = from; i < to; ++i) ops[i].ec = ec;
  }

  void report(const char* what, std::size_t n, const boost::system::error_code& ec) {
    if (!ec || n == 0) return;
    log(log_level::error, "store " + store_.describe() + ": " + what + " of " + std::to_string(n) +
                              " tasks failed: " + ec.message());
  }

  task_store& store_;
  const std::function<void()> on_kept_;
  std::mutex mutex_;
  std::condition_variable cv_;          // a batch was written
  std::condition_variable flusher_cv_;  // submitted ops may be writable, or stop
  std::shared_ptr<batch> open_;         // ops queued and not yet taken by a leader
  std::shared_ptr<batch> in_flight_;    // the batch being written, if any
  std::vector<op> failed_;              // must-land ops whose write failed, oldest first
  bool writing_ = false;
  bool background_queued_ = false;  // open_ holds submitted ops
  bool flusher_running_ = false;
  std::thread flusher_;  // last: started once everything above is set
};

}  // namespace delayq::detail
