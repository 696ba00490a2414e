// The files a crash worker leaves in its directory, shared by the worker that
// writes them and the driver that checks them. Every line is appended with one
// write() on an O_APPEND descriptor and fdatasync()ed before the worker goes
// on, so a SIGKILL leaves a line whole or absent, and a line that is there
// happened before whatever the worker did after writing it.
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace delayq::crash {

/// "<run> <id> <worker> ok|fail <attempt>\n" for every attempt of
/// "crash.task" that ran, written by the executor before it returns or throws
/// (so before the engine may remove the task or save its new attempt count).
/// `worker` numbers the engine's worker threads within one run; `attempt` is
/// 1 + the `task::attempts` the executor was given (1 for a first attempt).
inline constexpr const char* executed_log = "executed.log";
/// "<id>[ <how>]\n" for every task known to be durable, in id order c-0,
/// c-1, ...: written after schedule() returned, or by the recovery of the id
/// a kill left in doubt (see `found_pending` and `found_executed`).
inline constexpr const char* acked_log = "acked.log";
/// The number of the last run that started, replaced atomically (rename).
inline constexpr const char* run_counter = "run";
/// Every error-level line the engine or its store logged, in any run.
inline constexpr const char* errors_log = "engine-errors.log";

/// acked.log tags of the in-doubt id (the first one not acknowledged when the
/// previous run was killed): the restarted engine held it, or it had already
/// run. Without a tag the line means "schedule() returned".
inline constexpr std::string_view found_pending = "found-pending";
inline constexpr std::string_view found_executed = "found-executed";

/// The engine's worker threads in the crash worker.
inline constexpr unsigned worker_threads = 2;
/// The type of every crash task.
inline constexpr const char* task_type = "crash.task";

/// The retry policy of the crash worker: short waits keep retries in flight
/// at every kill, and far more attempts than any task is designed to need,
/// so a task that dies shows a bug (a retry counter that jumped forward).
inline constexpr std::uint32_t max_attempts = 10;
inline constexpr unsigned retry_base_ms = 5;
inline constexpr unsigned retry_cap_ms = 20;

/// How many first attempts of task k fail on purpose: every fifth task fails
/// its first attempt or its first two, alternately, the rest none. The
/// executor decides by the attempt number the engine hands it, so a repeated
/// attempt has the same outcome as the first time round.
inline unsigned designed_failures(std::size_t k) {
  return k % 5 == 0 ? 1 + static_cast<unsigned>((k / 5) % 2) : 0;
}

/// Lines executed.log holds after tasks 0 .. n-1 ran once each: one per
/// designed failure plus the success.
inline std::size_t expected_executions(std::size_t n) {
  std::size_t lines = 0;
  for (std::size_t k = 0; k < n; ++k) lines += 1 + designed_failures(k);
  return lines;
}

inline std::string task_id(std::size_t k) { return "c-" + std::to_string(k); }

template <class T>
std::optional<T> parse_number(std::string_view s) {
  T v{};
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

/// k for "c-k" with k < n.
inline std::optional<std::size_t> task_index(std::string_view id, std::size_t n) {
  if (id.substr(0, 2) != "c-" || id.size() > 2 + 20) return std::nullopt;
  auto k = parse_number<std::size_t>(id.substr(2));
  if (!k || *k >= n || task_id(*k) != id) return std::nullopt;  // no leading zeros
  return k;
}

/// The delay of task k: a pure function of the seed, so every run agrees.
inline std::uint64_t task_delay_ms(std::uint64_t seed, std::size_t k, std::uint64_t span_ms) {
  // splitmix64 of seed and k.
  std::uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (static_cast<std::uint64_t>(k) + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return z % (span_ms + 1);
}

/// The two outcomes an executed.log line records.
inline constexpr std::string_view outcome_ok = "ok";
inline constexpr std::string_view outcome_fail = "fail";

struct executed_line {
  unsigned run = 0;
  std::string id;
  unsigned worker = 0;
  bool ok = false;       // the attempt succeeded (else it failed on purpose)
  unsigned attempt = 0;  // 1 for a first attempt
};

inline std::string format_executed(const executed_line& e) {
  return std::to_string(e.run) + " " + e.id + " " + std::to_string(e.worker) + " " +
         std::string(e.ok ? outcome_ok : outcome_fail) + " " + std::to_string(e.attempt) + "\n";
}

inline std::optional<executed_line> parse_executed(std::string_view line) {
  std::string_view field[5];
  for (std::size_t i = 0, start = 0; i < 5; ++i) {
    const auto end = i < 4 ? line.find(' ', start) : line.size();
    if (end == std::string_view::npos || end == start) return std::nullopt;
    field[i] = line.substr(start, end - start);
    start = end + 1;
  }
  auto run = parse_number<unsigned>(field[0]);
  auto worker = parse_number<unsigned>(field[2]);
  auto attempt = parse_number<unsigned>(field[4]);
  if (!run || !worker || !attempt || (field[3] != outcome_ok && field[3] != outcome_fail))
    return std::nullopt;
  return executed_line{*run, std::string(field[1]), *worker, field[3] == outcome_ok, *attempt};
}

struct acked_line {
  std::string id;
  std::string how;  // empty, found_pending or found_executed
};

inline std::optional<acked_line> parse_acked(std::string_view line) {
  const auto a = line.find(' ');
  if (a == std::string_view::npos) return acked_line{std::string(line), {}};
  const std::string_view how = line.substr(a + 1);
  if (how != found_pending && how != found_executed) return std::nullopt;
  return acked_line{std::string(line.substr(0, a)), std::string(how)};
}

/// The complete lines of a file (none when it does not exist). `torn` is set
/// when bytes follow the last newline: a line cut short, which one write() of
/// a short line never leaves behind, so callers treat it as an error.
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

/// Cuts the torn last line off a log a killed run left behind. One write()
/// per line leaves a line whole or absent for nearly every kill, but Linux
/// checks for a fatal signal between the pages a write() copies, so a line
/// that straddles a 4 KiB boundary can be cut by a SIGKILL (seen once in an
/// ASan run). A torn record is the kill landing before the record was
/// written, which the checks allow for; cut off, it cannot glue onto the
/// next run's first line either.
inline void drop_torn_tail(const std::string& path) {
  const file_lines f = read_lines(path);
  if (!f.torn) return;
  std::uintmax_t keep = 0;
  for (const auto& line : f.lines) keep += line.size() + 1;
  std::filesystem::resize_file(path, keep);
}

}  // namespace delayq::crash
