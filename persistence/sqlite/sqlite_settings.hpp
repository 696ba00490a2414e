// persistence/sqlite/sqlite_settings.hpp - the settings role of the SQLite
// store. Internal.
#pragma once

#include <utility>

#include "delayq/settings_store.hpp"
#include "sqlite_backend.hpp"

namespace delayq::detail::sqlite {

/// The settings (settings_store), in the table `settings` (schema version
/// 3): keys and values as BLOBs, so any bytes round-trip; load_settings()
/// returns them sorted by key bytes. Each save_setting() and
/// erase_setting() is one statement, so one committed transaction.
///
/// Thread safety: every member may be called from any thread; calls are
/// serialized by the backend's mutex.
class settings_role final : public settings_store {
 public:
  explicit settings_role(backend& b) : b_(b) {}

  std::vector<std::pair<std::string, std::string>> load_settings(
      boost::system::error_code& ec) override;
  void save_setting(std::string_view key, std::string_view value,
                    boost::system::error_code& ec) override;
  bool erase_setting(std::string_view key, boost::system::error_code& ec) override;

 private:
  backend& b_;
};

}  // namespace delayq::detail::sqlite
