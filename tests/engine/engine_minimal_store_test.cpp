// What the engine promises on a store that implements task_store alone (no
// dead letters, no settings, no shards: docs/persistence.md, "Writing your
// own store"): it schedules, fires, cancels and recovers as on any store, and
// a task that runs out of attempts stays stored as it was
// (docs/failure-handling.md, "Dead letters"), to run again after a restart.

#include <doctest/doctest.h>

#include <atomic>
#include <condition_variable>
#include <delayq/delayq.hpp>
#include <future>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine_test_support.hpp"

using namespace delayq_test;

namespace {

// The tasks of a tasks_only_store, kept apart from it so that they outlive
// the engine that owns the store, as a restarted process finds its database.
struct tasks_only_data {
  std::mutex m;
  std::map<std::string, delayq::task> tasks;

  std::map<std::string, delayq::task> snapshot() {
    std::lock_guard lock(m);
    return tasks;
  }
};

// The smallest store there is: the four calls task_store requires and
// nothing else. Every role accessor keeps its default (null).
class tasks_only_store : public delayq::task_store {
 public:
  explicit tasks_only_store(tasks_only_data& data) : data_(data) {}
  using task_store::list;
  using task_store::remove;
  using task_store::save;

  void save(std::span<const delayq::task> tasks, boost::system::error_code& ec) override {
    ec = {};
    std::lock_guard lock(data_.m);
    for (const delayq::task& t : tasks) data_.tasks.insert_or_assign(t.id, t);
  }
  void remove(std::span<const std::string> ids, boost::system::error_code& ec) override {
    ec = {};
    std::lock_guard lock(data_.m);
    for (const std::string& id : ids) data_.tasks.erase(id);
  }
  delayq::list_summary list(const std::function<void(delayq::task&&)>& sink,
                            boost::system::error_code& ec) override {
    ec = {};
    const auto copy = data_.snapshot();  // the sink runs without our lock
    for (auto [id, t] : copy) sink(std::move(t));
    return {copy.size(), 0};
  }
  std::string describe() const override { return "tasks-only:"; }

 private:
  tasks_only_data& data_;
};

// A tasks_only_store that counts the dead letters the engine asks it to
// write: it has nowhere to put one, and a batch holding one would fail.
class bury_counting_store final : public tasks_only_store {
 public:
  bury_counting_store(tasks_only_data& data, std::atomic<int>& buries)
      : tasks_only_store(data), buries_(buries) {}
  using task_store::write;
  void write(std::span<const delayq::store_change> changes,
             boost::system::error_code& ec) override {
    for (const auto& c : changes)
      if (c.what == delayq::change_kind::bury) ++buries_;
    task_store::write(changes, ec);
  }

 private:
  std::atomic<int>& buries_;
};

delayq::engine_options minimal_store_options() {
  auto o = fast_options();
  o.retry.max_attempts = 2;
  o.retry.base = 1ms;
  o.retry.cap = 1ms;
  return o;
}

}  // namespace

TEST_CASE("minimal store: a store with no role beyond task_store answers null for each") {
  tasks_only_data data;
  tasks_only_store store(data);
  CHECK(store.dead_letters() == nullptr);
  CHECK(store.settings() == nullptr);
  CHECK(store.sharded() == nullptr);
  CHECK(store.sequences() == nullptr);
  boost::system::error_code ec;
  CHECK(delayq::dead_letters_of(store, ec) == nullptr);
  CHECK(ec == delayq::errc::unsupported);
  ec = {};
  CHECK(delayq::settings_of(store, ec) == nullptr);
  CHECK(ec == delayq::errc::unsupported);
  ec = {};
  CHECK(delayq::sequences_of(store, ec) == nullptr);
  CHECK(ec == delayq::errc::unsupported);
  // The default write() has nowhere to put a dead letter.
  const delayq::task t{"t-1", "t", "", clock_type::now(), 0};
  delayq::store_change bury{delayq::change_kind::bury, &t, "failed", clock_type::now()};
  ec = {};
  store.write(std::span(&bury, 1), ec);
  CHECK(ec == delayq::errc::unsupported);
}

