// persistence/sqlite/sqlite_store.cpp - sqlite_store: the backend opened,
// and the role objects put together over it (delayq/sqlite_store.hpp,
// delayq/role_store.hpp).
#include "delayq/sqlite_store.hpp"

#include "sqlite_backend.hpp"
#include "sqlite_dead_letters.hpp"
#include "sqlite_schedules.hpp"
#include "sqlite_sequences.hpp"
#include "sqlite_settings.hpp"
#include "sqlite_tasks.hpp"

namespace delayq {
namespace {

using detail::sqlite::backend;

sqlite_options::synchronous_level level_of(int pragma) {
  using level = sqlite_options::synchronous_level;
  switch (pragma) {
    case 0: return level::off;
    case 1: return level::normal;
    case 3: return level::extra;
    default: return level::full;
  }
}

// A backend whose database is open, or null with `ec` and `message` set.
std::shared_ptr<backend> open_backend(const std::string& path, sqlite_options options,
                                      boost::system::error_code& ec, std::string& message) {
  auto b = std::make_shared<backend>(path, options);
  b->open(ec, message);
  return ec ? nullptr : b;
}

std::shared_ptr<backend> open_backend_or_throw(const std::string& path, sqlite_options options) {
  boost::system::error_code ec;
  std::string message;
  auto b = open_backend(path, options, ec, message);
  if (ec) throw boost::system::system_error(ec, "delayq: sqlite:" + path + ": " + message);
  return b;
}

// Every role the file offers, each over the one backend.
store_roles make_roles(const std::shared_ptr<backend>& b) {
  store_roles roles;
  roles.backend = b;
  roles.tasks = std::make_unique<detail::sqlite::tasks_role>(*b);
  roles.dead_letters = std::make_unique<detail::sqlite::dead_letters_role>(*b);
  roles.settings = std::make_unique<detail::sqlite::settings_role>(*b);
  roles.sequences = std::make_unique<detail::sqlite::sequences_role>(*b);
  roles.schedules = std::make_unique<detail::sqlite::schedules_role>(*b);
  return roles;
}

}  // namespace

sqlite_store::sqlite_store(std::shared_ptr<backend> b)
    : role_store(make_roles(b)), backend_(b.get()) {}

sqlite_store::sqlite_store(const std::string& path, sqlite_options options)
    : sqlite_store(open_backend_or_throw(path, options)) {}

std::unique_ptr<sqlite_store> sqlite_store::open(const std::string& path, sqlite_options options,
                                                 boost::system::error_code& ec,
                                                 std::string* message) {
  std::string why;
  auto b = open_backend(path, options, ec, why);
  if (ec) {
    if (message) *message = std::move(why);
    return nullptr;
  }
  return std::unique_ptr<sqlite_store>(new sqlite_store(std::move(b)));
}

// The write thread drains while every role is still there, as it did when
// the store was one class; role_store's destructor then destroys the roles
// and, last, the backend.
sqlite_store::~sqlite_store() { backend_->stop_writes(); }

sqlite_options::synchronous_level sqlite_store::synchronous(boost::system::error_code& ec) {
  int value = 2;
  std::lock_guard lock(backend_->mutex());
  backend_->guarded("synchronous", ec,
                    [&] { value = backend_->db().execAndGet("PRAGMA synchronous").getInt(); });
  return level_of(value);
}

sqlite_options::synchronous_level sqlite_store::synchronous() {
  boost::system::error_code ec;
  const auto level = synchronous(ec);
  detail::throw_if(ec, "delayq: sqlite_store synchronous");
  return level;
}

}  // namespace delayq
