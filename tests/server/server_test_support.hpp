// Helpers of the delayq-server process tests (docs/server.md):
//
//   server_process  the real delayq-server as a child process, its output
//                   captured, always killed and reaped by its destructor
//   test_store      a fresh store per test: the Redis server of
//                   $DELAYQ_TEST_REDIS under a key prefix of its own, or a
//                   SQLite file in a fresh temp dir
//   http_client     a small synchronous HTTP/1.1 client (keep-alive) on Beast
//   raw_connection  a socket for requests no client would send (slowloris,
//                   oversized headers, a consumer that goes away)
//
// push_receiver.hpp adds the HTTP server that push targets point to.
//
// Waiting: the tests wait on events (the server's "listening" line, an HTTP
// answer, a long-poll reserve, a call reaching the receiver). Every wait has a
// generous guard (`hang_guard`) so that a broken server fails the test instead
// of hanging it; the guard is never what a test asserts. `eventually()` polls
// for state that has no event to wait on (a task's state in GET).
#pragma once

#include <utility>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

extern char** environ;

namespace delayq::server_test {

using json = nlohmann::json;
using namespace std::chrono_literals;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

/// The longest any single wait may take before the test gives up: far above
/// what any step needs on a loaded machine, never asserted on.
inline constexpr auto hang_guard = std::chrono::seconds{90};

/// The token every test server is started with (see server_process::start).
inline const std::string test_token = "test-token-0123";

/// The server binary CMake built (tests/server/CMakeLists.txt).
inline std::string server_binary() { return DELAYQ_SERVER_BIN; }

inline std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

/// A name no other test (process) uses: for key prefixes, task types, ids.
inline std::string unique_name(std::string_view stem) {
  static std::atomic<unsigned> counter{0};
  return std::string(stem) + "-" + std::to_string(::getpid()) + "-" + std::to_string(now_ms()) +
         "-" + std::to_string(counter++);
}

/// Polls `pred` until it holds or `guard` passes; returns its last value. Only
/// for state that has no event to wait on.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds guard = hang_guard) {
  const auto end = std::chrono::steady_clock::now() + guard;
  for (;;) {
    if (pred()) return true;
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(20ms);
  }
}

// ---------------------------------------------------------------------------
// Temp dir and stores

/// A fresh directory, removed with everything in it.
class temp_dir {
 public:
  temp_dir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/delayq-server-test.XXXXXX";
    if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

enum class store_kind { redis, sqlite, postgres };

inline std::string to_string(store_kind k) {
  return k == store_kind::redis ? "redis" : k == store_kind::sqlite ? "sqlite" : "postgres";
}

/// The base Redis URI of the test run; fails (throws) with the way out when
/// there is none, so a Redis test is never silently skipped.
inline std::string test_redis_uri() {
  const char* base = std::getenv("DELAYQ_TEST_REDIS");
  if (!base || !*base)
    throw std::runtime_error(
        "DELAYQ_TEST_REDIS is not set: run the tests through scripts/with-redis.sh (e.g. "
        "scripts/with-redis.sh ctest -L server) or scripts/test.sh, which start a private "
        "redis-server and set it, or export DELAYQ_TEST_REDIS=redis://127.0.0.1:PORT");
  return base;
}

/// One test's store: a SQLite file of its own or a Redis key prefix of its own
/// (docs/persistence.md: `?prefix=NAME`). Every server the test starts on it
/// (a restart included) sees the same tasks. The private Redis of the test run
/// is discarded after the run, so the prefix's keys are left there.
class test_store {
 public:
  explicit test_store(store_kind kind) : kind_(kind) {
    if (kind == store_kind::redis) {
      const std::string base = test_redis_uri();
      // 1-64 characters of [A-Za-z0-9._-].
      std::string prefix = unique_name("srv");
      if (prefix.size() > 64) prefix = prefix.substr(prefix.size() - 64);
      uri_ = base + (base.find('?') == std::string::npos ? "?" : "&") + "prefix=" + prefix;
    } else if (kind == store_kind::postgres) {
      // A schema of its own on the run's PostgreSQL (scripts/with-postgres.sh).
      const char* base = std::getenv("DELAYQ_TEST_POSTGRES");
      if (!base || !*base)
        throw std::runtime_error(
            "DELAYQ_TEST_POSTGRES is not set: run the tests through scripts/with-postgres.sh "
            "or scripts/test.sh");
      std::string schema = unique_name("srv");
      for (char& ch : schema)
        if (ch == '-' || ch == '.') ch = '_';
      if (schema.size() > 47) schema = schema.substr(schema.size() - 47);
      uri_ = std::string(base) +
             (std::string_view(base).find('?') == std::string_view::npos ? "?" : "&") + "schema=s" +
             schema;
    } else {
      uri_ = "sqlite:" + dir_.path() + "/tasks.db";
    }
  }
  store_kind kind() const { return kind_; }
  const std::string& uri() const { return uri_; }
  const std::string& dir() const { return dir_.path(); }

