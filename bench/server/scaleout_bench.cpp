// delayq-bench-scaleout: the scale-out benchmark of issue 14. Starts 1, 2
// and 3 delayq-server processes with --cluster on one Redis (a fresh key
// prefix per round) and measures
//   schedule  POST /v1/tasks:batch, spread round-robin over the instances
//             from several connections: tasks acknowledged per second;
//   firing    the same number of tasks, all due at one instant, pushed to a
//             receiver in this process that answers 200: distinct tasks
//             delivered per second from the first delivery to the last;
//   failover  3 instances, tasks due all the time on every shard; one
//             instance is SIGKILLed and the time from the kill to the first
//             push, by a survivor, of a task of a shard the dead one held is
//             measured (and to the last of its shards taken over).
// The shards the killed instance held are the shards (delayq::shard_of) of
// the tasks it pushed (X-Delayq-Instance) before the kill.
// scripts/bench-scaleout.sh starts the Redis and runs this program; it
// starts and stops the delayq-servers itself (each round needs fresh ones,
// and the failover rounds kill one at a moment of their choosing).
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <utility>  // before any Boost.Asio header: Boost 1.74 + C++20 needs it

#include <CLI/CLI.hpp>
#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <delayq/shard_leases.hpp>
#include <exception>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "connection.hpp"

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using json = nlohmann::json;
using steady = std::chrono::steady_clock;
using namespace delayq::bench_server;

constexpr const char* task_type = "scaleout";
constexpr const char* token = "bench-scaleout-token";

