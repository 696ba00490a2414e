// beanstalk/session_registry.hpp - what the connections do, counted for
// stats and stats-tube: connections open, producers and workers among them,
// and per tube those using, watching and waiting on it.
#pragma once

#include <atomic>
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
  /// When a connection began to hold nothing (no reservation, no reserve
  /// waiting, no command begun or being answered, no reply unsent): the
  /// steady clock's nanoseconds since its epoch, 0 while it holds something.
  /// The connection stores it itself, lock-free, so that a request costs no
  /// call here (a lock, a map node and its erase per request did before).
  using idle_mark = std::atomic<std::int64_t>;
  /// Connection `id` is open, until forget(id); the listener may close it
  /// for room while `since` is set.
  void track(std::uint64_t id, std::weak_ptr<session> s, std::shared_ptr<idle_mark> since);
  void forget(std::uint64_t id);
  /// The connection idle the longest, its mark cleared so that it is not
  /// picked twice (null when none is idle). A scan of the open connections:
  /// it runs only at --max-connections, once per newcomer.
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
  struct tracked {
    std::weak_ptr<session> s;
    std::shared_ptr<idle_mark> since;  // shared: read here after the session went
  };
  std::unordered_map<std::uint64_t, tracked> open_;
  std::map<std::string, tube_counts, std::less<>> tubes_;
};

}  // namespace delayq::server::beanstalk
