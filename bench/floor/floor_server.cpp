// delayq-bench-floor: the least a beanstalk server can do for a request, as
// a bound for issue 32's table 1 (scripts/bench-peers.sh runs it beside
// beanstalkd and delayq-server, with the same client, in the same run).
//
//   delayq-bench-floor -l ADDR -p PORT [--sqlite PATH [--sync normal|full]]
//
// One thread, poll(), no engine, no timers, no other thread to wake: it
// parses a request, does what the request must do before its answer, and
// answers. With --sqlite it commits every put (an INSERT) and every delete
// (a DELETE) to a WAL-mode SQLite file before it answers, one statement a
// transaction, into the smallest schema a durable job can have (one table,
// the job's number as its rowid: one B-tree page written a commit), with
// the fastest settings found that keep what a commit promises (job_file). No
// server built on SQLite at that `synchronous` level can answer one request
// at a time faster: it has to do at least this work between reading a put
// and answering it, and the client sends the next request only then. So
// this server's rate on one connection bounds every SQLite store's, and
// the ratio of that rate to beanstalkd's is the most a SQLite store can
// reach against it (docs/benchmarks.md, "The floor under table 1's
// one-connection rows").
//
// It speaks what bench/peers/beanstalk_client.py sends on one connection:
// use, watch, ignore, put, reserve, reserve-with-timeout, delete,
// list-tube-used, quit. Jobs are handed out in the order they were put, per
// tube (the table's jobs all have priority 0 and no delay); a reserve with
// nothing ready waits, as beanstalkd's does, until a put or its timeout.
// Not a server to use: it keeps no lease, runs no delay and checks little.
#include <poll.h>
#include <sqlite3.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "delayq-bench-floor: %s\n", why.c_str());
  std::exit(2);
}

// The durable half: one job a row, committed per statement. A fresh file
// every start: the job numbers start again at 1, and the page size below
// takes only on a new file.
// Thread safety: none needed (the program is one thread).
class job_file {
 public:
  job_file(const std::string& path, const std::string& sync) {
    for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path + suffix).c_str());
    if (sqlite3_open(path.c_str(), &db_) != SQLITE_OK) die("cannot open " + path);
    // The fastest SQLite measured here at each synchronous level, so that the
    // bound is SQLite's and not this file's choices (neither changes what a
    // commit promises): 1 KiB pages, a quarter of the bytes a commit writes
    // with 4 KiB (set before WAL, which fixes it), and the file held
    // exclusively, which skips the dozen fcntl() locks a commit takes
    // otherwise. An INSERT commit at synchronous=normal took 13.2 us here
    // with neither, 8.8 us held exclusively, 5.4 us with both; at full, an
    // fdatasync() each, 96-128 us with any of them
    // (delayq-bench-sqlite-settings, sqlite_settings.cpp).
    exec("PRAGMA page_size=1024");
    exec("PRAGMA locking_mode=EXCLUSIVE");
    exec("PRAGMA journal_mode=WAL");
    exec("PRAGMA synchronous=" + sync);
    exec(
        "CREATE TABLE IF NOT EXISTS jobs (id INTEGER PRIMARY KEY, tube TEXT NOT NULL,"
        " pri INTEGER NOT NULL, ttr INTEGER NOT NULL, body BLOB NOT NULL)");
    prepare("INSERT INTO jobs (id, tube, pri, ttr, body) VALUES (?1, ?2, ?3, ?4, ?5)", insert_);
    prepare("DELETE FROM jobs WHERE id = ?1", remove_);
  }
  ~job_file() {
    sqlite3_finalize(insert_);
    sqlite3_finalize(remove_);
    sqlite3_close(db_);
  }
  job_file(const job_file&) = delete;
  job_file& operator=(const job_file&) = delete;

  void insert(std::uint64_t id, const std::string& tube, std::uint32_t pri, std::uint32_t ttr,
              std::string_view body) {
    sqlite3_bind_int64(insert_, 1, static_cast<sqlite3_int64>(id));
    sqlite3_bind_text(insert_, 2, tube.data(), static_cast<int>(tube.size()), SQLITE_STATIC);
    sqlite3_bind_int64(insert_, 3, pri);
    sqlite3_bind_int64(insert_, 4, ttr);
    sqlite3_bind_blob(insert_, 5, body.data(), static_cast<int>(body.size()), SQLITE_STATIC);
    step(insert_);
  }
  void remove(std::uint64_t id) {
    sqlite3_bind_int64(remove_, 1, static_cast<sqlite3_int64>(id));
    step(remove_);
  }

 private:
  void exec(const std::string& sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK)
      die(sql + ": " + (err ? err : "?"));
  }
  void prepare(const char* sql, sqlite3_stmt*& s) {
    if (sqlite3_prepare_v2(db_, sql, -1, &s, nullptr) != SQLITE_OK)
      die(std::string(sql) + ": " + sqlite3_errmsg(db_));
  }
  void step(sqlite3_stmt* s) {
    if (sqlite3_step(s) != SQLITE_DONE) die(std::string("commit: ") + sqlite3_errmsg(db_));
    sqlite3_reset(s);
  }

  sqlite3* db_ = nullptr;
  sqlite3_stmt* insert_ = nullptr;
  sqlite3_stmt* remove_ = nullptr;
};

