// Group commit: schedule calls that arrive while a store write is in flight
// share the next write instead of paying one each.

#include <doctest/doctest.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <condition_variable>
#include <delayq/delayq.hpp>
#include <mutex>
#include <thread>
#include <vector>

using namespace std::chrono_literals;

namespace {

// A memory store whose first save() blocks until the test opens the gate,
// and which records the size of every save batch.
class gated_store final : public delayq::task_store {
 public:
  using task_store::list;
  using task_store::remove;
  using task_store::save;

  void save(std::span<const delayq::task> tasks, boost::system::error_code& ec) override {
    {
      std::unique_lock lock(m_);
      batches_.push_back(tasks.size());
      cv_.notify_all();
      if (batches_.size() == 1) cv_.wait(lock, [&] { return open_; });
    }
    inner_.save(tasks, ec);
  }
  void remove(std::span<const std::string> ids, boost::system::error_code& ec) override {
    inner_.remove(ids, ec);
  }
  delayq::list_summary list(const std::function<void(delayq::task&&)>& sink,
                            boost::system::error_code& ec) override {
    return inner_.list(sink, ec);
  }
  std::string describe() const override { return "gated-memory:"; }

  bool wait_first_save() {
    std::unique_lock lock(m_);
    return cv_.wait_for(lock, 60s, [&] { return !batches_.empty(); });
  }
  void open() {
    std::lock_guard lock(m_);
    open_ = true;
    cv_.notify_all();
  }
  std::vector<std::size_t> batches() {
    std::lock_guard lock(m_);
    return batches_;
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  bool open_ = false;
  std::vector<std::size_t> batches_;
  delayq::memory_store inner_;
};

}  // namespace

TEST_CASE("engine: concurrent schedule calls share store writes") {
  boost::asio::io_context io;
  delayq::executor_factory f;
  f.add("t", [](const delayq::task&) {});
  auto owned = std::make_unique<gated_store>();
  gated_store& store = *owned;
  delayq::engine eng(io, f, std::move(owned));
  eng.start();

  // The first call becomes the writer and blocks inside save().
  std::thread first([&] { eng.schedule("t", "first", 1h); });
  REQUIRE(store.wait_first_save());

  // Eight more queue up behind it while it is stuck.
  constexpr int followers = 8;
  std::vector<std::thread> rest;
  for (int i = 0; i < followers; ++i)
    rest.emplace_back([&, i] { eng.schedule("t", "follower " + std::to_string(i), 1h); });
  // They are queued once the writer holds them (stats().writes_queued:
  // queued, not yet sent). Not pending(): a call counts its task there when
  // it reserves room, before it hands the write over, so a follower could
  // still be on its way and make a third batch (seen under ASan).
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (eng.stats().writes_queued < followers && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  REQUIRE(eng.stats().writes_queued == followers);
  REQUIRE(eng.pending() == 1 + followers);

  store.open();
  first.join();
  for (auto& t : rest) t.join();

  const auto batches = store.batches();
  // One write for the first call, one shared by all eight followers.
  REQUIRE(batches.size() == 2);
  CHECK(batches[0] == 1);
  CHECK(batches[1] == followers);
  CHECK(eng.pending() == 1 + followers);
}
