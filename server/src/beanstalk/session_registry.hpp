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

/// The connections' counts per tube, for stats and stats-tube; and the open
/// connections with when each began to hold nothing, for the listener to
/// close the one idle the longest when it needs room.
///
/// Thread safety: every member is safe from any thread.
class session_registry {
 public:
  /// A number for a new connection (never 0).
  std::uint64_t next_id();
  /// When a connection began to hold nothing (no reservation, no reserve
  /// waiting, no command begun or being answered, no reply unsent): the
  /// steady clock's nanoseconds since its epoch, 0 while it holds something.
  /// The connection changes it through mark_idle() and mark_busy(),
  /// lock-free, so that a request takes no lock here (a lock, a map node
  /// and its erase a request did before).
  using idle_mark = std::atomic<std::int64_t>;
  /// Connection `id` is open, until forget(id); the listener may close it
  /// for room while its mark is set.
  void track(std::uint64_t id, std::weak_ptr<session> s, std::shared_ptr<idle_mark> mark);
  /// Connection `id` closed: it is no longer a candidate (call mark_busy()
  /// on its mark first).
  void forget(std::uint64_t id);
  /// The connection holds nothing since `since_ns` (not 0).
  void mark_idle(idle_mark& mark, std::int64_t since_ns) noexcept {
    if (mark.exchange(since_ns, std::memory_order_acq_rel) == 0)
      idle_.fetch_add(1, std::memory_order_relaxed);
  }
  /// The connection holds something again (or closes).
  void mark_busy(idle_mark& mark) noexcept {
    if (mark.exchange(0, std::memory_order_acq_rel) != 0)
      idle_.fetch_sub(1, std::memory_order_relaxed);
  }
  /// The connection idle the longest, its mark cleared so that it is not
  /// picked twice (null when none is idle: then at once, from a count).
  /// The oldest marks are found by a scan of the open connections, at most
  /// once per `cached_oldest` connections taken: it runs only at
  /// --max-connections.
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
    std::shared_ptr<idle_mark> mark;  // shared: read here after the session went
  };
  static constexpr std::size_t cached_oldest = 64;
  std::unordered_map<std::uint64_t, tracked> open_;
  // The oldest marks (mark, id) the last scan found, the oldest last. A
  // connection idle again since has a later mark and is not taken for it
  // (its claim fails); one idle only since the scan is younger than all.
  std::vector<std::pair<std::int64_t, std::uint64_t>> oldest_;
  std::atomic<std::size_t> idle_{0};  // marks set
  std::map<std::string, tube_counts, std::less<>> tubes_;
};

}  // namespace delayq::server::beanstalk