 private:
  store_kind kind_;
  temp_dir dir_;
  std::string uri_;
};

/// A loopback port where nothing listens (bound, then closed).
inline std::uint16_t unused_port() {
  asio::io_context ioc;
  tcp::acceptor a(ioc, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  return a.local_endpoint().port();
}

// ---------------------------------------------------------------------------
// The server process

inline std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("killed by signal ") + ::strsignal(WTERMSIG(status));
  return "ended with wait status " + std::to_string(status);
}

/// delayq-server as a child process. stdout and stderr are read by threads of
/// this object (the child never blocks on a full pipe); the port is read from
/// the line `delayq-server listening on 127.0.0.1:PORT`. The destructor kills
/// (SIGKILL) a child that still runs and reaps it, whatever the test did.
class server_process {
 public:
  /// Starts `delayq-server ARGS...` with DELAYQ_TOKEN and DELAYQ_STORE removed
  /// from its environment, so only ARGS configure it.
  /// `binary`: another program to run the same way (the tests start a
  /// redis-server with it). `env`: NAME=VALUE entries added to (or
  /// replacing) its environment.
  explicit server_process(std::vector<std::string> args, std::string binary = server_binary(),
                          std::vector<std::string> env = {})
      : args_(std::move(args)), binary_(std::move(binary)), env_(std::move(env)) {
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    if (::pipe2(err, O_CLOEXEC) != 0) {
      ::close(out[0]);
      ::close(out[1]);
      throw std::runtime_error("pipe failed");
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_adddup2(&fa, err[1], 2);
    // Asio's sockets are not close-on-exec: a server must not hold the test's
    // connections (a consumer that closes must really be gone).
    posix_spawn_file_actions_addclosefrom_np(&fa, 3);

    const std::string& bin = binary_;
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(bin.c_str()));
    for (auto& a : args_) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (char** e = environ; *e; ++e) {
      const std::string_view v = *e;
      if (v.starts_with("DELAYQ_TOKEN=") || v.starts_with("DELAYQ_STORE=")) continue;
      if (std::any_of(env_.begin(), env_.end(), [&](const std::string& x) {
            return v.starts_with(x.substr(0, x.find('=') + 1));
          }))
        continue;
      envp.push_back(*e);
    }
    for (auto& x : env_) envp.push_back(x.data());
    envp.push_back(nullptr);

    // The test process ignores SIGPIPE; the server gets the default back.
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t defaults;
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGPIPE);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF);

