// cluster/peer_directory.hpp - where each instance of a cluster takes API
// calls, kept in the store's settings so every instance can find the others.
#pragma once

#include <utility>  // before any Boost header: Boost 1.74 + C++20 needs it

#include <boost/system/error_code.hpp>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "delayq/task_store.hpp"

namespace delayq::server {

/// The API address (an http:// URL) of each instance under --cluster, by
/// instance name: the setting `"instance:" + name` whose value is
/// {"url": "..."}. An instance announces itself once it serves and
/// withdraws at a clean stop; one that died leaves its entry behind, which
/// is only read if a live member carries its name again, and that member
/// overwrote it when it started. A call on an id whose shard another
/// instance owns is forwarded to the address found here (docs/scale-out.md,
/// "Calls on any instance").
///
/// Example:
/// \code
///   delayq::server::peer_directory peers{store};
///   peers.announce("a", "http://10.0.0.5:7700", ec);
///   if (auto url = peers.url_of("b", ec)) forward_to(*url);
/// \endcode
///
/// Thread safety: every member may be called concurrently. announce(),
/// withdraw(), load() and a url_of() that misses call the store and may
/// block: call them off the I/O threads.
class peer_directory {
 public:
  /// The settings key prefix.
  static constexpr std::string_view key_prefix = "instance:";

  /// Borrows `store`, which must outlive the directory. Starts empty.
  explicit peer_directory(delayq::task_store& store);
  peer_directory(const peer_directory&) = delete;
  peer_directory& operator=(const peer_directory&) = delete;

  /// Stores `url` as the address of `instance` (durably, then in the map).
  /// Errors: boost::system::errc::invalid_argument for a URL parse_http_url
  /// refuses; the store's.
  void announce(const std::string& instance, const std::string& url, boost::system::error_code& ec);
  /// Erases the address of `instance`. Errors: the store's.
  void withdraw(const std::string& instance, boost::system::error_code& ec);
  /// Replaces the map with every `instance:` setting of the store. A value
  /// that is not {"url": an http:// URL} is logged and skipped. Errors: the
  /// store's (the map is then unchanged).
  void load(boost::system::error_code& ec);
  /// The address of `instance`: from the map, and on a miss from the store
  /// (load()) once; nothing when neither knows it. Errors: the store's.
  std::optional<std::string> url_of(std::string_view instance, boost::system::error_code& ec);

 private:
  delayq::task_store& store_;
  std::mutex mutex_;  // guards urls_
  std::map<std::string, std::string, std::less<>> urls_;
};

}  // namespace delayq::server
