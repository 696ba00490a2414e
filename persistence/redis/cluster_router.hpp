// persistence/redis/cluster_router.hpp - routes redis_store's commands by
// hash slot over a Redis Cluster (Debian's hiredis has no cluster support).
// Internal.
//
// How it works:
// - key_slot() is the Cluster spec's: CRC16 (XMODEM) of the key's hash tag
//   (the bytes between the first '{' and the first '}' after it, when not
//   empty; else the whole key), modulo 16384.
// - The slot map comes from `CLUSTER SLOTS`, asked of a known node or a seed
//   on a short-lived connection of its own; each master gets one
//   `connection` (connection.hpp: its own reconnect backoff and handshake,
//   with the extension the router was given: the store's scripts).
// - run(slot, ...) runs a body on the owner of `slot`. A connection in
//   cluster mode turns the redirect replies into a cluster_redirect
//   exception (after reading every reply it was asked for), and run():
//   MOVED: refreshes the map and runs the body again on the new owner;
//   ASK: runs it once on the named node, each command behind an ASKING, and
//   leaves the map alone; TRYAGAIN / CLUSTERDOWN: runs it again after a short
//   growing pause, as long as the call's command_timeout allows, then fails
//   with errc::store_unavailable. After max_redirects MOVED/ASK in one call,
//   errc::store_error. A body may therefore run several times: every body of
//   the store is idempotent (scripts.hpp) or a read.
// - Without cluster mode the router holds the one connection of the store
//   and run() is connection::run().
#pragma once

#include <utility>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "connection.hpp"

namespace delayq::detail::redis {

/// CRC16-CCITT (XMODEM): polynomial 0x1021, initial value 0, no reflection.
std::uint16_t crc16(std::string_view bytes) noexcept;

/// The hash slot of `key`, with the hash-tag rule above.
unsigned key_slot(std::string_view key) noexcept;

/// One range of a CLUSTER SLOTS reply: its master's address.
struct slot_range {
  unsigned first = 0;
  unsigned last = 0;
  std::string host;
  unsigned port = 0;
};

/// Parses a CLUSTER SLOTS reply; an empty host (the node asked) becomes
/// `asked_host`. Throws redis_failure (errc::store_error) on a malformed one.
std::vector<slot_range> parse_cluster_slots(const redisReply* r, const std::string& asked_host);

/// The connections of one user of a store (its calls, the writer, one
/// list()) and, in a cluster, the slot map they route by.
/// Thread safety: none; its owner serializes the calls (the store's mutex,
/// the writer's thread, the list() call).
class cluster_router {
 public:
  /// At most this many MOVED / ASK in one call.
  static constexpr int max_redirects = 5;

  /// `opts` must outlive the router. `client_name` (client_name_for()) and
  /// `handshake` (may be null) are passed to each node's connection.
  cluster_router(const redis_connection_options& opts, std::string store_name,
                 std::string client_name, std::shared_ptr<const handshake_extension> handshake);
  ~cluster_router();
  cluster_router(const cluster_router&) = delete;
  cluster_router& operator=(const cluster_router&) = delete;

  bool cluster() const noexcept { return opts_.cluster; }

  /// The connection of the master of `slot` (the only connection without
  /// cluster mode). Fetches the slot map when it has none for the slot;
  /// throws redis_failure when no node can tell.
  connection& owner(unsigned slot);
  /// The connection of the node at host:port (made on first use).
  connection& node(const std::string& host, unsigned port);
  /// Asks CLUSTER SLOTS of the known nodes, then of the seeds, until one
  /// answers, and replaces the map. Throws redis_failure.
  void refresh();
  /// Notes a MOVED: the slot is at host:port from now on, and the whole
  /// map is refreshed (failures to refresh are ignored: the noted owner
  /// stays).
  void moved(unsigned slot, const std::string& host, unsigned port) noexcept;
  /// The address of the node serving `slot` now, "HOST:PORT" (refreshes).
  std::string owner_address(unsigned slot);

