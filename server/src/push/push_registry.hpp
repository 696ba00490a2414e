// push/push_registry.hpp - the push targets by task type, kept in the store.
#pragma once

#include <utility>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include <boost/system/error_code.hpp>

#include "delayq/task_store.hpp"
#include "push/push_target.hpp"

namespace delayq::server {

/// The push targets of every push type, persisted as store settings so they
/// survive restarts and are shared by every server on the store.
///
/// Each target is the setting `"push:" + type` whose value is the JSON text
/// of to_json(). Writes are durable first, then visible: put() and erase()
/// change the store and only then the map find() reads, so a target a client
/// was told about (204) is never lost by a crash, and a failed write changes
/// nothing.
///
/// Example:
/// \code
///   delayq::server::push_registry targets{store};
///   targets.load(ec);                                   // at startup
///   targets.put("mail.send", {.url = "http://127.0.0.1:9000/hook"}, ec);
///   if (auto t = targets.find("mail.send")) client.deliver("mail.send", *t, task, done);
/// \endcode
///
/// Thread safety: every member may be called concurrently. load(), put() and
/// erase() call the store and may block (Redis, SQLite): call them off the
/// I/O threads. find() and all() never touch the store and only take a
/// shared lock.
class push_registry {
 public:
  /// The settings key prefix.
  static constexpr std::string_view key_prefix = "push:";

  /// Borrows `store`, which must outlive the registry. Starts empty: call load().
  explicit push_registry(delayq::task_store& store);

  push_registry(const push_registry&) = delete;
  push_registry& operator=(const push_registry&) = delete;

  /// Replaces the map with every `push:` setting of the store. A value that
  /// is not a valid target (corrupt JSON, a refused field) is logged through
  /// delayq::log and skipped. Returns the types that had no target before
  /// and have one now (so their tasks waiting for consumers can be pushed).
  /// Errors: the store's (the map is then unchanged, and nothing returned).
  /// Called at start, and again whenever another instance may have changed
  /// a target (engine_options::on_settings_changed).
  std::vector<std::string> load(boost::system::error_code& ec);

  /// Registers or replaces the target of `type`. Errors: errc::invalid_type
  /// for a type the engine would refuse (empty, over 251 bytes, characters
  /// outside [A-Za-z0-9._:-]); boost::system::errc::invalid_argument for a URL
  /// parse_http_url refuses or limits outside the JSON form's; the store's.
  void put(const std::string& type, const push_target& target, boost::system::error_code& ec);

  /// Removes the target of `type` and returns whether it had one, here or
  /// in the store (another server on the store may have added it, and this
  /// one not reread it yet). Errors: the store's (false).
  bool erase(std::string_view type, boost::system::error_code& ec);

  /// The target of `type`, if any.
  std::optional<push_target> find(std::string_view type) const;
  /// Whether `type` has a target (find() without copying it).
  bool has(std::string_view type) const;

  /// A copy of every target, by type.
  std::map<std::string, push_target> all() const;

 private:
  delayq::task_store& store_;
  // Serialises writers, so that the order of the store's writes is the
  // order their results become visible in targets_.
  std::mutex write_mutex_;
  mutable std::shared_mutex mutex_;
  std::map<std::string, push_target, std::less<>> targets_;
  // targets_.size(), stored (release) before the lock that publishes a
  // change is let go: find() and has() answer "none" from it without the
  // lock, so a server without push targets takes none a task.
  std::atomic<std::size_t> count_{0};
};

}  // namespace delayq::server
