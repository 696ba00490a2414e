// Removals after success are written by the store writer's flusher, not by
// the worker that ran the task: a worker goes on to its next task while the
// store is still deleting the last one, and removals that pile up during one
// write share the next.

#include <doctest/doctest.h>

#include <atomic>
#include <condition_variable>
#include <delayq/delayq.hpp>
#include <mutex>
#include <thread>
#include <vector>

#include "engine_test_support.hpp"

using namespace delayq_test;

namespace {

// Forwards to a memory store; its first remove() blocks until the test opens
// the gate. Records the size of every remove() call.
class blocking_remove_store final : public borrowed_store {
 public:
  explicit blocking_remove_store(delayq::task_store& inner) : borrowed_store(inner) {}
  using borrowed_store::remove;

  void remove(std::span<const std::string> ids, boost::system::error_code& ec) override {
    {
      std::unique_lock lock(m_);
      removes_.push_back(ids.size());
      cv_.notify_all();
      if (removes_.size() == 1) cv_.wait(lock, [&] { return open_; });
    }
    borrowed_store::remove(ids, ec);
  }

  bool wait_first_remove() {
    std::unique_lock lock(m_);
    return cv_.wait_for(lock, patience, [&] { return !removes_.empty(); });
  }
  void open() {
    std::lock_guard lock(m_);
    open_ = true;
    cv_.notify_all();
  }
  std::vector<std::size_t> removes() {
    std::lock_guard lock(m_);
    return removes_;
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  bool open_ = false;
  std::vector<std::size_t> removes_;
};

}  // namespace

TEST_CASE("engine: a worker runs its next task while the last removal is still being written") {
  io_thread io;
  recorder rec;
  delayq::memory_store inner;
  auto owned = std::make_unique<blocking_remove_store>(inner);
  blocking_remove_store& store = *owned;
  std::atomic<int> runs{0};
  delayq::executor_factory f;
  f.add("t", [&](const delayq::task& t) {
    rec(t);
    // Every task after the first finishes only once the first one's removal
    // is in the store's hands, so that removal is written alone.
    if (runs++ > 0) CHECK(store.wait_first_remove());
  });
  auto opts = fast_options();
  opts.workers = 1;  // one worker: held by the removal, nothing else would run
  delayq::engine eng(io.io, f, std::move(owned), opts);
  eng.start();

  // One batch, saved before any of them is armed: no schedule call has to
  // wait behind the blocked removal.
  constexpr std::size_t n = 5;
  std::vector<delayq::task_spec> specs(n);
  for (std::size_t i = 0; i < n; ++i) {
    specs[i].type = "t";
    specs[i].payload = std::to_string(i);
    specs[i].due = clock_type::now();
  }
  const auto ids = eng.schedule_many(std::move(specs));
  REQUIRE(ids.size() == n);
  CHECK(stored(inner).size() == n);

  // The first success's removal blocks inside the store...
  REQUIRE(store.wait_first_remove());
  // ...and the one worker still runs every other task, and finishes them.
  REQUIRE(rec.wait_for_count(n));
  REQUIRE(eventually([&] { return eng.stats().succeeded == n; }));
  CHECK(store.removes() == std::vector<std::size_t>{1});  // still the blocked one
  CHECK(stored(inner).size() == n);  // nothing removed yet: at-least-once holds
  // A success is counted before its removal is queued: wait for the queue
  // itself (a TSan run of CI once opened the store between the two, and the
  // last removal went out on its own).
  REQUIRE(eventually([&] { return eng.stats().writes_queued == n - 1; }));

  // Released, the removals queued meanwhile go out together in one call.
  store.open();
  CHECK(eventually([&] { return stored(inner).empty(); }));
  CHECK(store.removes() == std::vector<std::size_t>{1, n - 1});
  CHECK(eng.stop());
  CHECK(stored(inner).empty());
}

TEST_CASE("engine: stop() writes the removals still queued behind a slow store write") {
  io_thread io;
  recorder rec;
  delayq::executor_factory f;
  f.add("t", std::ref(rec));
  delayq::memory_store inner;
  auto owned = std::make_unique<blocking_remove_store>(inner);
  blocking_remove_store& store = *owned;
  auto opts = fast_options();
  opts.workers = 1;
  delayq::engine eng(io.io, f, std::move(owned), opts);
  eng.start();
  std::vector<delayq::task_spec> specs(3);
  for (auto& s : specs) {
    s.type = "t";
    s.due = clock_type::now();
  }
  REQUIRE(eng.schedule_many(std::move(specs)).size() == 3);
  REQUIRE(store.wait_first_remove());
  REQUIRE(eventually([&] { return eng.stats().succeeded == 3; }));

  // stop() returns only once every queued removal is written: open the gate
  // from another thread while it waits.
  std::thread opener([&] { store.open(); });
  CHECK(eng.stop());
  opener.join();
  CHECK(stored(inner).empty());
}
