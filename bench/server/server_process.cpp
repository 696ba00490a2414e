// server_process.cpp - fork/exec of delayq-server and the read of its port.
#include "server_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <fstream>
#include <stdexcept>

#include "scaleout_common.hpp"

namespace delayq::bench_server::scaleout {

server_process::server_process(const server_config& c, const std::string& name) : name_(name) {
  log_path_ = c.log_dir + "/" + name + "-" + std::to_string(++serial_) + ".log";
  const std::vector<std::string> args = {c.bin,         "--listen",
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

server_process::~server_process() {
  kill();
  if (drain_.joinable()) drain_.join();
  ::close(out_fd_);
}

void server_process::kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

bool server_process::alive() {
  if (pid_ <= 0) return false;
  if (::waitpid(pid_, nullptr, WNOHANG) == 0) return true;
  pid_ = -1;
  return false;
}

std::uint16_t server_process::read_port() {
  std::string line;
  const auto deadline = steady::now() + std::chrono::seconds(30);
  while (line.find('\n') == std::string::npos) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now());
    pollfd p{out_fd_, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) {
      throw std::runtime_error(name_ + ": no 'listening' line within 30 s (log " + log_path_ + ")");
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

instances start_instances(const server_config& c, int n) {
  instances in;
  for (int i = 0; i < n; ++i) {
    // Appended, not "i" + std::to_string(...): GCC 12 at -O3 warns about
    // that operator+ (-Wrestrict, a known false positive), which
    // -DDELAYQ_WERROR=ON makes an error.
    std::string name = "i";
    name += std::to_string(i + 1);
    in.push_back(std::make_unique<server_process>(c, name));
  }
  return in;
}

void check_alive(const instances& in) {
  for (const auto& s : in) {
    if (!s->alive()) {
      throw std::runtime_error(s->name() + " exited (log " + s->log_path() + ")");
    }
  }
}

}  // namespace delayq::bench_server::scaleout
