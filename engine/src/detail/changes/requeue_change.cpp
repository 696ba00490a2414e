// The dead letters: requeue (a dead letter back as a task, its attempt
// count reset) and purge (a dead letter deleted), and the reads of them.
// Dead letters are not held in memory: the reads go to the store, after
// the writes queued so far (a task that just died is listed).
//
//   requeue_change   a new record, written with the dead letter's removal
//                    in one change (change_kind::revive): armed once it
//                    landed (one dead letter fewer), erased if it failed
//   purge_change     no record: one dead letter fewer once it landed
#include "detail/engine_core.hpp"
#include "detail/engine_core_id_call.hpp"
#include "detail/task_state.hpp"

namespace delayq::detail {
namespace {

namespace tsw = task_state_word;

class requeue_change final : public change {
 public:
  using change::change;
  void landed(settle_context& c) override {
    c.engine.arm_locked(c.table, h, c.table.wheel.due_ms(h), &c.after);
    c.call.found = true;
    c.engine.note_dead(-1);
    c.engine.evict_if_far_locked(c.table, h);
  }
  void failed(settle_context& c, const boost::system::error_code&) override {
    c.engine.erase_locked(c.table, h);
  }
};

class purge_change final : public change {
 public:
  purge_change() : change(nullptr, timer_wheel::npos) {}
  void landed(settle_context& c) override {
    c.call.found = true;
    c.engine.note_dead(-1);
  }
  void failed(settle_context&, const boost::system::error_code&) override {}
};

}  // namespace

std::vector<dead_letter> engine_core::dead_letters(std::size_t offset, std::size_t limit,
                                                   boost::system::error_code& ec) const {
  ec = {};
  if (!running_check(ec)) return {};
  const_cast<store_writer&>(writer_).flush();
  dead_letter_store* const dead = dead_letters_of(*store_, ec);  // null: unsupported
  return dead ? dead->list_dead(offset, limit, ec) : std::vector<dead_letter>{};
}

std::optional<dead_letter> engine_core::find_dead(std::string_view id,
                                                  boost::system::error_code& ec) const {
  ec = {};
  if (!running_check(ec)) return std::nullopt;
  const_cast<store_writer&>(writer_).flush();  // as dead_letters()
  dead_letter_store* const dead = dead_letters_of(*store_, ec);
  return dead ? dead->find_dead(id, ec) : std::nullopt;
}

bool engine_core::requeue(std::string_view id, std::chrono::system_clock::time_point due,
                          boost::system::error_code& ec) {
  ec = {};
  if (!running_check(ec)) return false;
  std::int64_t due_ms = 0;
  std::optional<dead_letter> d;
  // A revive always goes to the writer (change_kind::revive): even a store
  // that keeps no live tasks holds the dead letter (it writes a purge then).
  return change_id(
      id, change_kind::revive, id_must::be_free,
      [&](boost::system::error_code& pec) {
        due_ms = due_at(due, now_ms(), options_.max_delay, pec);
        if (pec) return false;
        writer_.flush();
        dead_letter_store* const dead = dead_letters_of(*store_, pec);  // null: unsupported
        if (dead) d = dead->find_dead(id, pec);
        return !pec && d.has_value();
      },
      [&](id_change& c, boost::system::error_code& dec) {
        const type_registry::type_info* type =
            valid_type(d->task.type) ? types_.lookup(d->task.type, true, dec) : nullptr;
        if (!type) {
          if (!dec) dec = errc::invalid_type;
          return false;
        }
        // The counts are reserved before the record is made (as a schedule's).
        if (!pending_.reserve(1)) {
          dec = errc::queue_full;
          return false;
        }
        if (!type->pending.reserve(1)) {  // an uncapped type's always holds
          pending_.add(-1);
          dec = errc::type_full;
          return false;
        }
        task_table& t = *c.table;
        const timer_wheel::handle h =
            t.wheel.insert_detached({d->task.id, d->task.payload, type->k, due_ms, 0}, c.hash);
        t.set_tag(h, tsw::with_state(t.tag(h), tsw::persisting) | tsw::fresh);
        t.stamp(h, schedule_order());
        // A requeue keeps its priority and ttr (not its trigger count).
        t.set_attrs(h, {d->task.priority, clamped_ttr_ms(d->task.ttr)});
        c.make<requeue_change>(&t, h);
        return true;
      },
      ec);
}

bool engine_core::purge(std::string_view id, boost::system::error_code& ec) {
  ec = {};
  if (!running_check(ec)) return false;
  writer_.flush();
  dead_letter_store* const dead = dead_letters_of(*store_, ec);  // null: unsupported
  if (!dead) return false;
  std::optional<dead_letter> d = dead->find_dead(id, ec);
  if (ec || !d) return false;
  const auto call = std::make_shared<call_state>();
  call_state inline_result;
  after_lock after;
  bool queued = false;
  {
    write_op op;
    op.what = change_kind::purge;
    op.t.id = std::string(id);
    auto c = std::make_unique<purge_change>();
    c->call = call;
    op.ctx = std::move(c);
    queued = submit_locked(std::span(&op, 1), call, inline_result, after, true);
  }
  run_after(after);
  return wait_answer(call, queued, inline_result, ec);
}

}  // namespace delayq::detail
