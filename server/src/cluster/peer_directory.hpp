// cluster/peer_directory.hpp - where each instance of a cluster takes API
// calls, kept in the store's settings so every instance can find the others.
#pragma once

#include <boost/system/error_code.hpp>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "delayq/task_store.hpp"

namespace delayq::server {

/// The API address (an http:// URL) of each instance under --cluster, by
/// instance name: the setting `"instance:" + name` whose value is
/// {"url": "...", "incarnation": "..."}. An instance announces itself at
/// start, announces itself again when its entry is found missing (a store
/// that lost its settings), and withdraws at a clean stop, only the entry it
/// wrote (the incarnation says so: a successor under the same name keeps
/// its own). One that died leaves its entry behind; it is read only for a
/// live member of that name, which overwrote it when it started. A call on
/// an id whose shard another instance owns is forwarded to the address
/// found here (docs/scale-out.md, "Calls on any instance").
///
/// Example:
/// \code
///   delayq::server::peer_directory peers{store};
///   peers.announce("a", "http://10.0.0.5:7700", ec);
///   if (auto url = peers.url_of("b", ec)) forward_to(*url);
/// \endcode
///
/// Thread safety: every member may be called concurrently. announce(),
/// keep_announced(), withdraw(), load() and a url_of() that misses call the
/// store and may block: call them off the I/O threads (cached_url_of()
/// never blocks).
class peer_directory {
 public:
  /// The settings key prefix.
  static constexpr std::string_view key_prefix = "instance:";

  /// Borrows `store`, which must outlive the directory. Starts empty.
  explicit peer_directory(delayq::task_store& store);
  peer_directory(const peer_directory&) = delete;
  peer_directory& operator=(const peer_directory&) = delete;

  /// Stores `url` as the address of `instance`, this process's (durably,
  /// then in the map). Errors: boost::system::errc::invalid_argument for a
  /// URL parse_http_url refuses or one with a path (calls go to the root);
  /// the store's.
  void announce(const std::string& instance, const std::string& url, boost::system::error_code& ec);
  /// After load(): announces again when the map has no entry for the
  /// instance announce() named (a store that lost its settings); an entry
  /// of another process under the name is left alone. Errors: the store's.
  void keep_announced(boost::system::error_code& ec);
  /// Erases this process's entry, if the store still holds the one it
  /// wrote. Errors: the store's.
  void withdraw(boost::system::error_code& ec);
  /// Replaces the map with every `instance:` setting of the store. A value
  /// that is not {"url": an http:// URL, ...} is skipped, and logged once.
  /// Errors: the store's (the map is then unchanged).
  void load(boost::system::error_code& ec);
  /// load(), unless a load finished after `since` (or is under way and
  /// finishes): many callers that each saw the map fail read the store once.
  void load_since(std::chrono::steady_clock::time_point since, boost::system::error_code& ec);
  /// The address of `instance`: from the map, and on a miss from the store
  /// (a load, at most once a second per name); nothing when neither knows it.
  /// Errors: the store's.
  std::optional<std::string> url_of(std::string_view instance, boost::system::error_code& ec);
  /// The address of `instance` if the map holds it; never reads the store.
  std::optional<std::string> cached_url_of(std::string_view instance) const;

 private:
  struct entry {
    std::string url;
    std::string incarnation;
  };
  // Under load_mutex_: reads the store, and on success replaces the map.
  void load_locked(boost::system::error_code& ec);
  std::map<std::string, entry, std::less<>> read_locked(boost::system::error_code& ec);

  delayq::task_store& store_;
  std::mutex load_mutex_;     // one load at a time, so an older read never replaces a newer
  mutable std::mutex mutex_;  // guards what follows
  std::map<std::string, entry, std::less<>> entries_;
  std::string self_, self_url_, incarnation_;          // set by announce()
  std::chrono::steady_clock::time_point loaded_at_{};  // when the last load finished
  std::map<std::string, std::chrono::steady_clock::time_point, std::less<>> misses_;
  std::set<std::string> warned_;  // bad stored values already logged
};

}  // namespace delayq::server