TEST_CASE("minimal store: the engine schedules, fires, cancels and recovers on it") {
  tasks_only_data data;
  recorder ran;
  delayq::executor_factory f;
  f.add("t", std::ref(ran));
  std::string later;
  {
    io_thread io;
    delayq::engine eng(io.io, f, std::make_unique<tasks_only_store>(data), fast_options());
    eng.start();
    const auto now_id = eng.schedule("t", "now", 0ms);
    later = eng.schedule("t", "later", 1h);
    const auto doomed = eng.schedule("t", "cancelled", 1h);
    CHECK(data.snapshot().count(later) == 1);  // durable before acknowledged
    CHECK(data.snapshot().count(doomed) == 1);

    REQUIRE(ran.wait_for_count(1));
    CHECK(ran.ids() == std::vector<std::string>{now_id});

    CHECK(eng.cancel(doomed));
    CHECK(data.snapshot().count(doomed) == 0);  // cancel returns once the store has it
    CHECK_FALSE(eng.find(doomed).has_value());

    // The dead-letter calls have nothing to ask.
    boost::system::error_code ec;
    CHECK(eng.dead_letters(0, 10, ec).empty());
    CHECK(ec == delayq::errc::unsupported);
    CHECK_FALSE(eng.purge("no-such-letter", ec));
    CHECK(ec == delayq::errc::unsupported);
    CHECK_FALSE(eng.requeue("no-such-letter", clock_type::now(), ec));
    CHECK(ec == delayq::errc::unsupported);
    CHECK(eng.stats().dead == 0);

    CHECK(eng.stop());
    // The fired task left the store once it ran (stop() writes what is queued).
    const auto left = data.snapshot();
    CHECK(left.count(now_id) == 0);
    CHECK(left.count(later) == 1);
    CHECK(left.size() == 1);
  }
  // A restart on the same tasks holds the one still pending.
  io_thread io;
  delayq::engine eng(io.io, f, std::make_unique<tasks_only_store>(data), fast_options());
  eng.start();
  CHECK(eng.stats().loaded == 1);
  const auto found = eng.find(later);
  REQUIRE(found.has_value());
  CHECK(found->payload == "later");
  CHECK(eng.stop());
}

TEST_CASE("minimal store: a task that runs out of attempts stays stored and runs after a restart") {
  tasks_only_data data;
  std::mutex m;
  std::vector<std::uint32_t> attempts;
  delayq::executor_factory failing;
  failing.add("t", [&](const delayq::task& t) {
    {
      std::lock_guard lock(m);
      attempts.push_back(t.attempts);
    }
    throw std::runtime_error("downstream said 503");
  });
  std::string id;
  {
    io_thread io;
    delayq::engine eng(io.io, failing, std::make_unique<tasks_only_store>(data),
                       minimal_store_options());
    eng.start();
    id = eng.schedule("t", "order-9", 0ms);
    REQUIRE(eventually([&] { return eng.stats().died == 1; }));
    {
      std::lock_guard lock(m);
      CHECK(attempts == std::vector<std::uint32_t>{0, 1});
    }
    CHECK(eng.stats().pending == 0);  // no longer held: the store keeps it
    CHECK(eng.stats().dead == 0);     // and no dead letter exists
    CHECK(eng.stop());
    // Kept live, as the last retry stored it: nothing removed, nothing lost.
    const auto left = data.snapshot();
    REQUIRE(left.count(id) == 1);
    CHECK(left.at(id).payload == "order-9");
    CHECK(left.at(id).attempts == 1);
  }
  // The next process runs it again, and a success removes it.
  recorder ran;
  delayq::executor_factory working;
  working.add("t", std::ref(ran));
  io_thread io;
  delayq::engine eng(io.io, working, std::make_unique<tasks_only_store>(data),
                     minimal_store_options());
  eng.start();
  CHECK(eng.stats().loaded == 1);
  REQUIRE(ran.wait_for_count(1));
  CHECK(ran.ids() == std::vector<std::string>{id});
  CHECK(eng.stop());
  CHECK(data.snapshot().empty());
}

