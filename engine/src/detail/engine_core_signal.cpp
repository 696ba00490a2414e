// engine_core: count-triggered tasks. A task scheduled with a trigger count
// runs when it has received that many signals or at its due time, whichever
// comes first. Its count and signals live beside the wheel (triggers_, by
// record), since the wheel's records are kept small for the ordinary tasks;
// they travel with every write of the task (task_of()) and with its queue
// reference to the executor (ready_of()).
//
// A signal is one store write of the whole task with its new count, like a
// reschedule: the record is persisting while it is in flight (calls on the
// id wait, no tick can fire it), and the signal is acknowledged only once the
// write landed. The signal that reaches the count also moves the due time to
// now in that same write, so a crash after the acknowledgement finds the task
// due (it runs at once on start) and never loses a counted signal.
#include <algorithm>
#include <cstdint>

#include "detail/engine_core.hpp"
#include "detail/engine_core_id_call.hpp"
#include "detail/task_state.hpp"

namespace delayq::detail {
namespace {
namespace tsw = task_state_word;
}  // namespace

engine_core::trigger_counts engine_core::trigger_of(timer_wheel::handle h) const {
  if (triggers_.empty()) return {};  // the usual case: no count-triggered task held
  const auto it = triggers_.find(h);
  return it == triggers_.end() ? trigger_counts{} : it->second;
}

void engine_core::set_trigger_locked(timer_wheel::handle h, std::uint32_t count,
                                     std::uint32_t signals) {
  if (count == 0)
    triggers_.erase(h);
  else
    triggers_[h] = trigger_counts{count, signals};
}

ready_ref engine_core::ready_of(timer_wheel::handle h, std::uint32_t word) const {
  ready_ref r{h, word, wheel_.kind(h), wheel_.view(h)};
  const trigger_counts tc = trigger_of(h);
  r.trigger_count = tc.count;
  r.signals = tc.signals;
  const task_attrs a = attrs_of(h);
  r.priority = a.priority;
  r.ttr_ms = a.ttr_ms;
  r.fence = owner_->fence_of_locked(h);
  return r;
}

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
        const std::uint32_t w = tag(h);
        const trigger_counts tc = trigger_of(h);
        if (tc.count == 0) {
          dec = errc::not_count_triggered;
          return false;
        }
        // Only a task waiting for its first attempt counts signals: one that
        // is due (queued), running, or waiting for a retry has been triggered.
        if (tsw::state_of(w) != tsw::armed || tc.signals >= tc.count || wheel_.attempts(h) > 0) {
          dec = errc::already_triggered;
          return false;
        }
        const std::uint32_t signals =
            n > UINT32_MAX - tc.signals ? UINT32_MAX : tc.signals + n;  // saturates
        result = signal_result{signals, tc.count, signals >= tc.count};
        d.why = p_signal;
        d.old_due_ms = wheel_.due_ms(h);
        d.old_signals = tc.signals;
        set_tag(h, tsw::with_state(w, tsw::persisting));
        wheel_.disarm(h);
        set_trigger_locked(h, tc.count, signals);
        if (result.triggered) wheel_.set_due_ms(h, std::min(d.old_due_ms, ticker_.now_ms()));
        return true;
      },
      ec);
  return ec ? signal_result{} : result;
}

}  // namespace delayq::detail
