// The files a crash worker leaves in its directory, shared by the worker that
// writes them and the driver that checks them. Every line is appended with one
// write() on an O_APPEND descriptor and fdatasync()ed before the worker goes
// on, so a SIGKILL leaves a line whole or absent, and a line that is there
// happened before whatever the worker did after writing it.
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace delayq::crash {

/// "<run> <id> <worker>\n" for every attempt of "crash.task" that ran, written
/// by the executor before it returns (so before the engine may remove the
/// task). `worker` numbers the engine's worker threads within one run.
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

struct executed_line {
  unsigned run = 0;
  std::string id;
  unsigned worker = 0;
};

inline std::optional<executed_line> parse_executed(std::string_view line) {
  const auto a = line.find(' ');
  if (a == std::string_view::npos) return std::nullopt;
  const auto b = line.find(' ', a + 1);
  if (b == std::string_view::npos) return std::nullopt;
  auto run = parse_number<unsigned>(line.substr(0, a));
  auto worker = parse_number<unsigned>(line.substr(b + 1));
  if (!run || !worker || b == a + 1) return std::nullopt;
  return executed_line{*run, std::string(line.substr(a + 1, b - a - 1)), *worker};
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

}  // namespace delayq::crash
