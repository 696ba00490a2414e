// delayq/engine_options.hpp - how an engine is tuned (engine_options) and the
// policies it is given: retries, alerts. Plain values: set them before the
// engine is built; the engine keeps its own copy.
#pragma once

#include <utility>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>

#include "delayq/shard_leases.hpp"

namespace delayq {

/// How failed attempts are retried.
///
/// After a failed attempt k (k = 1 for the first), the task waits a random
/// delay drawn uniformly from [0, min(cap, base * 2^(k-1))] ("full jitter":
/// retries of many tasks that failed together spread out instead of hitting
/// the recovering service in waves), then runs again. After `max_attempts`
/// attempts in all it becomes a dead letter.
struct retry_policy {
  std::uint32_t max_attempts = 3;
  std::chrono::milliseconds base{1000};
  std::chrono::milliseconds cap{std::chrono::minutes{5}};
};

/// Something an operator should hear about.
struct alert {
  enum class kind {
    task_died,     ///< A task became a dead letter.
    failure_rate,  ///< A type's failure rate crossed the threshold.
  };
  kind what = kind::task_died;
  std::string type;
  std::string task_id;  ///< task_died: the task.
  std::string error;    ///< task_died: its last error.
  /// failure_rate: failed / finished attempts of the type over the window.
  double failure_rate = 0;
  std::uint64_t attempts = 0;  ///< failure_rate: attempts finished in the window.
  std::uint64_t failures = 0;  ///< failure_rate: of which failed.
};

/// When and how alerts are raised.
struct alert_options {
  /// Called for every alert, on a worker thread (never the ticking strand),
  /// without the engine's lock held. An exception from it is caught and
  /// logged. Empty: no alerts.
  std::function<void(const alert&)> on_alert;
  /// A type's failure rate at or above this, over `window`, raises one
  /// failure_rate alert; it is raised again only after the rate fell below.
  double failure_rate_threshold = 0.5;
  /// Fewer finished attempts than this in the window never alert.
  std::uint64_t min_attempts = 10;
  std::chrono::seconds window{60};
};

/// How an engine is tuned. With the defaults (a 1 ms tick) a task fires at
/// most one tick plus the timer's wake-up and a worker's start after its due
/// time: p99 0.86-1.33 ms for 10,000 tasks at delays up to 10 s on an idle
/// machine (docs/benchmarks.md, "The core rebuilt"); a burst of many tasks
/// due at once also waits for free workers.
///
/// Thread safety: a plain value; give the engine a copy.
struct engine_options {
  /// Resolution of the wheel: a task fires at the first tick boundary at or
  /// after its due time, so lateness is below one tick plus dispatch time.
  /// The timer wakes only for a tick that has a task due, so a fine tick
  /// costs nothing while nothing is due (timer_wheel.hpp, "Tick and slots").
  std::chrono::milliseconds tick{1};
  /// Buckets in the wheel. One revolution is `tick * slots` (4.1 s by
  /// default); longer delays wait more revolutions in their slot, and a
  /// slot is read only in a revolution where something in it is due.
  std::size_t slots = 4096;
  /// Task tables the engine splits its tasks over, by id hash, 1 to 64:
  /// each a wheel of `slots` buckets under a lock of its own, so that calls
  /// on ids of different tables (from several threads) do not wait for each
  /// other. A call on one id locks one table; a batch, the tables its ids
  /// fall in. A table makes its slot arrays (about 150 KB at 4,096 slots)
  /// with its first task due within two revolutions, so an engine started
  /// with nothing in it takes under 1 MB at 32 tables (docs/benchmarks.md,
  /// "idle tables"); a task costs the same at 8 tables or 32. 32 by
  /// default: with more threads calling than cores, a thread descheduled
  /// while it holds a table's lock stalls every call that needs that table:
  /// four threads on two cores did 0.74-0.80x of what four separate
  /// engines did with 8 tables, 0.83-0.85x with 32 (medians of five runs;
  /// docs/benchmarks.md, "Four threads: a bound, and 32 tables").
  std::size_t tables = 32;
  /// Threads that run executors. Never the thread that ticks the wheel.
  std::size_t workers = 2;
  /// Most tasks held at once (waiting, retrying or running). Beyond it
  /// schedule() fails with errc::queue_full.
  std::size_t max_pending = std::numeric_limits<std::size_t>::max();
  /// Largest payload accepted, in bytes (errc::payload_too_large beyond).
  std::size_t max_payload = std::size_t{1} << 20;
  /// Furthest due time accepted, measured from now (errc::due_too_far).
  std::chrono::milliseconds max_delay = std::chrono::hours{24 * 366 * 10};
  /// How failed attempts are retried, and when a task becomes a dead letter.
  delayq::retry_policy retry;
  /// Per-type overrides of `retry`.
  std::map<std::string, delayq::retry_policy, std::less<>> retry_per_type;
  /// Per-type execution timeouts: an attempt still running after its
  /// timeout counts as failed and is retried by the policy. The attempt
  /// itself is not interrupted (a synchronous executor keeps its worker
  /// until it returns), and its late outcome is ignored.
  std::map<std::string, std::chrono::milliseconds, std::less<>> timeout_per_type;
  /// Alerts on dead letters and on failure rates.
  alert_options alerts;
  /// Most attempts of one type running at once, per type; a type not listed
  /// is limited only by `workers`. Tasks over the limit wait their turn in due
  /// order.
  std::map<std::string, std::size_t, std::less<>> type_concurrency;
  /// When false (the default) schedule() rejects a type that has no executor
  /// with errc::unknown_type. Set it in a process that schedules work for
  /// types registered elsewhere.
  bool accept_unregistered_types = false;
  /// How fast start() releases tasks that were already overdue when it loaded
  /// them, in tasks per second, in due order; 0 releases them all at once.
  /// A process that was down for an hour may find a million tasks overdue;
  /// spreading them keeps the executors' downstream services standing.
  double catch_up_rate = 10000;
  /// Most pending tasks per type: scheduling past it fails with
  /// errc::type_full and stores nothing (1 means "one job per topic").
  /// Pending means held by the engine: delayed, due, running or waiting for
  /// a retry. A replace of a pending task of the same type takes no second
  /// place; on_conflict::keep takes none. The check and the insert happen
  /// under one lock, so two calls racing for the last place cannot both
  /// get it. A schedule_many() batch that would overfill a type fails as a
  /// whole (nothing stored, `bad` names the first task past the capacity).
  /// A requeue() of a dead letter into a full type fails with type_full too.
  std::map<std::string, std::size_t, std::less<>> type_capacity;
  /// How far ahead the engine holds tasks in memory; 0 (the default): every
  /// task. With a horizon, a task due later stays in the store only (its
  /// schedule writes it there and takes no wheel memory), and the engine
  /// reads the tasks coming within the horizon from the store's due index in
  /// pages, ahead of their due time, as time advances; start() loads only the
  /// horizon. Calls that name a task it does not hold (cancel, reschedule,
  /// signal, find, status, and schedule with an id and on_conflict reject or
  /// keep) look it up in the store first: one more store round trip for
  /// those. pending(), max_pending and type_capacity then count held tasks
  /// only (those due within the horizon). Needs a store with list_due() and
  /// find() (Redis and SQLite); with another store, or an in-process one, the
  /// engine holds every task and logs why. See docs/scale-out.md, "The horizon".
  std::chrono::milliseconds horizon{0};
  /// Store writes queued and not yet sent before calls that wait for their
  /// write are refused: async_schedule() and, by default, every schedule call
  /// then fail with errc::busy (nothing stored). Writes the engine makes for
  /// itself (removals, retries, dead letters) are never refused.
  std::size_t max_queued_writes = 100'000;
  /// What a blocking schedule call does when max_queued_writes writes are
  /// queued: fail with errc::busy (the default), or wait for room.
  /// async_schedule() never waits: it fails with errc::busy.
  enum class queue_full_policy { fail, wait };
  queue_full_policy when_write_queue_full = queue_full_policy::fail;
  /// Where a change's store write is made when no other write is in flight.
  /// A blocking call (schedule, cancel, reschedule...) always writes on its
  /// own thread then: it waits for the write anyway, and a hand-off to the
  /// writer thread and back would add two thread switches to it. With
  /// `caller_writes`, so do async_schedule() and the attempt outcomes an
  /// executor reports (the removal after a success, a retry's count): the
  /// calling thread is blocked for one store write (an fsync with SQLite's
  /// synchronous=full) and saves the hand-offs; what others queue meanwhile
  /// goes out together in the writer thread's next write (group commit). For a program
  /// whose threads answer a request where they stand (delayq-server's I/O
  /// threads). Off by default: async_schedule() never blocks its caller.
  /// Without it, on a store that pipelines (max_writes_in_flight() > 1:
  /// Redis, PostgreSQL, SQLite with its write thread) the calling thread
  /// still hands the change to the store's async_write() itself, which only
  /// queues it, and the store's thread reports it: one hand-off each way,
  /// none through the writer thread.
  bool caller_writes = false;
  /// Run as one instance of a cluster sharing a sharded store (opt-in; see
  /// docs/scale-out.md, "The engine in a cluster"). The store must split
  /// tasks into `cluster->shards` shards (shard_store::shards(); else start()
  /// fails with errc::shard_mismatch) and make lease tables
  /// (make_shard_leases()). The engine then holds leases on a share of the
  /// shards (a thread renews them every lease/3), holds and runs only the
  /// tasks of the shards it holds, and fires a task only while its shard's
  /// lease is surely ours (shard_lease::valid_until). A schedule of a task
  /// whose shard another instance holds is written to the store and then let
  /// go (its owner runs it). Calls naming an id (cancel, reschedule, signal,
  /// requeue, schedule with an id) whose shard this instance does not hold
  /// fail with errc::not_owner: only the owner can say whether it will run.
  /// Their store writes carry the shard's lease token (store_change::fence):
  /// when another instance took the shard while the call decided, the write
  /// is refused and the call fails with errc::lease_lost, having changed
  /// nothing.
  /// find() and status() of such an id read the store. start() returns after
  /// the first lease round, holding the shards it won then; stop() releases
  /// the leases once the running attempts ended (after a drain that timed
  /// out, the leases of shards with attempts still running are left to
  /// expire instead). A shard another instance should own is handed over
  /// only once no attempt runs on it (docs/scale-out.md).
  std::optional<cluster_options> cluster;
  /// engine_options::cluster: called when a store setting may have changed
  /// on another instance (settings_store::save_setting, erase_setting), so an
  /// application that keeps its configuration in the settings (delayq-server:
  /// push targets) rereads it and the whole cluster runs with one. Called
  /// once per batch of setting notices; once after start() (a change made
  /// between the application's own read and the engine's subscription would
  /// otherwise be missed); after the notice connection was lost and came
  /// back (notices may have been missed); every minute, since notices are
  /// best effort; and every lease round when the store sends no notices.
  /// Return false when the reread failed: it is called again about once a
  /// second until it returns true. Never two calls at once: it runs on the engine's
  /// notice thread (on its lease thread when the store sends no notices),
  /// without the engine's lock, and notices of saved tasks wait meanwhile.
  /// It may call the store. An exception from it is logged and counts as
  /// false.
  std::function<bool()> on_settings_changed;

