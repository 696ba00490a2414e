// beanstalk/stats_yaml.cpp - see stats_yaml.hpp.
#include "beanstalk/stats_yaml.hpp"

#include <charconv>

namespace delayq::server::beanstalk {

namespace {

template <typename Int>
void append_int(std::string& out, Int v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

}  // namespace

std::string& stats_yaml::key(std::string_view k) {
  text_ += k;
  text_ += ": ";
  return text_;
}

stats_yaml& stats_yaml::add(std::string_view k, std::uint64_t value) {
  append_int(key(k), value);
  text_ += '\n';
  return *this;
}

stats_yaml& stats_yaml::add_signed(std::string_view k, std::int64_t value) {
  append_int(key(k), value);
  text_ += '\n';
  return *this;
}

stats_yaml& stats_yaml::add_plain(std::string_view k, std::string_view text) {
  key(k) += text;
  text_ += '\n';
  return *this;
}

stats_yaml& stats_yaml::add_quoted(std::string_view k, std::string_view text) {
  key(k) += '"';
  for (char c : text) {
    if (c == '"' || c == '\\') text_ += '\\';
    text_ += c;
  }
  text_ += "\"\n";
  return *this;
}

stats_yaml& stats_yaml::add_micros(std::string_view k, std::uint64_t micros) {
  append_int(key(k), micros / 1'000'000);
  // beanstalkd's "%d.%06d".
  const std::uint64_t frac = micros % 1'000'000;
  char digits[6];
  std::uint64_t f = frac;
  for (int i = 5; i >= 0; --i, f /= 10) digits[i] = static_cast<char>('0' + f % 10);
  text_ += '.';
  text_.append(digits, sizeof digits);
  text_ += '\n';
  return *this;
}

std::string tube_list_yaml(std::span<const std::string> tubes) {
  std::string out = "---\n";
  for (const std::string& t : tubes) {
    out += "- ";
    out += t;
    out += '\n';
  }
  return out;
}

std::string job_stats_yaml(const job_stats& s) {
  stats_yaml y;
  y.add("id", s.id)
      .add_plain("tube", s.tube)
      .add_plain("state", s.state)
      .add("pri", s.pri)
      .add_signed("age", s.age)
      .add_signed("delay", s.delay)
      .add_signed("ttr", s.ttr)
      .add_signed("time-left", s.time_left)
      .add_signed("file", s.file)
      .add("reserves", s.reserves)
      .add("timeouts", s.timeouts)
      .add("releases", s.releases)
      .add("buries", s.buries)
      .add("kicks", s.kicks);
  return std::move(y).str();
}

std::string tube_stats_yaml(const tube_stats& s) {
  stats_yaml y;
  y.add_plain("name", s.name)
      .add("current-jobs-urgent", s.current_jobs_urgent)
      .add("current-jobs-ready", s.current_jobs_ready)
      .add("current-jobs-reserved", s.current_jobs_reserved)
      .add("current-jobs-delayed", s.current_jobs_delayed)
      .add("current-jobs-buried", s.current_jobs_buried)
      .add("total-jobs", s.total_jobs)
      .add("current-using", s.current_using)
      .add("current-watching", s.current_watching)
      .add("current-waiting", s.current_waiting)
      .add("cmd-delete", s.cmd_delete)
      .add("cmd-pause-tube", s.cmd_pause_tube)
      .add("pause", s.pause)
      .add_signed("pause-time-left", s.pause_time_left);
  return std::move(y).str();
}

std::string server_stats_yaml(const server_stats& s) {
  // beanstalkd's cmd-* lines, in its order.
  static constexpr verb counted[] = {verb::put,
                                     verb::peek,
                                     verb::peek_ready,
                                     verb::peek_delayed,
                                     verb::peek_buried,
                                     verb::reserve,
                                     verb::reserve_with_timeout,
                                     verb::delete_,
                                     verb::release,
                                     verb::use,
                                     verb::watch,
                                     verb::ignore,
                                     verb::bury,
                                     verb::kick,
                                     verb::touch,
                                     verb::stats,
                                     verb::stats_job,
                                     verb::stats_tube,
                                     verb::list_tubes,
                                     verb::list_tube_used,
                                     verb::list_tubes_watched,
                                     verb::pause_tube};
  stats_yaml y;
  y.add("current-jobs-urgent", s.current_jobs_urgent)
      .add("current-jobs-ready", s.current_jobs_ready)
      .add("current-jobs-reserved", s.current_jobs_reserved)
      .add("current-jobs-delayed", s.current_jobs_delayed)
      .add("current-jobs-buried", s.current_jobs_buried);
  std::string key;
  for (verb v : counted) {
    key = "cmd-";
    key += name_of(v);
    y.add(key, s.cmd[static_cast<std::size_t>(v)]);
  }
  y.add("job-timeouts", s.job_timeouts)
      .add("total-jobs", s.total_jobs)
      .add("max-job-size", s.max_job_size)
      .add("current-tubes", s.current_tubes)
      .add("current-connections", s.current_connections)
      .add("current-producers", s.current_producers)
      .add("current-workers", s.current_workers)
      .add("current-waiting", s.current_waiting)
      .add("total-connections", s.total_connections)
      .add_signed("pid", s.pid)
      .add_quoted("version", s.version)
      .add_micros("rusage-utime", s.rusage_utime_us)
      .add_micros("rusage-stime", s.rusage_stime_us)
      .add("uptime", s.uptime)
      .add_signed("binlog-oldest-index", s.binlog_oldest_index)
      .add_signed("binlog-current-index", s.binlog_current_index)
      .add_signed("binlog-records-migrated", s.binlog_records_migrated)
      .add_signed("binlog-records-written", s.binlog_records_written)
      .add_signed("binlog-max-size", s.binlog_max_size)
      .add_plain("draining", s.draining ? "true" : "false")
      .add_plain("id", s.id)
      .add_plain("hostname", s.hostname)
      .add_plain("os", s.os)
      .add_plain("platform", s.platform);
  return std::move(y).str();
}

}  // namespace delayq::server::beanstalk
