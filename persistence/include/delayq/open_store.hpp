// delayq/open_store.hpp - pick and open a task_store from a URI.
#pragma once

#include <utility>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "delayq/task_store.hpp"

namespace delayq {

/// Opens the store a URI names:
///
///   redis://[[USER]:PASSWORD@]HOST[:PORT][/DB][?prefix=NAME]   Redis over TCP
///   unix:///PATH/TO/SOCKET[?db=N&prefix=NAME]                  Redis over a Unix socket
///   sqlite:PATH/TO/FILE.db  or  sqlite:///ABS/PATH/FILE.db     an SQLite file
///       [?synchronous=off|normal|full|extra&busy_timeout_ms=N]
///   memory:                                                    process memory
///
/// The Redis options are those of redis_options::parse(); a relative SQLite
/// path is relative to the working directory and may not contain '?'.
///
/// Errors: errc::invalid_store_uri for anything else (the message lists the
/// accepted forms); otherwise the backend's errors (errc::store_unavailable,
/// errc::store_error). When `message` is not null it receives a sentence for
/// the operator; when it is null the error-code form logs that sentence
/// through delayq::log() instead. For an unreachable Redis the sentence names
/// the address and suggests `sqlite:delayq.db` (or DELAYQ_STORE).
///
/// Thread safety: may be called from any thread.
std::unique_ptr<task_store> open_store(std::string_view uri, boost::system::error_code& ec,
                                       std::string* message = nullptr);

/// Throwing form of open_store(): boost::system::system_error whose what()
/// holds the sentence described above.
std::unique_ptr<task_store> open_store(std::string_view uri);

/// The URI to use when none is configured: the environment variable
/// DELAYQ_STORE when set and not empty, else "redis://127.0.0.1:6379/0".
///
/// Thread safety: reads the environment; do not call while another thread
/// calls setenv().
std::string default_store_uri();

/// Copies every task of `from` into `to`, in batches of 1000 tasks per
/// save(), and returns the number copied. Records `from` cannot decode are
/// quarantined there (see task_store::list) and not copied. Stops at the
/// first error (`ec` set; earlier batches stay in `to`, so running it again
/// after fixing the cause is safe: saves are upserts).
///
/// Thread safety: as safe as the two stores; `from` and `to` must differ.
std::size_t copy_tasks(task_store& from, task_store& to, boost::system::error_code& ec);

/// Throwing form of copy_tasks().
std::size_t copy_tasks(task_store& from, task_store& to);

}  // namespace delayq
