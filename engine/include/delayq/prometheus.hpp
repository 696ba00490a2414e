// delayq/prometheus.hpp - an engine's metrics in the Prometheus text format
// (version 0.0.4), for programs that embed the engine and serve /metrics
// from their own HTTP server.
//
// Example:
// \code
//   // in your GET /metrics handler:
//   response.set(content_type, "text/plain; version=0.0.4");
//   response.body() = delayq::prometheus_text(eng);
// \endcode
//
// Every series is named `delayq_...`; counters end in `_total`, durations
// are in seconds (`_seconds`). Per-type series carry a `type` label whose
// value is the task type, escaped as the format requires. docs/server.md
// ("Metrics") lists them.
//
// Written by hand rather than through prometheus-cpp: the engine counts as
// it goes with one relaxed atomic add per event on a record it already
// holds, and renders the text only when scraped; see docs/design.md.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "delayq/engine_metrics.hpp"

namespace delayq {

class engine;

/// Appends `m` to `out` in the Prometheus text format 0.0.4: a `# HELP` and
/// a `# TYPE` line per family, then its samples. Never throws but
/// std::bad_alloc. Thread safety: a pure function of its arguments.
void write_prometheus(const engine_metrics& m, std::string& out);

/// `e.metrics()` in the Prometheus text format. Thread safety: as
/// engine::metrics(), safe from any thread.
std::string prometheus_text(const engine& e);

/// Pieces for adding series of one's own beside the engine's, in the same
/// format. Thread safety: pure functions of their arguments.
namespace prometheus {

/// Appends `# HELP name help` and `# TYPE name type` (type: counter,
/// gauge, histogram). `help` is escaped (\\ and newline).
void family(std::string& out, std::string_view name, std::string_view type, std::string_view help);

/// Appends `v` as a label value, escaped: backslash, double quote and
/// newline become \\, \" and \n (a task type is user input).
void escape_label_value(std::string& out, std::string_view v);

/// Appends a sample line `name v`, or `name{label="value"} v` when `label`
/// is not empty.
void sample(std::string& out, std::string_view name, std::string_view label, std::string_view value,
            double v);
void sample(std::string& out, std::string_view name, std::string_view label, std::string_view value,
            std::uint64_t v);

/// Appends a histogram's `_bucket`, `_sum` and `_count` lines, with the
/// label `label="value"` when `label` is not empty.
void histogram(std::string& out, std::string_view name, std::string_view label,
               std::string_view value, const histogram_data& h);

}  // namespace prometheus
}  // namespace delayq
