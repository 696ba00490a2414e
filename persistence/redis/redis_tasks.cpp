// The tasks role of the Redis store (redis_tasks.hpp): the one-kind
// writes and quarantine. list() is in redis_list.cpp, list_due() and find()
// in redis_due.cpp.
#include "redis_tasks.hpp"

#include "../roles/change_batches.hpp"
#include "connection.hpp"
#include "delayq/log.hpp"
#include "scripts.hpp"

namespace delayq::detail::redis {

void tasks_role::save(std::span<const task> tasks, boost::system::error_code& ec) {
  b_.write(roles::task_changes(tasks, change_kind::save), ec);
}

void tasks_role::remove(std::span<const std::string> ids, boost::system::error_code& ec) {
  std::vector<task> holders;
  b_.write(roles::id_changes(ids, change_kind::remove, holders), ec);
}

void tasks_role::quarantine(std::string_view id, std::string_view reason,
                            boost::system::error_code& ec) {
  backend& m = b_;
  const backend::part& p = m.part_of(id);
  std::lock_guard lock(m.mutex);
  m.conn.run(p.slot, "quarantine", ec, [&](connection& c) {
    auto replies = c.exchange({quarantine_call(quarantine_id_script, p.keys.tasks, p.keys.due,
                                               p.keys.quarantine, p.keys.quarantine_reason)
                                   .arg(id)
                                   .arg(reason)},
                              true);
    const redisReply* r = replies[0].get();
    if (r->type == REDIS_REPLY_ERROR) throw_server_error("quarantine", r);
    if (r->type == REDIS_REPLY_INTEGER && r->integer == 1)
      log(log_level::error, m.name + ": quarantined task '" + std::string(id) + "' in " +
                                p.keys.quarantine + ": " + std::string(reason));
  });
}

}  // namespace delayq::detail::redis
