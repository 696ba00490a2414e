// measure.cpp - see measure.hpp.
#include "measure.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

namespace delayq::bench {

double process_cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto sec = [](const timeval& tv) {
    return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) / 1e6;
  };
  return sec(ru.ru_utime) + sec(ru.ru_stime);
}

std::optional<double> pid_cpu_seconds(long pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  // The command name (field 2) is in parentheses and may hold spaces: count
  // fields from the last ')'. utime and stime are fields 14 and 15.
  const std::size_t close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(line.substr(close + 2));
  std::vector<std::string> fields{std::istream_iterator<std::string>(rest), {}};
  if (fields.size() < 13) return std::nullopt;
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  return (std::stod(fields[11]) + std::stod(fields[12])) / ticks;  // fields 14, 15
}

namespace {
std::atomic<std::uint64_t> next_generation{1};

struct cached_buffer {
  std::uint64_t generation = 0;
  void* buf = nullptr;
};
thread_local cached_buffer this_thread_buffer;
}  // namespace

lateness_recorder::lateness_recorder() : generation_(next_generation.fetch_add(1)) {}

lateness_recorder::buffer& lateness_recorder::mine() {
  if (this_thread_buffer.generation != generation_) {
    std::lock_guard lock(mutex_);
    buffers_.push_back(std::make_unique<buffer>());
    buffers_.back()->samples.reserve(1 << 16);
    this_thread_buffer = {generation_, buffers_.back().get()};
  }
  return *static_cast<buffer*>(this_thread_buffer.buf);
}

void lateness_recorder::record(std::chrono::system_clock::duration late) {
  mine().samples.push_back(std::chrono::duration_cast<std::chrono::microseconds>(late).count());
}

std::vector<std::int64_t> lateness_recorder::take() {
  std::lock_guard lock(mutex_);
  std::vector<std::int64_t> all;
  for (auto& b : buffers_) {
    all.insert(all.end(), b->samples.begin(), b->samples.end());
    b->samples.clear();
  }
  std::sort(all.begin(), all.end());
  return all;
}

void completion::add(std::uint64_t n) {
  const std::uint64_t now = done_.fetch_add(n, std::memory_order_acq_rel) + n;
  if (now >= target_ && now - n < target_) {
    std::lock_guard lock(mutex_);  // the waiter is either before its check or waiting
    cv_.notify_all();
  }
}

progress::progress(std::string label, std::uint64_t total)
    : label_(std::move(label)),
      total_(total),
      tty_(isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()),
      last_(start_) {}

void progress::show(std::uint64_t done) {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_ < (tty_ ? std::chrono::milliseconds(200) : std::chrono::milliseconds(5000)))
    return;
  last_ = now;
  print(done, false);
}

void progress::finish(std::uint64_t done) {
  print(done, true);
  if (tty_) std::fputc('\n', stderr);
}

void progress::print(std::uint64_t done, bool final) {
  const double pct =
      total_ > 0 ? 100.0 * static_cast<double>(done) / static_cast<double>(total_) : 100.0;
  std::fprintf(stderr, "%s  %s: %llu/%llu (%.0f%%) %.1f s%s", tty_ ? "\r" : "", label_.c_str(),
               static_cast<unsigned long long>(done), static_cast<unsigned long long>(total_), pct,
               seconds_since(start_), final ? " done" : "");
  if (!tty_) std::fputc('\n', stderr);
  std::fflush(stderr);
}

distribution summarize(const std::vector<std::int64_t>& sorted) {
  distribution d;
  d.count = sorted.size();
  if (sorted.empty()) return d;
  // Nearest rank: the smallest sample with at least q of them at or below it.
  auto at = [&](double q) {
    const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(sorted.size())));
    return sorted[std::clamp<std::size_t>(rank, 1, sorted.size()) - 1];
  };
  double sum = 0;
  for (auto v : sorted) sum += static_cast<double>(v);
  d.mean_us = sum / static_cast<double>(sorted.size());
  d.min_us = sorted.front();
  d.p50_us = at(0.50);
  d.p90_us = at(0.90);
  d.p99_us = at(0.99);
  d.p999_us = at(0.999);
  d.max_us = sorted.back();
  for (int k = 1; k <= 100; ++k) d.percentiles_us.push_back(at(k / 100.0));
  return d;
}

void remove_sqlite_files(const std::string& path) {
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix);
}

std::string fmt(double v, int prec) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", prec, v);
  return buf;
}

std::string fmt_count(double v) {
  char buf[64];
  if (v >= 1e6)
    std::snprintf(buf, sizeof buf, "%.2f M", v / 1e6);
  else if (v >= 1e3)
    std::snprintf(buf, sizeof buf, "%.1f k", v / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f", v);
  return buf;
}

}  // namespace delayq::bench
