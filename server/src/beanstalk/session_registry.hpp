// beanstalk/session_registry.hpp - what the connections do, counted for
// stats and stats-tube: connections open, producers and workers among them,
// and per tube those using, watching and waiting on it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace delayq::server::beanstalk {

class session;

/// What the connections do, as the stats command reports it, and why the
/// server closed those it closed.
///
/// Thread safety: a plain value.
struct connection_counts {
  std::size_t current = 0, producers = 0, workers = 0, waiting = 0;
  std::uint64_t total = 0;
  /// Closed by the server: a command begun and not finished by its deadline
  /// (--beanstalk-command-timeout), idle past --beanstalk-idle-timeout, the
  /// longest-idle one closed to make room at --max-connections, and
  /// newcomers refused at --max-connections (nothing idle to close).
  std::uint64_t command_timeouts = 0, idle_timeouts = 0, evicted = 0, refused = 0;
};

/// Why the server closed a connection (connection_counts).
enum class close_reason : std::uint8_t { command_timeout, idle_timeout, evicted };

/// The connections' counts per tube, for stats and stats-tube; and the
/// idle connections, oldest first, for the listener to close one of when it
/// needs room.
///
/// Thread safety: every member is safe from any thread.
class session_registry {
 public:
  using clock = std::chrono::steady_clock;
  /// A number for a new connection (never 0).
  std::uint64_t next_id();
  /// Connection `id` holds nothing since `since`: no reservation, no
  /// reserve waiting, no command begun or being answered, no reply unsent.
  void idle(std::uint64_t id, std::weak_ptr<session> s, clock::time_point since);
  /// Connection `id` is no longer idle (or closed).
  void not_idle(std::uint64_t id);
  /// The connection idle the longest, taken off the idle list (null when
  /// none is idle, or it is gone already).
  std::shared_ptr<session> take_longest_idle();
  void count_close(close_reason why);
  void count_refused();
  /// The Prometheus text of the counts (docs/beanstalk.md, "Connections").
  void render_metrics(std::string& out) const;

  void opened();
  void closed(bool producer, bool worker);
  void became(bool producer, bool worker);
  void use(const std::string& from, const std::string& to);
  void watch(const std::string& tube, int delta);
  void wait(const std::vector<std::string>& tubes, int delta);
  connection_counts counts() const;
  struct tube_counts {
    std::size_t using_ = 0, watching = 0, waiting = 0;
  };
  tube_counts of(const std::string& tube) const;
  /// Tubes some connection uses or watches.
  std::vector<std::string> tubes() const;

 private:
  mutable std::mutex mutex_;
  connection_counts c_;
  std::uint64_t next_id_ = 0;
  std::map<std::pair<clock::time_point, std::uint64_t>, std::weak_ptr<session>> idle_;
  std::unordered_map<std::uint64_t, clock::time_point> idle_since_;
  std::map<std::string, tube_counts, std::less<>> tubes_;
};

}  // namespace delayq::server::beanstalk
