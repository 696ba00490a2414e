#include "api/metrics_text.hpp"

#include <cstdint>

#include "delayq/prometheus.hpp"

namespace delayq::server {
namespace {

using u64 = std::uint64_t;
using type_map = std::map<std::string, lease_broker::type_counters, std::less<>>;

void per_type(std::string& out, const type_map& types, const char* name, const char* kind,
              const char* help, u64 (*read)(const lease_broker::type_counters&)) {
  prometheus::family(out, name, kind, help);
  for (const auto& [type, c] : types) prometheus::sample(out, name, "type", type, read(c));
}

void single(std::string& out, const char* name, const char* kind, const char* help, u64 v) {
  prometheus::family(out, name, kind, help);
  prometheus::sample(out, name, {}, {}, v);
}

}  // namespace

std::string render_metrics(const server_metrics& m, const push_client& pusher,
                           const http_server* http) {
  std::string out;
  write_prometheus(m.engine, out);
  // Pull types: the types a task was ever offered to consumers for.
  per_type(out, m.broker_types, "delayq_consumer_tasks_ready", "gauge",
           "Due tasks of pull types waiting for a consumer.",
           [](const lease_broker::type_counters& c) { return u64{c.ready}; });
  per_type(out, m.broker_types, "delayq_consumer_tasks_reserved", "gauge",
           "Tasks leased to consumers now.",
           [](const lease_broker::type_counters& c) { return u64{c.reserved}; });
  per_type(out, m.broker_types, "delayq_leases_granted_total", "counter",
           "Leases granted to consumers by reserve calls.",
           [](const lease_broker::type_counters& c) { return c.leased; });
  per_type(out, m.broker_types, "delayq_leases_expired_total", "counter",
           "Leases that reached their deadline before a finish or fail (a failed attempt).",
           [](const lease_broker::type_counters& c) { return c.expired; });
  const lease_broker::counters& b = m.broker;
  single(out, "delayq_leases_finished_total", "counter", "Leases ended by a consumer's finish.",
         b.finished);
  single(out, "delayq_leases_failed_total", "counter", "Leases ended by a consumer's fail.",
         b.failed);
  single(out, "delayq_leases_given_back_total", "counter",
         "Tasks given back to the engine uncounted (an answer not delivered, a cancel, a drain).",
         b.given_back);
  single(out, "delayq_leases_stale_given_back_total", "counter",
         "Ready tasks given back instead of leased: their attempt had lost its shard's lease "
         "(--cluster: this instance stalled or was cut off, and another owns the shard now).",
         b.stale);
  single(out, "delayq_consumers_waiting", "gauge", "Reserve calls long-polling now.",
         b.waiting_consumers);
  single(out, "delayq_pushes_total", "counter", "Push requests answered with 2xx.", pusher.sent());
  single(out, "delayq_push_failures_total", "counter", "Push requests that failed.",
         pusher.failed());
  single(out, "delayq_pushes_withdrawn_total", "counter",
         "Pushes withdrawn before their request was written, the task given back: their "
         "attempt had lost its shard's lease meanwhile (--cluster), or their task was replaced "
         "or cancelled while this older version waited for a slot.",
         pusher.withdrawn());
  single(out, "delayq_pushes_in_flight", "gauge", "Push requests sent and not answered.",
         pusher.in_flight());
  single(out, "delayq_pushes_queued", "gauge", "Push requests waiting for a connection.",
         pusher.queued());
  single(out, "delayq_io_threads", "gauge",
         "Threads serving HTTP and beanstalk connections (--io-threads; auto: 1 on memory:, "
         "else 2).",
         m.io_threads);
  single(out, "delayq_forward_marker_rejected_total", "counter",
         "Forwarding markers (X-Delayq-Forwarded-By) ignored: not made by a member for the call "
         "they came with, or too old; each call was handled as a client's.",
         m.forward_markers_rejected);
  if (http != nullptr) {
    prometheus::family(out, "delayq_http_responses_total", "counter",
                       "HTTP answers written, by status class (1xx to 5xx).");
    static constexpr const char* classes[] = {"1xx", "2xx", "3xx", "4xx", "5xx"};
    for (unsigned cls = 1; cls <= 5; ++cls)
      prometheus::sample(out, "delayq_http_responses_total", "class", classes[cls - 1],
                         http->answered(cls));
    single(out, "delayq_http_connections", "gauge", "HTTP connections open now.",
           u64{http->connections()});
    single(out, "delayq_http_connections_refused_total", "counter",
           "Connections closed as soon as accepted: --max-connections were open.",
           http->refused_connections());
  }
  return out;
}

}  // namespace delayq::server
