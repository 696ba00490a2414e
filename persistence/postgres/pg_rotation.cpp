// persistence/postgres/pg_rotation.cpp - see pg_rotation.hpp.
#include "pg_rotation.hpp"

#include <algorithm>

#include "delayq/log.hpp"
#include "pg_backend.hpp"
#include "pg_schema.hpp"

namespace delayq::detail::pg {

rotation::rotation(backend& b) : b_(b) {
  thread_ = std::thread([this] { run(); });
}

rotation::~rotation() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void rotation::note_writes(std::size_t) noexcept {}

void rotation::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    if (cv_.wait_for(lock, check_every, [&] { return stop_; })) break;
    lock.unlock();
    try {
      check();
    } catch (const pg_failure& f) {
      // Tried again at the next check; an advisory lock held on a connection
      // that broke is gone with it.
      log(log_level::warning, b_.name() + ": generation rotation: " + f.message);
      if (conn_ && !conn_->connected()) {
        conn_.reset();
        locked_ = false;
      }
    }
    lock.lock();
  }
  lock.unlock();
  conn_.reset();  // releases the advisory lock
}

void rotation::check() {
  const schema_sql& sql = b_.sql();
  if (!conn_ || !conn_->connected()) {
    conn_ = b_.calls().dial(":rotate");
    locked_ = false;
  }
  connection& c = *conn_;
  // Every store reads where new rows go; one of them rotates.
  const int gen = read_gen(c, sql);
  b_.set_gen(gen);
  if (!b_.options().rotate) return;
  if (!locked_) {
    statement s{{}, "SELECT pg_try_advisory_lock(hashtext($1))", {}};
    const std::string key = "delayq:rotate:" + sql.schema;
    s.args.text(key);
    const auto r = c.exchange(std::span{&s, 1}, true);
    locked_ = PQgetlength(r[0].get(), 0, 0) == 1 && PQgetvalue(r[0].get(), 0, 0)[0] != 0;
    if (!locked_) return;
  }
  const int other = 1 - gen;
  const std::string stats =
      "SELECT c.relname, pg_relation_size(c.oid), coalesce(s.n_live_tup, 0), "
      "coalesce(s.n_dead_tup, 0) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
      "LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid "
      "WHERE n.nspname = $1 AND c.relname IN ('tasks_0', 'tasks_1')";
  statement s{{}, stats, {}};
  s.args.text(sql.schema);
  const auto r = c.exchange(std::span{&s, 1}, false);
  long long size[2] = {0, 0}, live[2] = {0, 0}, dead[2] = {0, 0};
  for (int i = 0; i < PQntuples(r[0].get()); ++i) {
    const int g = get_bytes(r[0].get(), i, 0) == "tasks_1" ? 1 : 0;
    size[g] = get_int8(r[0].get(), i, 1);
    live[g] = get_int8(r[0].get(), i, 2);
    dead[g] = get_int8(r[0].get(), i, 3);
  }
  // The generation new rows no longer go to is drained and truncated first.
  if (size[other] > 0) {
    if (std::chrono::steady_clock::now() >= flipped_at_ + grace) drain_and_truncate(other, gen);
    return;
  }
  // VACUUM keeps up while dead rows stay below the live ones: nothing to do.
  if (dead[gen] < std::max(min_dead, live[gen] * b_.options().rotate_at / 100)) return;
  const std::string flip = "UPDATE " + sql.meta + " SET value = $1 WHERE key = 'gen'";
  statement f{{}, flip, {}};
  const std::string value = std::to_string(other);
  f.args.text(value);
  c.exchange(std::span{&f, 1}, true);
  b_.set_gen(other);
  flipped_at_ = std::chrono::steady_clock::now();
  log(log_level::info,
      b_.name() + ": tasks_" + std::to_string(gen) + " holds " + std::to_string(dead[gen]) +
          " dead rows beside " + std::to_string(live[gen]) +
          " live ones (VACUUM cannot reclaim them: a long transaction?); new "
          "tasks go to tasks_" +
          value + ", and tasks_" + std::to_string(gen) + " is truncated once drained");
  // Drained after the grace: by then every store writes to the new one, and
  // the rows due meanwhile have gone by themselves.
}

