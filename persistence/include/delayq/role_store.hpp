// delayq/role_store.hpp - a task_store put together from role objects.
//
// A backend hands out one object per role it offers (the live tasks, dead
// letters, settings, sequences, shards, schedules), each in a file of its
// own, all of them working over one connection or pool they share. role_store is the
// task_store the engine sees: it forwards the task calls to the tasks role
// and answers each role accessor with the role's object. A backend adds a
// role by writing its class and filling one more field of store_roles; it
// never touches the others. docs/persistence.md, "Writing a store", shows a
// whole backend written this way.
#pragma once

#include <utility>

#include <memory>

#include "delayq/dead_letter_store.hpp"
#include "delayq/schedule_store.hpp"
#include "delayq/sequence_store.hpp"
#include "delayq/settings_store.hpp"
#include "delayq/shard_store.hpp"
#include "delayq/task_store.hpp"

namespace delayq {

/// The role objects of one store, as a backend hands them out.
///
/// Thread safety: a plain value.
struct store_roles {
  /// What the roles share (a connection pool, a database handle, a
  /// background thread): destroyed after every role. May be null.
  std::shared_ptr<void> backend;
  /// The live tasks: required. Its own role accessors are never asked
  /// (role_store answers them); its write() takes the dead-letter changes of
  /// a batch too (bury, revive, purge), atomically with the others, when the
  /// store has dead letters.
  std::unique_ptr<task_store> tasks;
  /// Each role the store offers; null for one it does not.
  std::unique_ptr<dead_letter_store> dead_letters;
  std::unique_ptr<settings_store> settings;
  std::unique_ptr<sequence_store> sequences;
  std::unique_ptr<shard_store> shards;
  std::unique_ptr<schedule_store> schedules;
};

/// A task_store whose calls go to the tasks role and whose accessors answer
/// the other role objects (null for a role the backend does not offer). The
/// roles live as long as the store: an accessor answers the same object for
/// the store's whole life. A backend whose users construct the store by
/// name derives that class from role_store and builds the roles in its
/// constructor (sqlite_store); one opened by a function returns a
/// role_store as it is (open_postgres_store()).
///
/// Example:
/// \code
///   delayq::store_roles roles;
///   roles.backend = pool;                       // shared by the roles
///   roles.tasks = std::make_unique<my_tasks>(*pool);
///   roles.settings = std::make_unique<my_settings>(*pool);
///   auto store = std::make_unique<delayq::role_store>(std::move(roles));
/// \endcode
///
/// Thread safety: as the roles' (every call is forwarded as it is).
class role_store : public task_store {
 public:
  using task_store::list;
  using task_store::remove;
  using task_store::save;
  using task_store::write;

  /// Takes the roles; `roles.tasks` must not be null (std::invalid_argument).
  explicit role_store(store_roles roles);
  /// Destroys the roles (schedules and shards first, tasks last), then the
  /// backend.
  ~role_store() override;
  role_store(const role_store&) = delete;
  role_store& operator=(const role_store&) = delete;

  void write(std::span<const store_change> changes, boost::system::error_code& ec) override;
  void async_write(std::span<const store_change> changes,
                   std::function<void(boost::system::error_code)> done) override;
  std::size_t max_writes_in_flight() const noexcept override;
  void drive_writes_on(boost::asio::any_io_executor io) override;
  void save(std::span<const task> tasks, boost::system::error_code& ec) override;
  void remove(std::span<const std::string> ids, boost::system::error_code& ec) override;
  list_summary list(const std::function<void(task&&)>& sink,
                    boost::system::error_code& ec) override;
  list_summary list_due(due_cursor& after, std::int64_t until_ms, std::size_t limit,
                        const std::function<void(task&&)>& sink,
                        boost::system::error_code& ec) override;
  std::vector<std::optional<task>> find(std::span<const std::string> ids,
                                        boost::system::error_code& ec) override;
  void quarantine(std::string_view id, std::string_view reason,
                  boost::system::error_code& ec) override;
  bool in_process() const noexcept override;
  std::string describe() const override;

  dead_letter_store* dead_letters() noexcept override { return roles_.dead_letters.get(); }
  delayq::settings_store* settings() noexcept override { return roles_.settings.get(); }
  delayq::sequence_store* sequences() noexcept override { return roles_.sequences.get(); }
  shard_store* sharded() noexcept override { return roles_.shards.get(); }
  schedule_store* schedules() noexcept override { return roles_.schedules.get(); }

  /// The tasks role itself.
  task_store& tasks() noexcept { return *roles_.tasks; }

 private:
  store_roles roles_;
};

}  // namespace delayq
