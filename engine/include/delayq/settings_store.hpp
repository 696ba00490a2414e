// delayq/settings_store.hpp - the settings role a task_store may offer.
#pragma once

#include <utility>

#include <boost/system/error_code.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace delayq {

/// A few named values kept beside the tasks and shared by every engine on
/// the store: delayq-server keeps its push targets (and a cluster its
/// instance addresses) here. Keys are 1-256 bytes, values at most 64 KiB.
///
/// A store offers it by deriving from both task_store and settings_store and
/// answering task_store::settings() with `this`. A store that answers null
/// keeps no settings: the engine never needs them, and delayq-server answers
/// what needs them (push targets, its health probe) with errc::unsupported.
/// A store that listens (shard_store::listen()) announces every change with
/// a notice_kind::setting notice, after it is durable.
///
/// Errors: the backend's, translated (errc::store_unavailable,
/// errc::store_error).
///
/// Thread safety: as the store's (task_store); delayq-server calls these
/// from several threads, and every store delayq ships allows it.
class settings_store {
 public:
  virtual ~settings_store() = default;

  /// Every setting, sorted by key.
  virtual std::vector<std::pair<std::string, std::string>> load_settings(
      boost::system::error_code& ec) = 0;
  /// Upserts one setting, durably.
  virtual void save_setting(std::string_view key, std::string_view value,
                            boost::system::error_code& ec) = 0;
  /// Deletes one setting and returns whether there was one (false on an
  /// error); an unknown key is not an error. delayq-server answers a DELETE
  /// of a push target 204 or 404 from it. A store that retries a call whose
  /// answer was lost may find the key gone by its own first try: it then
  /// answers false for a key it erased.
  virtual bool erase_setting(std::string_view key, boost::system::error_code& ec) = 0;
};

}  // namespace delayq
