// delayq-server: the engine as an HTTP service. docs/server.md has the flags
// and the API; server_settings.cpp reads the flags and the config file,
// server_app.cpp has the wiring.

#include <sys/resource.h>
#include <unistd.h>
#include <boost/asio/signal_set.hpp>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "api/api_router.hpp"
#include "server_app.hpp"
#include "server_settings.hpp"

int main(int argc, char** argv) {
  // Flags, environment and --config file, through one table of settings
  // (server_settings.hpp): a usage error exits 2, naming where it is.
  delayq::server::server_config config;
  if (const auto code =
          delayq::server::load_server_config(argc, argv, config, std::cout, std::cerr))
    return *code;
  if (config.list_routes) {
    for (const auto& [method, path] : delayq::server::api_router::routes())
      std::printf("%s %s\n", method.c_str(), path.c_str());
    return 0;
  }
  const delayq::server::server_options& o = config.options;
  const auto drain_timeout = config.drain_timeout;
  // Before anything logs: the library's default writes warnings and errors.
  if (config.log_threshold != delayq::log_level::warning)
    delayq::set_log_function(delayq::stderr_log(config.log_threshold));

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
        // Refused first, then said: what reads the line may put at once.
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
