#include "cluster/peer_directory.hpp"

#include "api/task_json.hpp"
#include "delayq/log.hpp"
#include "push/push_target.hpp"

namespace delayq::server {
namespace {

std::string key_of(std::string_view instance) {
  std::string key{peer_directory::key_prefix};
  key += instance;
  return key;
}

}  // namespace

peer_directory::peer_directory(delayq::task_store& store) : store_(store) {}

void peer_directory::announce(const std::string& instance, const std::string& url,
                              boost::system::error_code& ec) {
  ec.clear();
  std::string why;
  if (!parse_http_url(url, why)) {
    ec = make_error_code(boost::system::errc::invalid_argument);
    return;
  }
  store_.save_setting(key_of(instance), dump_json(nlohmann::json{{"url", url}}), ec);
  if (ec) return;
  std::lock_guard lock(mutex_);
  urls_.insert_or_assign(instance, url);
}

void peer_directory::withdraw(const std::string& instance, boost::system::error_code& ec) {
  ec.clear();
  store_.erase_setting(key_of(instance), ec);
  if (ec) return;
  std::lock_guard lock(mutex_);
  if (const auto it = urls_.find(instance); it != urls_.end()) urls_.erase(it);
}

void peer_directory::load(boost::system::error_code& ec) {
  ec.clear();
  const auto settings = store_.load_settings(ec);
  if (ec) return;
  std::map<std::string, std::string, std::less<>> loaded;
  for (const auto& [key, value] : settings) {
    if (!key.starts_with(key_prefix)) continue;
    std::string instance = key.substr(key_prefix.size());
    const auto j = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
    std::string why = "not {\"url\": ...}";
    if (j.is_object() && j.contains("url") && j["url"].is_string() &&
        parse_http_url(j["url"].get<std::string>(), why)) {
      loaded.emplace(std::move(instance), j["url"].get<std::string>());
      continue;
    }
    // A hand edit must not hide the other instances.
    delayq::log(delayq::log_level::warning,
                "delayq-server: skipping the stored address of instance \"" + instance + "\" (" +
                    why + ")");
  }
  std::lock_guard lock(mutex_);
  urls_ = std::move(loaded);
}

std::optional<std::string> peer_directory::url_of(std::string_view instance,
                                                  boost::system::error_code& ec) {
  ec.clear();
  {
    std::lock_guard lock(mutex_);
    if (const auto it = urls_.find(instance); it != urls_.end()) return it->second;
  }
  // Announced after our last read (it started since), or never: ask the store.
  load(ec);
  if (ec) return std::nullopt;
  std::lock_guard lock(mutex_);
  if (const auto it = urls_.find(instance); it != urls_.end()) return it->second;
  return std::nullopt;
}

}  // namespace delayq::server
