// delayq/log.hpp - where the engine and its stores send diagnostics.
#pragma once

#include <functional>
#include <string_view>

namespace delayq {

enum class log_level { debug, info, warning, error };

/// Receives every diagnostic line delayq writes (store reconnects,
/// quarantined records, executor failures, ...).
using log_function = std::function<void(log_level, std::string_view message)>;

/// A log function that writes lines of `least` and above to stderr, one
/// `write` a line (`delayq LEVEL: message`), as the default does for
/// warnings and errors: `set_log_function(stderr_log(log_level::info))`
/// shows the info lines too (delayq-server's `--log-level`).
log_function stderr_log(log_level least);

/// Replaces the process-wide log function; an empty function restores the
/// default, which writes warnings and errors to stderr. Returns the previous
/// one.
///
/// Thread safety: safe to call from any thread; a line being written while the
/// function is replaced goes to either the old or the new one. The function
/// itself may be called from several threads at once.
log_function set_log_function(log_function fn);

/// Writes one line through the current log function. Never throws: an
/// exception from the log function is swallowed.
void log(log_level level, std::string_view message) noexcept;

}  // namespace delayq
