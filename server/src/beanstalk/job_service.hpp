// beanstalk/job_service.hpp - what each beanstalk command does to delayq:
// the engine holds the jobs (a job is a task, its tube the task's type), the
// lease broker hands ready jobs to reserving clients, the dead letters are
// the buried jobs (docs/beanstalk.md, "How jobs map onto delayq").
//
// A job's state, as beanstalk names it, is read from where delayq keeps it:
//   ready     due, waiting in the broker for a consumer (or about to be)
//   reserved  leased by the broker to a client
//   delayed   pending in the engine, due later
//   buried    a dead letter
//
// Every call answers through a handler, once, on any thread; calls that
// wait for the store (cancel, requeue, the dead letters, a new block of
// ids) run on the service's own blocking threads, never on the caller's.
#pragma once

#include <array>
#include <atomic>
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "beanstalk/command_reader.hpp"
#include "beanstalk/job_names.hpp"
#include "beanstalk/session_registry.hpp"
#include "delayq/engine.hpp"
#include "delayq/task_store.hpp"
#include "pull/lease_broker.hpp"

namespace delayq::server::beanstalk {

/// What a command's answer carries; the session turns it into the reply's
/// bytes (protocol.hpp).
struct answer {
  enum class kind {
    ok,              ///< INSERTED, DELETED, RELEASED, BURIED, TOUCHED, KICKED, FOUND, OK...
    not_found,       ///< NOT_FOUND
    draining,        ///< DRAINING (put while draining)
    bad_format,      ///< BAD_FORMAT (a value delayq cannot hold, e.g. a delay past max_delay)
    out_of_memory,   ///< OUT_OF_MEMORY (the engine's pending or per-type limit)
    internal_error,  ///< INTERNAL_ERROR (the store failed or did not confirm)
  } what = kind::ok;
  std::uint64_t id = 0;     ///< put, peek*, reserve-job: the job's id
  std::uint64_t count = 0;  ///< kick: jobs kicked
  std::string body;         ///< peek*, reserve-job: the job's data
  /// stats, stats-job, stats-tube: the YAML document (stats_yaml.hpp).
  std::string yaml;
  std::optional<leased_task> lease;  ///< reserve-job: the lease taken
};
using answer_handler = std::function<void(answer)>;

/// Thread safety: every member is safe from any thread. The engine, the
/// broker and the store must outlive it.
class job_service {
 public:
  struct parts {
    delayq::engine* engine = nullptr;
    lease_broker* broker = nullptr;
    /// Where the id sequence is kept (a store with the sequence role; a
    /// store without it gets numbers from this process only).
    task_store* sequences = nullptr;
    /// Whether a type has a push target (its jobs are pushed, never ready).
    std::function<bool(const std::string& type)> pushed;
    std::size_t max_job_size = 65535;
    /// The time-to-run of a task that names none (one put over HTTP).
    std::chrono::milliseconds default_ttr{30'000};
    std::string instance;  ///< stats' "id" and "hostname"
    /// Set (by SIGUSR1) to put the service in drain mode: every later put
    /// answers DRAINING, and stats says draining: true. Must outlive it.
    const std::atomic<bool>* draining = nullptr;
    /// --cluster: whether this instance holds the shard of task `id` now.
    /// Null: one instance, which holds every id.
    std::function<bool(const std::string& id)> owns;
    /// --cluster: sends an API call on task `id` (method, target, JSON body;
    /// docs/server.md) to the instance that owns it, and calls `done` once,
    /// on any thread, with the answer's status and body (503 or 421 when it
    /// could not be sent).
    using forward_fn = std::function<void(
        const std::string& id, std::string method, std::string target, std::string body,
        std::function<void(unsigned status, std::string body)> done)>;
    forward_fn forward;
  };
  job_service(parts p, std::size_t blocking_threads);
  ~job_service();
  job_service(const job_service&) = delete;
  job_service& operator=(const job_service&) = delete;

  job_names& names() noexcept { return names_; }
  lease_broker& broker() noexcept { return *p_.broker; }
  std::size_t max_job_size() const noexcept { return p_.max_job_size; }
  /// The lease a reserve asks for when the job names no time-to-run.
  std::chrono::milliseconds default_ttr() const noexcept { return p_.default_ttr; }

  /// Drain mode (parts::draining).
  bool draining() const noexcept { return p_.draining && p_.draining->load(); }

  void put(std::string type, std::string body, std::uint32_t priority, std::uint32_t delay_s,
           std::uint32_t ttr_s, answer_handler done);
  /// `held`: the job as the asking client reserved it (its task id and
  /// lease), if it did; the job number is looked up only otherwise.
  void remove(std::uint64_t job, std::optional<leased_task> held, answer_handler done);
  /// The job `held`, reserved by the asking client.
  void release(const leased_task& held, std::uint32_t priority, std::uint32_t delay_s,
               answer_handler done);
  void bury(const leased_task& held, std::uint32_t priority, answer_handler done);
  /// TOUCHED (ok) or NOT_FOUND; answers at once.
  answer touch(const leased_task& held);
  void reserve_job(std::uint64_t job, answer_handler done);

