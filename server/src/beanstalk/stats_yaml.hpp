// beanstalk/stats_yaml.hpp - the YAML documents of stats, stats-job,
// stats-tube, list-tubes and list-tubes-watched, byte for byte as
// beanstalkd 1.13 writes them (its STATS_FMT, STATS_JOB_FMT,
// STATS_TUBE_FMT and do_list_tubes() in prot.c; checked against
// beanstalkd 1.12): "---\n", then one "key: value\n" line per field in
// beanstalkd's order, or one "- name\n" per tube. Values are written plain
// (tube names, states, `draining: false`), except `version`, which
// beanstalkd quotes. The document goes into append_ok() (reply.hpp), which
// adds "OK <bytes>\r\n" before it and "\r\n" after it.
//
//   std::string out;
//   append_ok(out, job_stats_yaml(s));
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "beanstalk/command_reader.hpp"

namespace delayq::server::beanstalk {

/// A YAML dictionary of scalars, in the order added, as beanstalkd writes
/// them: "---\n" then "key: value\n" per entry. Keys are written as given.
///
/// Thread safety: a plain value.
class stats_yaml {
 public:
  stats_yaml() : text_("---\n") {}

  /// `key: 42`
  stats_yaml& add(std::string_view key, std::uint64_t value);
  /// `key: -3` (beanstalkd's time-left and pause-time-left are signed).
  stats_yaml& add_signed(std::string_view key, std::int64_t value);
  /// `key: text`, verbatim (tube names, states, `true`/`false`, ids).
  stats_yaml& add_plain(std::string_view key, std::string_view text);
  /// `key: "text"`, with '"' and '\' escaped (beanstalkd quotes `version`).
  stats_yaml& add_quoted(std::string_view key, std::string_view text);
  /// `key: 1.000250` from microseconds (rusage-utime, rusage-stime).
  stats_yaml& add_micros(std::string_view key, std::uint64_t micros);

  const std::string& str() const& noexcept { return text_; }
  std::string str() && noexcept { return std::move(text_); }

 private:
  std::string& key(std::string_view k);
  std::string text_;
};

/// list-tubes, list-tubes-watched: "---\n" then "- <name>\n" per tube.
std::string tube_list_yaml(std::span<const std::string> tubes);

/// What stats-job reports (beanstalkd's fields; times in whole seconds).
struct job_stats {
  std::uint64_t id = 0;
  std::string tube;
  std::string_view state = "ready";  ///< "ready", "delayed", "reserved", "buried"
  std::uint32_t pri = 0;
  std::int64_t age = 0;
  std::int64_t delay = 0;
  std::int64_t ttr = 0;
  std::int64_t time_left = 0;  ///< 0 unless reserved or delayed
  std::int64_t file = 0;       ///< beanstalkd's binlog file number; 0 without one
  std::uint32_t reserves = 0;
  std::uint32_t timeouts = 0;
  std::uint32_t releases = 0;
  std::uint32_t buries = 0;
  std::uint32_t kicks = 0;
};

/// id, tube, state, pri, age, delay, ttr, time-left, file, reserves,
/// timeouts, releases, buries, kicks.
std::string job_stats_yaml(const job_stats& s);

/// What stats-tube reports.
struct tube_stats {
  std::string name;
  std::uint64_t current_jobs_urgent = 0;  ///< ready with priority < 1024
  std::uint64_t current_jobs_ready = 0;
  std::uint64_t current_jobs_reserved = 0;
  std::uint64_t current_jobs_delayed = 0;
  std::uint64_t current_jobs_buried = 0;
  std::uint64_t total_jobs = 0;
  std::uint64_t current_using = 0;
  std::uint64_t current_watching = 0;
  std::uint64_t current_waiting = 0;
  std::uint64_t cmd_delete = 0;
  std::uint64_t cmd_pause_tube = 0;
  std::uint64_t pause = 0;  ///< seconds of the last pause-tube
  std::int64_t pause_time_left = 0;
};

/// name, current-jobs-urgent, -ready, -reserved, -delayed, -buried,
/// total-jobs, current-using, current-watching, current-waiting, cmd-delete,
/// cmd-pause-tube, pause, pause-time-left.
std::string tube_stats_yaml(const tube_stats& s);

/// What stats reports.
struct server_stats {
  std::uint64_t current_jobs_urgent = 0;
  std::uint64_t current_jobs_ready = 0;
  std::uint64_t current_jobs_reserved = 0;
  std::uint64_t current_jobs_delayed = 0;
  std::uint64_t current_jobs_buried = 0;
  /// Commands run, by verb: the cmd-* lines (beanstalkd lists 22 of them,
  /// not reserve-job, kick-job or quit).
  std::array<std::uint64_t, verb_count> cmd{};
  std::uint64_t job_timeouts = 0;
  std::uint64_t total_jobs = 0;
  std::uint64_t max_job_size = 0;
  std::uint64_t current_tubes = 0;
  std::uint64_t current_connections = 0;
  std::uint64_t current_producers = 0;
  std::uint64_t current_workers = 0;
  std::uint64_t current_waiting = 0;
  std::uint64_t total_connections = 0;
  std::int64_t pid = 0;
  std::string version;  ///< written quoted
  std::uint64_t rusage_utime_us = 0;
  std::uint64_t rusage_stime_us = 0;
  std::uint64_t uptime = 0;
  std::int64_t binlog_oldest_index = 0;
  std::int64_t binlog_current_index = 0;
  std::int64_t binlog_records_migrated = 0;
  std::int64_t binlog_records_written = 0;
  std::int64_t binlog_max_size = 0;
  bool draining = false;
  std::string id;  ///< beanstalkd: 16 hex digits, random per process
  std::string hostname;
  std::string os;
  std::string platform;
};

/// The fields of beanstalkd 1.13's stats, in its order.
std::string server_stats_yaml(const server_stats& s);

}  // namespace delayq::server::beanstalk
