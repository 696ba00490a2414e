// Group commit in front of a task_store.
//
// Every change the engine makes to the store goes through here, in the order
// the engine decided it (callers enqueue while holding the engine's lock), and
// is written in batches: whoever waits first while no write is in progress
// becomes the leader, takes everything queued so far and writes it in one
// save() and one remove() call; the others wait for their batch. A lone caller
// therefore writes inline with no thread hop, and many concurrent callers
// share one round trip (the LevelDB / MySQL group-commit scheme).
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "delayq/log.hpp"
#include "delayq/task_store.hpp"

namespace delayq::detail {

/// Thread safety: all members are safe to call from any thread.
class store_writer {
 public:
  /// One group of changes written together.
  struct batch {
    struct op {
      bool is_save;
      task t;  // for a remove only t.id is set
    };
    std::vector<op> ops;
    bool done = false;
    boost::system::error_code save_ec;
    boost::system::error_code remove_ec;
  };
  using ticket = std::shared_ptr<batch>;

  explicit store_writer(task_store& store) : store_(store) {}

  /// Queues an upsert of `t`. Cheap: call it under the engine's lock.
  ticket enqueue_save(task t) { return enqueue(batch::op{true, std::move(t)}); }
  /// Queues upserts of all of `tasks` into one batch, so they are written in
  /// one atomic store call.
  ticket enqueue_saves(std::vector<task> tasks) {
    std::lock_guard lock(mutex_);
    if (!open_) open_ = std::make_shared<batch>();
    for (task& t : tasks) open_->ops.push_back(batch::op{true, std::move(t)});
    return open_;
  }
  /// Queues a removal of `id`.
  ticket enqueue_remove(std::string id) {
    task t;
    t.id = std::move(id);
    return enqueue(batch::op{false, std::move(t)});
  }

  /// Blocks until the batch holding `t` is written; returns the outcome of the
  /// op kind `is_save`. Never call it while holding the engine's lock.
  boost::system::error_code wait(const ticket& t, bool is_save) {
    std::unique_lock lock(mutex_);
    while (!t->done) {
      if (!writing_) {
        lead(lock);
      } else {
        cv_.wait(lock);
      }
    }
    return is_save ? t->save_ec : t->remove_ec;
  }

  /// Writes whatever is queued (used for removals nobody waits for).
  void flush() {
    std::unique_lock lock(mutex_);
    while (open_ || writing_) {
      if (!writing_)
        lead(lock);
      else
        cv_.wait(lock);
    }
  }

 private:
  ticket enqueue(batch::op op) {
    std::lock_guard lock(mutex_);
    if (!open_) open_ = std::make_shared<batch>();
    open_->ops.push_back(std::move(op));
    return open_;
  }

  // Called with the lock held and no write in progress.
  void lead(std::unique_lock<std::mutex>& lock) {
    ticket mine = std::move(open_);
    open_.reset();
    if (!mine) return;
    writing_ = true;
    lock.unlock();
    write(*mine);
    lock.lock();
    mine->done = true;
    writing_ = false;
    cv_.notify_all();
  }

  void write(batch& b) {
    // Several ops on one id in one batch: only the last one matters for the
    // final state (save-then-remove is a removal, remove-then-save a save), so
    // keep the last and make saves and removes disjoint; then the order of the
    // two store calls does not matter.
    std::vector<task> saves;
    std::vector<std::string> removes;
    if (b.ops.size() == 1) {
      auto& op = b.ops.front();
      if (op.is_save)
        saves.push_back(std::move(op.t));
      else
        removes.push_back(std::move(op.t.id));
    } else {
      std::unordered_map<std::string_view, std::size_t> last;
      last.reserve(b.ops.size());
      for (std::size_t i = 0; i < b.ops.size(); ++i) last[b.ops[i].t.id] = i;
      for (std::size_t i = 0; i < b.ops.size(); ++i) {
        auto& op = b.ops[i];
        if (last[op.t.id] != i) continue;
        if (op.is_save)
          saves.push_back(std::move(op.t));
        else
          removes.push_back(std::move(op.t.id));
      }
    }
    if (!saves.empty()) store_.save(saves, b.save_ec);
    if (!removes.empty()) store_.remove(removes, b.remove_ec);
    // An op dropped in favour of a later one on the same id shares that
    // op's outcome; with one ec per kind that is approximated by: a batch
    // whose removes failed reports it to removers, whose saves failed to savers.
    if (b.save_ec)
      log(log_level::error, "store " + store_.describe() + ": save of " +
                                std::to_string(saves.size()) +
                                " tasks failed: " + b.save_ec.message());
    if (b.remove_ec)
      log(log_level::error, "store " + store_.describe() + ": remove of " +
                                std::to_string(removes.size()) +
                                " tasks failed: " + b.remove_ec.message());
    b.ops.clear();
    b.ops.shrink_to_fit();
  }

  task_store& store_;
  std::mutex mutex_;
  std::condition_variable cv_;
  ticket open_;
  bool writing_ = false;
};

}  // namespace delayq::detail
