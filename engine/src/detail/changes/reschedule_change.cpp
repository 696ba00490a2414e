// The reschedule change: a task that is not running moves to a new due
// time. A waiting one is taken out of its slot; a due one is taken from the
// workers by moving its state word to the next generation (its queue
// reference goes stale). Once the save landed it is armed at the new time;
// if the save failed, at the old one.
#include "detail/engine_core.hpp"
#include "detail/engine_core_id_call.hpp"
#include "detail/task_state.hpp"

namespace delayq::detail {
namespace {

namespace tsw = task_state_word;

class reschedule_change final : public change {
 public:
  using change::change;
  void landed(settle_context& c) override {
    c.call.found = true;
    c.engine.arm_locked(c.table, h, c.table.wheel.due_ms(h), &c.after);
    c.engine.evict_if_far_locked(c.table, h);
  }
  void failed(settle_context& c, const boost::system::error_code&) override {
    c.table.wheel.set_due_ms(h, old_due_ms);
    c.engine.arm_locked(c.table, h, old_due_ms, &c.after);
  }

  std::int64_t old_due_ms = 0;
};

}  // namespace

bool engine_core::reschedule(std::string_view id, std::chrono::system_clock::time_point due,
                             boost::system::error_code& ec) {
  ec = {};
  if (!running_check(ec)) return false;
  std::int64_t due_ms = 0;
  return change_id(
      id, change_kind::save, id_must::be_held,
      [&](boost::system::error_code& pec) {
        due_ms = due_at(due, now_ms(), options_.max_delay, pec);
        return !pec;
      },
      [&](id_change& d, boost::system::error_code&) {
        if (d.h == timer_wheel::npos) return false;
        task_table& t = *d.table;
        const timer_wheel::handle h = d.h;
        std::uint32_t w = t.tag(h);
        if (tsw::state_of(w) == tsw::armed) {
          t.set_tag(h, tsw::with_state(w, tsw::persisting));
        } else if (tsw::state_of(w) == tsw::queued &&
                   tsw::word(t.wheel.tag(h))
                       .compare_exchange_strong(w, tsw::next_generation(w, tsw::persisting),
                                                std::memory_order_acq_rel)) {
          // Taken from the ready queue: its reference there is stale now.
          dispatcher_.count_ready(t.wheel.kind(h), -1);
        } else {
          return false;  // running now
        }
        auto& c = d.make<reschedule_change>(&t, h);
        c.old_due_ms = t.wheel.due_ms(h);
        t.wheel.disarm(h);
        t.wheel.set_due_ms(h, due_ms);
        return true;
      },
      ec);
}

}  // namespace delayq::detail
