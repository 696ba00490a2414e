// engine_core: what the horizon's reads do to the wheel (horizon_pager.hpp
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

const type_registry::type_info* engine_core::accept_locked(const task& t, std::string& why) {
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

timer_wheel::handle engine_core::hold_locked(const task& t, const type_registry::type_info& type,
                                             std::vector<timer_wheel::handle>* overdue,
                                             std::int64_t now) {
  const std::int64_t due = std::clamp<std::int64_t>(to_epoch_ms(t.due), 0, latest_due_ms() - 1);
  const timer_wheel::handle h = wheel_.insert_detached({t.id, t.payload, type.k, due, t.attempts});
  if (h == timer_wheel::npos) return h;
  set_tag(h, tsw::with_state(tag(h), tsw::armed));
  if (t.trigger_count > 0) set_trigger_locked(h, t.trigger_count, t.signals);
  if (t.priority != 0 || t.ttr.count() > 0) set_attrs_locked(h, attrs_from(t));
  ++kind_pending(type.k);
  if (overdue && due <= now && options_.catch_up_rate > 0) {
    overdue->push_back(h);
  } else if (overdue) {
    wheel_.arm(h, ticker_.tick_for(due));  // start(): the timer is set once loaded
  } else {
    arm_locked(h, due);
  }
  return h;
}

bool engine_core::hold_found_locked(const task& t, std::uint64_t seq, std::int64_t now,
                                    rejected_tasks& rejected) {
  if (wheel_.find(t.id) != timer_wheel::npos) return true;  // held meanwhile: memory is newer
  if (pager_.erased_since_locked(t.id, seq)) return false;
  if (!owns_locked(t.id)) return true;  // its shard was lost meanwhile: its new owner runs it
  std::string why;
  const type_registry::type_info* type = accept_locked(t, why);
  if (!type) {
    rejected.emplace_back(t.id, std::move(why));
    return true;
  }
  if (hold_locked(t, *type, nullptr, now) != timer_wheel::npos) ++paged_;
  return true;
}

void engine_core::quarantine_rejected(const rejected_tasks& rejected) {
  for (const auto& [id, why] : rejected) {
    boost::system::error_code qec;
    store_->quarantine(id, why, qec);
    log(log_level::error, "horizon: quarantined stored task '" + id + "': " + why);
  }
}

void engine_core::evict_if_far_locked(timer_wheel::handle h) {
  if (!horizon_on() || !wheel_.is_indexed(h)) return;
  const std::uint32_t w = tag(h);
  if (tsw::state_of(w) != tsw::armed || (w & tsw::fresh)) return;
  // A task of a shard another instance holds is never held here (clusters).
  const bool owned = owns_locked(wheel_.id(h));
  if (owned && wheel_.due_ms(h) <= pager_.watermark_locked()) return;
  // A type with a capacity is held whole: its count must see every task.
  if (owned && types_.at(wheel_.kind(h)).capacity != 0) return;
  // A call that looked the id up decides on it next: keep it until then.
  if (pager_.pinned_locked(wheel_.id(h))) return;
  erase_locked(h);  // the store has it; the pager brings it back in time
}

engine_core::pins::~pins() {
  if (ids_.empty()) return;
  std::lock_guard lock(e_.mutex_);
  for (const std::string& id : ids_) {
    if (!e_.pager_.unpin_locked(id)) continue;
    // Looked up and left as it was (a keep, a cancel that found it running):
    // let go of it again if it is far.
    const timer_wheel::handle h = e_.wheel_.find(id);
    if (h != timer_wheel::npos) e_.evict_if_far_locked(h);
  }
}

void engine_core::fault_in(std::span<const std::string_view> ids, pins& p,
                           boost::system::error_code& ec) {
  ec = {};
  if (!horizon_on() || ids.empty()) return;
  if (!p.ids_.empty()) return;  // pinned already: held ones stay held
  // A round repeats only for an id erased while it was read (let go of, say),
  // which the next read sees as it is now.
  for (int round = 0; round < 8; ++round) {
    std::vector<std::string> missing;
    std::uint64_t seq = 0;
    {
      std::lock_guard lock(mutex_);
      if (state_.load() != run_state::running) {
        ec = errc::not_running;
        return;
      }
      for (std::string_view id : ids)
        if (wheel_.find(id) == timer_wheel::npos &&
            std::find(missing.begin(), missing.end(), id) == missing.end())
          missing.emplace_back(id);
      // Pinned before the read, in this hold of the lock: a record of one of
      // them that appears while the store is read (an async schedule of the
      // id settling: written, then let go of as far) is kept, not let go of
      // behind a read that began before its write landed.
      if (p.ids_.empty())
        for (std::string_view id : ids) pager_.pin_locked(p.ids_.emplace_back(id));
      if (missing.empty()) return;
      seq = pager_.begin_read_locked();
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
      std::lock_guard lock(mutex_);
      if (!ec) {
        for (std::optional<task>& t : found) {
          if (t && !hold_found_locked(*t, seq, now_ms(), rejected)) again = true;
        }
      }
      pager_.end_read_locked(seq);
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
  std::lock_guard lock(mutex_);
  if (wheel_.find(id) != timer_wheel::npos) {  // held now: ask the wheel
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
      std::lock_guard lock(mutex_);
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
