#include "delayq/open_store.hpp"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <vector>

#include "delayq/log.hpp"
#include "delayq/memory_store.hpp"
#include "delayq/postgres_store.hpp"
#include "delayq/redis_store.hpp"
#include "delayq/sqlite_store.hpp"

namespace delayq {
namespace {

constexpr const char* accepted_forms =
    "accepted store URIs: "
    "redis://[[USER]:PASSWORD@]HOST[:PORT][/DB][?prefix=NAME], "
    "unix:///PATH/TO/SOCKET[?db=N&prefix=NAME], "
    "redis-cluster://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT...][?prefix=NAME], "
    "postgres://[USER[:PASSWORD]@]HOST[:PORT][/DB][?schema=NAME] (or postgresql://), "
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

bool is_redis_uri(std::string_view uri) {
  return uri.starts_with("redis://") || uri.starts_with("unix://") ||
         uri.starts_with("redis-cluster://");
}

bool is_postgres_uri(std::string_view uri) {
  return uri.starts_with("postgres://") || uri.starts_with("postgresql://");
}

// Opens what the URI names, without requirements; `why` gets the sentence.
std::unique_ptr<task_store> open_plain(std::string_view uri, boost::system::error_code& ec,
                                       std::string& why) {
  ec = {};
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
  } else if (is_postgres_uri(uri)) {
    std::string parse_message;
    postgres_options opts = postgres_options::parse(uri, ec, &parse_message);
    if (ec) {
      why = parse_message + " (" + std::string(uri.substr(0, uri.find("://") + 3)) + "...); " +
            accepted_forms;
    } else {
      std::string open_message;
      store = open_postgres_store(opts, ec, &open_message);
      if (ec == errc::store_unavailable)
        why = "PostgreSQL at " + opts.connection.address() + " is unreachable (" + open_message +
              "). Start it there, or set DELAYQ_STORE to a reachable postgres:// URI";
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

  if (ec) store.reset();
  return store;
}

// "3 tasks and 1 dead letter"
std::string count_records(std::size_t tasks, std::size_t dead) {
  return std::to_string(tasks) + (tasks == 1 ? " task and " : " tasks and ") +
         std::to_string(dead) + (dead == 1 ? " dead letter" : " dead letters");
}

std::string with_shards(std::string uri, std::uint32_t shards) {
  const std::size_t q = uri.find('?');
  uri += q == std::string::npos ? "?" : (q + 1 == uri.size() ? "" : "&");
  return uri + "shards=" + std::to_string(shards);
}

// What a store holds, whatever its backend: the layout checks below are the
// same for every store several instances can share.
struct layout_view {
  std::uint32_t shards = 0;  // recorded
  std::size_t unsharded_tasks = 0;
  std::size_t unsharded_dead = 0;
  bool half_moved = false;  // Redis: records N and still holds unsharded records
  std::string shown;        // the URI without password and shards=
  bool password = false;
};

// --cluster: the store must hold the sharded layout of `n` shards and
// nothing in the unsharded one, or the instances would not see every task.
// An empty store gets that layout here (also one a server without --cluster
// left empty). Returns the sentence when it refuses; sets ec.
std::string check_cluster_layout(std::string_view uri, std::uint32_t n,
                                 boost::system::error_code& ec) {
  ec = {};
  std::string why;
  layout_view v;
  if (is_redis_uri(uri)) {
    redis_options opts = redis_options::parse(uri, ec);
    if (ec) return {};  // open_plain() says what is wrong
    opts.shards = n;
    redis_options plain = opts;
    plain.shards = 0;
    v.shown = plain.describe();
    v.password = !opts.password.empty();
    const redis_layout layout = redis_store::claim_shards(opts, true, ec, &why);
    if (ec) return "store " + v.shown + ": reading its shard layout: " + why;
    v.shards = layout.shards;
    v.unsharded_tasks = layout.unsharded_tasks;
    v.unsharded_dead = layout.unsharded_dead;
    v.half_moved = layout.shards == n && !layout.unsharded_empty();
    if (layout.shards == n && layout.unsharded_empty()) return {};
  } else {
    postgres_options opts = postgres_options::parse(uri, ec);
    if (ec) return {};
    opts.layout.shards = n;
    postgres_options plain = opts;
    plain.layout.shards = 0;
    v.shown = plain.describe();
    v.password = !opts.connection.password.empty();
    const postgres_layout_state state = claim_postgres_shards(opts, true, ec, &why);
    if (ec) return "store " + v.shown + ": reading its shard layout: " + why;
    if (state.shards == n) return {};
    v.shards = state.shards;
    v.unsharded_tasks = state.tasks;
    v.unsharded_dead = state.dead_letters;
  }
  ec = errc::shard_mismatch;
  const std::string count = std::to_string(n);
  std::string command = "delayqctl migrate-shards --store '" + v.shown + "' --shards " + count;
  if (v.password) command += " (with the store URI's password in --store)";
  const std::string counts = count_records(v.unsharded_tasks, v.unsharded_dead);
  if (v.shards != 0 && v.shards != n)
    return "store " + v.shown + " is sharded with " + std::to_string(v.shards) +
           " shards, not the " + count +
           " this instance was given: start every instance with --shards " +
           std::to_string(v.shards);
  if (v.shards == 0)
    return "store " + v.shown + " holds an unsharded task set (" + counts +
           ", written by delayq-server without --cluster); --cluster needs it in the sharded "
           "layout. Stop every server that uses this store, then move the tasks with: " +
           command;
  return "store " + v.shown + " is half converted to the sharded layout: it records " + count +
         " shards, but " + counts +
         " are still in the unsharded layout (a migration that did not finish, or a server "
         "without --cluster still writing there). Not starting on it; finish the migration "
         "with: " +
         command;
}

// Without --cluster, a store opened with another shard count than the one
// it records (errc::shard_mismatch): which, and what to start instead. Empty
// when it cannot tell.
std::string explain_shard_mismatch(std::string_view uri) {
  boost::system::error_code ec;
  std::uint32_t recorded = 0, asked = 0;
  std::string shown;
  if (is_redis_uri(uri)) {
    const redis_options opts = redis_options::parse(uri, ec);
    if (ec) return {};
    const redis_layout layout = redis_store::inspect_layout(opts, ec);
    if (ec) return {};
    redis_options plain = opts;
    plain.shards = 0;
    shown = plain.describe();
    recorded = layout.shards;
    asked = opts.shards;
  } else if (is_postgres_uri(uri)) {
    const postgres_options opts = postgres_options::parse(uri, ec);
    if (ec) return {};
    const postgres_layout_state state = inspect_postgres_layout(opts, ec);
    if (ec) return {};
    postgres_options plain = opts;
    plain.layout.shards = 0;
    shown = plain.describe();
    recorded = state.shards;
    asked = opts.layout.shards;
  } else {
    return {};
  }
  if (recorded == asked) return {};
  const std::string m = std::to_string(recorded);
  if (asked == 0)
    return "store " + shown + " holds a sharded task set (" + m +
           " shards, written by delayq-server --cluster); without --cluster this server would "
           "see none of its tasks. Start it with --cluster --shards " +
           m;
  return "store " + shown + " records " + m + " shards, not the shards=" + std::to_string(asked) +
         " of its URI";
}

// The error-code forms' common end: the sentence to `message`, or the log.
void report(boost::system::error_code& ec, std::string why, std::string* message) {
  if (!ec) return;
  if (message)
    *message = std::move(why);
  else
    log(log_level::error, "delayq: open_store: " + why);
}

}  // namespace

std::unique_ptr<task_store> open_store(std::string_view uri, boost::system::error_code& ec,
                                       std::string* message) {
  return open_store(uri, store_requirements{}, ec, message);
}

std::unique_ptr<task_store> open_store(std::string_view uri) {
  return open_store(uri, store_requirements{});
}

std::uint32_t required_shards(std::string_view uri, const store_requirements& requirements,
                              boost::system::error_code& ec, std::string* message) {
  ec = {};
  if (!requirements.cluster) return 0;
  const auto fail = [&](errc code, std::string why) -> std::uint32_t {
    ec = code;
    if (message) *message = std::move(why);
    return 0;
  };
  std::uint32_t in_uri = 0;
  std::string why;
  if (is_redis_uri(uri)) {
    const redis_options parsed = redis_options::parse(uri, ec, &why);
    if (ec) return fail(errc::invalid_store_uri, why);
    in_uri = parsed.shards;
  } else if (is_postgres_uri(uri)) {
    const postgres_options parsed = postgres_options::parse(uri, ec, &why);
    if (ec) return fail(errc::invalid_store_uri, why);
    in_uri = parsed.layout.shards;
  } else {
    // The instances share the store: only Redis and PostgreSQL can be shared.
    return fail(errc::invalid_cluster_options,
                "--cluster needs a store the instances share (redis://, unix://, "
                "redis-cluster:// or postgres://), not a " +
                    std::string(uri.substr(0, uri.find(':'))) + ": store");
  }
  if (requirements.shards != 0 && in_uri != 0 && requirements.shards != in_uri)
    return fail(errc::invalid_cluster_options,
                "--shards " + std::to_string(requirements.shards) +
                    " and the store URI's shards=" + std::to_string(in_uri) +
                    " differ: give the shard count once (--shards alone is enough), or the same "
                    "in both");
  const std::uint32_t n = requirements.shards != 0
                              ? requirements.shards
                              : (in_uri != 0 ? in_uri : default_cluster_shards);
  if (n > 16384)
    return fail(errc::invalid_cluster_options,
                "a shard count must be from 1 to 16384, not " + std::to_string(n));
  return n;
}

std::unique_ptr<task_store> open_store(std::string_view uri, const store_requirements& requirements,
                                       boost::system::error_code& ec, std::string* message) {
  ec = {};
  std::string why;
  std::unique_ptr<task_store> store;
  if (!requirements.cluster) {
    store = open_plain(uri, ec, why);
    if (ec == errc::shard_mismatch)
      if (std::string better = explain_shard_mismatch(uri); !better.empty())
        why = std::move(better);
    report(ec, std::move(why), message);
    return store;
  }
  const std::uint32_t n = required_shards(uri, requirements, ec, &why);
  if (ec) {
    report(ec, std::move(why), message);
    return nullptr;
  }
  // Before the store is opened: a cluster store is checked (and an empty
  // one given the sharded layout) first.
  why = check_cluster_layout(uri, n, ec);
  if (ec) {
    report(ec, std::move(why), message);
    return nullptr;
  }
  std::string full(uri);
  bool has_count = false;
  if (is_redis_uri(uri))
    has_count = redis_options::parse(uri, ec).shards != 0;
  else
    has_count = postgres_options::parse(uri, ec).layout.shards != 0;
  ec = {};
  store = open_plain(has_count ? full : with_shards(full, n), ec, why);
  report(ec, std::move(why), message);
  return store;
}

std::unique_ptr<task_store> open_store(std::string_view uri,
                                       const store_requirements& requirements) {
  boost::system::error_code ec;
  std::string message;
  auto store = open_store(uri, requirements, ec, &message);
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

// Lists `from` and hands its tasks to `flush` in batches of at most `size`
// (the last one smaller). `flush` sets `ec` and throws copy_aborted to stop;
// a listing error is left in `ec` too. Returns false when it stopped on an
// error.
template <class Flush>
bool list_in_batches(task_store& from, std::size_t size, boost::system::error_code& ec,
                     Flush&& flush) {
  std::vector<task> batch;
  batch.reserve(size);
  try {
    boost::system::error_code list_ec;
    from.list(
        [&](task&& t) {
          batch.push_back(std::move(t));
          if (batch.size() == size) {
            flush(batch);
            batch.clear();
          }
        },
        list_ec);
    if (list_ec) {
      ec = list_ec;
      return false;
    }
    if (!batch.empty()) flush(batch);
    return true;
  } catch (const copy_aborted&) {
    return false;
  }
}
}  // namespace

std::size_t copy_tasks(task_store& from, task_store& to, boost::system::error_code& ec) {
  constexpr std::size_t batch_size = 1000;
  ec = {};
  std::size_t copied = 0;
  bool save_failed = false;
  list_in_batches(from, batch_size, ec, [&](const std::vector<task>& batch) {
    to.save(batch, ec);
    if (ec) {
      save_failed = true;
      throw copy_aborted{};
    }
    copied += batch.size();
  });
  if (save_failed)
    log(log_level::error, "delayq: copy_tasks from " + from.describe() + " to " + to.describe() +
                              " stopped after " + std::to_string(copied) +
                              " tasks: " + ec.message());
  return copied;
}

std::size_t copy_tasks(task_store& from, task_store& to) {
  boost::system::error_code ec;
  const std::size_t n = copy_tasks(from, to, ec);
  detail::throw_if(ec, "delayq: copy_tasks");
  return n;
}

// ---- migrate_to_shards ----------------------------------------------------

namespace {

constexpr std::size_t migration_batch = 1000;

// Removes from `from` the tasks `to` holds as they are in `from`, a batch
// of `from`'s listing at a time; returns how many. A task changed since the
// copy (or not copied) stays, for the next pass.
std::size_t remove_landed_tasks(redis_store& from, redis_store& to, boost::system::error_code& ec) {
  ec = {};
  std::size_t removed = 0;
  // The flush removes from the hash list() scans: HSCAN still returns every
  // record that stays there for the whole scan.
  list_in_batches(from, migration_batch, ec, [&](const std::vector<task>& batch) {
    std::vector<std::string> ids;
    ids.reserve(batch.size());
    for (const task& t : batch) ids.push_back(t.id);
    const auto there = to.find(ids, ec);
    if (ec) throw copy_aborted{};
    std::vector<std::string> landed;
    for (std::size_t i = 0; i < batch.size(); ++i)
      if (there[i] && *there[i] == batch[i]) landed.push_back(std::move(ids[i]));
    from.remove(landed, ec);
    if (ec) throw copy_aborted{};
    removed += landed.size();
  });
  return removed;
}

// Buries every dead letter of `from` in `to`; returns how many.
std::size_t copy_dead_letters(redis_store& from, redis_store& to, boost::system::error_code& ec) {
  ec = {};
  std::size_t copied = 0;
  for (;;) {
    // Nothing removes letters from `from` meanwhile: offsets are stable.
    const auto page = from.dead_letters()->list_dead(copied, migration_batch, ec);
    if (ec || page.empty()) return copied;
    to.dead_letters()->bury(page, ec);
    if (ec) return copied;
    copied += page.size();
  }
}

// Purges from `from` the dead letters `to` holds as they are in `from`;
// returns how many.
std::size_t remove_landed_dead(redis_store& from, redis_store& to, boost::system::error_code& ec) {
  ec = {};
  std::size_t removed = 0, kept = 0;
  for (;;) {
    // The letters purged so far are gone from the index, the ones kept are
    // still at its front (in order): the next page starts after those.
    const auto page = from.dead_letters()->list_dead(kept, migration_batch, ec);
    if (ec || page.empty()) return removed;
    std::vector<std::string> landed;
    for (const dead_letter& d : page) {
      const auto there = to.dead_letters()->find_dead(d.task.id, ec);
      if (ec) return removed;
      if (there && *there == d)
        landed.push_back(d.task.id);
      else
        ++kept;
    }
    from.dead_letters()->purge(landed, ec);
    if (ec) return removed;
    removed += landed.size();
  }
}

}  // namespace

shard_migration migrate_to_shards(std::string_view uri, std::uint32_t shards,
                                  boost::system::error_code& ec, std::string* message) {
  ec = {};
  shard_migration result;
  std::string why;
  const auto fail = [&](boost::system::error_code e, std::string text) {
    ec = e;
    if (message)
      *message = std::move(text);
    else
      log(log_level::error, "delayq: migrate_to_shards: " + text);
    return result;
  };
  if (is_postgres_uri(uri)) {
    postgres_options opts = postgres_options::parse(uri, ec, &why);
    if (ec) return fail(ec, why);
    if (shards == 0 || shards > 16384)
      return fail(errc::invalid_cluster_options,
                  "a shard count must be from 1 to 16384, not " + std::to_string(shards));
    if (opts.layout.shards != 0 && opts.layout.shards != shards)
      return fail(errc::shard_mismatch,
                  "the store URI says shards=" + std::to_string(opts.layout.shards) +
                      ", the migration " + std::to_string(shards) + " shards: give the count once");
    opts.layout.shards = shards;
    // One transaction: it moves everything or nothing.
    result.tasks = migrate_postgres_shards(opts, ec, &why);
    if (ec) return fail(ec, opts.describe() + ": " + why);
    result.shards = shards;
    return result;
  }
  if (!is_redis_uri(uri))
    return fail(errc::invalid_store_uri,
                "only a Redis store (redis://, unix://, redis-cluster://) or a PostgreSQL one "
                "(postgres://) has a sharded layout");
  redis_options opts = redis_options::parse(uri, ec, &why);
  if (ec) return fail(ec, why);
  if (shards == 0 || shards > 16384)
    return fail(errc::invalid_cluster_options,
                "a shard count must be from 1 to 16384, not " + std::to_string(shards));
  if (opts.shards != 0 && opts.shards != shards)
    return fail(errc::shard_mismatch, "the store URI says shards=" + std::to_string(opts.shards) +
                                          ", the migration " + std::to_string(shards) +
                                          " shards: give the count once");
  opts.shards = shards;
  redis_options plain = opts;
  plain.shards = 0;
  const std::string name = plain.describe();

  // 1. The count first: from here on no server opens the store unsharded,
  // and a cluster refuses it until the unsharded layout is empty.
  redis_layout layout = redis_store::claim_shards(opts, false, ec, &why);
  if (ec) return fail(ec, name + ": " + why);
  if (layout.shards != shards)
    return fail(
        errc::shard_mismatch,
        name + " is sharded with " + std::to_string(layout.shards) + " shards already, not " +
            std::to_string(shards) +
            (layout.unsharded_empty()
                 ? ": there is nothing to move (changing the shard count of a sharded "
                   "store is not supported)"
                 : ": finish its migration with --shards " + std::to_string(layout.shards)));
  result.shards = shards;

  // 2. Both layouts as stores. The unsharded one ignores the count just
  // recorded, and only it.
  redis_options from_opts = plain;
  from_opts.ignore_shard_count = true;
  auto from = redis_store::open(from_opts, ec, &why);
  if (ec) return fail(ec, name + " (unsharded layout): " + why);
  auto to = redis_store::open(opts, ec, &why);
  if (ec) return fail(ec, opts.describe() + ": " + why);

  // 3. Copy, then remove what landed unchanged; again while some changed.
  for (int pass = 0; pass < 3 && !layout.unsharded_empty(); ++pass) {
    copy_tasks(*from, *to, ec);
    if (ec) return fail(ec, "copying the tasks to " + to->describe() + ": " + ec.message());
    copy_dead_letters(*from, *to, ec);
    if (ec) return fail(ec, "copying the dead letters to " + to->describe() + ": " + ec.message());
    result.tasks += remove_landed_tasks(*from, *to, ec);
    if (ec)
      return fail(ec, "removing the copied tasks from " + name + ": " + ec.message() +
                          " (run the migration again to finish it)");
    result.dead_letters += remove_landed_dead(*from, *to, ec);
    if (ec)
      return fail(ec, "removing the copied dead letters from " + name + ": " + ec.message() +
                          " (run the migration again to finish it)");
    layout = redis_store::inspect_layout(opts, ec, &why);
    if (ec) return fail(ec, name + ": " + why);
  }
  if (!layout.unsharded_empty())
    return fail(errc::busy,
                name + ": " + std::to_string(layout.unsharded_tasks) +
                    (layout.unsharded_tasks == 1 ? " task and " : " tasks and ") +
                    std::to_string(layout.unsharded_dead) +
                    (layout.unsharded_dead == 1 ? " dead letter" : " dead letters") +
                    " kept changing in the unsharded layout while they were moved: is a server "
                    "without --cluster still running on this store? Stop it and run the "
                    "migration again");
  return result;
}

shard_migration migrate_to_shards(std::string_view uri, std::uint32_t shards) {
  boost::system::error_code ec;
  std::string message;
  shard_migration result = migrate_to_shards(uri, shards, ec, &message);
  if (ec) throw boost::system::system_error(ec, "delayq: migrate_to_shards: " + message);
  return result;
}

}  // namespace delayq
