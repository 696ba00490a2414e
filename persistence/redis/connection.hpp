// persistence/redis/connection.hpp - one hiredis connection: dialling with
// a backoff, the handshake (AUTH, SELECT, CLIENT SETNAME), timeouts,
// pipelining, and the mapping of hiredis failures and error replies onto
// delayq::errc. Internal.
//
// A plain RESP connection: it knows no key and no script of the store. What
// the store adds to each handshake (its scripts, the check of its key
// layout) comes in through a handshake_extension (store_handshake.hpp); the
// key names are in key_schema.hpp.
//
// A call on a connection throws redis_failure; cluster_router::run() turns
// that into an error_code at the store's boundary. What a failure means:
// - the server closed the connection (EOF, reset, broken pipe): `retryable`,
//   the call may be run once more on a fresh connection (every write of the
//   store is idempotent, see scripts.hpp);
// - no reply within command_timeout, or a reply late by link_check and a
//   side dial of the server that fails (link_probe.hpp): for a read,
//   errc::store_unavailable; for a write, errc::outcome_unknown (the script
//   may still run when the server wakes up). The connection is dropped either way, with a
//   reset, so that what the server has not received yet is thrown away by
//   the kernel rather than sent on when the link heals; the next dial asks
//   the server to kill the old one (`CLIENT KILL ID`, when the server is
//   still the same run), so a write still queued there is dropped if the
//   kill comes first; a late reply can never be taken for the answer to a
//   new request, since it arrives on a closed socket.
#pragma once

#include <utility>

#include <hiredis/hiredis.h>
#include <signal.h>

#include <boost/system/error_code.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
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

/// The hash slots of a Redis Cluster.
constexpr unsigned cluster_slots = 16384;

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

/// Parses a MOVED / ASK error reply ("MOVED 3999 127.0.0.1:6381"); kind
/// `retry` for TRYAGAIN and CLUSTERDOWN, `none` for anything else.
cluster_redirect parse_redirect(const redisReply* r);

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
  command& arg(const char* a) { return arg(std::string_view(a)); }  // literals
  /// A temporary string would be gone before append_to() reads it: keep
  /// it in a variable that outlives the command.
  command& arg(std::string&&) = delete;
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

/// What the owner of a connection adds to each of its handshakes, sent in
/// the same round trip as AUTH, SELECT and CLIENT SETNAME: the store loads
/// its scripts and checks its key layout there (store_handshake.hpp).
/// One object may serve several connections (one per cluster node); the
/// connections call it from the thread that uses them, and it must not
/// change once one of them has dialled.
class handshake_extension {
 public:
  virtual ~handshake_extension() = default;
  /// Scripts to load (SCRIPT LOAD) at every dial, so that EVALSHA finds them
  /// again after a server restart: connection::script_sha(i) is the SHA1 the
  /// server answered for the i-th.
  virtual std::span<const char* const> scripts() const noexcept = 0;
  /// Sets `out` to a command sent last in the handshake, whose reply
  /// check_reply() judges; false for none. `out` may point into the
  /// extension's own strings.
  virtual bool check_command(command& out) const = 0;
  /// Judges the reply to check_command()'s command (never an error reply:
  /// the handshake refuses those first). Throws redis_failure to refuse the
  /// connection.
  virtual void check_reply(const redisReply* r) const = 0;
};

/// The client name of a store's connection: "delayq:PREFIX" + `role`
/// (empty for the store's calls, ":writer", ":list", ...).
std::string client_name_for(const redis_key_layout& layout, std::string_view role);

/// One connection to one server: dialled lazily, re-dialled after a loss
/// with a growing backoff (100 ms doubling to 5 s) during which calls fail
/// fast. Not thread-safe: its owner serializes the calls.
class connection {
 public:
  /// `opts` must outlive the connection. `client_name` (client_name_for())
  /// is set with CLIENT SETNAME, so the store's connections can be told
  /// apart in `CLIENT LIST`. `extension` (may be null) adds to every
  /// handshake: the layout checks (store_handshake.hpp), which a connection
  /// knows nothing of.
  connection(const redis_connection_options& opts, std::string store_name, std::string client_name,
             std::shared_ptr<const handshake_extension> extension = nullptr);

  /// Dials when not connected (or throws within the backoff).
  void ensure_connected();
  bool connected() const noexcept { return ctx_ != nullptr; }
  redisContext* get() const noexcept { return ctx_.get(); }
  /// The SHA1 of the extension's i-th script, as the server's SCRIPT LOAD
  /// answered at the last dial (empty before the first).
  const std::string& script_sha(std::size_t i) const noexcept;

  /// Closes the connection. `timed_out`: the server may still run what was
  /// sent; the next dial kills the old connection first (CLIENT KILL ID).
  /// `withdraw` (implied by `timed_out`): closes with a reset, so what the
  /// server has not received is dropped, for a connection whose batches go
  /// again elsewhere (a cluster redirect).
  void drop(bool timed_out, bool withdraw = false) noexcept;

  /// Describes a lost connection as a failure and drops it. `write`: a
  /// timeout leaves the outcome unknown (errc::outcome_unknown).
  redis_failure lost(int saved_errno, bool write);
  /// A call given up while the server may still run it (no answer within
  /// command_timeout, or the link found cut): drops the connection, to be
  /// killed on the server at the next dial; a write's outcome is unknown.
  redis_failure gave_up(const std::string& why, bool write);

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

  const redis_connection_options& options() const noexcept { return opts_; }

  void log_reconnecting(const std::string& why) const;
  void log_failed(const char* what, const std::string& why) const;

 private:
  void connect();
  void await_readable(bool write);

  const redis_connection_options& opts_;
  std::string name_;
  std::string client_name_;
  std::shared_ptr<const handshake_extension> extension_;
  bool asking_ = false;
  context_ptr ctx_;
  std::vector<std::string> script_shas_;  // by the extension's scripts()
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
