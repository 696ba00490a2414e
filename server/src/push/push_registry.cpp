#include "push/push_registry.hpp"

#include <algorithm>
#include <cctype>

#include "delayq/error.hpp"
#include "delayq/log.hpp"
#include "wire/dump_json.hpp"

namespace delayq::server {
namespace {

// Settings keys are at most 256 bytes, and the engine's own type rule.
constexpr std::size_t max_type_size = 256 - push_registry::key_prefix.size();

bool valid_type(std::string_view type) {
  return !type.empty() && type.size() <= max_type_size &&
         std::all_of(type.begin(), type.end(), [](char c) {
           return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == ':' ||
                  c == '-';
         });
}

std::string key_of(std::string_view type) {
  std::string key{push_registry::key_prefix};
  key += type;
  return key;
}

}  // namespace

push_registry::push_registry(delayq::task_store& store) : store_(store) {}

std::vector<std::string> push_registry::load(boost::system::error_code& ec) {
  ec.clear();
  std::lock_guard write_lock{write_mutex_};
  auto* const stored = delayq::settings_of(store_, ec);
  if (!stored) return {};
  auto settings = stored->load_settings(ec);
  if (ec) return {};
  std::map<std::string, push_target, std::less<>> loaded;
  for (auto& [key, value] : settings) {
    if (!key.starts_with(key_prefix)) continue;
    std::string type = key.substr(key_prefix.size());
    std::string why;
    auto j = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
    std::optional<push_target> target;
    if (j.is_discarded()) {
      why = "not JSON";
    } else {
      target = push_target_from_json(j, why);
    }
    if (!target) {
      // One bad record (a hand edit, a newer server's format) must not keep
      // the server from starting or drop the other targets.
      delayq::log(delayq::log_level::warning,
                  "delayq-server: skipping the stored push target of type \"" + type + "\" (" +
                      why + "); PUT /v1/types/" + type + " again to replace it");
      continue;
    }
    loaded.emplace(std::move(type), std::move(*target));
  }
  std::vector<std::string> gained;
  std::unique_lock lock{mutex_};
  for (const auto& [type, target] : loaded)
    if (!targets_.contains(type)) gained.push_back(type);
  targets_ = std::move(loaded);
  count_.store(targets_.size(), std::memory_order_release);
  return gained;
}

void push_registry::put(const std::string& type, const push_target& target,
                        boost::system::error_code& ec) {
  ec.clear();
  if (!valid_type(type)) {
    ec = delayq::errc::invalid_type;
    return;
  }
  // What is stored must load again: validate through the same JSON reader.
  std::string why;
  const auto json = to_json(target);
  if (!push_target_from_json(json, why)) {
    ec = make_error_code(boost::system::errc::invalid_argument);
    return;
  }
  auto* const stored = delayq::settings_of(store_, ec);
  if (!stored) return;
  std::lock_guard write_lock{write_mutex_};
  stored->save_setting(key_of(type), dump_json(json), ec);
  if (ec) return;
  std::unique_lock lock{mutex_};
  targets_.insert_or_assign(type, target);
  count_.store(targets_.size(), std::memory_order_release);
}

bool push_registry::erase(std::string_view type, boost::system::error_code& ec) {
  ec.clear();
  const std::string key = key_of(type);
  std::lock_guard write_lock{write_mutex_};
  // Another server may have added it, and this one not reread it yet (a
  // cluster rereads on a notice): the store's erase says whether there was
  // one, in the same step as it erases.
  const bool had_here = has(type);
  auto* const stored = delayq::settings_of(store_, ec);
  if (!stored) return false;
  const bool erased = stored->erase_setting(key, ec);
  if (ec) return false;
  const bool had = had_here || erased;
  std::unique_lock lock{mutex_};
  if (const auto it = targets_.find(type); it != targets_.end()) targets_.erase(it);
  count_.store(targets_.size(), std::memory_order_release);
  return had;
}

bool push_registry::has(std::string_view type) const {
  if (count_.load(std::memory_order_acquire) == 0) return false;  // no lock when none is held
  std::shared_lock lock{mutex_};
  return targets_.contains(type);
}

std::optional<push_target> push_registry::find(std::string_view type) const {
  if (count_.load(std::memory_order_acquire) == 0) return std::nullopt;  // as has()
  std::shared_lock lock{mutex_};
  const auto it = targets_.find(type);
  if (it == targets_.end()) return std::nullopt;
  return it->second;
}

std::map<std::string, push_target> push_registry::all() const {
  std::shared_lock lock{mutex_};
  return {targets_.begin(), targets_.end()};
}

}  // namespace delayq::server
