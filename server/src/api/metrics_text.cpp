#include "api/metrics_text.hpp"

#include <cstdint>

namespace delayq::server {
namespace {

void metric(std::string& out, const char* name, const char* type, const char* help, double value) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
  out += name;
  out += ' ';
  // Integers print exactly; Prometheus reads both forms.
  if (value == static_cast<double>(static_cast<std::int64_t>(value)))
    out += std::to_string(static_cast<std::int64_t>(value));
  else
    out += std::to_string(value);
  out += '\n';
}

}  // namespace

std::string render_metrics(const engine_stats& s, const lease_broker::counters& b,
                           const push_client& pusher) {
  std::string out;
  out.reserve(4096);
  const auto gauge = [&](const char* n, const char* h, double v) { metric(out, n, "gauge", h, v); };
  const auto counter = [&](const char* n, const char* h, double v) {
    metric(out, n, "counter", h, v);
  };
  gauge("delayq_pending", "Tasks held: waiting, due or running.", static_cast<double>(s.pending));
  gauge("delayq_ready", "Due tasks waiting for a worker or a per-type slot.",
        static_cast<double>(s.ready));
  gauge("delayq_running", "Attempts started and not ended (reserved and pushed included).",
        static_cast<double>(s.running));
  gauge("delayq_ready_for_consumers", "Due tasks of pull types waiting for a consumer.",
        static_cast<double>(b.ready));
  gauge("delayq_reserved", "Tasks leased to consumers.", static_cast<double>(b.reserved));
  gauge("delayq_waiting_consumers", "Reserve calls long-polling now.",
        static_cast<double>(b.waiting_consumers));
  gauge("delayq_dead", "Dead letters in the store.", static_cast<double>(s.dead));
  counter("delayq_scheduled_total", "Tasks accepted.", static_cast<double>(s.scheduled));
  counter("delayq_fired_total", "Attempts started.", static_cast<double>(s.fired));
  counter("delayq_succeeded_total", "Attempts that succeeded.", static_cast<double>(s.succeeded));
  counter("delayq_failed_total", "Attempts that failed.", static_cast<double>(s.failed));
  counter("delayq_retried_total", "Failed attempts scheduled again.",
          static_cast<double>(s.retried));
  counter("delayq_died_total", "Tasks that became dead letters.", static_cast<double>(s.died));
  counter("delayq_cancelled_total", "Tasks cancelled.", static_cast<double>(s.cancelled));
  counter("delayq_lease_expired_total", "Leases that ended before finish or fail.",
          static_cast<double>(b.expired));
  counter("delayq_pushes_total", "Push requests answered with 2xx.",
          static_cast<double>(pusher.sent()));
  counter("delayq_push_failures_total", "Push requests that failed.",
          static_cast<double>(pusher.failed()));
  gauge("delayq_store_writes_queued", "Store writes queued and not yet sent.",
        static_cast<double>(s.writes_queued));
  gauge("delayq_store_writes_kept",
        "Store writes that failed and wait to be retried (above 0: the store is down).",
        static_cast<double>(s.writes_kept));
  const double us = 1e-6;
  gauge("delayq_lateness_p50_seconds", "Median lateness of attempts since start.",
        static_cast<double>(s.lateness_p50.count()) * us);
  gauge("delayq_lateness_p99_seconds", "99th percentile lateness of attempts since start.",
        static_cast<double>(s.lateness_p99.count()) * us);
  gauge("delayq_lateness_max_seconds", "Largest lateness of an attempt since start.",
        static_cast<double>(s.lateness_max.count()) * us);
  return out;
}

}  // namespace delayq::server