    const int e = ::posix_spawnp(&pid_, bin.c_str(), &fa, &attr, argv.data(), envp.data());
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&fa);
    ::close(out[1]);
    ::close(err[1]);
    if (e != 0) {
      ::close(out[0]);
      ::close(err[0]);
      throw std::runtime_error("cannot start " + bin + ": " + std::strerror(e));
    }
    out_reader_ = std::thread([this, fd = out[0]] { read_pipe(fd, true); });
    err_reader_ = std::thread([this, fd = err[0]] { read_pipe(fd, false); });
    reaper_ = std::thread([this] { watch_exit(); });
  }

  /// The usual test server: on a free loopback port, on `store`, with the
  /// test token and a 10 ms tick, plus `extra` flags; waits until it listens.
  static std::unique_ptr<server_process> start(const test_store& store,
                                               std::vector<std::string> extra = {}) {
    std::vector<std::string> args{"--listen",  "127.0.0.1:0", "--store",
                                  store.uri(), "--token",     test_token};
    // The tests' tick, unless the test names its own.
    if (std::find(extra.begin(), extra.end(), "--tick") == extra.end())
      args.insert(args.end(), {"--tick", "10"});
    args.insert(args.end(), extra.begin(), extra.end());
    auto p = std::make_unique<server_process>(std::move(args));
    p->wait_listening();
    return p;
  }

  ~server_process() {
    {
      std::lock_guard lock(mu_);
      if (!reaped_) ::kill(pid_, SIGKILL);
    }
    if (reaper_.joinable()) reaper_.join();
    if (out_reader_.joinable()) out_reader_.join();
    if (err_reader_.joinable()) err_reader_.join();
  }
  server_process(const server_process&) = delete;
  server_process& operator=(const server_process&) = delete;

  /// Waits for the listening line and returns the port. Throws, with the
  /// server's output, when it exits first or the guard passes.
  std::uint16_t wait_listening() {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, hang_guard, [&] { return port_ != 0 || reaped_; }))
      throw std::runtime_error("delayq-server did not print its listening line; output:\n" +
                               output_locked());
    if (port_ == 0)
      throw std::runtime_error("delayq-server " + describe_status(status_) +
                               " before it listened; output:\n" + output_locked());
    return port_;
  }

  std::uint16_t port() const {
    std::lock_guard lock(mu_);
    return port_;
  }
  pid_t pid() const { return pid_; }

  /// Sends `sig` unless the child was reaped already.
  void signal(int sig) {
    std::lock_guard lock(mu_);
    if (!reaped_) ::kill(pid_, sig);
  }

  /// Waits for the child to exit and returns its wait status, once its
  /// output is read to the end (a reap can come before the readers have the
  /// last bytes: stderr_text() right after missed an exit's message under
  /// load). On the guard it kills the child and throws.
  int wait() {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, hang_guard, [&] { return reaped_ && pipes_open_ == 0; })) {
      ::kill(pid_, SIGKILL);
      lock.unlock();
      throw std::runtime_error("delayq-server did not exit; output:\n" + output());
    }
    return status_;
  }

  /// SIGKILL, then reap.
  void kill_now() {
    signal(SIGKILL);
    wait();
  }

  bool exited() const {
    std::lock_guard lock(mu_);
    return reaped_;
  }

  /// What the child wrote so far: "stdout:\n...\nstderr:\n...".
  std::string output() const {
    std::lock_guard lock(mu_);
    return output_locked();
  }
  /// The last `n` characters of output(), for failure messages.
  std::string output_tail(std::size_t n = 4000) const {
    std::string all = output();
    return all.size() > n ? "..." + all.substr(all.size() - n) : all;
  }
  std::string stderr_text() const {
    std::lock_guard lock(mu_);
    return err_;
  }
  /// Waits until stderr holds `text` or the child closed its pipes (it
  /// exited); whether stderr holds it. Throws, with the output, on the guard.
  bool wait_for_stderr(std::string_view text) {
    std::unique_lock lock(mu_);
    const auto seen = [&] { return err_.find(text) != std::string::npos; };
    if (!cv_.wait_for(lock, hang_guard, [&] { return seen() || pipes_open_ == 0; }))
      throw std::runtime_error("delayq-server neither wrote \"" + std::string(text) +
                               "\" nor exited; output:\n" + output_locked());
    return seen();
  }
  /// Waits for a whole stdout line that begins with `prefix` and returns
  /// the rest of it. Throws, with the output, when the child exits first or
  /// the guard passes.
  std::string wait_for_stdout_line(std::string_view prefix) {
    std::unique_lock lock(mu_);
    std::string rest;
    const auto found = [&] {
      for (std::size_t at = out_.find(prefix); at != std::string::npos;
           at = out_.find(prefix, at + 1)) {
        if (at != 0 && out_[at - 1] != '\n') continue;
        const auto end = out_.find('\n', at);
        if (end == std::string::npos) return false;  // not whole yet
        rest = out_.substr(at + prefix.size(), end - at - prefix.size());
        return true;
      }
      return false;
    };
    const bool done = cv_.wait_for(lock, hang_guard, [&] { return found() || pipes_open_ == 0; });
    if (!done || !found())
      throw std::runtime_error("delayq-server did not print \"" + std::string(prefix) +
                               "...\"; output:\n" + output_locked());
    return rest;
  }
  /// Waits until both pipes are closed (the child exited), then returns stderr.
  std::string stderr_after_exit() {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, hang_guard, [&] { return pipes_open_ == 0; });
    return err_;
  }

 private:
  std::string output_locked() const {
    return "--- stdout:\n" + out_ + "\n--- stderr:\n" + err_ + "\n---";
  }

  void read_pipe(int fd, bool is_stdout) {
    char buf[4096];
    std::string line;
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      std::lock_guard lock(mu_);
      (is_stdout ? out_ : err_).append(buf, static_cast<std::size_t>(n));
      if (is_stdout && port_ == 0) parse_port();
      cv_.notify_all();
    }
    ::close(fd);
    std::lock_guard lock(mu_);
    --pipes_open_;
    cv_.notify_all();
  }

  // Called with mu_ held: looks for the listening line in the output so far.
  void parse_port() {
    static constexpr std::string_view marker = "delayq-server listening on 127.0.0.1:";
    const auto at = out_.find(marker);
    if (at == std::string::npos) return;
    const auto end = out_.find('\n', at);
    if (end == std::string::npos) return;  // the line is not complete yet
    const std::string digits = out_.substr(at + marker.size(), end - at - marker.size());
    unsigned long p = 0;
    try {
      p = std::stoul(digits);
    } catch (...) {
      return;
    }
    if (p > 0 && p < 65536) port_ = static_cast<std::uint16_t>(p);
  }

  // Waits for the exit without reaping (WNOWAIT), then reaps under the lock,
  // so signal() can never hit a recycled pid.
  void watch_exit() {
    siginfo_t info{};
    while (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOWAIT) != 0 &&
           errno == EINTR) {
    }
    std::lock_guard lock(mu_);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    status_ = status;
    reaped_ = true;
    cv_.notify_all();
  }

  std::vector<std::string> args_;
  std::string binary_;
  std::vector<std::string> env_;
  pid_t pid_ = -1;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string out_;
  std::string err_;
  int pipes_open_ = 2;
  std::uint16_t port_ = 0;
  bool reaped_ = false;
  int status_ = 0;
  std::thread out_reader_;
  std::thread err_reader_;
  std::thread reaper_;
};

