// server_settings: every setting of delayq-server in one table, which both
// the command line and the config file read (docs/server.md, "Config file").
//
// A setting has one key: `drain_timeout` in the file is `--drain-timeout` on
// the command line, and means the same, with the same check. Where several
// places give a value, the most specific wins:
//
//   flag  >  environment variable  >  config file  >  built-in default
//
// The environment keeps its meaning (DELAYQ_STORE, DELAYQ_TOKEN,
// DELAYQ_CLUSTER_SECRET): it overrides the file, as it overrides the default
// today, and a flag overrides it. A repeatable setting (push, capacity, ...)
// takes its whole list from the one place that wins.
//
// Any error (an unknown key, a bad value, an unreadable file, a secret file
// others can read) is a usage error: load_server_config() says where it is
// (the flag, the variable, or FILE:LINE and the key) and main() exits 2.
#pragma once

#include <chrono>
#include <iosfwd>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "delayq/log.hpp"
#include "server_app.hpp"

namespace delayq::server {

/// What main() runs with: the server's options, and what main() itself
/// reads (the drain's deadline, the actions that exit at once).
struct server_config {
  server_options options;
  /// --drain-timeout: the most a drain waits (main() passes it to drain()).
  std::chrono::milliseconds drain_timeout{30'000};
  /// --log-level: the least severe lines written to stderr (main() installs
  /// delayq::stderr_log with it; the library's default is warning).
  log_level log_threshold = log_level::warning;
  /// --config: the file read, empty for none.
  std::string config_path;
  bool list_routes = false;
  bool print_config = false;
};

/// A usage error in the settings; what() is the whole message for the user,
/// naming where the bad value came from.
class config_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// One `key = value` line of a config file.
struct config_line {
  std::string key;
  std::string value;
  int line = 0;
};

/// Splits the text of a config file into its `key = value` lines (blank
/// lines and `#` comments left out). `file` names the file in errors.
/// Throws config_error ("FILE:LINE: ...") for a line that is not
/// `key = value`. Keys are not checked against the table here.
std::vector<config_line> parse_config_text(std::string_view text, const std::string& file);

/// Reads the command line (argv), the environment and, with --config, the
/// file, into `out`. Returns the status main() exits with now: 0 after
/// --help, --version or --print-config (written to `out_stream`), 2 after a
/// usage error (written to `err_stream`), or nullopt to go on and serve.
///
/// Thread safety: reads the environment; call before starting threads.
std::optional<int> load_server_config(int argc, const char* const* argv, server_config& out,
                                      std::ostream& out_stream, std::ostream& err_stream);

}  // namespace delayq::server
