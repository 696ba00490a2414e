// The default write() and async_write() of task_store: what a store written
// before batches existed gets. Every store delayq ships overrides write().
#include "delayq/task_store.hpp"

namespace delayq {

void task_store::write(std::span<const store_change> changes, boost::system::error_code& ec) {
  ec = {};
  // A store without dead letters answers their changes as its defaults did
  // before the roles were split: errc::unsupported, which the engine takes
  // to mean "keep the task live" (docs/failure-handling.md).
  dead_letter_store* const dead = dead_letters();
  std::size_t i = 0;
  while (i < changes.size() && !ec) {
    // One run of changes of the same kind, written with that kind's call.
    const change_kind what = changes[i].what;
    std::size_t j = i;
    while (j < changes.size() && changes[j].what == what) ++j;
    const auto run = changes.subspan(i, j - i);
    const bool needs_dead =
        what == change_kind::bury || what == change_kind::revive || what == change_kind::purge;
    if (needs_dead && !dead) {
      ec = errc::unsupported;
      break;
    }
    switch (what) {
      case change_kind::save:
      case change_kind::revive: {
        std::vector<task> tasks;
        tasks.reserve(run.size());
        for (const store_change& c : run) tasks.push_back(*c.task);
        if (what == change_kind::save)
          save(tasks, ec);
        else
          dead->revive(tasks, ec);
        break;
      }
      case change_kind::remove:
      case change_kind::purge: {
        std::vector<std::string> ids;
        ids.reserve(run.size());
        for (const store_change& c : run) ids.push_back(c.task->id);
        if (what == change_kind::remove)
          remove(ids, ec);
        else
          dead->purge(ids, ec);
        break;
      }
      case change_kind::bury: {
        std::vector<dead_letter> letters;
        letters.reserve(run.size());
        for (const store_change& c : run)
          letters.push_back(dead_letter{*c.task, std::string(c.error), c.died_at});
        dead->bury(letters, ec);
        break;
      }
    }
    i = j;
  }
}

void task_store::async_write(std::span<const store_change> changes,
                             std::function<void(boost::system::error_code)> done) {
  boost::system::error_code ec;
  write(changes, ec);
  done(ec);
}

}  // namespace delayq