// ---------------------------------------------------------------------------
// HTTP client

/// One answer. `headers` has lower-case names; `json` is the parsed body, or
/// null when the body is empty or not JSON.
struct http_response {
  unsigned status = 0;
  std::map<std::string, std::string> headers;
  std::string body;
  json body_json;
  bool keep_alive = true;

  /// The `error` member of an error body, else "".
  std::string error() const {
    if (body_json.is_object() && body_json.contains("error") && body_json["error"].is_string())
      return body_json["error"].get<std::string>();
    return {};
  }
  std::string message() const {
    if (body_json.is_object() && body_json.contains("message") && body_json["message"].is_string())
      return body_json["message"].get<std::string>();
    return {};
  }
  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
  }
  /// For failure messages: "STATUS BODY".
  std::string describe() const { return std::to_string(status) + " " + body.substr(0, 2000); }
};

inline http_response to_response(http::response<http::string_body>&& res) {
  http_response r;
  r.status = res.result_int();
  for (const auto& f : res) {
    std::string name(f.name_string());
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    r.headers[name] = std::string(f.value());
  }
  r.keep_alive = res.keep_alive();
  r.body = std::move(res.body());
  if (!r.body.empty()) r.body_json = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  if (r.body_json.is_discarded()) r.body_json = nullptr;
  return r;
}

