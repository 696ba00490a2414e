// server_app: one delayq-server: the engine on its store, the lease broker,
// the push client, the API and the HTTP listener, wired together, with the
// start-up and the drain (docs/server.md, "Running it").
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "delayq/engine.hpp"
#include "io/connection_home.hpp"

namespace delayq::server {

/// What the command line sets.
struct server_options {
  std::string listen = "127.0.0.1:7700";
  std::string store;  ///< Empty: delayq::default_store_uri().
  std::string token;  ///< Empty: no auth (loopback only).
  std::chrono::milliseconds tick{1};
  std::size_t workers = 2;
  /// --io-threads: 0 (the default, "auto") picks io_threads_for()'s count.
  std::size_t io_threads = 0;
  std::vector<std::string> push;      ///< TYPE=URL
  std::vector<std::string> capacity;  ///< TYPE=N: engine_options::type_capacity
  std::size_t max_body = 8 << 20;
  /// --max-connections: connections open at once (http_limits).
  std::size_t max_connections = 4096;
  /// --allowed-host: host names a Host header may name besides the listen
  /// address and localhost, when there is no token (request_guard).
  std::vector<std::string> allowed_hosts;
  /// --push-allow: CIDR|HOST[:PORT] rules for push targets (push_policy).
  /// Empty: loopback targets only.
  std::vector<std::string> push_allow;
  retry_policy retry;
  /// engine_options::horizon: tasks due later stay in the store only.
  std::chrono::milliseconds horizon = engine_options{}.horizon;
  /// --cluster: run as one instance of a cluster on a sharded store
  /// (engine_options::cluster) with these shards, lease and instance name.
  bool cluster = false;
  std::uint32_t shards = cluster_options{}.shards;
  /// --shards was given. Without it a `shards=N` in the store URI sets the
  /// count; with it such an N must be the same (start() checks).
  bool shards_given = false;
  std::chrono::milliseconds lease = cluster_options{}.lease;
  std::string instance;  ///< Empty: HOSTNAME:PID.
  /// --advertise: the URL other instances forward calls on this one's tasks
  /// to. Empty: http:// and the bound address (the host name when it is a
  /// wildcard).
  std::string advertise;
  /// --forward-timeout: the most a call forwarded to another instance takes.
  std::chrono::milliseconds forward_timeout{15000};
  /// --cluster-secret: the key that authenticates the marker of a forwarded
  /// call (cluster/forward_marker.hpp), at least 16 bytes, the same on every
  /// instance. Empty: the token; without one, a random key kept in the
  /// store. Ignored without --cluster.
  std::string cluster_secret;
  /// --beanstalk-listen: ADDR:PORT or unix:PATH addresses that speak
  /// beanstalkd's protocol (docs/beanstalk.md). Empty: none.
  std::vector<std::string> beanstalk_listen;
  /// --beanstalk-allow: CIDR blocks (or addresses) of TCP peers allowed
  /// besides loopback.
  std::vector<std::string> beanstalk_allow;
  /// --max-job-size: the largest beanstalk job body (JOB_TOO_BIG beyond).
  std::size_t max_job_size = 65535;
  /// --beanstalk-command-timeout: from a beanstalk command's first byte to
  /// its last (the line, then a put's body); past it the connection closes.
  std::chrono::milliseconds beanstalk_command_timeout{30'000};
  /// --beanstalk-idle-timeout: a beanstalk connection that holds no
  /// reservation, waits in no reserve and has no command under way is
  /// closed after this long. 0: never.
  std::chrono::milliseconds beanstalk_idle_timeout{0};
};

/// The I/O threads `options` asks for: --io-threads as given, or for "auto"
/// one on `memory:` and two on any other store. On `memory:` a request is
/// decided and answered where it is read and nothing waits, so one thread
/// takes every connection's ready requests per wake-up: with eight beanstalk
/// connections the server switched context 0.1 times a cycle against 0.9
/// with two threads, and did 1.26-1.46x the cycles (docs/benchmarks.md, "One
/// I/O thread on memory:"). With a store a second thread serves its
/// connections while the other writes (SQLite, engine_options::caller_writes)
/// or drives the store's pipeline (Redis, PostgreSQL): one thread did 0.29x
/// of two on SQLite (synchronous=full) and 0.82x on Redis there.
std::size_t io_threads_for(const server_options& options);

/// Parses a duration flag: a whole number with a unit, "500ms", "5s", "2m"
/// or "1h". Throws std::invalid_argument with a message for the user.
std::chrono::milliseconds parse_duration(const std::string& text);

/// Parses "TYPE=N" of --capacity; throws std::invalid_argument with a
/// message for the user.
std::pair<std::string, std::size_t> parse_capacity(const std::string& spec);

/// Parses "ADDR:PORT" ("[::1]:7700" for IPv6, "localhost:7700"); throws
/// std::invalid_argument with a message for the user.
boost::asio::ip::tcp::endpoint parse_listen(const std::string& text);

/// Thread safety: start() and run() from one thread; drain() from any
/// thread, once.
class server_app {
 public:
  explicit server_app(server_options options);
  ~server_app();
  server_app(const server_app&) = delete;
  server_app& operator=(const server_app&) = delete;

