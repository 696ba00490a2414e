// persistence/redis/connection.hpp - one hiredis connection of redis_store:
// dialling with a backoff, the handshake, timeouts and the mapping of
// hiredis failures and error replies onto delayq::errc. Internal.
//
// A call on a connection throws redis_failure; cluster_router::run() turns
// that into an error_code at the store's boundary. What a failure means:
// - the server closed the connection (EOF, reset, broken pipe): `retryable`,
//   the call may be run once more on a fresh connection (every write of the
//   store is idempotent, see scripts.hpp);
// - no reply within command_timeout: for a read, errc::store_unavailable;
//   for a write, errc::outcome_unknown (the script may still run when the
//   server wakes up). The connection is dropped either way, and the next
//   dial asks the server to kill the old one (`CLIENT KILL ID`, when the
//   server is still the same run), so a write still queued there is dropped
//   if the kill comes first; a late reply can never be taken for the answer
//   to a new request, since it arrives on a closed socket.
#pragma once

#include <utility>

#include <hiredis/hiredis.h>
#include <signal.h>

#include <boost/system/error_code.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "delayq/error.hpp"
#include "delayq/redis_store.hpp"

namespace delayq::detail::redis {

struct context_deleter {
  void operator()(redisContext* c) const noexcept { redisFree(c); }
};
using context_ptr = std::unique_ptr<redisContext, context_deleter>;

struct reply_deleter {
  void operator()(redisReply* r) const noexcept { freeReplyObject(r); }
};
using reply_ptr = std::unique_ptr<redisReply, reply_deleter>;

/// What went wrong inside one call. `lost`: the connection is unusable;
/// `retryable`: it was found closed by the peer (not timed out), so one fresh
/// connection may be tried within the same call.
struct redis_failure {
  errc code;
  std::string message;
  bool lost = false;
  bool retryable = false;
};

/// hiredis could not buffer a command (out of memory).
struct append_failed {};

/// A Redis Cluster redirect or "not now" reply, thrown by a connection in
/// cluster mode once it read every reply it was asked for (see
/// cluster_router.hpp). `retry`: TRYAGAIN or CLUSTERDOWN.
struct cluster_redirect {
  enum kind_t { none, moved, ask, retry } kind = none;
  unsigned slot = 0;
  std::string host;
  unsigned port = 0;
  std::string text;  // the reply, for messages
};

/// The names of every key of one store (docs/persistence.md, key layout).
struct store_keys {
  explicit store_keys(const std::string& prefix);
  /// The keys of shard `shard` of a sharded store: the same names under the
  /// hash tag `{PREFIX:SHARD}` (the tag of the shard's lease key). Its meta
  /// and settings are never used: those stay under `{PREFIX}`.
  store_keys(const std::string& prefix, std::uint32_t shard);
  std::string tasks, due, quarantine, quarantine_reason, meta;
  std::string dead, dead_by_time, dead_quarantine, dead_quarantine_reason;
  std::string settings;
};

/// hiredis writes with write(2): on a socket the server has closed, that
/// raises SIGPIPE, whose default action kills the process. A library must
/// not install a process-wide handler, so each call blocks SIGPIPE in its own
/// thread and swallows any SIGPIPE it raised before unblocking (the
/// technique libpq uses).
class sigpipe_guard {
 public:
  sigpipe_guard();
  ~sigpipe_guard();
  sigpipe_guard(const sigpipe_guard&) = delete;
  sigpipe_guard& operator=(const sigpipe_guard&) = delete;

 private:
  sigset_t pipe_{};
  sigset_t old_{};
  bool was_pending_ = false;
};

/// One command as an argument vector of byte strings (binary-safe); the
/// bytes are referenced, not copied, until append_to().
class command {
 public:
  command& arg(std::string_view a) {
    args_.push_back(a.data());
    lens_.push_back(a.size());
    return *this;
  }
  /// Throws append_failed when out of memory; the connection must then be
  /// dropped, since part of a pipeline may already sit in its buffer.
  void append_to(redisContext* c) const;

