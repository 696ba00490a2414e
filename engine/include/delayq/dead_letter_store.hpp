// delayq/dead_letter_store.hpp - the dead-letter role a task_store may offer.
#pragma once

#include <utility>

#include <boost/system/error_code.hpp>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "delayq/error.hpp"
#include "delayq/task.hpp"

namespace delayq {

/// The dead-letter area of a store: where a task goes when its last attempt
/// failed (docs/failure-handling.md), keyed by task id like the live tasks
/// and apart from them (task_store::list() never streams a dead letter).
///
/// A store offers it by deriving from both task_store and dead_letter_store
/// and answering task_store::dead_letters() with `this`. The engine reaches
/// it only through that call: a store that answers null has no dead letters,
/// and the engine then keeps a task that ran out of attempts live, as it was
/// stored (docs/failure-handling.md); its dead-letter calls
/// (engine::list_dead(), requeue_dead(), purge()) answer errc::unsupported.
///
/// Such a store's task_store::write() also takes the dead-letter changes
/// (change_kind::bury, revive, purge) in its batches, atomically with the
/// others; the default write() sends them here. A store without this role
/// answers them with errc::unsupported.
///
/// Every call is durable on return with the guarantees of task_store::write(),
/// and translates its backend's errors (errc::store_unavailable,
/// errc::store_error, errc::outcome_unknown).
///
/// Thread safety: as the store's (task_store); the engine calls these from
/// its writer thread and from the threads that call its dead-letter calls.
class dead_letter_store {
 public:
  virtual ~dead_letter_store() = default;

  /// Atomically, for each letter: removes the live task with its id and
  /// stores the letter (an upsert by id) in the dead-letter area.
  virtual void bury(std::span<const dead_letter> letters, boost::system::error_code& ec) = 0;

  /// Dead letters ordered by `died_at`, then id; skips `offset`, returns at
  /// most `limit`. Undecodable records are quarantined, as in
  /// task_store::list().
  virtual std::vector<dead_letter> list_dead(std::size_t offset, std::size_t limit,
                                             boost::system::error_code& ec) = 0;

  /// The dead letter with this id, if there is one.
  virtual std::optional<dead_letter> find_dead(std::string_view id,
                                               boost::system::error_code& ec) = 0;

  /// Atomically deletes the dead letters with the ids of `tasks` and saves
  /// `tasks` as live tasks (an upsert): how a dead letter is requeued.
  virtual void revive(std::span<const task> tasks, boost::system::error_code& ec) = 0;

  /// Deletes dead letters; unknown ids are not an error.
  virtual void purge(std::span<const std::string> ids, boost::system::error_code& ec) = 0;

  /// How many dead letters the store holds.
  virtual std::size_t count_dead(boost::system::error_code& ec) = 0;

  /// Throwing forms: boost::system::system_error.
  void bury(std::span<const dead_letter> letters) {
    boost::system::error_code ec;
    bury(letters, ec);
    detail::throw_if(ec, "delayq: store bury");
  }
  std::vector<dead_letter> list_dead(std::size_t offset, std::size_t limit) {
    boost::system::error_code ec;
    auto out = list_dead(offset, limit, ec);
    detail::throw_if(ec, "delayq: store list_dead");
    return out;
  }
  std::optional<dead_letter> find_dead(std::string_view id) {
    boost::system::error_code ec;
    auto out = find_dead(id, ec);
    detail::throw_if(ec, "delayq: store find_dead");
    return out;
  }
  void revive(std::span<const task> tasks) {
    boost::system::error_code ec;
    revive(tasks, ec);
    detail::throw_if(ec, "delayq: store revive");
  }
  void purge(std::span<const std::string> ids) {
    boost::system::error_code ec;
    purge(ids, ec);
    detail::throw_if(ec, "delayq: store purge");
  }
  std::size_t count_dead() {
    boost::system::error_code ec;
    auto n = count_dead(ec);
    detail::throw_if(ec, "delayq: store count_dead");
    return n;
  }
};

}  // namespace delayq
