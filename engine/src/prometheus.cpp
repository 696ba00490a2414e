#include "delayq/prometheus.hpp"

#include <charconv>
#include <cmath>

#include "delayq/engine.hpp"

namespace delayq {
namespace prometheus {
namespace {

void append_number(std::string& out, double v) {
  if (std::isnan(v)) {
    out += "NaN";
    return;
  }
  if (std::isinf(v)) {
    out += v > 0 ? "+Inf" : "-Inf";
    return;
  }
  char buf[32];
  // Shortest form that reads back as the same double (Go's ParseFloat,
  // which Prometheus uses, reads fixed and exponent forms).
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

void append_number(std::string& out, std::uint64_t v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

template <class V>
void sample_line(std::string& out, std::string_view name, std::string_view suffix,
                 std::string_view label, std::string_view value, std::string_view le, V v) {
  out += name;
  out += suffix;
  if (!label.empty() || !le.empty()) {
    out += '{';
    if (!label.empty()) {
      out += label;
      out += "=\"";
      escape_label_value(out, value);
      out += '"';
    }
    if (!le.empty()) {
      if (!label.empty()) out += ',';
      out += "le=\"";
      out += le;
      out += '"';
    }
    out += '}';
  }
  out += ' ';
  append_number(out, v);
  out += '\n';
}

}  // namespace

void family(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  for (char c : help) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

void escape_label_value(std::string& out, std::string_view v) {
  for (char c : v) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '"': out += "\\\""; break;
      case '\n': out += "\\n"; break;
      default: out += c;
    }
  }
}

void sample(std::string& out, std::string_view name, std::string_view label, std::string_view value,
            double v) {
  sample_line(out, name, {}, label, value, {}, v);
}

void sample(std::string& out, std::string_view name, std::string_view label, std::string_view value,
            std::uint64_t v) {
  sample_line(out, name, {}, label, value, {}, v);
}

void histogram(std::string& out, std::string_view name, std::string_view label,
               std::string_view value, const histogram_data& h) {
  // Always a le="+Inf" bucket, equal to _count, even for a histogram_data
  // with no buckets filled in.
  std::string le;
  for (std::size_t i = 0; i < h.upper_bounds.size() && i < h.counts.size(); ++i) {
    le.clear();
    append_number(le, h.upper_bounds[i]);
    sample_line(out, name, "_bucket", label, value, le, h.counts[i]);
  }
  sample_line(out, name, "_bucket", label, value, "+Inf", h.count);
  sample_line(out, name, "_sum", label, value, {}, h.sum);
  sample_line(out, name, "_count", label, value, {}, h.count);
}

}  // namespace prometheus

namespace {

using u64 = std::uint64_t;

// One per-type family: its name, kind, help, and how to read it.
struct per_type {
  const char* name;
  const char* kind;
  const char* help;
  u64 (*read)(const type_metrics&);
};

constexpr per_type per_type_series[] = {
    {"delayq_tasks_pending", "gauge", "Tasks held: waiting for their due time, due, or running.",
     [](const type_metrics& t) { return u64{t.pending}; }},
    {"delayq_tasks_ready", "gauge", "Due tasks waiting for a worker or a per-type slot.",
     [](const type_metrics& t) { return u64{t.ready}; }},
    {"delayq_tasks_running", "gauge",
     "Attempts started and not ended (for delayq-server: reserved and pushed ones included).",
     [](const type_metrics& t) { return u64{t.running}; }},
    {"delayq_tasks_scheduled_total", "counter",
     "Tasks accepted by schedule calls (a replace counts).",
     [](const type_metrics& t) { return t.scheduled; }},
    {"delayq_tasks_fired_total", "counter", "Attempts started.",
     [](const type_metrics& t) { return t.fired; }},
    {"delayq_tasks_succeeded_total", "counter", "Attempts that succeeded.",
     [](const type_metrics& t) { return t.succeeded; }},
    {"delayq_tasks_failed_total", "counter",
     "Attempts that failed (threw, reported a failure, timed out, had no executor).",
     [](const type_metrics& t) { return t.failed; }},
    {"delayq_tasks_retried_total", "counter", "Failed attempts scheduled to run again.",
     [](const type_metrics& t) { return t.retried; }},
    {"delayq_tasks_died_total", "counter", "Tasks that became dead letters.",
     [](const type_metrics& t) { return t.died; }},
    {"delayq_tasks_cancelled_total", "counter", "Tasks cancelled.",
     [](const type_metrics& t) { return t.cancelled; }},
    {"delayq_tasks_timed_out_total", "counter", "Attempts that passed their type's timeout.",
     [](const type_metrics& t) { return t.timed_out; }},
};

}  // namespace

void write_prometheus(const engine_metrics& m, std::string& out) {
  namespace p = prometheus;
  out.reserve(out.size() + 2048 + m.types.size() * 4096);
  for (const per_type& s : per_type_series) {
    p::family(out, s.name, s.kind, s.help);
    for (const type_metrics& t : m.types) p::sample(out, s.name, "type", t.type, s.read(t));
  }
  p::family(out, "delayq_task_lateness_seconds", "histogram",
            "Seconds from a task's due time to the start of its attempt.");
  for (const type_metrics& t : m.types)
    p::histogram(out, "delayq_task_lateness_seconds", "type", t.type, t.lateness_seconds);
  p::family(out, "delayq_task_execution_seconds", "histogram",
            "Seconds from the start of an attempt to its end.");
  for (const type_metrics& t : m.types)
    p::histogram(out, "delayq_task_execution_seconds", "type", t.type, t.execution_seconds);

  p::family(out, "delayq_tasks_loaded_total", "counter", "Tasks loaded from the store at start.");
  p::sample(out, "delayq_tasks_loaded_total", {}, {}, m.loaded);
  p::family(out, "delayq_tasks_quarantined_total", "counter",
            "Stored records set aside at start (undecodable, or not accepted).");
  p::sample(out, "delayq_tasks_quarantined_total", {}, {}, m.quarantined);
  p::family(out, "delayq_dead_letters", "gauge", "Dead letters in the store.");
  p::sample(out, "delayq_dead_letters", {}, {}, u64{m.dead});
  p::family(out, "delayq_timer_wakeups_total", "counter", "Times the wheel's timer fired.");
  p::sample(out, "delayq_timer_wakeups_total", {}, {}, m.wakeups);

  const store_metrics& s = m.store;
  p::family(out, "delayq_store_write_seconds", "histogram",
            "Seconds from handing a write (a batch of changes) to the store to its outcome.");
  p::histogram(out, "delayq_store_write_seconds", {}, {}, s.write_seconds);
  p::family(out, "delayq_store_write_batch_size", "histogram", "Changes per store write.");
  p::histogram(out, "delayq_store_write_batch_size", {}, {}, s.write_batch_size);
  p::family(out, "delayq_store_write_errors_total", "counter", "Store writes that failed.");
  p::sample(out, "delayq_store_write_errors_total", {}, {}, s.write_errors);
  p::family(out, "delayq_store_outage", "gauge",
            "1 while store writes fail or failed changes wait to be written again, else 0.");
  p::sample(out, "delayq_store_outage", {}, {}, u64{s.outage ? 1u : 0u});
  p::family(out, "delayq_store_writes_queued", "gauge", "Changes queued and not yet sent.");
  p::sample(out, "delayq_store_writes_queued", {}, {}, u64{s.writes_queued});
  p::family(out, "delayq_store_writes_kept", "gauge",
            "Changes whose write failed and that wait to be written again.");
  p::sample(out, "delayq_store_writes_kept", {}, {}, u64{s.writes_kept});
}

std::string prometheus_text(const engine& e) {
  std::string out;
  write_prometheus(e.metrics(), out);
  return out;
}

}  // namespace delayq
