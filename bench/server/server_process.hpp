// server_process.hpp - a delayq-server child process of
// delayq-bench-scaleout, started with --cluster on a loopback port the
// kernel picks. Its stdout is read up to the "listening" line (which names
// the port), then drained into its log by a thread, so it never blocks on a
// full pipe; stderr goes to the log directly. It dies with this process
// (PR_SET_PDEATHSIG), so a crashed benchmark leaves no server behind.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace delayq::bench_server::scaleout {

/// What the instances of one round share.
struct server_config {
  std::string bin;
  std::string store_uri;  // with prefix and shards
  int shards = 64;
  int lease_ms = 2000;
  std::string push_url;
  std::string log_dir;
};

/// One delayq-server, running from construction (which throws when it does
/// not come to listen within 30 s) until kill() or destruction. Used from
/// one thread.
class server_process {
 public:
  server_process(const server_config& c, const std::string& name);
  ~server_process();
  server_process(const server_process&) = delete;
  server_process& operator=(const server_process&) = delete;

  /// SIGKILL and reap. Also how rounds end: every round starts on a fresh
  /// prefix, so nothing a clean stop would leave behind matters.
  void kill();
  /// False once it exited (then reaped: kill() does nothing more).
  bool alive();
  std::uint16_t port() const { return port_; }
  pid_t pid() const { return pid_; }
  const std::string& name() const { return name_; }
  const std::string& log_path() const { return log_path_; }

 private:
  std::uint16_t read_port();

  static inline int serial_ = 0;
  std::string name_;
  std::string log_path_;
  pid_t pid_ = -1;
  int out_fd_ = -1;
  std::uint16_t port_ = 0;
  std::thread drain_;
};

/// The instances of a round; instance i is named "i(i+1)".
using instances = std::vector<std::unique_ptr<server_process>>;

instances start_instances(const server_config& c, int n);

/// Throws, naming the log, if an instance exited.
void check_alive(const instances& in);

}  // namespace delayq::bench_server::scaleout
