// persistence/redis/redis_settings.hpp - the settings role of the Redis
// store. Internal.
#pragma once

#include "delayq/settings_store.hpp"
#include "redis_backend.hpp"

namespace delayq::detail::redis {

/// Settings live in the hash `{PREFIX}:settings`. In the sharded layout a
/// change is announced on the notice channel once it landed ("setting
/// KEY"), so every instance of a cluster rereads it.
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

}  // namespace delayq::detail::redis
