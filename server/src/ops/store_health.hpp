// ops/store_health.hpp - whether the store answers, as /healthz reports it:
// kept up to date by one probe a second on a thread of its own, so a health
// check costs the store nothing however often it is asked (a load balancer,
// or a client that loops on the open endpoint), and never waits on it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace delayq::server {

/// The health of the store: the last probe's outcome and when it ended.
///
/// A probe that hangs (a store that accepts the connection and never
/// answers) must not leave "ok" standing: a state older than `stale_after`
/// reads as unhealthy, whatever the last probe said.
///
/// Example:
/// \code
///   store_health h([&](std::string& why) { return probe(why); });
///   h.start();
///   if (!h.now().ok) ...  // 503
/// \endcode
///
/// Thread safety: now() may be called from any thread, concurrently with the
/// probing thread; start() and stop() from one thread (the owner).
class store_health {
 public:
  using clock = std::chrono::steady_clock;
  /// Asks the store once; true when it answered, else sets `why`. Runs on
  /// the health thread only, one call at a time.
  using probe_fn = std::function<bool(std::string& why)>;

  struct options {
    /// Between the end of one probe and the start of the next.
    std::chrono::milliseconds interval{1000};
    /// A state older than this reads as unhealthy: a probe is stuck.
    std::chrono::milliseconds stale_after{3000};
  };

  /// What now() reports.
  struct state {
    bool ok = false;
    std::string why;  ///< Empty when ok; else what failed ("not probed yet", the store's error).
    std::chrono::milliseconds age{0};  ///< Since the probe that decided it ended.
  };

  explicit store_health(probe_fn probe) : store_health(std::move(probe), options{}) {}
  store_health(probe_fn probe, options opts);
  /// Stops the probing thread (waits for a probe under way).
  ~store_health();
  store_health(const store_health&) = delete;
  store_health& operator=(const store_health&) = delete;

  /// Probes once on the calling thread, then keeps probing on a thread of
  /// its own. The first probe runs before start() returns, so the state
  /// is known from the first request on.
  void start();
  /// Ends the probing (waits for a probe under way). Idempotent.
  void stop();

  /// The state, as of the last probe (unhealthy when stale).
  state now() const;

 private:
  void record(bool ok, std::string why);
  void loop();

  probe_fn probe_;
  options opts_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  bool ok_ = false;
  std::string why_ = "not probed yet";
  clock::time_point checked_{};
  std::thread thread_;
};

}  // namespace delayq::server
