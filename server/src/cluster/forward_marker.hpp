// cluster/forward_marker.hpp - the header that marks a call one instance of
// a cluster forwarded to another, authenticated so that only a member can
// set it (docs/scale-out.md, "Calls on any instance"; docs/server.md,
// "Security").
#pragma once

#include <atomic>
#include <boost/system/error_code.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "delayq/task_store.hpp"
#include "http/http_server.hpp"

namespace delayq::server {

/// Makes and checks the marker of a forwarded call:
///
///     X-Delayq-Forwarded-By: INSTANCE UNIX_MS MAC
///
/// INSTANCE is the forwarding instance's name, UNIX_MS the time it was made
/// (milliseconds since the Unix epoch), and MAC 64 lowercase hex digits: the
/// HMAC-SHA-256, under the cluster's key, of the lines
///
///     delayq-forward-v1 \n INSTANCE \n UNIX_MS \n METHOD \n TARGET \n hex(SHA-256(BODY))
///
/// (joined by "\n", no spaces; none of the fields can hold a newline).
///
/// An instance answers a forwarded call itself, never forwarding it again,
/// so that two instances that disagree on an owner do not pass a call back
/// and forth. Were the bare header enough, any client could set it and turn
/// forwarding off for its call (a finish on a lease another instance handed
/// out would then answer 409 stale_lease). So a call counts as forwarded
/// only when its marker's MAC verifies and UNIX_MS is within `window` of
/// this instance's clock, either way. Any other marker is ignored: the call
/// is handled as a client's (and forwarded, if another instance owns it,
/// with this instance's own marker), counted (rejected()) and logged at most
/// once a minute.
///
/// Why each field: the method, the target and the body's hash bind the
/// marker to one call, so a marker seen on one request (in a log, through a
/// proxy) turns off forwarding for no other; the time bounds a replay of the
/// same call to the window. The Authorization header is not covered: the
/// receiver checks the token by itself.
///
/// The key (server_app): --cluster-secret, else --token, else a random key
/// kept in the store's settings (load_or_create_key()).
///
/// Example:
/// \code
///   delayq::server::forward_marker marker{key};
///   out.set(forward_marker::header, marker.make("a", "POST", target, body, system_clock::now()));
///   // on the receiving instance:
///   if (marker.is_forwarded(req)) answer_here(req);
/// \endcode
///
/// Thread safety: every member may be called concurrently; set_key() takes
/// effect for the calls that begin after it.
class forward_marker {
 public:
  using clock = std::chrono::system_clock;

  /// The header a forwarded call carries.
  static constexpr std::string_view header = "X-Delayq-Forwarded-By";
  /// How far a marker's time may be from the receiver's clock, either way:
  /// the instances' clocks must agree within it.
  static constexpr std::chrono::seconds window{60};
  /// The store setting that holds the key when neither --cluster-secret nor
  /// --token is given. No API shows it: GET /v1/types lists the `push:`
  /// settings only.
  static constexpr std::string_view setting_key = "cluster:forward-key";

  /// What check() found.
  enum class verdict {
    absent,         ///< no marker
    valid,          ///< a member made it, for this call, within the window
    malformed,      ///< not INSTANCE UNIX_MS MAC, or the header twice
    bad_mac,        ///< made with another key, or for another call
    out_of_window,  ///< the MAC verifies, the time is more than `window` away
  };

  /// Throws std::invalid_argument for an empty `key`.
  explicit forward_marker(std::string key);
  forward_marker(const forward_marker&) = delete;
  forward_marker& operator=(const forward_marker&) = delete;

  /// Replaces the key (the one kept in the store changed). Throws
  /// std::invalid_argument for an empty `key`.
  void set_key(std::string key);

  /// The header's value for a call of `instance`: `method` `target` with
  /// `body`, made at `now`.
  std::string make(std::string_view instance, std::string_view method, std::string_view target,
                   std::string_view body, clock::time_point now) const;

  /// What `req`'s marker is, at `now`.
  verdict check(const http_request& req, clock::time_point now) const;

  /// Whether `req` was forwarded by a member (check() is valid now). A
  /// marker that is not valid is removed from `req`, so that it is counted
  /// once however often the request is asked about, counted in rejected()
  /// and logged (at most once a minute).
  bool is_forwarded(http_request& req) const;

  /// Markers is_forwarded() ignored since the start.
  std::uint64_t rejected() const noexcept { return rejected_.load(std::memory_order_relaxed); }

  /// The key kept in `store`'s settings (setting_key). When the store holds
  /// none it saves `ours` (when empty, 32 random bytes from the kernel, as
  /// hex) first, then reads again: instances that started at once each
  /// wrote theirs, and every one returns the last written. An instance that
  /// reads again on every setting notice (engine_options::
  /// on_settings_changed) thus converges on the stored one, and one that
  /// finds it gone (a store that lost its settings) puts its own back.
  /// Errors: the store's (nothing returned). Throws std::system_error when
  /// the kernel gives no random bytes. Blocks on the store: call it off the
  /// I/O threads.
  static std::string load_or_create_key(delayq::task_store& store, std::string_view ours,
                                        boost::system::error_code& ec);
  /// The same; throws boost::system::system_error for the store's errors.
  static std::string load_or_create_key(delayq::task_store& store, std::string_view ours);

 private:
  std::shared_ptr<const std::string> key() const;
  void warn(verdict v, std::string_view value) const;

  mutable std::mutex mutex_;  // guards key_
  std::shared_ptr<const std::string> key_;
  mutable std::atomic<std::uint64_t> rejected_{0};
  mutable std::atomic<std::int64_t> last_warning_ms_{0};  // steady clock
};

}  // namespace delayq::server