  /// Runs `body(connection&)` on the owner of `slot` (above). On failure
  /// returns it; the caller decides whether to log. Dials under a
  /// sigpipe_guard; the body's own I/O needs one of its caller.
  template <class Body>
  std::optional<redis_failure> try_run(unsigned slot, Body&& body) {
    const auto deadline = std::chrono::steady_clock::now() + opts_.command_timeout;
    int redirects = 0;
    bool reconnected = false;
    bool remapped = false;
    std::chrono::milliseconds pause{10};
    connection* ask = nullptr;
    for (;;) {
      connection* c = nullptr;
      try {
        try {
          {
            sigpipe_guard guard;  // dialling writes; a body guards its own I/O
            c = ask ? ask : &owner(slot);
            c->ensure_connected();
          }
          c->set_asking(ask != nullptr);
          ask = nullptr;
          body(*c);
          c->set_asking(false);
          return std::nullopt;
        } catch (const append_failed&) {
          if (c) c->drop(false);
          throw redis_failure{errc::store_error, "out of memory while buffering commands", true};
        }
      } catch (const cluster_redirect& r) {
        if (c) c->set_asking(false);
        if (r.kind == cluster_redirect::retry) {
          if (std::chrono::steady_clock::now() + pause >= deadline)
            return redis_failure{errc::store_unavailable,
                                 "the cluster kept answering '" + r.text + "' for " +
                                     std::to_string(opts_.command_timeout.count()) + " ms"};
          pause_for(pause);
          pause = std::min(pause * 2, std::chrono::milliseconds{200});
          continue;
        }
        if (++redirects > max_redirects)
          return redis_failure{errc::store_error, "more than " + std::to_string(max_redirects) +
                                                      " cluster redirects for slot " +
                                                      std::to_string(slot) +
                                                      " in one call (last: '" + r.text + "')"};
        log_redirect(r.text);
        if (r.kind == cluster_redirect::moved) {
          moved(r.slot, r.host, r.port);
        } else {
          try {
            ask = &node(r.host, r.port);
          } catch (const redis_failure& f) {
            return f;
          }
        }
      } catch (const redis_failure& f) {
        if (c) c->set_asking(false);
        if (f.retryable && !reconnected) {
          reconnected = true;
          if (c) c->log_reconnecting(f.message);
          continue;
        }
        // A node that cannot be reached may have failed over: read the map
        // again (once a call) and go on if the slot has a new owner.
        if (opts_.cluster && f.code == errc::store_unavailable && !remapped) {
          remapped = true;
          try {
            refresh();
            if (&owner(slot) != c) continue;
          } catch (const redis_failure&) {
          }
        }
        return f;
      }
    }
  }

  /// try_run() under a sigpipe_guard, with the failure logged and turned
  /// into `ec` (connection::run() for a routed call).
  template <class Body>
  void run(unsigned slot, const char* what, boost::system::error_code& ec, Body&& body) {
    ec = {};
    sigpipe_guard guard;
    if (auto f = try_run(slot, std::forward<Body>(body))) {
      ec = make_error_code(f->code);
      log_failed(what, f->message);
    }
  }

 private:
  struct node_entry {
    redis_connection_options opts;  // the store's, with this node's host and port
    std::unique_ptr<connection> conn;
  };

  static void pause_for(std::chrono::milliseconds ms);
  void log_redirect(const std::string& text) const;
  void log_failed(const char* what, const std::string& why) const;
  node_entry& entry(const std::string& host, unsigned port);
  std::optional<std::vector<slot_range>> ask_slots(const redis_connection_options& where,
                                                   std::string& why) const;

  const redis_connection_options& opts_;
  std::string name_;
  std::string client_name_;
  std::shared_ptr<const handshake_extension> handshake_;
  std::map<std::string, std::unique_ptr<node_entry>> nodes_;  // by "host:port"
  std::vector<node_entry*> slots_;      // by slot, null: unknown (cluster mode only)
  std::unique_ptr<connection> single_;  // without cluster mode
};

}  // namespace delayq::detail::redis
