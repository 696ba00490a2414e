// delayq/postgres_store.hpp - a task_store in a PostgreSQL database, put
// together from role objects (delayq/role_store.hpp).
#pragma once

#include <utility>

#include <boost/system/error_code.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "delayq/task_store.hpp"

namespace delayq {

/// Where and how the PostgreSQL store connects: what a URI says about the
/// server, apart from what the store keeps there (postgres_layout).
///
/// Thread safety: a plain value.
struct postgres_connection_options {
  /// A host name or an IP address (IPv6 without brackets here; bracketed in
  /// a URI).
  std::string host = "127.0.0.1";
  unsigned port = 5432;
  /// Empty: libpq's default (the operating system user).
  std::string user;
  std::string password;
  /// Empty: libpq's default (a database named like the user).
  std::string database;
  /// libpq's `sslmode` (disable, allow, prefer, require, verify-ca,
  /// verify-full); empty: libpq's default, `prefer`.
  std::string sslmode;
  /// Bounds one connection attempt (the dial, TLS, authentication).
  std::chrono::milliseconds connect_timeout{2000};
  /// Bounds each call on a connection: no reply within it is a timeout.
  std::chrono::milliseconds command_timeout{5000};
  /// Connections the store's calls share (besides the write pipeline, a
  /// list() in progress, the listener and each lease table, which have one
  /// each): 1 to 64.
  std::size_t pool = 4;

  /// "HOST:PORT".
  std::string address() const;
};

/// What the store keeps in the database: the schema its tables live in, and
/// the shard count of a cluster's layout. Recorded in the schema's `meta`
/// table when the store is created; opening it with another shard count is
/// errc::shard_mismatch.
///
/// Thread safety: a plain value.
struct postgres_layout {
  /// 1-48 characters from [A-Za-z0-9_], not starting with `pg_` or a digit.
  /// Two schemas in one database never see each other's tasks.
  std::string schema = "delayq";
  /// 0: a store for one engine. N (1-16384): the layout of a cluster of
  /// engines, tasks split by shard_of(id, N) (docs/scale-out.md).
  std::uint32_t shards = 0;
};

/// Everything a `postgres://` URI says:
///
///   postgres://[USER[:PASSWORD]@]HOST[:PORT][/DATABASE][?OPTIONS]
///   postgresql://...  (the same)
///
/// HOST is a name, an IPv4 address or a bracketed IPv6 address; PORT
/// defaults to 5432. USER, PASSWORD and DATABASE may be percent-encoded.
/// OPTIONS, joined with '&': `schema=NAME` (default "delayq"), `shards=N`
/// (1-16384), `connect_timeout_ms=N`, `command_timeout_ms=N`, `pool=N`
/// (1-64), `sslmode=MODE`, `rotate=on|off` and `rotate_at=PERCENT`. Anything else is errc::invalid_store_uri, so a
/// typo does not silently fall back to a default.
///
/// Thread safety: a plain value; parse() may be called from any thread.
struct postgres_options {
  postgres_connection_options connection;
  postgres_layout layout;
  /// Whether the store keeps the live tasks' table from growing while a
  /// long transaction elsewhere holds VACUUM back: a full generation of the
  /// table is drained and truncated (docs/persistence.md, "PostgreSQL").
  /// URI: `rotate=off` turns it off (for measuring without it).
  bool rotate = true;
  /// When a generation flips: once its dead rows reach this percentage of
  /// its live ones (and 2,000). Lower keeps the table smaller and moves
  /// more rows (docs/persistence.md has both measured). URI:
  /// `rotate_at=PERCENT`, 10-1000.
  unsigned rotate_at = 50;

  /// Parses a postgres:// or postgresql:// URI; on failure sets `ec` to
  /// errc::invalid_store_uri and, when `message` is not null, says why
  /// (never echoing a password).
  static postgres_options parse(std::string_view uri, boost::system::error_code& ec,
                                std::string* message = nullptr);
  /// Throwing form: boost::system::system_error with the reason.
  static postgres_options parse(std::string_view uri);

