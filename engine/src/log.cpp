#include "delayq/log.hpp"

#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

namespace delayq {
namespace {

const char* level_name(log_level level) {
  switch (level) {
    case log_level::debug: return "debug";
    case log_level::info: return "info";
    case log_level::warning: return "warning";
    case log_level::error: return "error";
  }
  return "?";
}

void write_line(log_level level, std::string_view message) {
  std::string line = "delayq ";
  line += level_name(level);
  line += ": ";
  line += message;
  line += '\n';
  std::fputs(line.c_str(), stderr);  // one call, so lines from threads do not interleave
}

void default_log(log_level level, std::string_view message) {
  if (level >= log_level::warning) write_line(level, message);
}

// A shared_ptr swapped under a mutex: a caller copies the pointer and calls
// the function outside the lock, so a slow log function blocks nobody else
// and replacing it while it runs is safe.
std::mutex g_mutex;
std::shared_ptr<const log_function> g_fn;

}  // namespace

log_function stderr_log(log_level least) {
  return [least](log_level level, std::string_view message) {
    if (level >= least) write_line(level, message);
  };
}

log_function set_log_function(log_function fn) {
  auto next = fn ? std::make_shared<const log_function>(std::move(fn)) : nullptr;
  std::lock_guard lock(g_mutex);
  auto previous = std::exchange(g_fn, std::move(next));
  return previous ? *previous : log_function{};
}

void log(log_level level, std::string_view message) noexcept {
  try {
    std::shared_ptr<const log_function> fn;
    {
      std::lock_guard lock(g_mutex);
      fn = g_fn;
    }
    if (fn)
      (*fn)(level, message);
    else
      default_log(level, message);
  } catch (...) {
    // A failing log function must not take the engine down with it.
  }
}

}  // namespace delayq