  void peek(std::uint64_t job, answer_handler done);
  void peek_ready(const std::string& type, answer_handler done);
  void peek_delayed(const std::string& type, answer_handler done);
  void peek_buried(const std::string& type, answer_handler done);
  void kick(const std::string& type, std::uint64_t bound, answer_handler done);
  void kick_job(std::uint64_t job, answer_handler done);
  void pause_tube(const std::string& type, std::uint32_t delay_s);

  void stats_job(std::uint64_t job, answer_handler done);
  /// `using_`, `watching`, `waiting`: the sessions' counts for this tube.
  void stats_tube(const std::string& type, std::size_t using_, std::size_t watching,
                  std::size_t waiting, answer_handler done);
  void stats(const connection_counts& connections, std::size_t tubes, answer_handler done);
  /// Every type known to the engine or to the broker.
  std::vector<std::string> types() const;

  /// Counts one command for stats ("cmd-put", ...).
  void count_command(verb v) noexcept { ++commands_[static_cast<std::size_t>(v)]; }
  /// Task `id` was reserved over beanstalk (stats-job: reserves).
  void count_reserve(const std::string& id);
  /// A reserved job's lease passed its time-to-run (stats: job-timeouts,
  /// stats-job: timeouts).
  void count_timeout(const std::string& id);

 private:
  // On the blocking threads; `fn`'s answer goes to `done` (internal_error
  // if it throws).
  void blocking(answer_handler done, std::function<answer()> fn);
  // The next job number, taking a block of numbers from the store when the
  // one in hand is used up (blocks).
  std::optional<std::uint64_t> next_number(boost::system::error_code& ec);
  // The next number whose task this instance may store (under a cluster,
  // one of a shard it holds; the numbers skipped are never used).
  std::optional<std::uint64_t> own_number(boost::system::error_code& ec);
  // Under a cluster: whether `id` is another instance's.
  bool foreign(const std::string& id) const { return p_.owns && !p_.owns(id); }
  // A command on another instance's job, sent there over HTTP.
  void forward_remove(const std::string& id, answer_handler done);
  void forward_kick(const std::string& id, answer_handler done);
  std::optional<std::uint64_t> next_number_now();
  // A put's arguments, as schedule_put() hands them to the engine.
  struct put_args {
    std::string type, body;
    std::uint32_t priority = 0, delay_s = 0;
    std::chrono::system_clock::time_point due;
    std::chrono::milliseconds ttr{0};
  };
  // Schedules job `number`; on a number taken already, tries the next one
  // (put_on_pool()), 16 times at most.
  void schedule_put(put_args args, std::uint64_t number, int tries, answer_handler done);
  // schedule_put() under a number drawn on the blocking threads.
  void put_on_pool(put_args args, int tries, answer_handler done);
  // The dead letter with task id `id`, or the first of `type` (scans).
  std::optional<dead_letter> find_buried(const std::string& id, boost::system::error_code& ec);
  std::vector<dead_letter> buried_of(const std::string& type, std::size_t limit,
                                     boost::system::error_code& ec, std::size_t* total = nullptr);
  answer job_answer(const task& t);
  // What beanstalkd counts per job and delayq does not store: kept here,
  // for the jobs this server has seen since it started (stats-job).
  struct job_counts {
    std::chrono::steady_clock::time_point born{};  // put here (else unknown)
    std::uint32_t delay_s = 0;                     // put's or release's delay
    std::uint32_t reserves = 0, timeouts = 0, releases = 0, buries = 0, kicks = 0;
  };
  // The counts of the jobs seen, by task id, under counts_mutex_: a job's
  // own id (a decimal, job_names::numeric()) is keyed by its number, which
  // takes 64 bytes a job where a string key took 96 (one per job put); any
  // other id by the id itself.
  class counted_jobs {
   public:
    job_counts* find(const std::string& id);
    // The counts of `id`, made when new; null when `limit` jobs are counted.
    job_counts* find_or_add(const std::string& id, std::size_t limit);
    void erase(const std::string& id);

   private:
    // The counts of `id`: added when `add` and new, else null when new.
    job_counts* lookup(const std::string& id, bool add);
    std::unordered_map<std::uint64_t, job_counts> by_number_;
    std::unordered_map<std::string, job_counts> by_id_;
  };
  template <class F>
  void with_counts(const std::string& id, F f);
  static answer error(const boost::system::error_code& ec);

  parts p_;
  job_names names_;
  boost::asio::thread_pool pool_;
  std::atomic<std::uint64_t> timeouts_{0};
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();

  mutable std::mutex ids_mutex_;  // the block of numbers in hand
  std::uint64_t next_ = 0, end_ = 0;
  std::mutex refill_mutex_;       // one refill at a time
  std::uint64_t local_next_ = 1;  // a store without the sequence role

  std::array<std::atomic<std::uint64_t>, verb_count> commands_{};
  mutable std::mutex counts_mutex_;
  counted_jobs jobs_;  // at most max_counted_jobs
  struct pause_count {
    std::uint64_t count = 0;    // pause-tube commands
    std::uint64_t seconds = 0;  // the last one's pause
  };
  std::map<std::string, std::uint64_t, std::less<>> deletes_;  // per type
  std::map<std::string, pause_count, std::less<>> pauses_;
};

}  // namespace delayq::server::beanstalk
