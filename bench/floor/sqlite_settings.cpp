// delayq-bench-sqlite-settings: what SQLite's own settings cost a commit and
// a large table, in C, without delayq: the figures behind the floor's choice
// of settings (floor_server.cpp, job_file) and behind the store keeping
// SQLite's 4 KiB pages (docs/benchmarks.md, "The floor under table 1's
// one-connection rows").
//
//   delayq-bench-sqlite-settings [--quick] [--dir DIR]
//
// commits  one INSERT and then one DELETE a transaction (autocommit), into
//          the floor's one-table schema, at synchronous=normal and full,
//          with each page size and locking mode in `settings` below: mean
//          microseconds a commit, checkpoints included
// pages    the store's schema (tasks: id TEXT PRIMARY KEY, due_ms, record;
//          an index on (due_ms, id)) with 4 KiB and 1 KiB pages: one
//          transaction inserting N tasks with random ids, the file's size,
//          a full scan (what a start reads) and 200 reads of a page of
//          1,000 due tasks (what the horizon's pager reads)
//
// Files go in DIR (default: a fresh directory under /tmp), removed at the
// end. --quick: a few hundred commits and 2,000 tasks (CI's smoke).
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

namespace {

using clock_type = std::chrono::steady_clock;

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "delayq-bench-sqlite-settings: %s\n", why.c_str());
  std::exit(2);
}

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// One database file, fresh: removed (with its WAL and shared memory) when
// opened and when closed.
class db_file {
 public:
  db_file(std::string path, const std::string& before_wal, const char* sync)
      : path_(std::move(path)) {
    remove_files();
    if (sqlite3_open(path_.c_str(), &db_) != SQLITE_OK) die("cannot open " + path_);
    if (!before_wal.empty()) exec(before_wal);  // the page size takes only before WAL
    exec("PRAGMA journal_mode=WAL");
    exec(std::string("PRAGMA synchronous=") + sync);
  }
  ~db_file() {
    sqlite3_close(db_);
    remove_files();
  }
  db_file(const db_file&) = delete;
  db_file& operator=(const db_file&) = delete;

  void exec(const std::string& sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK)
      die(sql + ": " + (err ? err : "?"));
  }
  sqlite3_stmt* prepare(const char* sql) {
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v2(db_, sql, -1, &s, nullptr) != SQLITE_OK)
      die(std::string(sql) + ": " + sqlite3_errmsg(db_));
    return s;
  }
  void step_done(sqlite3_stmt* s) {
    if (sqlite3_step(s) != SQLITE_DONE) die(std::string("step: ") + sqlite3_errmsg(db_));
    sqlite3_reset(s);
  }
  double megabytes() const {
    struct stat st {};
    return ::stat(path_.c_str(), &st) == 0 ? static_cast<double>(st.st_size) / 1e6 : 0;
  }

 private:
  void remove_files() const {
    for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path_ + suffix).c_str());
  }
  std::string path_;
  sqlite3* db_ = nullptr;
};

void commits(const std::string& dir, int n) {
  struct setting {
    const char* name;
    const char* before_wal;
  };
  static const setting settings[] = {
      {"4 KiB pages, shared", ""},
      {"4 KiB pages, exclusive", "PRAGMA locking_mode=EXCLUSIVE"},
      {"1 KiB pages, shared", "PRAGMA page_size=1024"},
      {"1 KiB pages, exclusive", "PRAGMA page_size=1024; PRAGMA locking_mode=EXCLUSIVE"},
      {"512 B pages, exclusive", "PRAGMA page_size=512; PRAGMA locking_mode=EXCLUSIVE"},
  };
  const std::string body(100, 'x');
  for (const char* sync : {"normal", "full"}) {
    for (const setting& s : settings) {
      db_file f(dir + "/commits.db", s.before_wal, sync);
      f.exec(
          "CREATE TABLE jobs (id INTEGER PRIMARY KEY, tube TEXT NOT NULL, pri INTEGER NOT NULL,"
          " ttr INTEGER NOT NULL, body BLOB NOT NULL)");
      sqlite3_stmt* ins = f.prepare("INSERT INTO jobs VALUES (?1, 't', 0, 60, ?2)");
      sqlite3_stmt* del = f.prepare("DELETE FROM jobs WHERE id = ?1");
      auto t0 = clock_type::now();
      for (int i = 1; i <= n; ++i) {
        sqlite3_bind_int64(ins, 1, i);
        sqlite3_bind_blob(ins, 2, body.data(), static_cast<int>(body.size()), SQLITE_STATIC);
        f.step_done(ins);
      }
      const double insert_us = seconds_since(t0) * 1e6 / n;
      t0 = clock_type::now();
      for (int i = 1; i <= n; ++i) {
        sqlite3_bind_int64(del, 1, i);
        f.step_done(del);
      }
      const double delete_us = seconds_since(t0) * 1e6 / n;
      sqlite3_finalize(ins);
      sqlite3_finalize(del);
      std::printf("commits  synchronous=%-6s %-24s INSERT %7.1f us  DELETE %7.1f us  (%d each)\n",
                  sync, s.name, insert_us, delete_us, n);
    }
  }
}