/// Runs the io_context until `done` is set, giving the stream `guard` before
/// its pending operations are cancelled (tcp_stream timeouts).
inline void run_until(asio::io_context& ioc, const bool& done) {
  ioc.restart();
  while (!done && ioc.run_one() > 0) {
  }
}

/// A synchronous HTTP/1.1 client that keeps its connection alive across
/// requests and dials again when the server closed it. Not thread-safe: one
/// per thread.
class http_client {
 public:
  /// `token`: sent as `Authorization: Bearer TOKEN` unless a request says
  /// otherwise; empty: no header.
  explicit http_client(std::uint16_t port, std::string token = test_token)
      : port_(port), token_(std::move(token)) {}

  /// `token`: nullopt uses the client's token; "" sends no Authorization.
  http_response request(http::verb method, const std::string& target,
                        const std::optional<json>& body = std::nullopt,
                        const std::optional<std::string>& token = std::nullopt) {
    return request_text(method, target,
                        body ? std::optional<std::string>(body->dump()) : std::nullopt, token);
  }

  /// As request() with a body sent as it is (`Content-Type: application/json`
  /// unless `extra` names another), and `extra` headers.
  http_response request_text(http::verb method, const std::string& target,
                             const std::optional<std::string>& body,
                             const std::optional<std::string>& token = std::nullopt,
                             const std::vector<std::pair<std::string, std::string>>& extra = {}) {
    http::request<http::string_body> req{method, target, 11};
    req.set(http::field::host, "127.0.0.1:" + std::to_string(port_));
    req.keep_alive(true);
    const std::string& t = token ? *token : token_;
    if (!t.empty()) req.set(http::field::authorization, "Bearer " + t);
    if (body) {
      req.set(http::field::content_type, "application/json");
      req.body() = *body;
    }
    // Last, so that a test can send another Host or Content-Type.
    for (const auto& [name, value] : extra) req.set(name, value);
    req.prepare_payload();

    // A connection the server closed while it sat idle fails at once on its
    // next use: dial again and send once more, only in that case.
    const bool reused = stream_ != nullptr;
    bool got_bytes = false;
    beast::error_code ec;
    auto res = exchange(req, ec, got_bytes);
    if (ec && reused && !got_bytes) {
      close();
      res = exchange(req, ec, got_bytes);
    }
    if (ec) {
      close();
      throw std::runtime_error(std::string(http::to_string(method)) + " " + target +
                               " failed: " + ec.message());
    }
    if (!res.keep_alive) close();
    return res;
  }

  // Short forms.
  http_response get(const std::string& target) { return request(http::verb::get, target); }
  http_response post(const std::string& target, const json& body) {
    return request(http::verb::post, target, body);
  }
  http_response put(const std::string& target, const json& body) {
    return request(http::verb::put, target, body);
  }
  http_response del(const std::string& target) { return request(http::verb::delete_, target); }

  void close() {
    if (stream_) {
      beast::error_code ec;
      stream_->socket().shutdown(tcp::socket::shutdown_both, ec);
      stream_->socket().close(ec);
    }
    stream_.reset();
  }

