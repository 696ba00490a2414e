// Child processes for the delayqctl tests: run a program to its end and
// capture its output, or keep a delayq-server running for a test's length.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ctl_test {

struct run_result {
  int exit_code = -1;  ///< the exit status, or 128 + signal
  std::string out;
  std::string err;
  bool timed_out = false;  ///< killed (SIGKILL) by run()'s guard
};

namespace detail {

inline void check(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(std::string(what) + ": " + std::strerror(errno));
}

// fork + exec `args` with stdin from /dev/null, stdout and stderr to the
// given descriptors (-1: inherit), DELAYQ_TOKEN and DELAYQ_SERVER cleared
// and then `env` ("NAME=VALUE") applied.
inline pid_t spawn(const std::vector<std::string>& args, const std::vector<std::string>& env,
                   int out_fd, int err_fd) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = fork();
  check(pid >= 0, "fork");
  if (pid == 0) {
    const int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, 0);
    if (out_fd >= 0) dup2(out_fd, 1);
    if (err_fd >= 0) dup2(err_fd, 2);
    unsetenv("DELAYQ_TOKEN");
    unsetenv("DELAYQ_SERVER");
    for (const auto& e : env) putenv(const_cast<char*>(e.c_str()));
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

inline int wait_exit(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) check(errno == EINTR, "waitpid");
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}

}  // namespace detail

/// Runs `args` (args[0] a path) to its end and returns its exit status and
/// everything it wrote. With `guard_ms` >= 0, a program that has not closed
/// its output after that long is killed (SIGKILL) and `timed_out` set: for a
/// program expected to stop by itself (a server that must refuse to start),
/// so that one that runs on fails the test instead of hanging it.
inline run_result run(const std::vector<std::string>& args,
                      const std::vector<std::string>& env = {}, int guard_ms = -1) {
  int out[2], err[2];
  detail::check(pipe2(out, O_CLOEXEC) == 0 && pipe2(err, O_CLOEXEC) == 0, "pipe2");
  const pid_t pid = detail::spawn(args, env, out[1], err[1]);
  close(out[1]);
  close(err[1]);
  run_result r;
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  std::string* sinks[2] = {&r.out, &r.err};
  int open_fds = 2;
  // Poll in slices of the guard, so that a wait cut short by a signal does
  // not start the guard over.
  int guard_left = guard_ms;
  constexpr int slice_ms = 100;
  while (open_fds > 0) {
    const int waited = guard_left < 0 ? -1 : std::min(guard_left, slice_ms);
    const int ready = poll(fds, 2, waited);
    if (ready < 0) {
      detail::check(errno == EINTR, "poll");
      continue;
    }
    if (ready == 0) {
      guard_left -= waited;
      if (guard_left <= 0 && !r.timed_out) {
        kill(pid, SIGKILL);
        r.timed_out = true;
        guard_left = -1;  // its pipes close now
      }
      continue;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[4096];
      const ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        sinks[i]->append(buf, static_cast<std::size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  r.exit_code = detail::wait_exit(pid);
  return r;
}

/// A delayq-server on a free loopback port with the memory store (or
/// `store`), stopped (SIGTERM, then waited for) when this object goes.
class server_process {
 public:
  explicit server_process(const std::string& path, const std::string& token,
                          std::vector<std::string> extra = {},
                          const std::string& store = "memory:") {
    std::vector<std::string> args = {path,      "--store", store,    "--listen", "127.0.0.1:0",
                                     "--token", token,     "--tick", "10"};
    for (auto& e : extra) args.push_back(std::move(e));
    int out[2];
    detail::check(pipe2(out, O_CLOEXEC) == 0, "pipe2");
    pid_ = detail::spawn(args, {}, out[1], -1);
    close(out[1]);
    out_fd_ = out[0];
    // Read until the ready line; the server prints it once it listens.
    const std::string ready = "delayq-server listening on 127.0.0.1:";
    std::string text;
    for (;;) {
      const auto nl = text.find('\n');
      if (nl != std::string::npos) {
        const std::string line = text.substr(0, nl);
        if (line.rfind(ready, 0) != 0) throw std::runtime_error("delayq-server said: " + line);
        port_ = std::stoi(line.substr(ready.size()));
        break;
      }
      char buf[256];
      const ssize_t n = read(out_fd_, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int code = detail::wait_exit(pid_);
        pid_ = -1;
        throw std::runtime_error("delayq-server exited (status " + std::to_string(code) +
                                 ") before listening; it printed: " + text);
      }
      text.append(buf, static_cast<std::size_t>(n));
    }
  }
  server_process(const server_process&) = delete;
  server_process& operator=(const server_process&) = delete;
  ~server_process() {
    stop();
    if (out_fd_ >= 0) close(out_fd_);
  }

  /// Sends SIGTERM (a drain) and returns the server's exit status (0 once
  /// drained); -1 when it was stopped already.
  int stop() {
    if (pid_ <= 0) return -1;
    kill(pid_, SIGTERM);
    const int code = detail::wait_exit(pid_);
    pid_ = -1;
    return code;
  }

  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int port_ = 0;
};

/// A loopback port bound but not listening: connecting to it is refused for
/// as long as this object lives (no other program can take the port).
class closed_port {
 public:
  /// With `listen_too`, the port listens but nobody ever accepts: a client
  /// connects (the kernel completes the handshake) and never gets an answer.
  explicit closed_port(bool listen_too = false) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    detail::check(fd_ >= 0, "socket");
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    detail::check(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0, "bind");
    socklen_t len = sizeof a;
    detail::check(getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0, "getsockname");
    port_ = ntohs(a.sin_port);
    if (listen_too) detail::check(listen(fd_, 16) == 0, "listen");
  }
  closed_port(const closed_port&) = delete;
  closed_port& operator=(const closed_port&) = delete;
  ~closed_port() { close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

}  // namespace ctl_test
