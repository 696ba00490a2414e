#include "delayq/open_store.hpp"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <vector>

#include "delayq/log.hpp"
#include "delayq/memory_store.hpp"
#include "delayq/redis_store.hpp"
#include "delayq/sqlite_store.hpp"

namespace delayq {
namespace {

constexpr const char* accepted_forms =
    "accepted store URIs: "
    "redis://[[USER]:PASSWORD@]HOST[:PORT][/DB][?prefix=NAME], "
    "unix:///PATH/TO/SOCKET[?db=N&prefix=NAME], "
    "redis-cluster://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT...][?prefix=NAME], "
    "sqlite:PATH/TO/FILE.db or sqlite:///ABS/PATH/FILE.db "
    "[?synchronous=off|normal|full|extra&busy_timeout_ms=N], "
    "memory: (in-process, nothing persisted)";

struct parse_failure {
  std::string message;
};

sqlite_options::synchronous_level parse_synchronous(std::string_view v) {
  using level = sqlite_options::synchronous_level;
  if (v == "off") return level::off;
  if (v == "normal") return level::normal;
  if (v == "full") return level::full;
  if (v == "extra") return level::extra;
  throw parse_failure{"synchronous must be off, normal, full or extra, not '" + std::string(v) +
                      "'"};
}

// sqlite:PATH[?options] or sqlite:///ABS/PATH[?options]
std::pair<std::string, sqlite_options> parse_sqlite(std::string_view rest) {
  sqlite_options opts;
  std::string_view query;
  if (const auto q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  if (rest.starts_with("//")) {
    // URL form: only an empty authority is meaningful (sqlite:///abs/path).
    if (!rest.starts_with("///"))
      throw parse_failure{"use sqlite:RELATIVE/PATH or sqlite:///ABSOLUTE/PATH"};
    rest.remove_prefix(2);
  }
  if (rest.empty()) throw parse_failure{"missing database path after 'sqlite:'"};
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view item = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    const auto eq = item.find('=');
    const std::string_view key = item.substr(0, eq);
    const std::string_view value = eq == std::string_view::npos ? "" : item.substr(eq + 1);
    if (key == "synchronous") {
      opts.synchronous = parse_synchronous(value);
    } else if (key == "busy_timeout_ms") {
      long long ms = -1;
      auto [p, e] = std::from_chars(value.data(), value.data() + value.size(), ms);
      if (value.empty() || e != std::errc{} || p != value.data() + value.size() || ms < 0 ||
          ms > 3'600'000)
        throw parse_failure{"busy_timeout_ms must be a number from 0 to 3600000"};
      opts.busy_timeout = std::chrono::milliseconds{ms};
    } else {
      throw parse_failure{"unknown option '" + std::string(key) + "'"};
    }
  }
  return {std::string(rest), opts};
}

}  // namespace

std::unique_ptr<task_store> open_store(std::string_view uri, boost::system::error_code& ec,
                                       std::string* message) {
  ec = {};
  std::string why;
  std::unique_ptr<task_store> store;
  // A URI with credentials is shown only up to its scheme: a mistyped scheme
  // ("rediss://:secret@host") must not put the password in a log.
  const std::size_t scheme_end = uri.find("://");
  const std::size_t at = uri.find('@');
  std::string shown;
  if (at == std::string_view::npos) {
    shown.append("'").append(uri.substr(0, 200)).append("'");
  } else if (scheme_end < at) {
    shown.append("'").append(uri.substr(0, scheme_end + 3)).append("...'");
  } else {
    shown = "(not shown: it may hold a password)";
  }

  if (uri == "memory:") {
    store = std::make_unique<memory_store>();
  } else if (uri.starts_with("redis://") || uri.starts_with("unix://") ||
             uri.starts_with("redis-cluster://")) {
    std::string parse_message;
    redis_options opts = redis_options::parse(uri, ec, &parse_message);
    if (ec) {
      // The URI may hold a password: name only its scheme.
      why = parse_message + " (" + std::string(uri.substr(0, uri.find("://") + 3)) + "...); " +
            accepted_forms;
    } else {
      std::string open_message;
      store = redis_store::open(opts, ec, &open_message);
      if (ec == errc::store_unavailable)
        why = "Redis at " + opts.address() + " is unreachable (" + open_message +
              "). Start Redis there, set DELAYQ_STORE to a reachable redis:// URI, or use the "
              "embedded store instead: DELAYQ_STORE=sqlite:delayq.db "
              "(open_store(\"sqlite:delayq.db\"))";
      else if (ec)
        why = opts.describe() + ": " + open_message;
    }
  } else if (uri.starts_with("sqlite:")) {
    try {
      auto [path, opts] = parse_sqlite(uri.substr(7));
      store = sqlite_store::open(path, opts, ec, &why);
      if (ec) why = "sqlite:" + path + ": " + why;
    } catch (const parse_failure& f) {
      ec = make_error_code(errc::invalid_store_uri);
      why = "invalid SQLite URI " + shown + ": " + f.message + "; " + accepted_forms;
    }
  } else {
    ec = make_error_code(errc::invalid_store_uri);
    why = "unsupported store URI " + shown + "; " + accepted_forms;
  }

  if (ec) {
    store.reset();
    if (message)
      *message = std::move(why);
    else
      log(log_level::error, "delayq: open_store: " + why);
  }
  return store;
}

std::unique_ptr<task_store> open_store(std::string_view uri) {
  boost::system::error_code ec;
  std::string message;
  auto store = open_store(uri, ec, &message);
  if (ec) throw boost::system::system_error(ec, "delayq: open_store: " + message);
  return store;
}

std::string default_store_uri() {
  // getenv is not thread-safe against setenv; documented in the header.
  const char* env = std::getenv("DELAYQ_STORE");  // NOLINT(concurrency-mt-unsafe)
  if (env && *env) return env;
  return "redis://127.0.0.1:6379/0";
}

namespace {
// Carries a failed save out of a list() sink to stop the listing.
struct copy_aborted {};
}  // namespace

std::size_t copy_tasks(task_store& from, task_store& to, boost::system::error_code& ec) {
  constexpr std::size_t batch_size = 1000;
  ec = {};
  std::size_t copied = 0;
  std::vector<task> batch;
  batch.reserve(batch_size);
  auto flush = [&] {
    to.save(batch, ec);
    if (ec) throw copy_aborted{};
    copied += batch.size();
    batch.clear();
  };
  try {
    boost::system::error_code list_ec;
    from.list(
        [&](task&& t) {
          batch.push_back(std::move(t));
          if (batch.size() == batch_size) flush();
        },
        list_ec);
    if (list_ec) {
      ec = list_ec;
      return copied;
    }
    if (!batch.empty()) flush();
  } catch (const copy_aborted&) {
    log(log_level::error, "delayq: copy_tasks from " + from.describe() + " to " + to.describe() +
                              " stopped after " + std::to_string(copied) +
                              " tasks: " + ec.message());
  }
  return copied;
}

std::size_t copy_tasks(task_store& from, task_store& to) {
  boost::system::error_code ec;
  const std::size_t n = copy_tasks(from, to, ec);
  detail::throw_if(ec, "delayq: copy_tasks");
  return n;
}

}  // namespace delayq