TEST_CASE("minimal store: a task out of attempts sends the store no dead letter to refuse") {
  // The store writer puts the changes of many callers in one batch, and the
  // default write() fails a whole batch at a change it cannot apply: a dead
  // letter sent to this store would fail the schedules written beside it.
  tasks_only_data data;
  std::atomic<int> buries{0};
  delayq::executor_factory f;
  f.add("t", [](const delayq::task&) { throw std::runtime_error("down"); });
  io_thread io;
  delayq::engine eng(io.io, f, std::make_unique<bury_counting_store>(data, buries),
                     minimal_store_options());
  eng.start();
  for (int i = 0; i < 20; ++i) eng.schedule("t", "p", 0ms);
  REQUIRE(eventually([&] { return eng.stats().died == 20; }));
  CHECK(buries.load() == 0);
  CHECK(eng.stats().dead == 0);
  CHECK(eng.stop());
  CHECK(data.snapshot().size() == 20);  // every one kept live, as its last retry left it
}

TEST_CASE(
    "minimal store: bury() drops the task there: kept live, unsupported, run after a restart") {
  // attempt_completion::bury() on a store without dead letters: nothing is
  // written (a dead letter there would fail the batch it shares), the store
  // keeps the task as it was last written, on_stored hears unsupported, and
  // the engine lets go of it until the next start().
  tasks_only_data data;
  std::atomic<int> buries{0};
  std::mutex m;
  std::condition_variable cv;
  std::vector<delayq::attempt_completion> dones;
  delayq::executor_factory f;
  f.add_async("t", [&](const delayq::task&, delayq::attempt_completion done) {
    std::lock_guard lock(m);
    dones.push_back(std::move(done));
    cv.notify_all();
  });
  std::string id;
  {
    io_thread io;
    delayq::engine eng(io.io, f, std::make_unique<bury_counting_store>(data, buries),
                       minimal_store_options());
    eng.start();
    delayq::schedule_options o;
    o.priority = 5;
    id = eng.schedule("t", "order-1", 0ms, o);
    delayq::attempt_completion done;
    {
      std::unique_lock lock(m);
      REQUIRE(cv.wait_for(lock, patience, [&] { return !dones.empty(); }));
      done = std::move(dones.front());
    }
    std::promise<boost::system::error_code> stored_ec;
    done.bury("poison", 9, [&](boost::system::error_code ec) { stored_ec.set_value(ec); });
    auto fut = stored_ec.get_future();
    REQUIRE(fut.wait_for(patience) == std::future_status::ready);
    CHECK(fut.get() == delayq::errc::unsupported);
    CHECK(buries.load() == 0);
    CHECK(eng.stats().died == 1);
    CHECK(eng.stats().dead == 0);
    CHECK(eng.stats().pending == 0);
    CHECK(eng.stop());
    const auto left = data.snapshot();
    REQUIRE(left.count(id) == 1);
    CHECK(left.at(id).priority == 5);  // as last written: the bury's priority is not stored
    CHECK(left.at(id).attempts == 0);
  }
  io_thread io;
  delayq::engine eng(io.io, f, std::make_unique<tasks_only_store>(data), minimal_store_options());
  eng.start();
  CHECK(eng.stats().loaded == 1);
  delayq::attempt_completion again;
  {
    std::unique_lock lock(m);
    REQUIRE(cv.wait_for(lock, patience, [&] { return dones.size() == 2; }));
    again = std::move(dones.back());
  }
  again("");  // runs again after the restart; a success removes it
  CHECK(eventually([&] { return data.snapshot().empty(); }));
  CHECK(eng.stop());
}