 private:
  http_response exchange(http::request<http::string_body>& req, beast::error_code& ec,
                         bool& got_bytes) {
    ec = {};
    got_bytes = false;
    if (!stream_) {
      stream_ = std::make_unique<beast::tcp_stream>(ioc_);
      stream_->expires_after(hang_guard);
      bool done = false;
      stream_->async_connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port_),
                             [&](beast::error_code e) {
                               ec = e;
                               done = true;
                             });
      run_until(ioc_, done);
      if (ec) return {};
    }
    {
      stream_->expires_after(hang_guard);
      bool done = false;
      http::async_write(*stream_, req, [&](beast::error_code e, std::size_t) {
        ec = e;
        done = true;
      });
      run_until(ioc_, done);
      if (ec) return {};
    }
    http::response_parser<http::string_body> parser;
    parser.body_limit(64u << 20);
    {
      stream_->expires_after(hang_guard);
      bool done = false;
      http::async_read(*stream_, buffer_, parser, [&](beast::error_code e, std::size_t n) {
        ec = e;
        got_bytes = n > 0;
        done = true;
      });
      run_until(ioc_, done);
      if (ec) {
        got_bytes = got_bytes || buffer_.size() > 0;
        buffer_.consume(buffer_.size());
        return {};
      }
    }
    return to_response(parser.release());
  }

  asio::io_context ioc_;
  std::uint16_t port_;
  std::string token_;
  std::unique_ptr<beast::tcp_stream> stream_;
  beast::flat_buffer buffer_;
};

/// A socket to the server for bytes no well-behaved client would send.
class raw_connection {
 public:
  explicit raw_connection(std::uint16_t port) : stream_(ioc_) {
    stream_.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  }

  void send(std::string_view bytes) { asio::write(stream_, asio::buffer(bytes)); }

  /// Reads one response; nullopt when the server closed the connection (or
  /// reset it) before a complete response arrived. Throws on the guard.
  std::optional<http_response> read_response() {
    http::response_parser<http::string_body> parser;
    parser.body_limit(64u << 20);
    beast::error_code ec;
    bool done = false;
    stream_.expires_after(hang_guard);
    http::async_read(stream_, buffer_, parser, [&](beast::error_code e, std::size_t) {
      ec = e;
      done = true;
    });
    run_until(ioc_, done);
    if (ec == beast::error::timeout) throw std::runtime_error("no answer and no close");
    if (ec) return std::nullopt;
    return to_response(parser.release());
  }

  /// Closes the socket gracefully (FIN), or with `reset` at once (RST, via
  /// SO_LINGER 0), the way a killed consumer's kernel may.
  void close(bool reset = false) {
    beast::error_code ec;
    if (reset) stream_.socket().set_option(asio::socket_base::linger(true, 0), ec);
    stream_.socket().close(ec);
  }

 private:
  asio::io_context ioc_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
};

/// The text of a request, for raw_connection.
inline std::string raw_request(std::string_view method, std::string_view target,
                               std::string_view body, std::string_view extra_headers = "") {
  std::string r = std::string(method) + " " + std::string(target) + " HTTP/1.1\r\n";
  r += "Host: 127.0.0.1\r\n";
  r += "Authorization: Bearer " + test_token + "\r\n";
  r += "Content-Type: application/json\r\n";
  r += extra_headers;
  r += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
  r += body;
  return r;
}

// ---------------------------------------------------------------------------
// Request bodies and common steps

/// Adds a task; returns the 201 answer (callers check it).
inline http_response add_task(http_client& c, const std::string& type, const std::string& payload,
                              std::int64_t delay_ms, const std::string& id = {}) {
  json body{{"type", type}, {"payload", payload}, {"delay_ms", delay_ms}};
  if (!id.empty()) body["id"] = id;
  return c.post("/v1/tasks", body);
}

