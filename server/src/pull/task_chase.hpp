// pull/task_chase.hpp - acting on a task the engine may hold as "running"
// only because it waits here for a consumer: cancel, reschedule, requeue,
// kick. Shared by the HTTP routes and the beanstalk commands, so both take
// the same care with the moments between the engine and the broker.
#pragma once

#include <boost/system/error_code.hpp>
#include <chrono>
#include <functional>
#include <string>

#include "delayq/engine.hpp"
#include "pull/lease_broker.hpp"

namespace delayq::server {

/// How a chase ended.
enum class chase_result {
  done,       ///< `act` succeeded.
  not_found,  ///< No pending task with the id.
  running,    ///< Reserved by a consumer, being pushed, or in transit: an
              ///< attempt that cannot be taken back.
  busy,       ///< It kept becoming due for the whole patience.
  failed,     ///< `act` or the status call failed: see `ec`.
};

/// Runs `act` until it succeeds. The engine cannot cancel or move a task
/// that is "running", which a task waiting in `broker` for a consumer is:
/// it is given back to the engine first, then `act` runs again. Three
/// moments need only another round:
/// - the engine fired it again after the give-back (one tick later);
/// - the engine is still settling the give-back (outcomes are applied in
///   batches during bursts);
/// - a worker has just started the attempt of a pulled type and has not
///   offered it to the broker yet.
/// Reserved (leased) and pushed tasks (`pushed(type)` true) are attempts
/// that cannot be taken back: `running` at once. A task running and not in
/// the broker that was never there (in transit) is `running` once it stayed
/// so for `transit_patience`. The rounds are bounded by `patience`, not by
/// count (a loaded worker can take longer than a count allows), and poll
/// every few ms. Blocks: call it off the I/O threads.
///
/// Thread safety: as the engine's and the broker's calls (any thread).
chase_result chase(delayq::engine& engine, lease_broker& broker,
                   const std::function<bool(const std::string& type)>& pushed,
                   const std::string& id,
                   const std::function<bool(boost::system::error_code&)>& act,
                   boost::system::error_code& ec,
                   std::chrono::milliseconds patience = std::chrono::seconds{5},
                   std::chrono::milliseconds transit_patience = std::chrono::seconds{2});

}  // namespace delayq::server
