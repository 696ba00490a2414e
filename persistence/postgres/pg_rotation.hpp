// persistence/postgres/pg_rotation.hpp - keeps the live tasks' table from
// growing without bound while its rows churn, even when a long transaction
// elsewhere keeps VACUUM from removing anything. Internal.
//
// Why. A task is inserted when it is scheduled and deleted once it ran: at
// thousands a second, a DELETE-heavy table. VACUUM reclaims the dead rows,
// but only those older than the oldest snapshot still open anywhere in the
// cluster: one long transaction (a report, a forgotten psql session, a
// logical slot) pins them all, and the table and its indexes grow for as
// long as it stays open. TRUNCATE frees a table's files whatever snapshots
// are open. So the live tasks live in two partitions, generations 0 and 1
// (tasks_0, tasks_1), and a full one is emptied and truncated:
//
//   flip    when the generation new rows go to holds more dead rows than
//           live ones (postgres_options::rotate_at percent of them, and at
//           least `min_dead`), new rows go to the other
//           one from then on (the schema's meta, `gen`; every store reads it
//           again within a check interval, and a write that used the old
//           value is still right: pg_batch.hpp deletes an id from the other
//           generation as it upserts it);
//   drain   after `grace` (the rows due soon meanwhile run and go by
//           themselves), the live rows left in the old generation move to
//           the new one, a few hundred per transaction (UPDATE ... SET gen: a writer that
//           meets a row moved under it gets a serialization failure, and its
//           transaction is run again, never silently missing the row); rows
//           a writer holds locked are skipped, not waited for, and moved at
//           a later check;
//   truncate once the old generation is empty, TRUNCATE it under a short
//           lock_timeout (a writer holding it makes the truncate give way
//           and try again later, rather than queue every writer behind it).
//
// Without long transactions VACUUM keeps up (the partitions have aggressive
// autovacuum settings), dead rows stay few, and nothing flips: the rotation
// costs one small statistics query per check. docs/persistence.md,
// "PostgreSQL", has the measurements and the choice.
//
// One store at a time rotates a schema: the one whose connection holds the
// schema's advisory lock; the others only read `gen` again.
#pragma once

#include <utility>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace delayq::detail::pg {

class backend;
class connection;

/// Thread safety: note_writes() from any thread; the rest is the thread's.
class rotation {
 public:
  /// Dead rows a generation holds before it may flip, at least.
  static constexpr long long min_dead = 2000;
  /// How often a store looks.
  static constexpr std::chrono::seconds check_every{1};
  /// How long after a flip the old generation is drained.
  static constexpr std::chrono::seconds grace{2};
  /// Rows moved per transaction while draining: a writer that meets the
  /// drain waits for one such transaction.
  static constexpr int drain_batch = 500;
  /// The pause between two of them, for the writers they met (a drain of
  /// 1e6 rows takes 20 s longer for it).
  static constexpr std::chrono::milliseconds drain_pause{10};

  /// Starts the thread (`b` must outlive the rotation).
  explicit rotation(backend& b);
  ~rotation();
  rotation(const rotation&) = delete;
  rotation& operator=(const rotation&) = delete;

  /// Writes to the live tasks happened: the thread looks at once when it
  /// has not looked for a check interval.
  void note_writes(std::size_t changes) noexcept;

 private:
  void run();
  void check();
  bool drain_and_truncate(int old_gen, int new_gen);

  backend& b_;
  std::unique_ptr<connection> conn_;  // holds the advisory lock when rotating
  bool locked_ = false;
  std::chrono::steady_clock::time_point flipped_at_{};
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace delayq::detail::pg
