// seeds_queue.hpp - the delay queue the seed documents describe (seeds 000 and
// 003 in /work/shared/seeds), rebuilt faithfully as the baseline delayq-bench
// compares against. Not part of delayq.
//
// The design: a job's body lives in a hash (id -> body) and its due time in a
// sorted set (id scored by due epoch ms). A producer writes both in one round
// trip (MULTI, HSET, ZADD, EXEC, pipelined). One poller thread loops: it runs
// a Lua script that takes the due ids out of the sorted set atomically
// (ZRANGEBYSCORE -inf now LIMIT 0 n, then ZREM), fetches their bodies with one
// HMGET and hands them to worker threads; when a poll came back short (nothing
// more is due) it sleeps a fixed P ms, as the seeds' "spin 1 s" loop does. A
// worker runs the executor of each job, then deletes the bodies of its chunk
// with one HDEL. What is measured is exactly that P: lateness is bounded by P
// plus the round trips, and an idle queue still costs one EVAL per P.
//
// Where this rebuild is kinder than the seeds: the seeds delete per job and
// seed 000 fetches one job per poll; here a poll takes up to `batch` ids and a
// worker deletes a chunk at once, so the baseline is not slowed by round
// trips the design does not need.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "delayq/redis_store.hpp"
#include "redis_client.hpp"

namespace delayq::bench {

class seeds_queue {
 public:
  /// Runs one job: its id, body and due time (epoch ms, from the body).
  using handler = std::function<void(std::string_view id, std::int64_t due_ms)>;
  /// Called after a chunk of jobs ran and their bodies were deleted.
  using chunk_done = std::function<void(std::size_t jobs)>;

  struct options {
    std::string prefix = "e2e-seeds";  ///< keys {prefix}:jobs and {prefix}:due
    std::chrono::milliseconds period{1000};
    std::size_t workers = 2;
    std::size_t batch = 1000;  ///< most ids one poll takes
  };

  seeds_queue(redis_options server, options o, handler run, chunk_done done);
  ~seeds_queue();  // stops
  seeds_queue(const seeds_queue&) = delete;
  seeds_queue& operator=(const seeds_queue&) = delete;

  /// Starts the poller and the workers.
  void start();
  /// Stops them; jobs not yet polled stay in Redis.
  void stop();

  /// Polls done so far (each one EVAL), for the idle figures.
  std::uint64_t polls() const;

  /// A producer with a connection of its own (one per scheduling thread).
  class producer {
   public:
    producer(const redis_options& server, const options& o);
    /// Stores the job: MULTI, HSET, ZADD, EXEC in one round trip.
    void add(std::string_view id, std::string_view type, std::string_view params,
             std::int64_t due_ms);

   private:
    redis_client conn_;
    std::string jobs_key_, due_key_, body_;
  };

  /// Deletes the queue's keys.
  static void clear(redis_client& conn, const options& o);
  /// The job body as the seeds store it: DelayQueueJob as JSON.
  static std::string make_body(std::string_view id, std::string_view type, std::string_view params,
                               std::int64_t due_ms);

 private:
  struct job {
    std::string id;
    std::int64_t due_ms;
  };
  void poll_loop();
  void work_loop();

  redis_options server_;
  options options_;
  handler run_;
  chunk_done done_;
  std::string jobs_key_, due_key_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;  // stop() interrupts the poller's sleep; workers wait for chunks
  bool stopping_ = false;
  std::deque<std::vector<job>> chunks_;
  std::uint64_t polls_ = 0;
  std::vector<std::thread> threads_;
};

}  // namespace delayq::bench
