// Helpers shared by the engine test files: an io_context on its own thread,
// executors that record runs or block on a latch, a store several engines can
// share in turn, and waits with a generous failure bound (never a timing
// claim).
#pragma once

#include <unistd.h>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <delayq/delayq.hpp>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
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
  int entered_so_far() {
    std::lock_guard lock(m);
    return entered;
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

// Waits until `eng` answers calls with not_running (its stop() has begun and
// no attempt starts any more).
inline bool wait_stopping(delayq::engine& eng) {
  const auto deadline = std::chrono::steady_clock::now() + patience;
  for (;;) {
    boost::system::error_code ec;
    eng.cancel("no-such-task", ec);
    if (ec == delayq::errc::not_running) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
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

// The private Redis that scripts/with-redis.sh started for this run.
inline std::string test_redis_uri() {
  const char* uri = std::getenv("DELAYQ_TEST_REDIS");
  if (!uri || !*uri)
    throw std::runtime_error(
        "DELAYQ_TEST_REDIS is not set: run the tests through scripts/test.sh, or "
        "scripts/with-redis.sh ctest ... (it starts a private redis-server)");
  return uri;
}

// A Redis store URI with a key prefix no other test (or run) uses.
inline std::string fresh_redis_uri(const std::string& name) {
  static std::atomic<int> counter{0};
  return test_redis_uri() + "/0?prefix=" + name + "-" + std::to_string(::getpid()) + "-" +
         std::to_string(counter++);
}

// A directory removed (with what is in it) at the end of the scope.
struct temp_dir {
  std::string path;
  temp_dir() {
    std::string tmpl = std::filesystem::temp_directory_path() / "delayq-engine-test.XXXXXX";
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path = tmpl;
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return path + "/" + name; }
};

inline std::map<std::string, delayq::task> stored(delayq::task_store& store) {
  std::map<std::string, delayq::task> out;
  store.list([&](delayq::task&& t) { out.emplace(t.id, std::move(t)); });
  return out;
}

// Forwards every call to another store: lets several engines in a row use one
// memory_store, as a restarted process reuses its Redis or SQLite store, and
// lets a test change one call by overriding it. It offers dead letters and
// settings when the other store does.
class borrowed_store : public delayq::task_store,
                       public delayq::dead_letter_store,
                       public delayq::settings_store {
 public:
  explicit borrowed_store(delayq::task_store& inner) : inner_(inner) {}
  using task_store::list;
  using task_store::remove;
  using task_store::save;
  delayq::dead_letter_store* dead_letters() noexcept override {
    return inner_.dead_letters() ? this : nullptr;
  }
  delayq::settings_store* settings() noexcept override {
    return inner_.settings() ? this : nullptr;
  }
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
  delayq::list_summary list_due(delayq::due_cursor& after, std::int64_t until_ms, std::size_t limit,
                                const std::function<void(delayq::task&&)>& sink,
                                boost::system::error_code& ec) override {
    return inner_.list_due(after, until_ms, limit, sink, ec);
  }
  std::vector<std::optional<delayq::task>> find(std::span<const std::string> ids,
                                                boost::system::error_code& ec) override {
    return inner_.find(ids, ec);
  }
  std::string describe() const override { return inner_.describe(); }
  void bury(std::span<const delayq::dead_letter> d, boost::system::error_code& ec) override {
    inner_.dead_letters()->bury(d, ec);
  }
  std::vector<delayq::dead_letter> list_dead(std::size_t offset, std::size_t limit,
                                             boost::system::error_code& ec) override {
    return inner_.dead_letters()->list_dead(offset, limit, ec);
  }
  std::optional<delayq::dead_letter> find_dead(std::string_view id,
                                               boost::system::error_code& ec) override {
    return inner_.dead_letters()->find_dead(id, ec);
  }
  void revive(std::span<const delayq::task> t, boost::system::error_code& ec) override {
    inner_.dead_letters()->revive(t, ec);
  }
  void purge(std::span<const std::string> ids, boost::system::error_code& ec) override {
    inner_.dead_letters()->purge(ids, ec);
  }
  std::size_t count_dead(boost::system::error_code& ec) override {
    return inner_.dead_letters()->count_dead(ec);
  }
  void quarantine(std::string_view id, std::string_view reason,
                  boost::system::error_code& ec) override {
    inner_.quarantine(id, reason, ec);
  }
  std::vector<std::pair<std::string, std::string>> load_settings(
      boost::system::error_code& ec) override {
    return inner_.settings()->load_settings(ec);
  }
  void save_setting(std::string_view key, std::string_view value,
                    boost::system::error_code& ec) override {
    inner_.settings()->save_setting(key, value, ec);
  }
  bool erase_setting(std::string_view key, boost::system::error_code& ec) override {
    return inner_.settings()->erase_setting(key, ec);
  }

 private:
  delayq::task_store& inner_;
};

// A store (over a memory store, the way a restarted process reuses its Redis
// or SQLite store) that a test controls: it fails every write while `down`
// (with `error`), can hold its next write until released, and logs every
// change it was asked to write, in order, as "kind:id".
class controlled_store : public borrowed_store {
 public:
  explicit controlled_store(delayq::task_store& inner) : borrowed_store(inner) {}
  using task_store::write;

  void write(std::span<const delayq::store_change> changes,
             boost::system::error_code& ec) override {
    {
      std::unique_lock lock(m_);
      ++writes;
      for (const auto& c : changes) log_.push_back(kind_name(c.what) + ":" + c.task->id);
      if (hold_next_) {
        hold_next_ = false;
        held_ = true;
        cv_.notify_all();
        cv_.wait(lock, [&] { return !held_; });
      }
      if (on_write) on_write(changes);
      if (down || fail_writes > 0) {
        if (fail_writes > 0) --fail_writes;
        ec = error;
        return;
      }
    }
    borrowed_store::write(changes, ec);
  }

  /// The next write blocks, once it has logged its changes, until release().
  void hold_next_write() {
    std::lock_guard lock(m_);
    hold_next_ = true;
  }
  bool wait_held() {
    std::unique_lock lock(m_);
    return cv_.wait_for(lock, patience, [&] { return held_; });
  }
  void release() {
    std::lock_guard lock(m_);
    held_ = false;
    cv_.notify_all();
  }
  std::vector<std::string> log() {
    std::lock_guard lock(m_);
    return log_;
  }

  std::atomic<bool> down{false};
  std::atomic<int> fail_writes{0};  // the next this many writes fail
  std::atomic<int> writes{0};       // write() calls so far
  boost::system::error_code error = delayq::errc::store_unavailable;
  /// Called inside every write, before it applies (under the store's lock).
  std::function<void(std::span<const delayq::store_change>)> on_write;

 private:
  static std::string kind_name(delayq::change_kind k) {
    switch (k) {
      case delayq::change_kind::save: return "save";
      case delayq::change_kind::remove: return "remove";
      case delayq::change_kind::bury: return "bury";
      case delayq::change_kind::revive: return "revive";
      case delayq::change_kind::purge: return "purge";
    }
    return "?";
  }
  std::mutex m_;
  std::condition_variable cv_;
  bool hold_next_ = false;
  bool held_ = false;
  std::vector<std::string> log_;
};

// A controlled_store that pipelines like redis_store: async_write() queues a
// batch and returns; a thread of its own applies the batches in order (each
// through controlled_store::write(), so holding and failing work the same)
// and completes them. Several batches can be in flight at once, which is what
// lets a newer change to an id travel while an older one is still unsettled.
class pipelined_store final : public controlled_store {
 public:
  explicit pipelined_store(delayq::task_store& inner) : controlled_store(inner) {}
  ~pipelined_store() override {
    {
      std::lock_guard lock(m_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  std::size_t max_writes_in_flight() const noexcept override { return 8; }
  void async_write(std::span<const delayq::store_change> changes,
                   std::function<void(boost::system::error_code)> done) override {
    std::lock_guard lock(m_);
    last_caller_ = std::this_thread::get_id();
    queue_.push_back({{changes.begin(), changes.end()}, std::move(done)});
    cv_.notify_all();
  }
  /// The thread that applies the batches and completes them.
  std::thread::id thread_id() const { return thread_.get_id(); }
  /// The thread that called async_write() last.
  std::thread::id last_caller() {
    std::lock_guard lock(m_);
    return last_caller_;
  }

 private:
  struct pending {
    std::vector<delayq::store_change> changes;
    std::function<void(boost::system::error_code)> done;
  };
  void run() {
    std::unique_lock lock(m_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      pending p = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      boost::system::error_code ec;
      write(p.changes, ec);
      p.done(ec);
      lock.lock();
    }
  }
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<pending> queue_;
  bool stop_ = false;
  std::thread::id last_caller_;
  std::thread thread_{[this] { run(); }};
};

}  // namespace delayq_test