std::int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}
double seconds_between(steady::time_point a, steady::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// CPU seconds (user + system) a process has used so far, from
// /proc/PID/stat; 0 when it is gone. The figures show where the two cores
// went: with every process on them, a sum near 2 busy cores means the
// machine, not delayq's design, set the pace.
double cpu_seconds(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(f, stat)) return 0;
  // Fields after the command name (which may hold spaces) in parentheses.
  std::istringstream rest(stat.substr(stat.rfind(')') + 2));
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stod(field);
    if (i == 15) stime = std::stod(field);
  }
  return (utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// ---------------------------------------------------------------------------
// The push receiver: an HTTP server on its own thread that answers every
// POST with 200 and records when it came, the task and the instance.

struct delivery {
  steady::time_point at;
  std::string task_id;
  std::string instance;
};

class receiver {
 public:
  receiver() : acceptor_(ioc_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
    accept();
    thread_ = std::thread([this] { ioc_.run(); });
  }
  ~receiver() {
    ioc_.stop();
    thread_.join();
  }
  receiver(const receiver&) = delete;
  receiver& operator=(const receiver&) = delete;

  std::string url() const {
    return "http://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port()) + "/hook";
  }
  void clear() {
    std::lock_guard lock(mu_);
    calls_.clear();
  }
  std::vector<delivery> calls() const {
    std::lock_guard lock(mu_);
    return calls_;
  }
  std::size_t count() const {
    std::lock_guard lock(mu_);
    return calls_.size();
  }
  /// Waits until `done(calls)` holds or the deadline passes; false then.
  /// Polls every 5 ms instead of waking at every delivery: a notification
  /// per push would wake this thread up to ~30,000 times a second, CPU taken
  /// from the servers on a 2-core machine. The figures use the times the
  /// receiver recorded, so the poll costs no precision.
  template <class Pred>
  bool wait_until(steady::time_point deadline, Pred done) {
    for (;;) {
      {
        std::lock_guard lock(mu_);
        if (done(calls_)) return true;
      }
      if (steady::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

 private:
  struct session : std::enable_shared_from_this<session> {
    session(receiver& r, tcp::socket s) : owner(r), stream(std::move(s)) {}
    void read() {
      req = {};
      http::async_read(stream, buffer, req,
                       [self = shared_from_this()](beast::error_code ec, std::size_t) {
                         if (!ec) self->respond();
                       });
    }
    void respond() {
      {
        // Recorded before the answer: the time is when the push arrived.
        std::lock_guard lock(owner.mu_);
        owner.calls_.push_back({steady::now(), std::string(req["X-Delayq-Task-Id"]),
                                std::string(req["X-Delayq-Instance"])});
      }
      res = http::response<http::string_body>(http::status::ok, 11);
      res.body() = "ok";
      res.keep_alive(req.keep_alive());
      res.prepare_payload();
      http::async_write(stream, res,
                        [self = shared_from_this()](beast::error_code ec, std::size_t) {
                          if (!ec && self->res.keep_alive()) self->read();
                        });
    }
    receiver& owner;
    beast::tcp_stream stream;
    beast::flat_buffer buffer;
    http::request<http::string_body> req;
    http::response<http::string_body> res;
  };

  void accept() {
    acceptor_.async_accept([this](beast::error_code ec, tcp::socket s) {
      if (ec) return;
      std::make_shared<session>(*this, std::move(s))->read();
      accept();
    });
  }

  asio::io_context ioc_;
  tcp::acceptor acceptor_;
  std::thread thread_;
  mutable std::mutex mu_;
  std::vector<delivery> calls_;
};

// ---------------------------------------------------------------------------
// A delayq-server child process. Its stdout is read up to the "listening"
// line (which names the port), then drained into its log by a thread, so
// it never blocks on a full pipe; stderr goes to the log directly. It dies
// with this process (PR_SET_PDEATHSIG), so a crashed benchmark leaves no
// server behind.

struct server_config {
  std::string bin;
  std::string store_uri;  // with prefix and shards
  int shards = 64;
  int lease_ms = 2000;
  std::string push_url;
  std::string log_dir;
};

class server_process {
 public:
  server_process(const server_config& c, const std::string& name) : name_(name) {
    log_path_ = c.log_dir + "/" + name + "-" + std::to_string(++serial_) + ".log";
    const std::vector<std::string> args = {
        c.bin,         "--listen",
        "127.0.0.1:0", "--store",
        c.store_uri,   "--token",
        token,         "--cluster",
        "--shards",    std::to_string(c.shards),
        "--lease",     std::to_string(c.lease_ms) + "ms",
        "--instance",  name,
        "--push",      std::string(task_type) + "=" + c.push_url};
    int out[2];
    if (::pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
    const int log = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log < 0) throw std::runtime_error("cannot open " + log_path_);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);  // the parent died already
      ::dup2(out[1], 1);
      ::dup2(log, 2);
      // Asio's sockets (the receiver's among them) are not close-on-exec.
      ::close_range(3, ~0U, 0);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(out[1]);
    ::close(log);
    out_fd_ = out[0];
    try {
      port_ = read_port();
    } catch (...) {
      kill();
      ::close(out_fd_);
      throw;
    }
    drain_ = std::thread([fd = out_fd_, path = log_path_] {
      std::ofstream f(path, std::ios::app);
      char buf[4096];
      for (;;) {
        const ssize_t n = ::read(fd, buf, sizeof buf);
        if (n <= 0) break;
        f.write(buf, n);
      }
    });
  }
  ~server_process() {
    kill();
    if (drain_.joinable()) drain_.join();
    ::close(out_fd_);
  }
  server_process(const server_process&) = delete;
  server_process& operator=(const server_process&) = delete;

  /// SIGKILL and reap. Also how rounds end: every round starts on a fresh
  /// prefix, so nothing a clean stop would leave behind matters.
  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  /// False once it exited (then reaped: kill() does nothing more).
  bool alive() {
    if (pid_ <= 0) return false;
    if (::waitpid(pid_, nullptr, WNOHANG) == 0) return true;
    pid_ = -1;
    return false;
  }
  std::uint16_t port() const { return port_; }
  pid_t pid() const { return pid_; }
  const std::string& name() const { return name_; }
  const std::string& log_path() const { return log_path_; }

 private:
  std::uint16_t read_port() {
    std::string line;
    const auto deadline = steady::now() + std::chrono::seconds(30);
    while (line.find('\n') == std::string::npos) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now());
      pollfd p{out_fd_, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) {
        throw std::runtime_error(name_ + ": no 'listening' line within 30 s (log " + log_path_ +
                                 ")");
      }
      char c;
      if (::read(out_fd_, &c, 1) != 1) {
        throw std::runtime_error(name_ + ": exited before listening (log " + log_path_ + ")");
      }
      line += c;
    }
    const auto colon = line.rfind(':');
    if (line.rfind("delayq-server listening on 127.0.0.1:", 0) != 0 || colon == std::string::npos) {
      throw std::runtime_error(name_ + ": unexpected first line '" + line + "'");
    }
    return static_cast<std::uint16_t>(std::stoi(line.substr(colon + 1)));
  }

  static inline int serial_ = 0;
  std::string name_;
  std::string log_path_;
  pid_t pid_ = -1;
  int out_fd_ = -1;
  std::uint16_t port_ = 0;
  std::thread drain_;
};

// ---------------------------------------------------------------------------
// HTTP calls from the main thread: one io_context, run until the call ends.

target target_of(std::uint16_t port) {
  target t;
  t.name = "delayq";
  t.host = "127.0.0.1";
  t.port = port;
  t.token = token;
  return t;
}

template <class T>
T run_sync(asio::io_context& io, asio::awaitable<T> a) {
  std::optional<T> result;
  std::exception_ptr error;
  asio::co_spawn(io, std::move(a), [&](std::exception_ptr e, T v) {
    if (e)
      error = e;
    else
      result = std::move(v);
  });
  io.restart();
  io.run();
  if (error) std::rethrow_exception(error);
  return std::move(*result);
}

json stats_of(asio::io_context& io, std::uint16_t port) {
  auto call = [](asio::any_io_executor ex, std::uint16_t p) -> asio::awaitable<http_response> {
    http_connection c(target_of(p), ex);
    co_await c.connect();
    co_return co_await c.request("GET", "/v1/stats", "");
  };
  const http_response r = run_sync(io, call(io.get_executor(), port));
  if (r.status != 200) {
    throw std::runtime_error("GET /v1/stats answered " + std::to_string(r.status) + " " + r.body);
  }
  return json::parse(r.body);
}

using instances = std::vector<std::unique_ptr<server_process>>;

void check_alive(const instances& in) {
  for (const auto& s : in) {
    if (!s->alive()) {
      throw std::runtime_error(s->name() + " exited (log " + s->log_path() + ")");
    }
  }
}

/// CPU seconds of the servers, Redis and this process (the load generator
/// and the push receiver) at one moment.
struct cpu_snapshot {
  steady::time_point at;
  double servers = 0, redis = 0, bench = 0;
};
cpu_snapshot cpu_now(const instances& in, pid_t redis_pid) {
  cpu_snapshot c{steady::now()};
  for (const auto& s : in) c.servers += cpu_seconds(s->pid());
  c.redis = redis_pid > 0 ? cpu_seconds(redis_pid) : 0;
  c.bench = cpu_seconds(::getpid());
  return c;
}
/// Busy cores between two snapshots: CPU seconds over wall seconds.
json busy_cores(const cpu_snapshot& a, const cpu_snapshot& b) {
  const double wall = seconds_between(a.at, b.at);
  if (wall <= 0) return json::object();
  return json{{"servers", (b.servers - a.servers) / wall},
              {"redis", (b.redis - a.redis) / wall},
              {"bench", (b.bench - a.bench) / wall},
              {"total", (b.servers - a.servers + b.redis - a.redis + b.bench - a.bench) / wall}};
}

/// Polls /v1/stats until the instances together hold every shard, each some;
/// returns the seconds it took.
double wait_all_shards_held(asio::io_context& io, const instances& in, int shards,
                            std::chrono::seconds guard) {
  const auto start = steady::now();
  for (;;) {
    int sum = 0;
    bool each = true;
    for (const auto& s : in) {
      const int held = stats_of(io, s->port()).value("shards_held", -1);
      sum += held;
      each = each && held > 0;
    }
    if (each && sum == shards) return seconds_between(start, steady::now());
    check_alive(in);
    if (steady::now() - start > guard) {
      throw std::runtime_error("the instances did not come to hold all " + std::to_string(shards) +
                               " shards within " + std::to_string(guard.count()) + " s (last sum " +
                               std::to_string(sum) + ")");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a poll, not a wait
  }
}

// ---------------------------------------------------------------------------
// Scheduling: `connections` coroutines take batches from a shared counter
// until every task is acknowledged.

struct schedule_result {
  double seconds = 0;
  std::vector<std::string> ids;
};

// What the scheduling coroutines share (they all run on one thread).
struct schedule_state {
  std::size_t count = 0;
  std::size_t batch = 0;
  std::function<std::int64_t(std::size_t)> due_of;  // task k is due then (ms since the epoch)
  std::size_t next = 0;                             // the first task not taken yet
  std::vector<std::string> ids;
  std::exception_ptr error;
};

asio::awaitable<void> schedule_worker(schedule_state* st, std::uint16_t port) {
  http_connection c(target_of(port), co_await asio::this_coro::executor);
  co_await c.connect();
  std::string body;
  while (st->next < st->count && !st->error) {
    const std::size_t first = st->next;
    const std::size_t last = std::min(st->count, first + st->batch);
    st->next = last;
    // Types and payloads are plain ASCII: no JSON library needed to write.
    body = R"({"tasks":[)";
    for (std::size_t k = first; k < last; ++k) {
      if (k != first) body += ',';
      body += R"({"type":")";
      body += task_type;
      body += R"(","payload":"p)";
      body += std::to_string(k);
      body += R"(","due_ms":)";
      body += std::to_string(st->due_of(k));
      body += '}';
    }
    body += "]}";
    const http_response r = co_await c.request("POST", "/v1/tasks:batch", body);
    if (r.status != 201) {
      throw std::runtime_error("POST /v1/tasks:batch answered " + std::to_string(r.status) + " " +
                               r.body.substr(0, 200));
    }
    // Parsed into a named value first: a range-for over a member of a
    // temporary would iterate a destroyed object (before C++23).
    const json answer = json::parse(r.body);
    for (const auto& id : answer.at("ids")) st->ids.push_back(id.get<std::string>());
  }
}

