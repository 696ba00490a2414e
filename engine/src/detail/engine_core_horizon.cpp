// engine_core: what the horizon's reads do to the tables (horizon_pager.hpp
// explains the horizon, the watermark and the reads): hold what a read of
// the store found, let go of a far task once settled, fault in the ids a
// call names, read a range of the due index for the pager.
//
// A type with a capacity (engine_options::type_capacity) is always held
// whole, so its count stays exact: start() then reads every stored task once
// (holding those due within the horizon or of a capped type) instead of the
// due index up to the horizon.
#include <algorithm>

#include "delayq/log.hpp"
#include "delayq/shard_store.hpp"
#include "detail/engine_core.hpp"
#include "detail/task_state.hpp"

namespace delayq::detail {
namespace {

namespace tsw = task_state_word;

constexpr std::size_t page_size = 1000;

}  // namespace

const type_registry::type_info* engine_core::accept(const task& t, std::string& why) {
  if (!valid_id(t.id)) {
    why = "the engine does not accept its id";
    return nullptr;
  }
  if (!valid_type(t.type)) {
    why = "the engine does not accept its type";
    return nullptr;
  }
  boost::system::error_code ec;
  const type_registry::type_info* type = types_.lookup(t.type, true, ec);
  if (!type) why = "more distinct task types than the engine holds";
  return type;
}

timer_wheel::handle engine_core::hold_locked(task_table& tb, const task& t,
                                             const type_registry::type_info& type,
                                             std::vector<record_id>* overdue, std::int64_t now) {
  const std::int64_t due = std::clamp<std::int64_t>(to_epoch_ms(t.due), 0, latest_due_ms() - 1);
  const timer_wheel::handle h =
      tb.wheel.insert_detached({t.id, t.payload, type.k, due, t.attempts});
  if (h == timer_wheel::npos) return h;
  tb.set_tag(h, tsw::with_state(tb.tag(h), tsw::armed));
  tb.stamp(h, schedule_order());
  if (t.trigger_count > 0) tb.set_trigger(h, t.trigger_count, t.signals);
  if (t.priority != 0 || t.ttr.count() > 0) tb.set_attrs(h, {t.priority, clamped_ttr_ms(t.ttr)});
  // Held as the store has it: counted, never refused (a capacity counts it).
  type.pending.add(1);
  pending_.add(1);
  if (overdue && due <= now && options_.catch_up_rate > 0) {
    overdue->push_back(tb.ref(h));
  } else if (overdue) {
    tb.wheel.arm(h, ticker_.tick_for(due));  // start(): the timer is set once loaded
  } else {
    arm_locked(tb, h, due);
  }
  return h;
}

bool engine_core::hold_found_locked(const task& t, std::uint64_t seq, std::int64_t now,
                                    rejected_tasks& rejected) {
  // The caller holds the lock of this task's table.
  task_table& tb = table_for(hash(t.id));
  if (tb.wheel.find(t.id) != timer_wheel::npos) return true;  // held meanwhile: memory is newer
  if (pager_.erased_since(t.id, seq)) return false;
  if (!owner_->owns(t.id)) return true;  // its shard was lost meanwhile: its new owner runs it
  std::string why;
  const type_registry::type_info* type = accept(t, why);
  if (!type) {
    rejected.emplace_back(t.id, std::move(why));
    return true;
  }
  if (hold_locked(tb, t, *type, nullptr, now) != timer_wheel::npos) ++paged_;
  return true;
}

void engine_core::quarantine_rejected(const rejected_tasks& rejected) {
  for (const auto& [id, why] : rejected) {
    boost::system::error_code qec;
    store_->quarantine(id, why, qec);
    log(log_level::error, "horizon: quarantined stored task '" + id + "': " + why);
  }
}

engine_core::pins::~pins() {
  for (const std::string& id : ids_) {
    if (!e_.pager_.unpin(id)) continue;
    // Looked up and left as it was (a keep, a cancel that found it running):
    // let go of it again if it is far.
    task_table& t = e_.table_for(e_.hash(id));
    std::lock_guard lock(t.mutex);
    const timer_wheel::handle h = t.wheel.find(id);
    if (h != timer_wheel::npos) e_.evict_if_far_locked(t, h);
  }
}

void engine_core::fault_in(std::span<const std::string_view> ids, pins& p,
                           boost::system::error_code& ec) {
  ec = {};
  if (!horizon_on() || ids.empty()) return;
  if (!p.ids_.empty()) return;  // pinned already: held ones stay held
  // The tables of the ids, locked together in order for each step.
  std::vector<task_table*> tables;
  for (std::string_view id : ids) tables.push_back(&table_for(hash(id)));
  std::sort(tables.begin(), tables.end(),
            [](const task_table* a, const task_table* b) { return a->index < b->index; });
  tables.erase(std::unique(tables.begin(), tables.end()), tables.end());
  table_set_lock theirs(std::move(tables));
  // A round repeats only for an id erased while it was read (let go of, say),
  // which the next read sees as it is now.
  for (int round = 0; round < 8; ++round) {
    std::vector<std::string> missing;
    std::uint64_t seq = 0;
    {
      std::lock_guard lock(theirs);
      if (state_.load() != run_state::running) {
        ec = errc::not_running;
        return;
      }
      for (std::string_view id : ids)
        if (table_for(hash(id)).wheel.find(id) == timer_wheel::npos &&
            std::find(missing.begin(), missing.end(), id) == missing.end())
          missing.emplace_back(id);
      // Pinned before the read, under the tables' locks: a record of one of
      // them that appears while the store is read (an async schedule of the
      // id settling: written, then let go of as far) is kept, not let go of
      // behind a read that began before its write landed.
      if (p.ids_.empty())
        for (std::string_view id : ids) pager_.pin(p.ids_.emplace_back(id));
      if (missing.empty()) return;
      seq = pager_.begin_read();
    }
    // Writes queued before the read began (a success's removal, a far
    // schedule) land first: the read sees no record the engine let go of.
    writer_.flush();
    std::vector<std::optional<task>> found;
    try {
      found = store_->find(missing, ec);
    } catch (const std::exception&) {
      ec = errc::store_error;
    }
    rejected_tasks rejected;
    bool again = false;
    {
      std::lock_guard lock(theirs);
      if (!ec) {
        for (std::optional<task>& t : found) {
          if (t && !hold_found_locked(*t, seq, now_ms(), rejected)) again = true;
        }
      }
      pager_.end_read(seq);
    }
    quarantine_rejected(rejected);
    if (ec) {
      log(log_level::warning, "looking up stored tasks failed: " + ec.message());
      return;
    }
    if (!again) return;
  }
  ec = errc::busy;  // the ids kept changing while they were read: let the caller retry
}

std::optional<task> engine_core::find_stored(std::string_view id, boost::system::error_code& ec,
                                             bool* held_meanwhile) const {
  ec.clear();
  if (!horizon_on()) return std::nullopt;
  auto& self = const_cast<engine_core&>(*this);
  self.writer_.flush();  // a task that just succeeded is gone from the store too
  const std::string key(id);
  std::vector<std::optional<task>> found = store_->find(std::span(&key, 1), ec);
  if (ec || found.empty() || !found[0]) return std::nullopt;
  const task_table& t = table_for(hash(id));
  std::lock_guard lock(t.mutex);
  if (t.wheel.find(id) != timer_wheel::npos) {  // held now: ask the table
    if (held_meanwhile) *held_meanwhile = true;
    return std::nullopt;
  }
  return std::move(found[0]);
}

bool engine_core::page_in(std::int64_t from, std::int64_t until, std::uint64_t seq) {
  // A cluster engine reads the shards it holds, one after the other.
  std::vector<std::uint32_t> shards;
  const bool by_shard = owner_->page_by_shard(shards);
  std::size_t next_shard = 0;
  if (by_shard && shards.empty()) return true;
  due_cursor cursor{from + 1, {}};  // (from + 1, "") is before every task due after `from`
  std::vector<task> page;
  rejected_tasks rejected;
  for (;;) {
    page.clear();
    boost::system::error_code ec;
    list_summary got;
    const auto sink = [&](task&& t) { page.push_back(std::move(t)); };
    try {
      got = by_shard ? store_->sharded()->list_due_shard(shards[next_shard], cursor, until,
                                                         page_size, sink, ec)
                     : store_->list_due(cursor, until, page_size, sink, ec);
    } catch (const std::exception&) {
      ec = errc::store_error;
    }
    if (ec) {
      // The tasks of this range must be held before they are due: try again
      // until the store answers (or the engine stops).
      log(log_level::warning, "horizon: reading due tasks from " + store_->describe() +
                                  " failed: " + ec.message() + "; retrying");
      if (!pager_.wait_to_retry()) return false;
      continue;
    }
    {
      std::lock_guard lock(all_);
      quarantined_ += got.quarantined;
      const std::int64_t now = now_ms();
      for (const task& t : page) hold_found_locked(t, seq, now, rejected);
    }
    if (got.tasks + got.quarantined < page_size) {
      if (!by_shard || ++next_shard == shards.size()) break;
      cursor = due_cursor{from + 1, {}};
    }
  }
  quarantine_rejected(rejected);
  return true;
}

}  // namespace delayq::detail
