// beanstalk/session_registry.hpp - what the connections do, counted for
// stats and stats-tube: connections open, producers and workers among them,
// and per tube those using, watching and waiting on it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace delayq::server::beanstalk {

/// What the connections do, as the stats command reports it.
///
/// Thread safety: a plain value.
struct connection_counts {
  std::size_t current = 0, producers = 0, workers = 0, waiting = 0;
  std::uint64_t total = 0;
};

/// The connections' counts per tube, for stats and stats-tube.
///
/// Thread safety: every member is safe from any thread.
class session_registry {
 public:
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
  std::map<std::string, tube_counts, std::less<>> tubes_;
};

}  // namespace delayq::server::beanstalk