/// Schedules `count` tasks, task k due at due_of(k), in batches of `batch`
/// from `connections` connections, connection i on instance i % N.
schedule_result schedule_tasks(asio::io_context& io, const instances& in, std::size_t count,
                               std::size_t batch, int connections,
                               std::function<std::int64_t(std::size_t)> due_of) {
  schedule_state st;
  st.count = count;
  st.batch = batch;
  st.due_of = std::move(due_of);
  st.ids.reserve(count);
  const auto start = steady::now();
  for (int i = 0; i < connections; ++i) {
    asio::co_spawn(io, schedule_worker(&st, in[static_cast<std::size_t>(i) % in.size()]->port()),
                   [&st](std::exception_ptr e) {
                     if (e && !st.error) st.error = e;
                   });
  }
  io.restart();
  io.run();
  schedule_result out;
  out.seconds = seconds_between(start, steady::now());
  if (st.error) std::rethrow_exception(st.error);
  if (st.ids.size() != count) {
    throw std::runtime_error(std::to_string(st.ids.size()) + " ids acknowledged for " +
                             std::to_string(count) + " tasks sent");
  }
  out.ids = std::move(st.ids);
  return out;
}

// ---------------------------------------------------------------------------

struct options {
  std::string server_bin;
  std::string redis;  // redis://127.0.0.1:PORT
  std::string log_dir = "/tmp";
  std::string out, tables;
  bool quick = false;
  int shards = 64;
  int lease_ms = 2000;
  std::vector<int> instance_counts{1, 2, 3};
  int rounds = 5;
  std::size_t tasks = 50000;
  std::size_t batch = 500;
  int connections = 6;
  int failover_rounds = 5;
  std::vector<int> failover_leases_ms{2000, 1000};
  int failover_rate = 2000;  // tasks due per second over all shards
  pid_t redis_pid = 0;       // for its CPU time; 0: not measured
};

