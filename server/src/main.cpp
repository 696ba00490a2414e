// delayq-server: the engine as an HTTP service. docs/server.md has the flags
// and the API; server_app.cpp has the wiring.

#include <sys/resource.h>
#include <unistd.h>
#include <CLI/CLI.hpp>
#include <boost/asio/signal_set.hpp>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "api/api_router.hpp"
#include "server_app.hpp"

int main(int argc, char** argv) {
  delayq::server::server_options o;
  CLI::App app{"delayq-server: delayed tasks over HTTP (docs/server.md)", "delayq-server"};
  app.set_version_flag("--version", std::string("delayq-server ") + DELAYQ_VERSION);
  app.add_option("--listen", o.listen, "ADDR:PORT to listen on (port 0: any free one)")
      ->capture_default_str();
  app.add_option("--store", o.store,
                 "store URI: redis://..., redis-cluster://..., sqlite:FILE or memory: "
                 "(default: $DELAYQ_STORE, else redis://127.0.0.1:6379)");
  app.add_option("--token", o.token, "bearer token every /v1/ request must carry")
      ->envname("DELAYQ_TOKEN");
  std::int64_t tick_ms = o.tick.count();
  app.add_option("--tick", tick_ms, "wheel resolution in milliseconds")
      ->capture_default_str()
      ->check(CLI::Range(1, 60'000));
  app.add_option("--workers", o.workers, "engine worker threads")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  app.add_option("--io-threads", o.io_threads, "threads serving HTTP")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  app.add_option("--push", o.push, "TYPE=URL push target (repeatable; kept in the store)");
  app.add_option("--capacity", o.capacity,
                 "TYPE=N: at most N pending tasks of TYPE; more get 429 type_full (repeatable)");
  app.add_option("--max-connections", o.max_connections,
                 "connections open at once; one more is closed at once, and counted in "
                 "/metrics (delayq_http_connections_refused_total)")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{1'000'000}));
  app.add_option("--allowed-host", o.allowed_hosts,
                 "without --token: a host name the Host header may name besides the listen "
                 "address and localhost (repeatable; anything else gets 403, against DNS "
                 "rebinding)");
  app.add_option("--push-allow", o.push_allow,
                 "CIDR|HOST[:PORT] push targets may reach (repeatable; default: loopback only). "
                 "Link-local (cloud metadata), 0.0.0.0 and this server are refused unless named "
                 "alone");
  std::string drain_timeout_text = "30s";
  app.add_option("--drain-timeout", drain_timeout_text,
                 "on SIGTERM or SIGINT, the most the drain waits for requests and pushes in "
                 "flight, 0s to 1h; a push still unanswered then is pushed again after the restart")
      ->capture_default_str()
      ->check([](const std::string& text) -> std::string {
        try {
          if (delayq::server::parse_duration(text) > std::chrono::hours{1})
            return "must be from 0s to 1h, got " + text;
          return {};
        } catch (const std::invalid_argument& e) {
          return std::string(e.what());
        }
      });
  bool list_routes = false;
  app.add_flag("--list-routes", list_routes,
               "print every route of the API (METHOD PATH, one a line) and exit");
  app.add_option("--beanstalk-listen", o.beanstalk_listen,
                 "ADDR:PORT or unix:PATH to speak beanstalkd's protocol on (repeatable; "
                 "beanstalkd's port is 11300; docs/beanstalk.md)");
  app.add_option("--beanstalk-allow", o.beanstalk_allow,
                 "CIDR block of TCP peers allowed on the beanstalk addresses besides loopback "
                 "(repeatable)");
  app.add_option("--max-job-size", o.max_job_size,
                 "largest beanstalk job body in bytes (JOB_TOO_BIG beyond)")
      ->capture_default_str();
  std::string bs_command_timeout_text = "30s";
  app.add_option("--beanstalk-command-timeout", bs_command_timeout_text,
                 "the most a beanstalk client may take to send one command, from its first "
                 "byte to its last (line and body), 100ms to 1h; past it the connection is "
                 "closed")
      ->capture_default_str()
      ->check([](const std::string& text) -> std::string {
        try {
          const auto d = delayq::server::parse_duration(text);
          if (d < std::chrono::milliseconds{100} || d > std::chrono::hours{1})
            return "must be from 100ms to 1h, got " + text;
          return {};
        } catch (const std::invalid_argument& e) {
          return std::string(e.what());
        }
      });
  std::string bs_idle_timeout_text = "0s";
  app.add_option("--beanstalk-idle-timeout", bs_idle_timeout_text,
                 "close a beanstalk connection that holds no reservation, waits in no reserve "
                 "and has no command under way once it stayed so this long, 0s (never) to 24h")
      ->capture_default_str()
      ->check([](const std::string& text) -> std::string {
        try {
          if (delayq::server::parse_duration(text) > std::chrono::hours{24})
            return "must be from 0s to 24h, got " + text;
          return {};
        } catch (const std::invalid_argument& e) {
          return std::string(e.what());
        }
      });
  app.add_option("--max-body", o.max_body, "largest request body in bytes (413 beyond)")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1024}, std::size_t{1} << 30));
  std::uint32_t retry_max = o.retry.max_attempts;
  std::int64_t retry_base = o.retry.base.count(), retry_cap = o.retry.cap.count();
  app.add_option("--retry-max", retry_max, "attempts before a task becomes a dead letter")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1'000'000u));
  app.add_option("--retry-base", retry_base, "first retry backoff bound in milliseconds")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{86'400'000}));
  app.add_option("--retry-cap", retry_cap, "largest retry backoff bound in milliseconds")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{86'400'000}));
  std::int64_t horizon_s = o.horizon.count() / 1000;
  app.add_option("--horizon", horizon_s,
                 "seconds ahead the engine holds tasks in memory; later ones stay in the store "
                 "(0: hold every task)")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{366} * 86'400));
  auto* cluster =
      app.add_flag("--cluster", o.cluster,
                   "run as one instance of a cluster on a Redis store: hold and run only "
                   "the shards this instance holds a lease on (docs/scale-out.md)");
  auto* shards =
      app.add_option("--shards", o.shards,
                     "with --cluster: how many shards tasks are split into; every instance must "
                     "use the same number. The store is opened with it (a shards=N in the "
                     "store URI may give it instead)")
          ->capture_default_str()
          ->check(CLI::Range(1u, 16384u))
          ->needs(cluster);
  std::string lease_text = "5s";
  app.add_option("--lease", lease_text,
                 "with --cluster: how long a shard lease lives without renewal (200ms to 10m)")
      ->capture_default_str()
      ->check([](const std::string& text) {
        try {
          const auto d = delayq::server::parse_duration(text);
          if (d < std::chrono::milliseconds{200} || d > std::chrono::minutes{10})
            return std::string("must be from 200ms to 10m");
          return std::string();
        } catch (const std::invalid_argument& e) {
          return std::string(e.what());
        }
      })
      ->needs(cluster);
  app.add_option("--instance", o.instance,
                 "with --cluster: this instance's name, unique among live instances "
                 "(default HOSTNAME:PID)")
      ->needs(cluster);
  std::string forward_timeout_text = "15s";
  app.add_option("--forward-timeout", forward_timeout_text,
                 "with --cluster: the most a call forwarded to the instance that owns its task "
                 "may take before it is answered 503 outcome_unknown, 100ms to 10m (default 15s)")
      ->check([](const std::string& text) -> std::string {
        try {
          const auto d = delayq::server::parse_duration(text);
          if (d < std::chrono::milliseconds{100} || d > std::chrono::minutes{10})
            return "must be from 100ms to 10m, got " + text;
          return {};
        } catch (const std::invalid_argument& e) {
          return std::string(e.what());
        }
      })
      ->needs(cluster);
  app.add_option("--cluster-secret", o.cluster_secret,
                 "with --cluster: the key (16 bytes or more, the same on every instance) that "
                 "authenticates a forwarded call's X-Delayq-Forwarded-By, so no client can set "
                 "it (default: the --token; without one, a random key kept in the store)")
      ->envname("DELAYQ_CLUSTER_SECRET");
  app.add_option("--advertise", o.advertise,
                 "with --cluster: the http:// URL the other instances reach this one's API at, "
                 "to forward calls on its tasks (default: the address it listens on; the host "
                 "name when that is 0.0.0.0 or ::)")
      ->needs(cluster);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (list_routes) {
    for (const auto& [method, path] : delayq::server::api_router::routes())
      std::printf("%s %s\n", method.c_str(), path.c_str());
    return 0;
  }
  const auto drain_timeout = delayq::server::parse_duration(drain_timeout_text);
  o.shards_given = shards->count() > 0;
  o.tick = std::chrono::milliseconds{tick_ms};
  o.horizon = std::chrono::seconds{horizon_s};
  o.lease = delayq::server::parse_duration(lease_text);
  o.forward_timeout = delayq::server::parse_duration(forward_timeout_text);
  o.beanstalk_command_timeout = delayq::server::parse_duration(bs_command_timeout_text);
  o.beanstalk_idle_timeout = delayq::server::parse_duration(bs_idle_timeout_text);
  o.retry.max_attempts = retry_max;
  o.retry.base = std::chrono::milliseconds{retry_base};
  o.retry.cap = std::chrono::milliseconds{retry_cap};

  // Connections, store and push sockets all take descriptors: raise the
  // soft limit to the hard one, and say so when --max-connections cannot
  // be reached within it (accept() would fail first, with EMFILE).
  if (rlimit rl{}; ::getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    if (rl.rlim_cur < rl.rlim_max) {
      rl.rlim_cur = rl.rlim_max;
      if (::setrlimit(RLIMIT_NOFILE, &rl) != 0) ::getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < o.max_connections + 256)
      std::fprintf(stderr,
                   "delayq-server: warning: %llu open files allowed (ulimit -n), fewer than "
                   "--max-connections %zu plus the store's and pushes' sockets\n",
                   static_cast<unsigned long long>(rl.rlim_cur), o.max_connections);
  }

  delayq::server::server_app server(o);
  // SIGUSR1 is beanstalkd's drain mode; installed before anything listens,
  // since its default action would end the process.
  boost::asio::io_context signals_io;
  boost::asio::signal_set usr1(signals_io, SIGUSR1);
  std::function<void(const boost::system::error_code&, int)> on_usr1 =
      [&](const boost::system::error_code& ec, int) {
        if (ec) return;
        // The flag first: whoever reads the line (a test, an operator's
        // script) may put at once, and must get DRAINING.
        server.refuse_beanstalk_puts();
        std::fprintf(stderr, "delayq-server: SIGUSR1: beanstalk puts answer DRAINING from now\n");
        usr1.async_wait(on_usr1);
      };
  usr1.async_wait(on_usr1);
  try {
    const auto at = server.start();
    std::printf("delayq-server listening on %s:%u\n", at.address().to_string().c_str(),
                static_cast<unsigned>(at.port()));
    for (const std::string& where : server.beanstalk_addresses())
      std::printf("delayq-server beanstalk listening on %s\n", where.c_str());
    std::fflush(stdout);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "delayq-server: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "delayq-server: %s\n", e.what());
    return 1;
  }

  // The first SIGTERM or SIGINT drains (on a thread of its own: the drain
  // waits for work the I/O threads do); a second one exits at once. Nothing
  // acknowledged is lost either way: a 201 was sent only once durable.
  boost::asio::signal_set signals(signals_io, SIGTERM, SIGINT);
  std::thread drainer;  // set on the signal thread
  std::function<void(const boost::system::error_code&, int)> on_signal =
      [&](const boost::system::error_code& ec, int sig) {
        if (ec) return;
        if (drainer.joinable()) {
          std::fprintf(stderr, "delayq-server: second signal (%d): exiting now\n", sig);
          std::_Exit(130);
        }
        std::fprintf(stderr, "delayq-server: signal %d: draining\n", sig);
        drainer = std::thread([&server, drain_timeout] { server.drain(drain_timeout); });
        signals.async_wait(on_signal);
      };
  signals.async_wait(on_signal);
  std::thread signal_thread([&] { signals_io.run(); });

  server.run();
  // run() can return while the signal handler is still move-assigning
  // `drainer` (the drain it started stops the server first): join the signal
  // thread before looking at `drainer`, or a joinable thread is destroyed.
  signals.cancel();
  usr1.cancel();
  signals_io.stop();
  signal_thread.join();
  if (drainer.joinable()) drainer.join();
  std::fprintf(stderr, "delayq-server: stopped\n");
  return 0;
}