 private:
  std::vector<const char*> args_;
  std::vector<std::size_t> lens_;
};

/// The text of a string, status or error reply.
std::string reply_text(const redisReply* r);

/// An error reply as a failure: errc::store_unavailable for the replies that
/// mean "not now" (LOADING, BUSY, MASTERDOWN, TRYAGAIN, CLUSTERDOWN),
/// errc::store_error for the rest.
redis_failure server_error(const std::string& what, const redisReply* r);
[[noreturn]] void throw_server_error(const std::string& what, const redisReply* r);

/// Whether `r` is the NOSCRIPT error (EVALSHA of a script the server lost).
bool is_noscript(const redisReply* r);

/// One connection of a store: dialled lazily, re-dialled after a loss with a
/// growing backoff (100 ms doubling to 5 s) during which calls fail fast.
/// Not thread-safe: its owner serializes the calls.
class connection {
 public:
  /// `role` is appended to the client name ("delayq:PREFIX" + role), so the
  /// store's connections can be told apart in `CLIENT LIST`.
  connection(const redis_options& opts, std::string store_name, std::string role,
             bool load_write_script);

  /// Dials when not connected (or throws within the backoff).
  void ensure_connected();
  bool connected() const noexcept { return ctx_ != nullptr; }
  redisContext* get() const noexcept { return ctx_.get(); }
  /// The SHA1 of the write script, as the server's SCRIPT LOAD answered.
  const std::string& write_sha() const noexcept { return write_sha_; }
  /// The SHA1 of the list_due() page script, loaded with the write script.
  const std::string& due_sha() const noexcept { return due_sha_; }

  /// Closes the connection. `timed_out`: the server may still run what was
  /// sent; the next dial kills the old connection first (CLIENT KILL ID).
  void drop(bool timed_out) noexcept;

  /// Describes a lost connection as a failure and drops it. `write`: a
  /// timeout leaves the outcome unknown (errc::outcome_unknown).
  redis_failure lost(int saved_errno, bool write);

  /// Sends everything appended and reads `n` replies; error replies are
  /// returned like any other, a lost connection throws.
  std::vector<reply_ptr> read_replies(std::size_t n, bool write = false);
  std::vector<reply_ptr> exchange(const std::vector<command>& cmds, bool write = false);

  /// Buffers a command (or one already in the wire format), behind an
  /// ASKING when asking mode is on. Throws append_failed.
  void append(const command& cmd);
  /// `starts_command`: false for the rest of a command whose start was
  /// appended already (no ASKING in between).
  void append_formatted(std::string_view bytes, bool starts_command = true);
  /// Asking mode (cluster_router, after an ASK redirect): every command is
  /// sent behind an ASKING, whose reply read_replies() skips.
  void set_asking(bool on) noexcept { asking_ = on; }

  /// Writes the key layout version (and, for a sharded store, the shard
  /// count) to `{PREFIX}:meta` unless there is one, and checks it is this
  /// build's (errc::store_error) and that the shard count is the options'
  /// (errc::shard_mismatch; checked by the store's own connections only,
  /// those that load the write script: a lease table or a list() connection
  /// neither creates the meta key nor minds the count, and neither does a
  /// store opened with redis_options::ignore_shard_count). Part of the handshake without cluster
  /// mode; a cluster store runs it through its router, since the meta key
  /// lives on one node only.
  void check_layout();

  const redis_options& options() const noexcept { return opts_; }

  void log_reconnecting(const std::string& why) const;
  void log_failed(const char* what, const std::string& why) const;

 private:
  void connect();
  /// The layout check's command, and the check of its reply (throws).
  command layout_command() const;
  void check_layout_reply(const redisReply* r);

  const redis_options& opts_;
  std::string name_;
  std::string client_name_;
  bool load_write_script_;
  bool asking_ = false;
  std::string key_meta_;
  std::string layout_;  // layout_version, as text
  std::string shards_;  // opts.shards, as text
  context_ptr ctx_;
  std::string write_sha_;
  std::string due_sha_;
  long long client_id_ = -1;
  std::string run_id_;      // the server's run (INFO server)
  long long kill_id_ = -1;  // a timed-out connection to kill at the next dial
  std::string kill_run_id_;
  bool connected_once_ = false;
  static constexpr std::chrono::milliseconds min_backoff{100};
  static constexpr std::chrono::milliseconds max_backoff{5000};
  std::chrono::milliseconds backoff_ = min_backoff;
  std::chrono::steady_clock::time_point next_attempt_{};
};

}  // namespace delayq::detail::redis
