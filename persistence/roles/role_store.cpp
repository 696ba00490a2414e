#include "delayq/role_store.hpp"

#include <stdexcept>

namespace delayq {

role_store::role_store(store_roles roles) : roles_(std::move(roles)) {
  if (!roles_.tasks) throw std::invalid_argument("delayq: role_store needs a tasks role");
}

role_store::~role_store() {
  // The roles may hold threads that use the others (a listener, a write
  // pipeline): the optional ones go first, then the tasks, then what they
  // all share.
  roles_.schedules.reset();
  roles_.shards.reset();
  roles_.sequences.reset();
  roles_.settings.reset();
  roles_.dead_letters.reset();
  roles_.tasks.reset();
  roles_.backend.reset();
}

void role_store::write(std::span<const store_change> changes, boost::system::error_code& ec) {
  roles_.tasks->write(changes, ec);
}

void role_store::async_write(std::span<const store_change> changes,
                             std::function<void(boost::system::error_code)> done) {
  roles_.tasks->async_write(changes, std::move(done));
}

std::size_t role_store::max_writes_in_flight() const noexcept {
  return roles_.tasks->max_writes_in_flight();
}

void role_store::drive_writes_on(boost::asio::any_io_executor io) {
  roles_.tasks->drive_writes_on(std::move(io));
}

void role_store::save(std::span<const task> tasks, boost::system::error_code& ec) {
  roles_.tasks->save(tasks, ec);
}

void role_store::remove(std::span<const std::string> ids, boost::system::error_code& ec) {
  roles_.tasks->remove(ids, ec);
}

list_summary role_store::list(const std::function<void(task&&)>& sink,
                              boost::system::error_code& ec) {
  return roles_.tasks->list(sink, ec);
}

list_summary role_store::list_due(due_cursor& after, std::int64_t until_ms, std::size_t limit,
                                  const std::function<void(task&&)>& sink,
                                  boost::system::error_code& ec) {
  return roles_.tasks->list_due(after, until_ms, limit, sink, ec);
}

std::vector<std::optional<task>> role_store::find(std::span<const std::string> ids,
                                                  boost::system::error_code& ec) {
  return roles_.tasks->find(ids, ec);
}

void role_store::quarantine(std::string_view id, std::string_view reason,
                            boost::system::error_code& ec) {
  roles_.tasks->quarantine(id, reason, ec);
}

bool role_store::in_process() const noexcept { return roles_.tasks->in_process(); }

std::string role_store::describe() const { return roles_.tasks->describe(); }

}  // namespace delayq