  /// engine_options::cluster: called after each lease round in which shards
  /// were lost or are leaving. A hand-over waits for every attempt running
  /// on the shard, and an asynchronous executor may hold attempts it has not
  /// begun any work on (delayq-server: a task waiting for a consumer, a push
  /// waiting for a connection): it should then ask engine::attempt_current()
  /// of each and abandon (drop the completion of) those it is false for,
  /// which the shard's next owner runs instead. Otherwise one that nobody
  /// takes holds the hand-over up, and every task due on the shard with it,
  /// for as long as it waits. Runs on the engine's lease thread, without the
  /// engine's lock; keep it short (no store, no network). An exception from
  /// it is logged and ignored.
  std::function<void()> on_attempts_stale;

  /// Recurring schedules (engine::upsert_schedule(), docs/schedules.md):
  /// how far ahead of its time an occurrence becomes a task, 1 s to 1 day.
  /// At most about 1.5 times this many milliseconds of a schedule's
  /// occurrences are tasks at once; a change to a schedule reaches the
  /// occurrences not yet made; and an occurrence is missed (missed_runs)
  /// only when no instance could make it this long before its time. With
  /// `cluster`, at least two leases and a second is used (a dead owner's
  /// schedules are taken over within two leases).
  std::chrono::milliseconds schedule_lookahead{10000};
};

}  // namespace delayq
