// measure.hpp - what delayq-bench measures with: CPU clocks of this process
// and of redis-server, lateness buffers per thread, a completion counter to
// wait on, a progress line, and percentiles; and the formatting and clean-up
// helpers its files share.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace delayq::bench {

/// User + system CPU seconds this process has used (all threads).
double process_cpu_seconds();

/// User + system CPU seconds of process `pid`, read from /proc/<pid>/stat;
/// nullopt when it cannot be read (Redis on another host).
std::optional<double> pid_cpu_seconds(long pid);

/// Lateness samples, one buffer per recording thread, so workers never share a
/// lock or a cache line while they record. record() is wait-free after a
/// thread's first call; take() must run after every record() it should see
/// (the completion counter provides that ordering).
///
/// Thread safety: record() from any thread; take() from one thread while no
/// record() runs.
class lateness_recorder {
 public:
  lateness_recorder();
  /// `late`: execution start minus due time (negative when early).
  void record(std::chrono::system_clock::duration late);
  /// Every sample recorded so far, in microseconds, sorted; the buffers are
  /// emptied.
  std::vector<std::int64_t> take();

 private:
  struct buffer {
    std::vector<std::int64_t> samples;
  };
  buffer& mine();
  std::uint64_t generation_;  // tells a thread's cached buffer of an older recorder apart
  std::mutex mutex_;          // only taken when a thread records for the first time
  std::vector<std::unique_ptr<buffer>> buffers_;
};

/// Counts finished tasks; wait() blocks until `target` is reached.
///
/// Thread safety: add() from any thread; wait() from one.
class completion {
 public:
  explicit completion(std::uint64_t target) : target_(target) {}
  void add(std::uint64_t n = 1);
  std::uint64_t done() const noexcept { return done_.load(std::memory_order_acquire); }
  std::uint64_t target() const noexcept { return target_; }
  /// Waits until done() >= target, calling `tick(done())` about every 200 ms
  /// (for the progress line). Returns false when `limit` passed first.
  template <class Tick>
  bool wait(std::chrono::steady_clock::duration limit, Tick tick) {
    const auto end = std::chrono::steady_clock::now() + limit;
    std::unique_lock lock(mutex_);
    while (done() < target_) {
      if (std::chrono::steady_clock::now() >= end) return false;
      cv_.wait_for(lock, std::chrono::milliseconds(200), [&] { return done() >= target_; });
      lock.unlock();
      tick(done());
      lock.lock();
    }
    return true;
  }

 private:
  std::uint64_t target_;
  std::atomic<std::uint64_t> done_{0};
  std::mutex mutex_;
  std::condition_variable cv_;
};

/// A progress line on stderr: rewritten in place (`\r`) about five times a
/// second when stderr is a terminal, else one plain line every five seconds
/// (CI logs stay short).
class progress {
 public:
  progress(std::string label, std::uint64_t total);
  void show(std::uint64_t done);
  /// Ends the line (terminal) or prints the last one.
  void finish(std::uint64_t done);

 private:
  void print(std::uint64_t done, bool final);
  std::string label_;
  std::uint64_t total_;
  bool tty_;
  std::chrono::steady_clock::time_point start_, last_;
};

/// Summary of a sorted sample vector (microseconds).
struct distribution {
  std::uint64_t count = 0;
  double mean_us = 0;
  std::int64_t p50_us = 0, p90_us = 0, p99_us = 0, p999_us = 0, max_us = 0, min_us = 0;
  std::vector<std::int64_t> percentiles_us;  ///< p1 .. p100 (index 0 is p1)
};
distribution summarize(const std::vector<std::int64_t>& sorted);

/// Seconds on the steady clock since `t0`.
inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Deletes an SQLite database file and its -wal and -shm files, if present.
void remove_sqlite_files(const std::string& path);

/// `v` with `prec` decimals ("3.14").
std::string fmt(double v, int prec = 2);
/// A count or rate in a table cell: "1.25 M", "12.5 k", "950".
std::string fmt_count(double v);

}  // namespace delayq::bench