/// A reserve on `types` (empty: any).
inline http_response reserve(http_client& c, const std::vector<std::string>& types,
                             std::int64_t wait_ms, int max = 1,
                             std::optional<std::int64_t> ttr_ms = std::nullopt) {
  json body{{"wait_ms", wait_ms}, {"max", max}};
  if (!types.empty()) body["types"] = types;
  if (ttr_ms) body["ttr_ms"] = *ttr_ms;
  return c.post("/v1/reserve", body);
}

/// The `tasks` array of a reserve answer (empty when it is not one).
inline json reserved_tasks(const http_response& r) {
  if (r.status == 200 && r.body_json.is_object() && r.body_json.contains("tasks") &&
      r.body_json["tasks"].is_array())
    return r.body_json["tasks"];
  return json::array();
}

/// Reserves until one task of `types` is handed out (long polls of up to
/// 60 s, repeated until the guard). Returns the task, or null.
inline json reserve_one(http_client& c, const std::vector<std::string>& types,
                        std::optional<std::int64_t> ttr_ms = std::nullopt) {
  const auto end = std::chrono::steady_clock::now() + hang_guard;
  while (std::chrono::steady_clock::now() < end) {
    auto r = reserve(c, types, 30000, 1, ttr_ms);
    if (r.status != 200) return nullptr;
    auto tasks = reserved_tasks(r);
    if (!tasks.empty()) return tasks[0];
  }
  return nullptr;
}

/// Percent-encodes a path segment.
inline std::string path_escape(std::string_view s) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char ch : s) {
    if (std::isalnum(ch) || ch == '-' || ch == '_' || ch == '.' || ch == '~') {
      out += static_cast<char>(ch);
    } else {
      out += '%';
      out += hex[ch >> 4];
      out += hex[ch & 15];
    }
  }
  return out;
}

/// The string at `key` of a JSON object, or "" (not an object, no such key,
/// not a string).
inline std::string str(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "";
}

/// The "id" of an answer's JSON body, or "".
inline std::string id_of(const http_response& r) { return str(r.body_json, "id"); }

inline std::string task_path(std::string_view id) { return "/v1/tasks/" + path_escape(id); }

/// GET /v1/tasks/{id}'s `state`, or "" when it did not answer 200.
inline std::string task_state(http_client& c, const std::string& id) {
  auto r = c.get(task_path(id));
  if (r.status != 200 || !r.body_json.is_object() || !r.body_json.contains("state")) return {};
  return r.body_json["state"].is_string() ? r.body_json["state"].get<std::string>() : "";
}

/// Looks for a number named `key` at the top of `j` or in any object below it
/// (the stats keep the engine's counters and the server's; where each sits
/// is not part of the contract).
inline std::optional<double> find_number(const json& j, const std::string& key) {
  if (!j.is_object()) return std::nullopt;
  if (auto it = j.find(key); it != j.end() && it->is_number()) return it->get<double>();
  for (const auto& [k, v] : j.items())
    if (v.is_object())
      if (auto n = find_number(v, key)) return n;
  return std::nullopt;
}

/// The consumers whose reserve waits now (GET /v1/stats), or -1.
inline double waiting_consumers(http_client& c) {
  auto s = c.get("/v1/stats");
  if (s.status != 200) return -1;
  return find_number(s.body_json, "waiting_consumers").value_or(-1);
}

}  // namespace delayq::server_test

/// Runs the rest of the enclosing TEST_CASE once per durable store: declares
/// `kind` (store_kind) set by a SUBCASE each.
#define DELAYQ_FOR_EACH_STORE(kind)                                                  \
  ::delayq::server_test::store_kind kind = ::delayq::server_test::store_kind::redis; \
  SUBCASE("redis") { kind = ::delayq::server_test::store_kind::redis; }              \
  SUBCASE("sqlite") { kind = ::delayq::server_test::store_kind::sqlite; }            \
  SUBCASE("postgres") { kind = ::delayq::server_test::store_kind::postgres; }        \
  INFO("store: ", ::delayq::server_test::to_string(kind))
