// persistence/roles/change_batches.hpp - the one-kind calls of a role
// (save, remove, bury, revive, purge) as the batch of changes its
// backend's write() takes, so each is atomic as a batch is. Internal.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "delayq/dead_letter_store.hpp"
#include "delayq/task_store.hpp"

namespace delayq::detail::roles {

/// `what` (save, revive) of each task; the changes point into `tasks`.
inline std::vector<store_change> task_changes(std::span<const task> tasks, change_kind what) {
  std::vector<store_change> changes;
  changes.reserve(tasks.size());
  for (const task& t : tasks) changes.push_back({what, &t, {}, {}});
  return changes;
}

/// `what` (remove, purge) of each id: the tasks the changes point at hold
/// nothing but the id, in `holders`, which must outlive the write.
inline std::vector<store_change> id_changes(std::span<const std::string> ids, change_kind what,
                                            std::vector<task>& holders) {
  holders.assign(ids.size(), task{});
  std::vector<store_change> changes;
  changes.reserve(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    holders[i].id = ids[i];
    changes.push_back({what, &holders[i], {}, {}});
  }
  return changes;
}

/// A bury of each letter; the changes point into `letters`.
inline std::vector<store_change> bury_changes(std::span<const dead_letter> letters) {
  std::vector<store_change> changes;
  changes.reserve(letters.size());
  for (const dead_letter& d : letters)
    changes.push_back({change_kind::bury, &d.task, d.error, d.died_at});
  return changes;
}

/// The dead-letter calls that write (bury, revive, purge), each one batch
/// of the backend's `write(std::span<const store_change>, error_code&)`:
/// atomic as a batch is, and going wherever the batch's other changes go.
/// A backend's dead-letter role derives from it and adds the reads.
///
/// Thread safety: as Backend::write().
template <class Backend>
class dead_letter_writes : public dead_letter_store {
 public:
  using dead_letter_store::bury;
  using dead_letter_store::purge;
  using dead_letter_store::revive;

  explicit dead_letter_writes(Backend& b) : b_(b) {}

  void bury(std::span<const dead_letter> letters, boost::system::error_code& ec) override {
    b_.write(bury_changes(letters), ec);
  }
  void revive(std::span<const task> tasks, boost::system::error_code& ec) override {
    b_.write(task_changes(tasks, change_kind::revive), ec);
  }
  void purge(std::span<const std::string> ids, boost::system::error_code& ec) override {
    std::vector<task> holders;
    b_.write(id_changes(ids, change_kind::purge, holders), ec);
  }

 protected:
  Backend& b_;
};

}  // namespace delayq::detail::roles
