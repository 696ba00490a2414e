// Helpers shared by the engine test files: an io_context on its own thread,
// executors that record runs or block on a latch, a store several engines can
// share in turn, and waits with a generous failure bound (never a timing
// claim).
#pragma once

#include <utility>  // before Boost.Asio (Boost 1.74 + C++20)

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <condition_variable>
#include <delayq/delayq.hpp>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace delayq_test {

using namespace std::chrono_literals;
using clock_type = std::chrono::system_clock;

// Generous upper bound for waiting on an event; reaching it fails the test.
constexpr auto patience = 60s;
// Lateness allowed beyond one tick: a shared, noisy machine (and sanitizers).
constexpr auto margin = 5s;

// An io_context run by a thread of its own for the duration of a test.
struct io_thread {
  boost::asio::io_context io;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard{io.get_executor()};
  std::thread runner{[this] { io.run(); }};
  ~io_thread() {
    guard.reset();
    io.stop();
    runner.join();
  }
};

// Records every execution with its time, and lets a test wait for a count.
struct recorder {
  struct run {
    delayq::task t;
    clock_type::time_point at;
  };
  std::mutex m;
  std::condition_variable cv;
  std::vector<run> runs;

  void operator()(const delayq::task& t) {
    std::lock_guard lock(m);
    runs.push_back(run{t, clock_type::now()});
    cv.notify_all();
  }
  bool wait_for_count(std::size_t n) {
    std::unique_lock lock(m);
    return cv.wait_for(lock, patience, [&] { return runs.size() >= n; });
  }
  std::vector<run> snapshot() {
    std::lock_guard lock(m);
    return runs;
  }
  std::vector<std::string> ids() {
    std::vector<std::string> out;
    for (auto& r : snapshot()) out.push_back(r.t.id);
    return out;
  }
};

// A gate an executor can block on until the test opens it.
struct latch {
  std::mutex m;
  std::condition_variable cv;
  bool open = false;
  int entered = 0;
  void enter_and_wait() {
    std::unique_lock lock(m);
    ++entered;
    cv.notify_all();
    cv.wait(lock, [&] { return open; });
  }
  bool wait_entered(int n) {
    std::unique_lock lock(m);
    return cv.wait_for(lock, patience, [&] { return entered >= n; });
  }
  void release() {
    std::lock_guard lock(m);
    open = true;
    cv.notify_all();
  }
};

inline delayq::engine_options fast_options() {
  delayq::engine_options o;
  o.tick = 10ms;
  o.slots = 64;
  o.workers = 2;
  o.retry.base = 5ms;
  o.retry.cap = 20ms;
  return o;
}

template <class Pred>
bool eventually(Pred pred) {
  // Polls a condition the engine exposes only through its counters. Each
  // round yields the CPU; the bound is a failure guard, not a timing claim.
  const auto deadline = std::chrono::steady_clock::now() + patience;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

inline std::map<std::string, delayq::task> stored(delayq::task_store& store) {
  std::map<std::string, delayq::task> out;
  store.list([&](delayq::task&& t) { out.emplace(t.id, std::move(t)); });
  return out;
}

// Forwards every call to another store: lets several engines in a row use one
// memory_store, as a restarted process reuses its Redis or SQLite store, and
// lets a test change one call by overriding it.
class borrowed_store : public delayq::task_store {
 public:
  explicit borrowed_store(delayq::task_store& inner) : inner_(inner) {}
  using task_store::list;
  using task_store::remove;
  using task_store::save;
  void save(std::span<const delayq::task> t, boost::system::error_code& ec) override {
    inner_.save(t, ec);
  }
  void remove(std::span<const std::string> ids, boost::system::error_code& ec) override {
    inner_.remove(ids, ec);
  }
  delayq::list_summary list(const std::function<void(delayq::task&&)>& sink,
                            boost::system::error_code& ec) override {
    return inner_.list(sink, ec);
  }
  std::string describe() const override { return inner_.describe(); }
  void bury(std::span<const delayq::dead_letter> d, boost::system::error_code& ec) override {
    inner_.bury(d, ec);
  }
  std::vector<delayq::dead_letter> list_dead(std::size_t offset, std::size_t limit,
                                             boost::system::error_code& ec) override {
    return inner_.list_dead(offset, limit, ec);
  }
  std::optional<delayq::dead_letter> find_dead(std::string_view id,
                                               boost::system::error_code& ec) override {
    return inner_.find_dead(id, ec);
  }
  void revive(std::span<const delayq::task> t, boost::system::error_code& ec) override {
    inner_.revive(t, ec);
  }
  void purge(std::span<const std::string> ids, boost::system::error_code& ec) override {
    inner_.purge(ids, ec);
  }
  std::size_t count_dead(boost::system::error_code& ec) override { return inner_.count_dead(ec); }

 private:
  delayq::task_store& inner_;
};

}  // namespace delayq_test