  /// The URI without the password, e.g.
  /// "postgres://delayq@127.0.0.1:5432/app?schema=billing&shards=64".
  std::string describe() const;
};

/// What a schema holds, as inspect_postgres_layout() and
/// claim_postgres_shards() read it.
///
/// Thread safety: a plain value.
struct postgres_layout_state {
  /// The schema's tables exist: a store was opened there.
  bool created = false;
  /// The shard count the schema records (0: a store for one engine).
  std::uint32_t shards = 0;
  /// Live tasks and dead letters stored.
  std::size_t tasks = 0;
  std::size_t dead_letters = 0;
};

/// Opens the store (creating the schema and its tables when they do not
/// exist) and checks its layout: a schema whose version is newer than this
/// build is errc::store_error, one created with another shard count
/// errc::shard_mismatch. The store it returns offers every role: dead
/// letters, settings, sequences, and with `layout.shards` > 0 the cluster's
/// (shard_store: leases fenced by the database, notices by LISTEN/NOTIFY).
/// Layout and guarantees: docs/persistence.md, "PostgreSQL".
///
/// Writes. Every batch of write() and async_write() (and every save(),
/// remove(), bury(), revive() and purge()) is one transaction, sent in
/// libpq's pipeline mode (one round trip), and answered once COMMIT has
/// returned: durable as the server's `synchronous_commit` defines.
/// async_write() keeps up to max_writes_in_flight() batches in one pipeline
/// on a connection of its own, driven by a private thread, and calls `done`
/// there, in order.
///
/// Connections. A broken connection is replaced at the next call; a read
/// that found its connection broken runs once more on a fresh one; when the
/// server cannot be reached, calls fail fast with errc::store_unavailable
/// for a growing backoff (100 ms doubling up to 5 s). Logged at warning
/// level, never with the password.
///
/// Errors: errc::store_unavailable (cannot connect, connection lost before a
/// write was sent, a read timed out, the server shutting down or out of
/// connections, a lock or serialization conflict that outlasted the
/// retries); errc::outcome_unknown (a write sent whole whose answer never
/// came: it may have committed); errc::store_error (every other SQL error:
/// authentication, permissions, a full disk, a read-only server, a schema
/// newer than the build); errc::shard_mismatch; errc::lease_lost (a fenced
/// write refused: shard_store). The server's message is logged.
///
/// Example:
/// \code
///   auto store = delayq::open_postgres_store(
///       delayq::postgres_options::parse("postgres://app:secret@db:5432/app?schema=billing"));
///   store->save(std::span{&t, 1});
/// \endcode
///
/// Thread safety: the store and its roles are safe to call from any thread.
std::unique_ptr<task_store> open_postgres_store(const postgres_options& options,
                                                boost::system::error_code& ec,
                                                std::string* message = nullptr);
/// Throwing form: boost::system::system_error with the reason.
std::unique_ptr<task_store> open_postgres_store(const postgres_options& options);

/// Reads what the schema holds without creating anything (`options.layout`
/// names the schema; its `shards` is not used). Errors as
/// open_postgres_store().
postgres_layout_state inspect_postgres_layout(const postgres_options& options,
                                              boost::system::error_code& ec,
                                              std::string* message = nullptr);

/// Creates the schema if needed and records `options.layout.shards`
/// (1-16384) as its shard count, in one transaction, when it records none
/// and (with `only_if_empty`) holds no task and no dead letter. Returns the
/// state as the transaction left it: `shards` is options.layout.shards when
/// it was recorded now or before, else what stopped it. Errors as
/// open_postgres_store(); errc::invalid_cluster_options for a count of 0.
postgres_layout_state claim_postgres_shards(const postgres_options& options, bool only_if_empty,
                                            boost::system::error_code& ec,
                                            std::string* message = nullptr);

/// Moves the schema from the layout of one engine to the sharded layout of
/// `options.layout.shards` (1-16384) shards, in one transaction that locks
/// the live tasks against writes, gives every task its shard and records
/// the count: it lands whole or not at all. Returns how many tasks it moved
/// (0 when the schema records that count already). Dead letters, settings
/// and sequences need no move. Errors as open_postgres_store();
/// errc::shard_mismatch when the schema records another count;
/// errc::invalid_cluster_options for a count out of range. Used by
/// migrate_to_shards() (delayq/open_store.hpp, `delayqctl migrate-shards`).
std::size_t migrate_postgres_shards(const postgres_options& options, boost::system::error_code& ec,
                                    std::string* message = nullptr);

/// The version of the schema this build creates and reads (the schema's
/// `meta` table, key `layout`).
inline constexpr int postgres_schema_version = 1;

}  // namespace delayq