bool rotation::drain_and_truncate(int old_gen, int new_gen) {
  const schema_sql& sql = b_.sql();
  connection& c = *conn_;
  const std::string old_part = old_gen == 0 ? sql.tasks0 : sql.tasks1;
  // A few hundred rows a transaction, in id order from a cursor: each
  // UPDATE moves them to the new generation (row movement), so a writer that
  // meets a moved row fails and runs again rather than miss it. The rows are
  // locked first, and those a writer holds are skipped (moved at a later
  // check): a drain that waited for them, while holding the rows it had
  // moved, could deadlock with the writer's DELETE of several ids, which
  // PostgreSQL breaks only after deadlock_timeout (1 s), every write queued
  // behind it. A writer that meets the drain waits for one transaction of
  // `drain_batch` rows, a few milliseconds; small batches keep that short,
  // at the price of more transactions for a large generation.
  const std::string move =
      "WITH pick AS (SELECT id FROM " + old_part + " WHERE id > $1 ORDER BY id LIMIT " +
      std::to_string(drain_batch) + " FOR UPDATE SKIP LOCKED) UPDATE " + sql.tasks +
      " t SET gen = " + std::to_string(new_gen) +
      " FROM pick WHERE t.gen = " + std::to_string(old_gen) + " AND t.id = pick.id RETURNING t.id";
  std::string cursor;
  std::size_t moved = 0;
  for (bool first = true;; first = false) {
    {
      // Between batches, a pause: a writer that waited for the last one got
      // a serialization failure at its commit and sends its batch again at
      // once; the pause lets that resend through before the next batch locks
      // more rows, so one writer does not meet batch after batch (the
      // pipeline gives up on a write after 3 such failures).
      std::unique_lock lock(mutex_);
      if (!first && cv_.wait_for(lock, drain_pause, [&] { return stop_; })) return false;
      if (stop_) return false;
    }
    statement s{{}, move, {}};
    s.args.bytea(cursor);
    std::vector<result_ptr> r;
    try {
      r = c.exchange(std::span{&s, 1}, true);
    } catch (const pg_failure& f) {
      if (f.sqlstate == "40001" || f.sqlstate == "40P01") {
        // Tried again at the next check. A deadlock cost every writer up to
        // deadlock_timeout: said, so that a stall has a name in the log.
        if (f.sqlstate == "40P01")
          log(log_level::warning, b_.name() + ": generation drain: " + f.message +
                                      " (PostgreSQL broke a lock cycle with a writer; "
                                      "drained again at the next check)");
        return false;
      }
      throw;
    }
    const int n = PQntuples(r[0].get());
    if (n == 0) break;
    moved += static_cast<std::size_t>(n);
    for (int i = 0; i < n; ++i) cursor = std::max(cursor, std::string(get_bytes(r[0].get(), i, 0)));
  }
  // Empty now, under a lock that keeps writers out: truncate. A writer (or
  // a list()) holding the partition makes the lock give way after a moment
  // instead of queueing every writer behind it; the next check tries again.
  const std::string lock = "LOCK TABLE " + old_part + " IN ACCESS EXCLUSIVE MODE";
  const std::string empty = "SELECT NOT EXISTS (SELECT 1 FROM " + old_part + ")";
  std::vector<statement> first(4);
  first[0].sql = "BEGIN";
  first[1].sql = "SET LOCAL lock_timeout = '100ms'";
  first[2].sql = lock;
  first[3].sql = empty;
  bool truncated = false;
  try {
    const auto r = c.exchange(first, true);
    const bool is_empty = PQgetlength(r[3].get(), 0, 0) == 1 && PQgetvalue(r[3].get(), 0, 0)[0];
    const std::string truncate = "TRUNCATE " + old_part;
    std::vector<statement> last(is_empty ? 2 : 1);
    if (is_empty) {
      last[0].sql = truncate;
      last[1].sql = "COMMIT";
    } else {
      last[0].sql = "ROLLBACK";  // a writer with the old generation put rows there: drain again
    }
    c.exchange(last, true);
    truncated = is_empty;
  } catch (const pg_failure& f) {
    statement rollback{{}, "ROLLBACK", {}};
    if (c.connected()) c.exchange(std::span{&rollback, 1}, true);
    if (f.sqlstate != "55P03") throw;  // lock_timeout: next check
  }
  if (truncated)
    log(log_level::info, b_.name() + ": tasks_" + std::to_string(old_gen) + " drained (" +
                             std::to_string(moved) + " live tasks moved) and truncated");
  return truncated;
}

}  // namespace delayq::detail::pg
