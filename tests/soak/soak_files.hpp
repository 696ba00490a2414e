// The files a soak run leaves in its directory, shared by `delayq-soak run`
// that writes them and `delayq-soak check` that reads them. Every line is
// appended with one write() on an O_APPEND descriptor and fdatasync()ed before
// the writer goes on, so a SIGKILL leaves a line whole or absent, and a line
// that is there happened before whatever its thread did after writing it.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace delayq::soak {

/// "<id> <type>\n" once schedule() returned for it.
inline constexpr const char* acked_log = "acked.log";
/// One line per event, in the order they happened within a run:
///   <run> exec <id> <attempt> ok|fail|late <ms>   an attempt ended (before it returned or threw)
///   <run> refused <id> <error>                  schedule() failed: nothing was stored
///   <run> cancel-intent <id>                    about to call cancel()
///   <run> cancelled <id>                        cancel() returned true
///   <run> cancel-missed <id>                    cancel() returned false
///   <run> cancel-failed <id>                    cancel() failed (the task stays)
///   <run> rescheduled <id>                      reschedule() returned true
inline constexpr const char* events_log = "events.log";
/// Every error-level line the engine or its store logged, with its run.
inline constexpr const char* errors_log = "engine-errors.log";
/// "stats.<run>": the run's engine counters, "key value" lines, replaced
/// atomically twice a second; a run that drained adds "final 1".
inline std::string stats_file(unsigned run) { return "stats." + std::to_string(run); }

/// The task types and what their executors do.
inline constexpr const char* type_ok = "soak.ok";          // succeeds at once
inline constexpr const char* type_flaky = "soak.flaky";    // fails 35% of attempts
inline constexpr const char* type_doomed = "soak.doomed";  // always fails: dead letters
inline constexpr const char* type_slow = "soak.slow";      // sleeps 50-200 ms, succeeds
/// Sleeps 50-200 ms under a 150 ms timeout; an attempt that took 120 ms or
/// more throws ("late"), so whichever of the timeout and the executor the
/// engine hears first, a late attempt counts as failed.
inline constexpr const char* type_slow_timed = "soak.slow.timed";
inline constexpr unsigned timeout_ms = 150;
inline constexpr unsigned late_ms = 120;
inline const std::vector<std::string>& all_types() {
  static const std::vector<std::string> types = {type_ok, type_flaky, type_doomed, type_slow,
                                                 type_slow_timed};
  return types;
}

/// The retry policy of every type: a doomed task dies within a few seconds.
inline constexpr std::uint32_t max_attempts = 4;
inline constexpr unsigned retry_base_ms = 50;
inline constexpr unsigned retry_cap_ms = 400;

/// FNV-1a of id and attempt: what a flaky or slow attempt does is a pure
/// function of them, so an attempt repeated after a kill does the same.
inline std::uint64_t attempt_hash(std::string_view id, std::uint32_t attempt) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  auto mix = [&h](unsigned char c) { h = (h ^ c) * 0x100000001b3ULL; };
  for (char c : id) mix(static_cast<unsigned char>(c));
  for (int i = 0; i < 4; ++i) mix(static_cast<unsigned char>(attempt >> (8 * i)));
  return h ^ (h >> 29);
}

template <class T>
std::optional<T> parse_number(std::string_view s) {
  T v{};
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

/// The space-separated fields of a line.
inline std::vector<std::string_view> fields(std::string_view line) {
  std::vector<std::string_view> out;
  for (std::size_t start = 0; start <= line.size();) {
    const auto end = std::min(line.find(' ', start), line.size());
    out.push_back(line.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

/// The complete lines of a file (none when it does not exist); `torn` when
/// bytes follow the last newline, which one write() of a short line never
/// leaves behind.
struct file_lines {
  std::vector<std::string> lines;
  bool torn = false;
};

inline file_lines read_lines(const std::string& path) {
  file_lines out;
  std::ifstream in(path, std::ios::binary);
  if (!in) return out;
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::size_t start = 0;
  for (std::size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1)
    out.lines.emplace_back(text, start, nl - start);
  out.torn = start != text.size();
  return out;
}

/// An append-only file whose every line is durable before append() returns.
/// Throws std::runtime_error when it cannot write.
class durable_log {
 public:
  explicit durable_log(std::string path)
      : path_(std::move(path)),
        fd_(::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) {
    if (fd_ < 0) throw std::runtime_error("cannot open " + path_);
  }
  ~durable_log() { ::close(fd_); }
  durable_log(const durable_log&) = delete;
  durable_log& operator=(const durable_log&) = delete;

  void append(const std::string& line) const {
    if (::write(fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size()) ||
        ::fdatasync(fd_) != 0)
      throw std::runtime_error("cannot append to " + path_);
  }

 private:
  std::string path_;
  int fd_;
};

/// Replaces `dir`/`name` with `text` atomically (a kill leaves the old file
/// or the new one). Returns false when it could not.
inline bool replace_file(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = dir + "/" + name, tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                       ::fdatasync(fd) == 0;
  ::close(fd);
  return written && std::rename(tmp.c_str(), path.c_str()) == 0;
}

}  // namespace delayq::soak
