// delayq/open_store.hpp - pick and open a task_store from a URI.
#pragma once

#include <utility>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "delayq/task_store.hpp"

namespace delayq {

/// Opens the store a URI names:
///
///   redis://[[USER]:PASSWORD@]HOST[:PORT][/DB][?prefix=NAME]   Redis over TCP
///   unix:///PATH/TO/SOCKET[?db=N&prefix=NAME]                  Redis over a Unix socket
///   redis-cluster://[[USER]:PASSWORD@]HOST:PORT[,...]          a Redis Cluster
///   postgres://[USER[:PASSWORD]@]HOST[:PORT][/DB][?schema=NAME] PostgreSQL (also postgresql://)
///   sqlite:PATH/TO/FILE.db  or  sqlite:///ABS/PATH/FILE.db     an SQLite file
///       [?synchronous=off|normal|full|extra&busy_timeout_ms=N]
///   memory:                                                    process memory
///
/// The Redis options are those of redis_options::parse(), the PostgreSQL ones
/// those of postgres_options::parse(); a relative SQLite path is relative to
/// the working directory and may not contain '?'.
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

/// The shard count a cluster uses when nothing names one.
inline constexpr std::uint32_t default_cluster_shards = 64;

/// What the caller needs of a store, which open_store(uri, requirements)
/// checks against what the store holds before it hands the store out
/// (docs/persistence.md, "Opening a store"): every backend's layout checks
/// live there, so no caller carries any.
///
/// Thread safety: a plain value.
struct store_requirements {
  /// For a cluster of engines (engine_options::cluster): the store must be
  /// one several processes share (Redis, a Redis Cluster, PostgreSQL) and is
  /// opened in its sharded layout. An empty store (or one a server without
  /// --cluster left empty) is given that layout; one holding an unsharded
  /// task set, one sharded with another count, or a move that did not
  /// finish is refused with errc::shard_mismatch and a sentence naming the
  /// command that fixes it (delayqctl migrate-shards).
  ///
  /// Without it (false), a store recording a shard count is refused with
  /// errc::shard_mismatch and a sentence saying so (its tasks live in the
  /// sharded layout, which one engine alone would not see).
  bool cluster = false;
  /// With `cluster`: the shard count the caller was given, or 0 for none:
  /// then the URI's `shards=N`, else default_cluster_shards. Both given and
  /// different is errc::invalid_cluster_options.
  std::uint32_t shards = 0;
};

/// open_store() of `uri`, checked against `requirements` (above). Errors:
/// those of open_store(); errc::invalid_cluster_options (with `cluster`: a
/// store the instances cannot share, two shard counts that differ, a count
/// out of range); errc::shard_mismatch (above).
std::unique_ptr<task_store> open_store(std::string_view uri, const store_requirements& requirements,
                                       boost::system::error_code& ec,
                                       std::string* message = nullptr);
/// Throwing form: boost::system::system_error whose what() holds the sentence.
std::unique_ptr<task_store> open_store(std::string_view uri,
                                       const store_requirements& requirements);

/// The shard count open_store(uri, requirements) opens the store with (0
/// without `cluster`), worked out from the URI alone: no store is contacted.
/// Errors: errc::invalid_cluster_options, errc::invalid_store_uri, as
/// open_store(); `message` says why.
std::uint32_t required_shards(std::string_view uri, const store_requirements& requirements,
                              boost::system::error_code& ec, std::string* message = nullptr);

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

/// What migrate_to_shards() did.
///
/// Thread safety: a plain value.
struct shard_migration {
  /// The shard count the store records now.
  std::uint32_t shards = 0;
  /// Live tasks and dead letters this call moved out of the unsharded
  /// layout (0 and 0 when a run before it had moved everything).
  std::size_t tasks = 0;
  std::size_t dead_letters = 0;
};

/// Moves a Redis or PostgreSQL store from the unsharded layout (written by engines without
/// engine_options::cluster, `delayq-server` without --cluster) to the
/// sharded layout of `shards` shards that a cluster uses
/// (docs/scale-out.md, "Moving a store to the sharded layout"):
///
/// 1. records `shards` as the store's shard count in `{PREFIX}:meta`
///    (redis_store::claim_shards()). From then on the store opens with that
///    count only, and `delayq-server --cluster` refuses it while the
///    unsharded layout still holds records;
/// 2. copies every task (copy_tasks()) and every dead letter of the
///    unsharded layout into the sharded one; saves and burials are upserts;
/// 3. removes from the unsharded layout each task and dead letter that the
///    sharded layout now holds as it is (read back and compared), and
///    goes round again, at most three times in all, while some changed
///    meanwhile.
///
/// Interrupted anywhere, running it again finishes the move: nothing is
/// removed before its copy landed. The settings (`{PREFIX}:settings`, where
/// delayq-server keeps push targets) are shared by both layouts and stay
/// where they are; so do quarantined records, which are not moved. Stop
/// every server on the store first: one without --cluster that still runs
/// keeps writing to the unsharded layout.
///
/// PostgreSQL keeps both layouts in one table: its move is one transaction
/// that records the count and gives every task its shard, so it never
/// stops half done.
///
/// `uri` is a redis://, unix://, redis-cluster:// or postgres:// URI; a
/// `shards=` option in it must be absent or equal to `shards`.
///
/// Errors: errc::invalid_store_uri (neither Redis nor PostgreSQL, or a bad URI),
/// errc::invalid_cluster_options (`shards` not 1-16384),
/// errc::shard_mismatch (the URI's `shards=` differs, or the store records
/// another shard count already), errc::busy (records kept changing: a
/// server still writes to the unsharded layout), and the store's errors
/// (errc::store_unavailable, errc::store_error, errc::outcome_unknown). On
/// error, what was moved stays moved and `message` (when not null) gets a
/// sentence for the operator; when it is null the sentence is logged.
///
/// Thread safety: may be called from any thread; one call at a time per
/// store.
shard_migration migrate_to_shards(std::string_view uri, std::uint32_t shards,
                                  boost::system::error_code& ec, std::string* message = nullptr);

/// Throwing form of migrate_to_shards(): boost::system::system_error whose
/// what() holds the sentence.
shard_migration migrate_to_shards(std::string_view uri, std::uint32_t shards);

}  // namespace delayq