std::string store_uri(const options& o, const std::string& prefix) {
  return o.redis + (o.redis.find('?') == std::string::npos ? "?" : "&") + "prefix=" + prefix +
         "&shards=" + std::to_string(o.shards);
}

std::string fresh_prefix(const std::string& what) {
  static int n = 0;
  return "scaleout-" + std::to_string(::getpid()) + "-" + what + "-" + std::to_string(++n);
}

instances start_instances(const server_config& c, int n) {
  instances in;
  for (int i = 0; i < n; ++i) {
    in.push_back(std::make_unique<server_process>(c, "i" + std::to_string(i + 1)));
  }
  return in;
}

/// One throughput round with `n` instances.
json throughput_round(const options& o, receiver& rx, int n, int round) {
  asio::io_context io;
  server_config c{o.server_bin, store_uri(o, fresh_prefix("n" + std::to_string(n))),
                  o.shards,     o.lease_ms,
                  rx.url(),     o.log_dir};
  rx.clear();
  instances in = start_instances(c, n);
  const double balance_s = wait_all_shards_held(io, in, o.shards, std::chrono::seconds(60));

  // Schedule: due in a day, so nothing fires during the round.
  const std::int64_t far = wall_ms() + 24 * 3600 * 1000;
  const cpu_snapshot sched_cpu0 = cpu_now(in, o.redis_pid);
  const schedule_result sched =
      schedule_tasks(io, in, o.tasks, o.batch, o.connections, [&](std::size_t) { return far; });
  const json sched_cores = busy_cores(sched_cpu0, cpu_now(in, o.redis_pid));
  const double schedule_rate = static_cast<double>(o.tasks) / sched.seconds;

  // Firing: as many tasks, all due at one instant, far enough ahead that
  // scheduling them (as long again as above, twice over for margin) ends
  // before it.
  const std::int64_t margin_ms =
      std::max<std::int64_t>(2000, static_cast<std::int64_t>(sched.seconds * 2000) + 1000);
  const std::int64_t due = wall_ms() + margin_ms;
  const auto due_steady = steady::now() + std::chrono::milliseconds(margin_ms);
  const schedule_result fire =
      schedule_tasks(io, in, o.tasks, o.batch, o.connections, [&](std::size_t) { return due; });
  // Every owner holds every task of its shards before the due time (tasks
  // scheduled through another instance reach the owner by a notice)?
  // `pending` counts held tasks.
  bool held_before_due = false;
  while (steady::now() < due_steady) {
    std::int64_t pending = 0;
    for (const auto& s : in) pending += stats_of(io, s->port()).value("pending", 0);
    if (pending == static_cast<std::int64_t>(2 * o.tasks)) {
      held_before_due = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // CPU from the due time to the last delivery (roughly: the snapshot is
  // taken once the first delivery came, and again once all had).
  const std::unordered_set<std::string> want(fire.ids.begin(), fire.ids.end());
  rx.wait_until(due_steady + std::chrono::seconds(120),
                [](const auto& calls) { return !calls.empty(); });
  const cpu_snapshot fire_cpu0 = cpu_now(in, o.redis_pid);
  std::size_t seen_calls = 0;
  std::unordered_set<std::string> got;
  const bool all = rx.wait_until(due_steady + std::chrono::seconds(120), [&](const auto& calls) {
    for (; seen_calls < calls.size(); ++seen_calls) {
      if (want.count(calls[seen_calls].task_id)) got.insert(calls[seen_calls].task_id);
    }
    return got.size() == want.size();
  });
  const json fire_cores = busy_cores(fire_cpu0, cpu_now(in, o.redis_pid));
  check_alive(in);
  const auto calls = rx.calls();
  if (!all) {
    throw std::runtime_error(std::to_string(want.size() - got.size()) + " of " +
                             std::to_string(want.size()) +
                             " tasks not delivered within 120 s of their due time");
  }
  steady::time_point first = steady::time_point::max(), last = steady::time_point::min();
  std::size_t fire_calls = 0;
  std::map<std::string, std::size_t> by_instance;
  for (const auto& d : calls) {
    if (!want.count(d.task_id)) continue;
    ++fire_calls;
    ++by_instance[d.instance];
    first = std::min(first, d.at);
    last = std::max(last, d.at);
  }
  const double fire_s = seconds_between(first, last);
  const double firing_rate = static_cast<double>(want.size()) / fire_s;
  json r{{"instances", n},
         {"round", round},
         {"balance_s", balance_s},
         {"schedule_s", sched.seconds},
         {"schedule_per_s", schedule_rate},
         {"schedule_busy_cores", sched_cores},
         {"fire_schedule_s", fire.seconds},
         {"held_before_due", held_before_due},
         {"first_delivery_after_due_ms",
          std::chrono::duration<double, std::milli>(first - due_steady).count()},
         {"fire_s", fire_s},
         {"fired_per_s", firing_rate},
         {"firing_busy_cores", fire_cores},
         {"deliveries", fire_calls},
         {"duplicates", fire_calls - want.size()},
         {"deliveries_by_instance", by_instance}};
  std::cerr << "scaleout: N=" << n << " round " << round << ": schedule "
            << static_cast<long>(schedule_rate) << "/s, firing " << static_cast<long>(firing_rate)
            << "/s (" << want.size() << " tasks in " << fire_s << " s, " << fire_calls - want.size()
            << " duplicates, held before due: " << (held_before_due ? "yes" : "NO") << ")\n";
  return r;
}

/// One failover round: 3 instances, tasks due at `rate` per second over all
/// shards; i2 is SIGKILLed once tasks have been running for 2 s.
json failover_round(const options& o, receiver& rx, int lease_ms, int round, std::mt19937_64& rng) {
  asio::io_context io;
  server_config c{o.server_bin, store_uri(o, fresh_prefix("failover")),
                  o.shards,     lease_ms,
                  rx.url(),     o.log_dir};
  rx.clear();
  instances in = start_instances(c, 3);
  wait_all_shards_held(io, in, o.shards, std::chrono::seconds(60));
  const std::string victim = "i2";

  // The kill comes `lead` plus a random fraction of a lease after the first
  // task is due: the takeover time depends on where in the renewal cycle
  // of the leases the kill falls, so every round draws that anew. Tasks are
  // due from 1 s ahead until well past two leases after the kill.
  std::uniform_int_distribution<std::int64_t> phase(0, lease_ms - 1);
  const std::int64_t lead_ms = 2000 + phase(rng);
  const std::int64_t window_ms = lead_ms + 3 * lease_ms + 3000;
  const auto count = static_cast<std::size_t>(window_ms * o.failover_rate / 1000);
  const std::int64_t start = wall_ms() + 1000;
  const auto start_steady = steady::now() + std::chrono::milliseconds(1000);
  schedule_tasks(io, in, count, o.batch, o.connections, [&](std::size_t k) {
    return start + static_cast<std::int64_t>(k) * window_ms / static_cast<std::int64_t>(count);
  });
  // Wait (on deliveries) until tasks have been running for `lead`.
  const std::size_t before_kill = static_cast<std::size_t>(lead_ms * o.failover_rate / 1000);
  if (!rx.wait_until(start_steady + std::chrono::seconds(60),
                     [&](const auto& calls) { return calls.size() >= before_kill; })) {
    throw std::runtime_error("failover: tasks did not start running");
  }
  check_alive(in);
  // The clock starts when SIGKILL is sent: kill() also reaps the process,
  // which takes a moment that belongs to the failover time.
  const auto killed_at = steady::now();
  in[1]->kill();

  // The victim's shards: those of the tasks it pushed (all before the kill:
  // it is reaped, and the receiver records a call before answering).
  std::set<std::uint32_t> victim_shards;
  for (const auto& d : rx.calls()) {
    if (d.instance == victim) victim_shards.insert(delayq::shard_of(d.task_id, o.shards));
  }
  if (victim_shards.empty()) throw std::runtime_error("failover: the victim pushed nothing");

  // First push after the kill, by a survivor, per victim shard.
  std::map<std::uint32_t, steady::time_point> taken;
  std::size_t seen = 0;
  const auto deadline = killed_at + std::chrono::milliseconds(4 * lease_ms + 10000);
  const bool all = rx.wait_until(deadline, [&](const auto& calls) {
    for (; seen < calls.size(); ++seen) {
      const auto& d = calls[seen];
      if (d.at < killed_at || d.instance == victim) continue;
      const auto s = delayq::shard_of(d.task_id, o.shards);
      if (victim_shards.count(s) && !taken.count(s)) taken[s] = d.at;
    }
    return taken.size() == victim_shards.size();
  });
  for (const std::size_t i : {0u, 2u}) {
    if (!in[i]->alive())
      throw std::runtime_error(in[i]->name() + " exited (log " + in[i]->log_path() + ")");
  }
  if (taken.empty()) throw std::runtime_error("failover: no shard of the victim was taken over");
  steady::time_point first = steady::time_point::max(), last = steady::time_point::min();
  for (const auto& [s, at] : taken) {
    first = std::min(first, at);
    last = std::max(last, at);
  }
  const double first_s = seconds_between(killed_at, first);
  const double last_s = seconds_between(killed_at, last);
  std::cerr << "scaleout: failover lease " << lease_ms << " ms round " << round << ": "
            << victim_shards.size() << " shards of " << victim << ", first run after the kill "
            << first_s << " s, all " << taken.size() << " taken over " << (all ? "" : "(NOT all) ")
            << last_s << " s\n";
  return json{{"lease_ms", lease_ms},
              {"round", round},
              {"kill_after_first_due_ms", lead_ms},
              {"tasks", count},
              {"victim_shards", victim_shards.size()},
              {"shards_taken_over", taken.size()},
              {"all_taken_over", all},
              {"first_s", first_s},
              {"last_s", last_s}};
}

std::string fmt(double v, int prec = 0) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(prec);
  s << v;
  return s.str();
}

int run(const options& o) {
  receiver rx;
  json results{{"config",
                {{"shards", o.shards},
                 {"lease_ms", o.lease_ms},
                 {"tick_ms", 1},
                 {"rounds", o.rounds},
                 {"tasks", o.tasks},
                 {"batch", o.batch},
                 {"connections", o.connections},
                 {"failover_rounds", o.failover_rounds},
                 {"failover_leases_ms", o.failover_leases_ms},
                 {"failover_rate_per_s", o.failover_rate},
                 {"quick", o.quick}}}};
  // Rounds outermost, instance counts inside: a slow spell of the shared
  // machine then hits every N alike instead of one of them.
  std::map<int, std::vector<json>> by_n;
  for (int round = 1; round <= o.rounds; ++round) {
    for (const int n : o.instance_counts) by_n[n].push_back(throughput_round(o, rx, n, round));
  }
  std::map<int, std::vector<json>> by_lease;
  std::mt19937_64 rng(std::random_device{}());
  for (int round = 1; round <= o.failover_rounds; ++round) {
    for (const int l : o.failover_leases_ms) {
      by_lease[l].push_back(failover_round(o, rx, l, round, rng));
    }
  }

  std::ostringstream md;
  md << "### Scale-out: throughput (" << o.tasks << " tasks per figure, " << o.shards
     << " shards, lease " << o.lease_ms << " ms, median of " << o.rounds << " rounds)\n\n"
     << "| instances | schedule (tasks/s) | vs 1 | busy cores: servers + redis + bench | firing "
        "(tasks/s) | vs 1 | busy cores: servers + redis + bench | duplicates | held before due "
        "|\n|---|---|---|---|---|---|---|---|---|\n";
  json summary = json::array();
  double sched1 = 0, fire1 = 0;
  for (const int n : o.instance_counts) {
    std::vector<double> s, f;
    std::map<std::string, std::vector<double>> sc, fc;  // busy cores per part
    std::size_t dups = 0, held = 0;
    for (const auto& r : by_n[n]) {
      s.push_back(r["schedule_per_s"]);
      f.push_back(r["fired_per_s"]);
      for (const char* part : {"servers", "redis", "bench"}) {
        sc[part].push_back(r["schedule_busy_cores"].value(part, 0.0));
        fc[part].push_back(r["firing_busy_cores"].value(part, 0.0));
      }
      dups += r["duplicates"].get<std::size_t>();
      held += r["held_before_due"].get<bool>() ? 1 : 0;
    }
    const double sm = median(s), fm = median(f);
    if (n == 1) sched1 = sm, fire1 = fm;
    const double sr = sched1 > 0 ? sm / sched1 : 0, fr = fire1 > 0 ? fm / fire1 : 0;
    const auto cores = [](auto& m) {
      return fmt(median(m["servers"]), 2) + " + " + fmt(median(m["redis"]), 2) + " + " +
             fmt(median(m["bench"]), 2);
    };
    md << "| " << n << " | " << fmt(sm) << " | " << (sched1 > 0 ? fmt(sr, 2) : "-") << " | "
       << cores(sc) << " | " << fmt(fm) << " | " << (fire1 > 0 ? fmt(fr, 2) : "-") << " | "
       << cores(fc) << " | " << dups << " | " << held << "/" << by_n[n].size() << " |\n";
    summary.push_back({{"instances", n},
                       {"schedule_per_s_median", sm},
                       {"fired_per_s_median", fm},
                       {"schedule_vs_1", sr},
                       {"fired_vs_1", fr},
                       {"rounds", by_n[n]}});
  }
  results["throughput"] = summary;

  md << "\n### Scale-out: failover (3 instances, " << o.shards << " shards, one SIGKILLed, "
     << o.failover_rounds << " rounds; tasks due " << o.failover_rate << "/s, so one every "
     << fmt(1000.0 * o.shards / o.failover_rate, 0) << " ms per shard)\n\n"
     << "| lease | kill to first task of a taken-over shard, median | max | kill to the last "
        "shard's first task, median | max | under 2 leases |\n|---|---|---|---|---|---|\n";
  json fo = json::array();
  for (const int l : o.failover_leases_ms) {
    std::vector<double> first, last;
    bool all = true;
    for (const auto& r : by_lease[l]) {
      first.push_back(r["first_s"]);
      last.push_back(r["last_s"]);
      all = all && r["all_taken_over"].get<bool>();
    }
    const double fmax = *std::max_element(first.begin(), first.end());
    const double lmax = *std::max_element(last.begin(), last.end());
    const bool under = all && lmax < 2.0 * l / 1000;
    md << "| " << fmt(l / 1000.0, 1) << " s | " << fmt(median(first), 2) << " s | " << fmt(fmax, 2)
       << " s | " << fmt(median(last), 2) << " s | " << fmt(lmax, 2) << " s | "
       << (under ? "yes" : "no") << " (2 leases = " << fmt(2.0 * l / 1000, 1) << " s) |\n";
    fo.push_back({{"lease_ms", l},
                  {"first_s_median", median(first)},
                  {"first_s_max", fmax},
                  {"last_s_median", median(last)},
                  {"last_s_max", lmax},
                  {"all_rounds_all_taken_over", all},
                  {"under_two_leases", under},
                  {"rounds", by_lease[l]}});
  }
  results["failover"] = fo;

  std::cout << md.str();
  if (!o.out.empty()) std::ofstream(o.out) << results.dump(2) << '\n';
  if (!o.tables.empty()) std::ofstream(o.tables) << md.str();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  CLI::App app{
      "delayq-bench-scaleout: delayq-server --cluster with 1, 2, 3 instances on one "
      "Redis (issue 14)"};
  app.add_option("--server-bin", o.server_bin, "delayq-server to start")->required();
  app.add_option("--redis", o.redis, "redis://HOST:PORT of the Redis to use")->required();
  app.add_option("--log-dir", o.log_dir, "where the servers' logs go");
  app.add_option("--out", o.out, "JSON results");
  app.add_option("--tables", o.tables, "markdown tables");
  app.add_flag("--quick", o.quick, "tiny sizes, one round: checks the pipeline");
  app.add_option("--shards", o.shards, "--shards of every instance");
  app.add_option("--lease-ms", o.lease_ms, "--lease of the throughput rounds, in ms");
  app.add_option("--rounds", o.rounds, "throughput rounds per instance count");
  app.add_option("--tasks", o.tasks, "tasks per schedule and per firing figure");
  app.add_option("--batch", o.batch, "tasks per POST /v1/tasks:batch");
  app.add_option("--connections", o.connections, "client connections for scheduling");
  app.add_option("--failover-rounds", o.failover_rounds, "failover rounds per lease");
  app.add_option("--failover-leases-ms", o.failover_leases_ms, "leases of the failover rounds");
  app.add_option("--failover-rate", o.failover_rate, "tasks due per second in a failover round");
  app.add_option("--redis-pid", o.redis_pid, "redis-server's pid, for its CPU time");
  CLI11_PARSE(app, argc, argv);
  if (o.quick) {
    o.shards = 16;
    o.rounds = 1;
    o.tasks = 2000;
    o.batch = 200;
    o.connections = 3;
    o.failover_rounds = 1;
    o.failover_leases_ms = {1000};
    o.failover_rate = 200;
  }
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::cerr << "delayq-bench-scaleout: " << e.what() << '\n';
    return 1;
  }
}