void pages(const std::string& dir, int n) {
  for (const int page : {4096, 1024}) {
    db_file f(dir + "/pages.db", "PRAGMA page_size=" + std::to_string(page), "normal");
    f.exec(
        "CREATE TABLE tasks(id TEXT PRIMARY KEY NOT NULL, due_ms INTEGER NOT NULL,"
        " record BLOB NOT NULL); CREATE INDEX tasks_due_ms_id ON tasks(due_ms, id);");
    sqlite3_stmt* ins = f.prepare("INSERT INTO tasks VALUES (?1, ?2, ?3)");
    const std::string record(120, 'r');
    std::mt19937_64 rng(1);  // the same ids and due times for both page sizes
    const std::int64_t base = 1'700'000'000'000;
    auto t0 = clock_type::now();
    f.exec("BEGIN");
    for (int i = 0; i < n; ++i) {
      const std::string id = "order-" + std::to_string(rng());
      sqlite3_bind_text(ins, 1, id.data(), static_cast<int>(id.size()), SQLITE_TRANSIENT);
      sqlite3_bind_int64(ins, 2, base + static_cast<std::int64_t>(rng() % 2'000'000'000));
      sqlite3_bind_blob(ins, 3, record.data(), static_cast<int>(record.size()), SQLITE_STATIC);
      f.step_done(ins);
    }
    f.exec("COMMIT");
    const double insert_s = seconds_since(t0);
    sqlite3_finalize(ins);
    f.exec("PRAGMA wal_checkpoint(TRUNCATE)");
    const double mb = f.megabytes();

    sqlite3_stmt* scan = f.prepare("SELECT rowid, id, record FROM tasks");
    t0 = clock_type::now();
    std::size_t bytes = 0;
    while (sqlite3_step(scan) == SQLITE_ROW)
      bytes += static_cast<std::size_t>(sqlite3_column_bytes(scan, 2));
    const double scan_s = seconds_since(t0);
    sqlite3_finalize(scan);

    sqlite3_stmt* due =
        f.prepare("SELECT id, record FROM tasks WHERE due_ms <= ?1 ORDER BY due_ms, id LIMIT 1000");
    t0 = clock_type::now();
    for (int r = 0; r < 200; ++r) {
      sqlite3_bind_int64(due, 1, base + static_cast<std::int64_t>(r) * 1'000'000);
      while (sqlite3_step(due) == SQLITE_ROW) {
      }
      sqlite3_reset(due);
    }
    const double due_s = seconds_since(t0);
    sqlite3_finalize(due);
    std::printf(
        "pages    %4d B: %d tasks inserted in one transaction %.2f s, file %.0f MB, full scan "
        "%.3f s (%zu record bytes), 200 due pages %.3f s\n",
        page, n, insert_s, mb, scan_s, bytes, due_s);
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::string dir;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      quick = true;
    } else if (a == "--dir" && i + 1 < argc) {
      dir = argv[++i];
    } else {
      die("usage: delayq-bench-sqlite-settings [--quick] [--dir DIR]");
    }
  }
  std::string made;
  if (dir.empty()) {
    char tmpl[] = "/tmp/delayq-sqlite-settings.XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) die("cannot make a temporary directory");
    dir = made = tmpl;
  }
  std::printf("SQLite %s, files in %s\n", sqlite3_libversion(), dir.c_str());
  commits(dir, quick ? 200 : 3000);
  pages(dir, quick ? 2000 : 1'000'000);
  if (!made.empty()) ::rmdir(made.c_str());
  return 0;
}
