// metrics_text: the server's counters in the Prometheus text format (0.0.4).
// Written by hand: the format is a few lines of text, and rendering it from
// counters the engine keeps anyway costs nothing on the hot path.
#pragma once

#include <string>

#include "delayq/engine.hpp"
#include "pull/lease_broker.hpp"
#include "push/push_client.hpp"

namespace delayq::server {

/// Thread safety: a pure function of its arguments.
std::string render_metrics(const engine_stats& s, const lease_broker::counters& b,
                           const push_client& pusher);

}  // namespace delayq::server
