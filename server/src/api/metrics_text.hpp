// metrics_text: GET /metrics, the engine's series (delayq/prometheus.hpp)
// followed by the server's own (consumers, leases, pushes, HTTP answers), in
// the Prometheus text format 0.0.4. docs/server.md ("Metrics") lists them.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "delayq/engine_metrics.hpp"
#include "http/http_server.hpp"
#include "pull/lease_broker.hpp"
#include "push/push_client.hpp"

namespace delayq::server {

/// What /metrics renders, gathered from the server's parts.
struct server_metrics {
  engine_metrics engine;
  lease_broker::counters broker;
  std::map<std::string, lease_broker::type_counters, std::less<>> broker_types;
  /// Forwarding markers ignored (peer_forwarder::markers_rejected(); 0
  /// without --cluster).
  std::uint64_t forward_markers_rejected = 0;
  /// The I/O threads the server runs (io_threads_for(): what "auto" chose).
  std::uint64_t io_threads = 0;
};

/// Thread safety: a pure function of its arguments (`pusher` and `http` are
/// read through their thread-safe accessors; `http` may be null).
std::string render_metrics(const server_metrics& m, const push_client& pusher,
                           const http_server* http);

}  // namespace delayq::server
