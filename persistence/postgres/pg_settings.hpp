// persistence/postgres/pg_settings.hpp - the settings role of the
// PostgreSQL store. Internal.
#pragma once

#include <utility>

#include "delayq/settings_store.hpp"
#include "pg_backend.hpp"

namespace delayq::detail::pg {

/// The settings (settings_store), in the table settings: keys and values as
/// bytea, so any bytes round-trip; load_settings() sorts by key bytes. Each
/// save_setting() and erase_setting() is one transaction; in a cluster's
/// layout the same transaction NOTIFYs "s KEY" (pg_batch.hpp), which the
/// server delivers at COMMIT: a notice never comes before its change.
///
/// Thread safety: every member may be called from any thread.
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

}  // namespace delayq::detail::pg