struct job {
  std::string tube;
  std::string body;
  int reserved_by = -1;  // the connection holding it, or -1: ready
};

struct client {
  int fd = -1;
  bool wants_data = false;  // its input ends inside a request: nothing to do until more comes
  std::string in;
  std::string out;
  std::string used = "default";
  std::set<std::string> watched{"default"};
  bool waiting = false;  // a reserve with nothing ready
  clock_type::time_point deadline = clock_type::time_point::max();
  bool closing = false;
};

// Thread safety: none needed (the program is one thread).
class floor_server {
 public:
  floor_server(int listener, std::unique_ptr<job_file> file)
      : listener_(listener), file_(std::move(file)) {}

  [[noreturn]] void run() {
    std::vector<pollfd> fds;
    for (;;) {
      fds.clear();
      fds.push_back({listener_, POLLIN, 0});
      for (auto& [fd, c] : clients_)
        fds.push_back({fd, static_cast<short>(c.out.empty() ? POLLIN : POLLIN | POLLOUT), 0});
      if (poll(fds.data(), fds.size(), wait_ms()) < 0 && errno != EINTR) die("poll failed");
      if (fds[0].revents & POLLIN) accept_one();
      for (std::size_t i = 1; i < fds.size(); ++i) {
        auto it = clients_.find(fds[i].fd);
        if (it == clients_.end()) continue;
        client& c = it->second;
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) read_from(c);
        if (!c.closing) handle(c);
        flush(c);
        if (c.closing && c.out.empty()) drop(c);
      }
      expire_waits();
    }
  }

 private:
  int wait_ms() const {
    auto first = clock_type::time_point::max();
    for (const auto& [fd, c] : clients_) {
      // Requests sent behind a reserve that has been answered since: now.
      if (!c.waiting && !c.wants_data && !c.closing && c.in.find("\r\n") != std::string::npos)
        return 0;
      if (c.waiting) first = std::min(first, c.deadline);
    }
    if (first == clock_type::time_point::max()) return -1;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(first - clock_type::now());
    return static_cast<int>(std::max<std::int64_t>(0, left.count()));
  }

  void accept_one() {
    const int fd = ::accept(listener_, nullptr, nullptr);
    if (fd < 0) return;
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    clients_[fd].fd = fd;
  }

  void read_from(client& c) {
    char buf[65536];
    const ssize_t n = ::recv(c.fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0)
      c.in.append(buf, static_cast<std::size_t>(n));
    else if (n == 0 || (errno != EAGAIN && errno != EINTR))
      c.closing = true;
  }

  void flush(client& c) {
    while (!c.out.empty()) {
      const ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n <= 0) {
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
        c.out.clear();
        c.closing = true;
        return;
      }
      c.out.erase(0, static_cast<std::size_t>(n));
    }
  }

  void drop(client& c) {
    for (auto& [id, j] : jobs_) {  // a reserved job goes back, as on a lost connection
      if (j.reserved_by != c.fd) continue;
      j.reserved_by = -1;
      ready_[j.tube].push_front(id);
    }
    const int fd = c.fd;
    ::close(fd);
    clients_.erase(fd);
    wake_waiters();  // the jobs given back may be what a reserve waits for
  }

  // Runs every complete request in c.in, in order; stops at a reserve that
  // waits (the requests after it wait with it, as on beanstalkd).
  void handle(client& c) {
    c.wants_data = false;
    for (;;) {
      if (c.waiting) {
        if (!try_reserve(c)) return;
        c.waiting = false;
      }
      const std::size_t eol = c.in.find("\r\n");
      if (eol == std::string::npos) {
        c.wants_data = true;
        return;
      }
      // The line's words, as views into line_ (reused: no allocation a
      // request once it has grown), which outlives the erase from c.in
      // below. A word's number is read with strto*(), which stops at the
      // space or the terminating NUL after it.
      line_.assign(c.in, 0, eol);
      std::array<std::string_view, 6> w;
      std::size_t words = 0;
      for (std::size_t i = 0; i < line_.size() && words < w.size();) {
        const std::size_t j = std::min(line_.find(' ', i), line_.size());
        if (j > i) w[words++] = std::string_view(line_).substr(i, j - i);
        i = j + 1;
      }
      if (words == 0) {
        c.in.erase(0, eol + 2);
        c.out += "UNKNOWN_COMMAND\r\n";
        continue;
      }
      const std::string_view cmd = w[0];
      if (cmd == "put") {
        if (words != 5) {
          bad(c, eol);
          continue;
        }
        const std::size_t bytes = std::strtoull(w[4].data(), nullptr, 10);
        if (bytes > max_job_size) {  // beanstalkd's default -z
          c.out += "JOB_TOO_BIG\r\n";
          c.closing = true;  // its body is not read: the stream cannot be followed
          return;
        }
        if (c.in.size() < eol + 2 + bytes + 2) {
          c.wants_data = true;  // the body is still coming
          return;
        }
        if (c.in.compare(eol + 2 + bytes, 2, "\r\n") != 0) {
          c.out += "EXPECTED_CRLF\r\n";
          c.closing = true;
          return;
        }
        const std::string_view body(c.in.data() + eol + 2, bytes);
        const std::uint64_t id = ++last_id_;
        if (file_)
          file_->insert(id, c.used,
                        static_cast<std::uint32_t>(std::strtoul(w[1].data(), nullptr, 10)),
                        static_cast<std::uint32_t>(std::strtoul(w[3].data(), nullptr, 10)), body);
        jobs_[id] = job{c.used, std::string(body)};
        ready_[c.used].push_back(id);
        c.in.erase(0, eol + 2 + bytes + 2);
        c.out += "INSERTED ";
        c.out += std::to_string(id);
        c.out += "\r\n";
        wake_waiters();
        continue;
      }
      c.in.erase(0, eol + 2);
      if (cmd == "reserve" || cmd == "reserve-with-timeout") {
        const long secs = words > 1 ? std::strtol(w[1].data(), nullptr, 10) : -1;
        if (try_reserve(c)) continue;
        if (secs == 0) {
          c.out += "TIMED_OUT\r\n";
          continue;
        }
        c.waiting = true;
        c.deadline = secs < 0 ? clock_type::time_point::max()
                              : clock_type::now() + std::chrono::seconds(secs);
        return;
      } else if (cmd == "delete" && words == 2) {
        const std::uint64_t id = std::strtoull(w[1].data(), nullptr, 10);
        auto it = jobs_.find(id);
        if (it == jobs_.end()) {
          c.out += "NOT_FOUND\r\n";
          continue;
        }
        if (file_) file_->remove(id);
        if (it->second.reserved_by < 0) {
          auto& q = ready_[it->second.tube];
          q.erase(std::find(q.begin(), q.end(), id));
        }
        jobs_.erase(it);
        c.out += "DELETED\r\n";
      } else if (cmd == "use" && words == 2) {
        c.used = w[1];
        c.out += "USING " + c.used + "\r\n";
      } else if (cmd == "watch" && words == 2) {
        c.watched.emplace(w[1]);
        c.out += "WATCHING " + std::to_string(c.watched.size()) + "\r\n";
      } else if (cmd == "ignore" && words == 2) {
        const std::string tube(w[1]);
        if (c.watched.size() == 1 && c.watched.count(tube) != 0) {
          c.out += "NOT_IGNORED\r\n";
          continue;
        }
        c.watched.erase(tube);
        c.out += "WATCHING " + std::to_string(c.watched.size()) + "\r\n";
      } else if (cmd == "list-tube-used") {
        c.out += "USING " + c.used + "\r\n";
      } else if (cmd == "quit") {
        c.closing = true;
        return;
      } else {
        c.out += "UNKNOWN_COMMAND\r\n";
      }
    }
  }

  void bad(client& c, std::size_t eol) {
    c.in.erase(0, eol + 2);
    c.out += "BAD_FORMAT\r\n";
  }

  bool try_reserve(client& c) {
    for (const std::string& tube : c.watched) {
      auto it = ready_.find(tube);
      if (it == ready_.end() || it->second.empty()) continue;
      const std::uint64_t id = it->second.front();
      it->second.pop_front();
      job& j = jobs_[id];
      j.reserved_by = c.fd;
      c.out += "RESERVED ";
      c.out += std::to_string(id);
      c.out += ' ';
      c.out += std::to_string(j.body.size());
      c.out += "\r\n";
      c.out += j.body;
      c.out += "\r\n";
      return true;
    }
    return false;
  }

  void wake_waiters() {
    for (auto& [fd, c] : clients_) {
      if (!c.waiting || !try_reserve(c)) continue;
      c.waiting = false;  // what it sent after the reserve: the next turn (wait_ms)
      flush(c);
    }
  }

  void expire_waits() {
    const auto now = clock_type::now();
    for (auto& [fd, c] : clients_) {
      if (!c.waiting || c.deadline > now) continue;
      c.waiting = false;
      c.out += "TIMED_OUT\r\n";
      flush(c);
    }
  }

  static constexpr std::size_t max_job_size = 65535;

  int listener_;
  std::unique_ptr<job_file> file_;
  std::map<int, client> clients_;
  std::unordered_map<std::uint64_t, job> jobs_;
  std::unordered_map<std::string, std::deque<std::uint64_t>> ready_;
  std::uint64_t last_id_ = 0;
  std::string line_;  // the request line being run (handle())
};

int listen_on(const std::string& addr, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) die("socket failed");
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<std::uint16_t>(port));
  if (inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1) die("not an IPv4 address: " + addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0)
    die("cannot bind " + addr + ":" + std::to_string(port) + ": " + std::strerror(errno));
  if (::listen(fd, 64) != 0) die("listen failed");
  return fd;
}

}  // namespace

int main(int argc, char** argv) {
  std::string addr = "127.0.0.1", path, sync = "full";
  int port = 11300;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) die(a + " needs a value");
      return argv[++i];
    };
    if (a == "-l")
      addr = value();
    else if (a == "-p")
      port = std::atoi(value().c_str());
    else if (a == "--sqlite")
      path = value();
    else if (a == "--sync")
      sync = value();
    else if (a == "-h" || a == "--help") {
      std::puts("delayq-bench-floor -l ADDR -p PORT [--sqlite PATH [--sync normal|full]]");
      return 0;
    } else {
      die("unknown argument " + a);
    }
  }
  if (sync != "normal" && sync != "full") die("--sync: normal or full");
  std::signal(SIGPIPE, SIG_IGN);
  const int listener = listen_on(addr, port);
  floor_server(listener, path.empty() ? nullptr : std::make_unique<job_file>(path, sync)).run();
}
