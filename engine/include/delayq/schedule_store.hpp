// delayq/schedule_store.hpp - the schedules role a task_store may offer:
// where recurring schedules (delayq/schedule.hpp) are kept.
#pragma once

#include <utility>

#include <boost/system/error_code.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "delayq/error.hpp"
#include "delayq/task.hpp"

namespace delayq {

/// One stored schedule as a store sees it: opaque bytes under an id, with
/// a revision the store counts. The engine writes `definition` (what and
/// when) and `state` (how far its occurrences were made tasks) in its own
/// format (docs/schedules.md, "How a schedule is stored"); a store keeps
/// both as they are, byte for byte (they may hold any byte, NUL included).
///
/// Thread safety: a plain value.
struct schedule_record {
  std::string id;
  std::string definition;
  std::string state;
  /// 1 after the first write, one more with every write since.
  std::uint64_t revision = 0;

  friend bool operator==(const schedule_record&, const schedule_record&) = default;
};

/// One change of a write_schedules() call. Points at memory the caller
/// keeps valid until the call returns.
struct schedule_write {
  enum class kind : std::uint8_t {
    put,    ///< Store `definition` and `state` under `id` (create, or replace).
    state,  ///< Replace only the state of the stored schedule `id`.
    erase,  ///< Delete `id`.
  };
  kind what = kind::put;
  std::string_view id;
  std::string_view definition;  ///< put
  std::string_view state;       ///< put, state
  /// Applied only if the revision stored now is this one (0: nothing is
  /// stored under `id`; a `state` or an `erase` with 0 never applies). The
  /// store then sets the revision to expected + 1 (erase: removes it).
  std::uint64_t expected = 0;
  /// Set by write_schedules(): whether this change was applied.
  mutable bool applied = false;
};

/// Where recurring schedules are kept, beside the tasks and shared by every
/// engine on the store. The engine needs nothing of the schedule's bytes
/// from the store but that it keeps them and checks revisions: every write
/// is a compare-and-set, so that two engines (or a restarted one and its
/// stalled predecessor) never both make the same occurrence a task.
///
/// A store offers it by deriving from both task_store and schedule_store
/// and answering task_store::schedules() with `this`. A store that answers
/// null keeps no schedules: the engine's schedule calls then answer
/// errc::unsupported. memory_store, sqlite_store, redis_store and the
/// PostgreSQL store offer it (a role object of role_store there);
/// docs/persistence.md, "Writing your own store", says what a store must do.
///
/// In a sharded store (shard_store) a schedule lives in the shard of its
/// id, shard_of(id), like a task of that id.
///
/// Errors: the backend's, translated (errc::store_unavailable,
/// errc::store_error, errc::outcome_unknown for a write that timed out:
/// re-read with find_schedules() to learn what landed).
///
/// Thread safety: every member is safe from any thread, and each write is
/// atomic against every other caller on the same store (other threads,
/// other processes).
class schedule_store {
 public:
  virtual ~schedule_store() = default;

  /// Applies each change whose `expected` revision matches, sets its
  /// `applied`, and returns once the applied ones are durable. Each change
  /// is atomic on its own; the batch need not be (a sharded store applies
  /// each shard's part on its own). On an error none, some or all of the
  /// changes may have been applied (their `applied` flags are then not
  /// meaningful).
  virtual void write_schedules(std::span<const schedule_write> changes,
                               boost::system::error_code& ec) = 0;

  /// The stored schedules with these ids: element i is `ids[i]`'s, or empty.
  virtual std::vector<std::optional<schedule_record>> find_schedules(
      std::span<const std::string> ids, boost::system::error_code& ec) = 0;

  /// At most `limit` stored schedules whose ids come after `after` (byte
  /// order; "" is before every id), in id order: page through every
  /// schedule by passing the last id of a page to get the next.
  virtual std::vector<schedule_record> list_schedules(std::string_view after, std::size_t limit,
                                                      boost::system::error_code& ec) = 0;

  /// How many schedules are stored.
  virtual std::size_t count_schedules(boost::system::error_code& ec) = 0;

  /// Hands every stored schedule to `visit`, a page of at most `page`
  /// records at a time, in no set order: what the engine reads at start().
  /// Each stored schedule is seen once; one written or erased meanwhile
  /// may be seen or not. Unlike list_schedules(), a sharded store need not
  /// merge its shards into one id order, so it reads each record once
  /// rather than a page of every shard for each page it returns. Stops at
  /// the first error (ec set), the pages before it seen. Default:
  /// list_schedules() page after page.
  virtual void scan_schedules(std::size_t page,
                              const std::function<void(std::vector<schedule_record>&)>& visit,
                              boost::system::error_code& ec) {
    ec = {};
    if (page == 0) page = 1;
    std::string after;
    for (;;) {
      auto got = list_schedules(after, page, ec);
      if (ec) return;
      const bool last = got.size() < page;
      if (!last) after = got.back().id;
      if (!got.empty()) visit(got);
      if (last) return;
    }
  }

  /// For a cluster's engines (a sharded store): stores each of `tasks` as a
  /// live task unless a task with its id is stored already, atomically per
  /// task, and announces each one stored with the notice of a saved task
  /// (shard_store::listen()), as a task saved by write() is. How an engine
  /// makes an occurrence a task in a shard another instance holds (its
  /// owner then holds it, from the notice). Default: errc::unsupported (an
  /// engine on such a store makes occurrences of other instances' shards
  /// through... nothing: it logs them as lost).
  virtual void insert_absent(std::span<const task> tasks, boost::system::error_code& ec) {
    (void)tasks;
    ec = errc::unsupported;
  }
};

}  // namespace delayq
