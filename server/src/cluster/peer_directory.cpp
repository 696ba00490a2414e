#include "cluster/peer_directory.hpp"

#include "delayq/log.hpp"
#include "security/secure_random.hpp"
#include "wire/dump_json.hpp"
#include "wire/http_url.hpp"

namespace delayq::server {
namespace {

std::string instance_key(std::string_view instance) {
  std::string key{peer_directory::key_prefix};
  key += instance;
  return key;
}

// Tells this process's entry from a successor's under the same name.
std::string new_incarnation() { return random_hex(8); }

// A url_of() miss reads the store at most this often: a member that never
// announces (an older version) would otherwise cost a read per call.
constexpr std::chrono::seconds miss_reload{1};

}  // namespace

peer_directory::peer_directory(delayq::task_store& store) : store_(store) {}

void peer_directory::announce(const std::string& instance, const std::string& url,
                              boost::system::error_code& ec) {
  ec.clear();
  std::string why;
  const auto parsed = parse_http_url(url, why);
  if (!parsed || parsed->target != "/") {
    ec = make_error_code(boost::system::errc::invalid_argument);
    return;
  }
  std::string incarnation;
  {
    std::lock_guard lock(mutex_);
    if (incarnation_.empty()) incarnation_ = new_incarnation();
    incarnation = incarnation_;
  }
  auto* const stored = delayq::settings_of(store_, ec);
  if (!stored) return;
  stored->save_setting(instance_key(instance),
                       dump_json(nlohmann::json{{"url", url}, {"incarnation", incarnation}}), ec);
  if (ec) return;
  std::lock_guard lock(mutex_);
  self_ = instance;
  self_url_ = url;
  entries_.insert_or_assign(instance, entry{url, incarnation});
}

void peer_directory::keep_announced(boost::system::error_code& ec) {
  ec.clear();
  std::string self, url;
  {
    std::lock_guard lock(mutex_);
    if (self_.empty() || entries_.contains(self_)) return;
    self = self_;
    url = self_url_;
  }
  delayq::log(delayq::log_level::warning,
              "delayq-server: the store lost this instance's address; announcing it again");
  announce(self, url, ec);
}

void peer_directory::withdraw(boost::system::error_code& ec) {
  ec.clear();
  std::string self, incarnation;
  {
    std::lock_guard lock(mutex_);
    self = self_;
    incarnation = incarnation_;
  }
  if (self.empty()) return;
  std::lock_guard load_lock(load_mutex_);
  const auto stored = read_locked(ec);
  if (ec) return;
  const auto it = stored.find(self);
  // A successor under our name announced since: its entry stays.
  if (it == stored.end() || it->second.incarnation != incarnation) return;
  if (auto* const settings = delayq::settings_of(store_, ec))
    settings->erase_setting(instance_key(self), ec);
  if (ec) return;
  std::lock_guard lock(mutex_);
  if (const auto mine = entries_.find(self); mine != entries_.end()) entries_.erase(mine);
}

std::map<std::string, peer_directory::entry, std::less<>> peer_directory::read_locked(
    boost::system::error_code& ec) {
  std::map<std::string, entry, std::less<>> loaded;
  auto* const stored = delayq::settings_of(store_, ec);
  if (!stored) return loaded;
  const auto settings = stored->load_settings(ec);
  if (ec) return loaded;
  for (const auto& [key, value] : settings) {
    if (!key.starts_with(key_prefix)) continue;
    std::string instance = key.substr(key_prefix.size());
    const auto j = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
    std::string why = "not {\"url\": ...}";
    if (j.is_object() && j.contains("url") && j["url"].is_string() &&
        parse_http_url(j["url"].get<std::string>(), why)) {
      entry e{j["url"].get<std::string>(), {}};
      if (j.contains("incarnation") && j["incarnation"].is_string())
        e.incarnation = j["incarnation"].get<std::string>();
      loaded.emplace(std::move(instance), std::move(e));
      continue;
    }
    // A hand edit must not hide the other instances; said once per value.
    {
      std::lock_guard lock(mutex_);
      if (!warned_.insert(key + '\n' + value).second) continue;
    }
    delayq::log(delayq::log_level::warning,
                "delayq-server: skipping the stored address of instance \"" + instance + "\" (" +
                    why + ")");
  }
  return loaded;
}

void peer_directory::load_locked(boost::system::error_code& ec) {
  auto loaded = read_locked(ec);
  if (ec) return;
  std::lock_guard lock(mutex_);
  entries_ = std::move(loaded);
  loaded_at_ = std::chrono::steady_clock::now();
}

void peer_directory::load(boost::system::error_code& ec) {
  ec.clear();
  std::lock_guard load_lock(load_mutex_);
  load_locked(ec);
}

void peer_directory::load_since(std::chrono::steady_clock::time_point since,
                                boost::system::error_code& ec) {
  ec.clear();
  std::lock_guard load_lock(load_mutex_);  // waits for a load under way
  {
    std::lock_guard lock(mutex_);
    if (loaded_at_ > since) return;
  }
  load_locked(ec);
}

std::optional<std::string> peer_directory::cached_url_of(std::string_view instance) const {
  std::lock_guard lock(mutex_);
  if (const auto it = entries_.find(instance); it != entries_.end()) return it->second.url;
  return std::nullopt;
}

std::optional<std::string> peer_directory::url_of(std::string_view instance,
                                                  boost::system::error_code& ec) {
  ec.clear();
  const auto find = [&]() -> std::optional<std::string> {
    if (const auto it = entries_.find(instance); it != entries_.end()) return it->second.url;
    return std::nullopt;
  };
  {
    std::lock_guard lock(mutex_);
    if (auto url = find()) return url;
  }
  // Announced after our last read (it started since), or never: ask the
  // store, after a load under way (which may bring it) and at most once a
  // second per name (a member that never announces, an older version,
  // would otherwise cost a read per call).
  std::lock_guard load_lock(load_mutex_);
  {
    std::lock_guard lock(mutex_);
    if (auto url = find()) return url;
    const auto now = std::chrono::steady_clock::now();
    auto& missed = misses_[std::string(instance)];
    if (missed != std::chrono::steady_clock::time_point{} && now - missed < miss_reload)
      return std::nullopt;
    missed = now;
    if (misses_.size() > 1024) misses_.clear();  // made-up names must not grow it
  }
  load_locked(ec);
  if (ec) return std::nullopt;
  std::lock_guard lock(mutex_);
  return find();
}

}  // namespace delayq::server