  /// Listens, then opens the store, registers the --push targets and starts
  /// the engine. Returns where it listens. When the store cannot be reached
  /// it keeps listening (503 to every request) and retries every second in
  /// the background. Throws std::runtime_error (or std::invalid_argument for
  /// a bad option) with a message for the user.
  boost::asio::ip::tcp::endpoint start();

  /// Serves on `io_threads` threads (this one among them) until drain() ends.
  void run();

  /// Stops gracefully: no new connections, 503 to new requests, waits for
  /// requests in flight, gives back the tasks waiting for consumers or
  /// reserved, stops the engine (no push starts), waits for the pushes in
  /// flight and writes their outcomes, then ends run(). All the waiting ends
  /// `grace` after the call (--drain-timeout): a push unanswered by then is
  /// abandoned, and its task pushed again after the restart.
  void drain(std::chrono::milliseconds grace = std::chrono::seconds{30});

  /// beanstalkd's drain mode (SIGUSR1): every later beanstalk put answers
  /// DRAINING, and stats says `draining: true`; everything else goes on.
  /// Safe from any thread (a put racing with it may still be inserted).
  void refuse_beanstalk_puts();

  /// Where the beanstalk protocol listens, as --beanstalk-listen names it
  /// (the port chosen for port 0 filled in); after start().
  const std::vector<std::string>& beanstalk_addresses() const noexcept {
    return beanstalk_addresses_;
  }

 private:
  struct parts;  // server_app.cpp
  // Opens the store and builds what needs it; throws (start_error for the
  // store's errors) and leaves nothing half built.
  void bring_up();
  void stop_starter();
  server_options options_;
  std::vector<std::string> beanstalk_addresses_;
  std::atomic<bool> refuse_puts_{false};
  // The I/O threads: thread 0 runs io_ (the engine's timer, the broker,
  // the pushes, the store's write pipeline, and connections), each other
  // thread an io_context of its own that only connections use. A connection
  // is given the one with the fewest open connections when it is accepted,
  // thread 0 on a tie, and is read, handled and answered on that thread:
  // one io_context run by several threads hands every request from the
  // thread that read it to another and back (measured in
  // docs/benchmarks.md, "A request runs to completion"). So a lone
  // connection runs on thread 0, where the store's writes are sent and
  // answered (task_store::drive_writes_on()): its requests cross no thread
  // at all.
  // Declared before io_, so destroyed after it: io_ holds the listeners'
  // accepts, whose sockets are on strands of these contexts, and an accept
  // still pending when io_ goes is destroyed with it (ASan in CI: a
  // use-after-free of a strand whose context had gone first). Nothing
  // pending on these holds an object of io_.
  std::vector<std::unique_ptr<boost::asio::io_context>> more_io_;
  boost::asio::io_context io_;
  // Open connections by I/O thread (0: io_), shared with what each
  // connection holds, which may outlive this object on a stopped context.
  struct thread_loads;
  std::shared_ptr<thread_loads> loads_;
  // The executor of a new connection's thread, and what it holds while
  // open (http_server.hpp, session_home).
  connection_home next_connection_home();
  void stop_io();
  std::unique_ptr<parts> p_;
};

}  // namespace delayq::server
