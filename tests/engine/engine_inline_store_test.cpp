// Stores whose writes are inline (task_store::inline_writes()): the engine
// writes them directly under the shard lock of the id, one call per change,
// never through the group commit, and the store ends up agreeing with the
// engine even when threads race on the same ids.
#include <utility>  // before Boost.Asio (Boost 1.74 + C++20)

#include <doctest/doctest.h>

#include <atomic>
#include <delayq/delayq.hpp>
#include <mutex>
#include <thread>
#include <vector>

#include "engine_test_support.hpp"

using namespace delayq_test;

namespace {

// A memory store that says its writes are inline and records the size of
// every save and remove call.
class counting_inline_store final : public borrowed_store {
 public:
  explicit counting_inline_store(delayq::task_store& inner) : borrowed_store(inner) {}
  using task_store::remove;
  using task_store::save;
  bool in_process() const noexcept override { return true; }
  void save(std::span<const delayq::task> t, boost::system::error_code& ec) override {
    {
      std::lock_guard lock(m_);
      save_sizes_.push_back(t.size());
    }
    borrowed_store::save(t, ec);
  }
  void remove(std::span<const std::string> ids, boost::system::error_code& ec) override {
    {
      std::lock_guard lock(m_);
      remove_sizes_.push_back(ids.size());
    }
    borrowed_store::remove(ids, ec);
  }
  std::vector<std::size_t> save_sizes() {
    std::lock_guard lock(m_);
    return save_sizes_;
  }
  std::vector<std::size_t> remove_sizes() {
    std::lock_guard lock(m_);
    return remove_sizes_;
  }

 private:
  std::mutex m_;
  std::vector<std::size_t> save_sizes_, remove_sizes_;
};

}  // namespace

TEST_CASE("store: the memory store writes inline, the default is group commit") {
  delayq::memory_store mem;
  CHECK(mem.in_process());
  borrowed_store wrapped(mem);  // does not override in_process()
  CHECK_FALSE(wrapped.in_process());
}

TEST_CASE("engine: an inline store gets one write per call, from every thread, and agrees") {
  io_thread io;
  delayq::executor_factory f;
  f.add("t", [](const delayq::task&) {});
  delayq::memory_store mem;
  auto owned = std::make_unique<counting_inline_store>(mem);
  counting_inline_store& store = *owned;
  delayq::engine eng(io.io, f, std::move(owned), fast_options());
  eng.start();

  constexpr int threads = 4, per_thread = 200, shared_ids = 8;
  std::vector<std::thread> users;
  std::atomic<int> errors{0};
  for (int k = 0; k < threads; ++k)
    users.emplace_back([&, k] {
      for (int i = 0; i < per_thread; ++i) {
        boost::system::error_code ec;
        // Ids of its own: schedule, and cancel every other one.
        const std::string own = "own-" + std::to_string(k) + "-" + std::to_string(i);
        eng.schedule("t", "", 1h, {own}, ec);
        if (ec) ++errors;
        if (i % 2 == 0 && !eng.cancel(own, ec)) ++errors;
        // Ids every thread races on: replace, reschedule, cancel.
        const std::string shared = "shared-" + std::to_string(i % shared_ids);
        delayq::schedule_options replace{shared, delayq::on_conflict::replace};
        eng.schedule("t", std::to_string(k), 1h + std::chrono::minutes(i), replace, ec);
        if (ec) ++errors;
        if (i % 3 == 0) eng.reschedule(shared, clock_type::now() + 2h, ec);
        if (i % 5 == 0) eng.cancel(shared, ec);
        if (ec) ++errors;
      }
    });
  for (auto& u : users) u.join();
  CHECK(errors == 0);

  // Never a group-committed batch: each change was its own store call.
  for (std::size_t n : store.save_sizes()) CHECK(n == 1);
  for (std::size_t n : store.remove_sizes()) CHECK(n == 1);

  // The store holds exactly what the engine holds, with the same content.
  const auto in_store = stored(mem);
  CHECK(in_store.size() == eng.pending());
  for (const auto& [id, t] : in_store) {
    const auto held = eng.find(id);
    REQUIRE(held.has_value());
    CHECK(*held == t);
  }
  for (int k = 0; k < threads; ++k)
    for (int i = 1; i < per_thread; i += 2)
      CHECK(in_store.count("own-" + std::to_string(k) + "-" + std::to_string(i)) == 1);
  CHECK(eng.stop());
}

TEST_CASE("engine: tasks due at the same instant run in the order they were scheduled") {
  io_thread io;
  recorder rec;
  delayq::executor_factory f;
  f.add("t", std::ref(rec));
  auto opts = fast_options();
  opts.workers = 1;  // attempts start in order; one worker also runs them in it
  delayq::engine eng(io.io, f, std::make_unique<delayq::memory_store>(), opts);
  eng.start();
  // Many ids, so they land in different shards of the engine.
  const auto due = clock_type::now() + 100ms;
  std::vector<std::string> ids;
  for (int i = 0; i < 40; ++i)
    ids.push_back(eng.schedule_at("t", "", due, {"same-instant-" + std::to_string(i)}));
  REQUIRE(rec.wait_for_count(ids.size()));
  CHECK(rec.ids() == ids);
}
