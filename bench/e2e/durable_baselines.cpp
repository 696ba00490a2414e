// durable_baselines.cpp - the backends of the `durable` scenario of
// delayq-bench (redis, sqlite-full, sqlite-normal): how each opens, counts
// and clears its store, and its baselines, (1) one at a time (the seeds'
// producer on Redis) and (2) the store's raw limit. See durable_bench.cpp.

#include <SQLiteCpp/Database.h>
#include <SQLiteCpp/Statement.h>
#include <SQLiteCpp/Transaction.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "bench_cli.hpp"
#include "delayq/engine.hpp"
#include "delayq/record_codec.hpp"
#include "delayq/sqlite_store.hpp"
#include "durable_internal.hpp"
#include "io_thread.hpp"
#include "measure.hpp"
#include "redis_client.hpp"
#include "seeds_queue.hpp"

namespace delayq::bench {
// ------------------------------------------------------------ backends

// Redis: the store under prefix e2e-durable; baselines beside it.
backend redis_backend(const redis_options& server) {
  backend b;
  b.name = "redis";
  auto probe = std::make_shared<redis_client>(server);
  std::string fsync = "?";
  {
    const redis_reply r = probe->command({"CONFIG", "GET", "appendfsync"});
    if (r->elements == 2) fsync = std::string(r->element[1]->str, r->element[1]->len);
  }
  b.description = "redis-server " + server.address() + ", appendfsync " + fsync;
  redis_options store_opts = server;
  store_opts.prefix = "e2e-durable";
  b.open = [store_opts] { return std::make_unique<redis_store>(store_opts); };
  b.clear = [probe] {
    std::vector<std::string> keys;
    for (const char* prefix : {"e2e-durable", "e2e-durable-limit"})
      for (const char* k : {"tasks", "due", "meta", "quarantine", "quarantine:reason", "dead",
                            "dead:by_time", "dead:quarantine", "dead:quarantine:reason"})
        keys.push_back("{" + std::string(prefix) + "}:" + k);
    std::vector<std::string_view> cmd{"UNLINK"};
    for (const auto& k : keys) cmd.emplace_back(k);
    probe->command(cmd);
    seeds_queue::options so;
    so.prefix = "e2e-durable-seeds";
    seeds_queue::clear(*probe, so);
  };
  b.count = [probe] {
    return static_cast<std::uint64_t>(probe->command({"HLEN", "{e2e-durable}:tasks"})->integer);
  };
  b.one_at_a_time = [server](std::uint64_t n, double max_s) {
    durable_rate r{"seeds' producer: MULTI/HSET/ZADD/EXEC per task, 1 thread"};
    seeds_queue::options so;
    so.prefix = "e2e-durable-seeds";
    seeds_queue::producer producer(server, so);
    const auto due = to_epoch_ms(system_clock::now() + std::chrono::hours(1));
    const auto t0 = steady_clock::now();
    for (std::uint64_t i = 0; i < n; ++i) {
      if (seconds_since(t0) > max_s) {
        r.capped = true;
        break;
      }
      producer.add(make_id('s', i), "noop", "", due);
      ++r.tasks;
    }
    r.seconds = seconds_since(t0);
    return r;
  };
  b.limit = [server](std::uint64_t n, double max_s) {
    durable_rate r{"raw hiredis: MULTI batches of 1000 (HSET+ZADD), 8 pipelined"};
    constexpr std::uint64_t batch = 1000;
    constexpr std::uint64_t window = 8;
    redis_client conn(server);
    const std::string tasks_key = "{e2e-durable-limit}:tasks", due_key = "{e2e-durable-limit}:due";
    const auto due = system_clock::now() + std::chrono::hours(1);
    const std::string score = std::to_string(to_epoch_ms(due));
    std::uint64_t sent = 0, acked = 0;
    auto read_batch = [&](std::uint64_t size) {
      for (std::uint64_t k = 0; k < 2 * size + 2; ++k) conn.get_reply();  // throws on errors
      acked += size;
    };
    std::vector<std::uint64_t> sizes;
    const auto t0 = steady_clock::now();
    while (sent < n) {
      if (seconds_since(t0) > max_s) {
        r.capped = true;
        break;
      }
      const std::uint64_t size = std::min(batch, n - sent);
      conn.append({"MULTI"});
      for (std::uint64_t k = 0; k < size; ++k) {
        const task t = bench_task('l', sent + k, due);
        const std::string record = encode_task(t);
        conn.append({"HSET", tasks_key, t.id, record});
        conn.append({"ZADD", due_key, score, t.id});
      }
      conn.append({"EXEC"});
      sent += size;
      sizes.push_back(size);
      if (sizes.size() >= window) {
        read_batch(sizes.front());
        sizes.erase(sizes.begin());
      }
    }
    for (std::uint64_t size : sizes) read_batch(size);
    r.seconds = seconds_since(t0);
    r.tasks = acked;
    return r;
  };
  return b;
}

// SQLite with one synchronous level; baselines on a file of their own with
// the store's table and pragmas.
backend sqlite_backend(const std::string& dir, sqlite_options::synchronous_level level) {
  const bool full = level == sqlite_options::synchronous_level::full;
  backend b;
  b.name = full ? "sqlite-full" : "sqlite-normal";
  b.description = std::string("SQLite WAL, synchronous=") + (full ? "FULL" : "NORMAL");
  const std::string path = dir + "/" + b.name + ".db";
  const std::string base_path = dir + "/" + b.name + "-baseline.db";
  sqlite_options opts;
  opts.synchronous = level;
  b.open = [path, opts] { return std::make_unique<sqlite_store>(path, opts); };
  b.clear = [path, base_path] {
    remove_sqlite_files(path);
    remove_sqlite_files(base_path);
  };
  b.count = [path] {
    if (!std::filesystem::exists(path)) return std::uint64_t{0};
    SQLite::Database db(path, SQLite::OPEN_READONLY);
    return static_cast<std::uint64_t>(db.execAndGet("SELECT count(*) FROM tasks").getInt64());
  };
  const char* pragma = full ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL";
  auto open_baseline = [base_path, pragma] {
    remove_sqlite_files(base_path);
    auto db =
        std::make_unique<SQLite::Database>(base_path, SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE);
    db->execAndGet("PRAGMA journal_mode=WAL");
    db->exec(pragma);
    db->exec(
        "CREATE TABLE tasks (id TEXT PRIMARY KEY NOT NULL, due_ms INTEGER NOT NULL,"
        " record BLOB NOT NULL); CREATE INDEX tasks_due_ms ON tasks(due_ms);");
    return db;
  };
  auto insert = [](SQLite::Statement& st, const task& t) {
    const std::string record = encode_task(t);
    st.bind(1, t.id);
    st.bind(2, static_cast<std::int64_t>(to_epoch_ms(t.due)));
    st.bind(3, record.data(), static_cast<int>(record.size()));
    st.exec();
    st.reset();
  };
  constexpr const char* upsert =
      "INSERT INTO tasks(id, due_ms, record) VALUES(?1, ?2, ?3) ON CONFLICT(id) DO UPDATE SET "
      "due_ms = excluded.due_ms, record = excluded.record";
  b.one_at_a_time = [open_baseline, insert, upsert](std::uint64_t n, double max_s) {
    durable_rate r{"raw SQLite: one committed INSERT per task, 1 thread"};
    auto db = open_baseline();
    SQLite::Statement st(*db, upsert);
    const auto due = system_clock::now() + std::chrono::hours(1);
    const auto t0 = steady_clock::now();
    for (std::uint64_t i = 0; i < n; ++i) {
      if (seconds_since(t0) > max_s) {
        r.capped = true;
        break;
      }
      insert(st, bench_task('s', i, due));
      ++r.tasks;
    }
    r.seconds = seconds_since(t0);
    return r;
  };
  b.limit = [open_baseline, insert, upsert](std::uint64_t n, double max_s) {
    durable_rate r{"raw SQLite: transactions of 1000 INSERTs"};
    auto db = open_baseline();
    SQLite::Statement st(*db, upsert);
    const auto due = system_clock::now() + std::chrono::hours(1);
    const auto t0 = steady_clock::now();
    for (std::uint64_t i = 0; i < n;) {
      if (seconds_since(t0) > max_s) {
        r.capped = true;
        break;
      }
      const std::uint64_t size = std::min<std::uint64_t>(1000, n - i);
      SQLite::Transaction tx(*db, SQLite::TransactionBehavior::IMMEDIATE);
      for (std::uint64_t k = 0; k < size; ++k) insert(st, bench_task('l', i + k, due));
      tx.commit();
      i += size;
      r.tasks += size;
    }
    r.seconds = seconds_since(t0);
    return r;
  };
  return b;
}
}  // namespace delayq::bench
