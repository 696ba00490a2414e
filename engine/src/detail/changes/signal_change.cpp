// The signal change: signals to a count-triggered task (scheduled with
// schedule_options::trigger_count). Its count and signals live in its
// table's side table (task_table::trigger_of), since the wheel's records are
// kept small for the ordinary tasks; they travel with every write of the
// task and with its queue reference to the executor.
//
// A signal is one store write of the whole task with its new count, like a
// reschedule: the record is persisting while it is in flight (calls on the
// id wait, no tick can fire it), and the signal is acknowledged only once
// the write landed. The signal that reaches the count also moves the due
// time to now in that same write, so a crash after the acknowledgement finds
// the task due (it runs at once on start) and never loses a counted signal.
// A failed write puts back the old count and due time.
#include <algorithm>
#include <cstdint>

#include "detail/engine_core.hpp"
#include "detail/engine_core_id_call.hpp"
#include "detail/task_state.hpp"

namespace delayq::detail {
namespace {

namespace tsw = task_state_word;

class signal_change final : public change {
 public:
  using change::change;
  void landed(settle_context& c) override {
    c.call.found = true;
    c.engine.arm_locked(c.table, h, c.table.wheel.due_ms(h), &c.after);
    c.engine.evict_if_far_locked(c.table, h);
  }
  void failed(settle_context& c, const boost::system::error_code&) override {
    c.table.set_trigger(h, c.table.trigger_of(h).count, old_signals);
    c.table.wheel.set_due_ms(h, old_due_ms);
    c.engine.arm_locked(c.table, h, old_due_ms, &c.after);
  }

  std::int64_t old_due_ms = 0;
  std::uint32_t old_signals = 0;
};

}  // namespace

signal_result engine_core::signal(std::string_view id, std::uint32_t n,
                                  boost::system::error_code& ec) {
  ec = {};
  if (!running_check(ec)) return {};
  if (n == 0) {
    ec = errc::invalid_signal;
    return {};
  }
  signal_result result;
  change_id(
      id, change_kind::save, id_must::be_held, [](boost::system::error_code&) { return true; },
      [&](id_change& d, boost::system::error_code& dec) {
        const timer_wheel::handle h = d.h;
        if (h == timer_wheel::npos) {
          dec = errc::not_found;
          return false;
        }
        task_table& t = *d.table;
        const std::uint32_t w = t.tag(h);
        const task_table::trigger_counts tc = t.trigger_of(h);
        if (tc.count == 0) {
          dec = errc::not_count_triggered;
          return false;
        }
        // Only a task waiting for its first attempt counts signals: one that
        // is due (queued), running, or waiting for a retry has been triggered.
        if (tsw::state_of(w) != tsw::armed || tc.signals >= tc.count || t.wheel.attempts(h) > 0) {
          dec = errc::already_triggered;
          return false;
        }
        const std::uint32_t signals =
            n > UINT32_MAX - tc.signals ? UINT32_MAX : tc.signals + n;  // saturates
        result = signal_result{signals, tc.count, signals >= tc.count};
        auto& c = d.make<signal_change>(&t, h);
        c.old_due_ms = t.wheel.due_ms(h);
        c.old_signals = tc.signals;
        t.set_tag(h, tsw::with_state(w, tsw::persisting));
        t.wheel.disarm(h);
        t.set_trigger(h, tc.count, signals);
        if (result.triggered) t.wheel.set_due_ms(h, std::min(c.old_due_ms, ticker_.now_ms()));
        return true;
      },
      ec);
  return ec ? signal_result{} : result;
}

}  // namespace delayq::detail
