// Helpers of the server's unit tests (delayq_server_unit_tests).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

#include <delayq/log.hpp>

namespace delayq::server_test {

namespace fs = std::filesystem;

// A scratch directory removed at the end of the test.
struct scratch_dir {
  scratch_dir() {
    path = fs::temp_directory_path() /
           ("delayq-server-unit-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~scratch_dir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
  static inline int counter = 0;
  fs::path path;
};

// Collects delayq::log lines while alive.
struct log_capture {
  log_capture() {
    previous = delayq::set_log_function([this](delayq::log_level, std::string_view line) {
      std::lock_guard lock{mutex};
      lines.emplace_back(line);
    });
  }
  ~log_capture() { delayq::set_log_function(previous); }
  std::vector<std::string> taken() {
    std::lock_guard lock{mutex};
    return lines;
  }
  delayq::log_function previous;
  std::mutex mutex;
  std::vector<std::string> lines;
};

}  // namespace delayq::server_test
