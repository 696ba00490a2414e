// The cancel change: cancel(id) returns true only if no attempt of the task
// starts after it returns, and the task has left the store (design.md, "A
// truthful cancel"). Two cases, decided under the id's table lock:
//
//   cancel_change          the task waits (armed in the wheel): it is taken
//                          out of its slot; once the removal landed it goes,
//                          and if the removal failed it is armed again
//   cancel_queued_change   the task is due and no worker started it yet: one
//                          compare-and-swap of its state word from queued to
//                          cancelling takes it from the workers (a worker
//                          starts it only by swapping queued to running:
//                          exactly one wins); once the removal landed it is
//                          dead (whoever holds its queue reference frees it),
//                          and if the removal failed it is due again
//
// A task whose attempt runs is not cancelled: cancel() answers false.
#include "detail/engine_core.hpp"
#include "detail/engine_core_id_call.hpp"
#include "detail/task_state.hpp"

namespace delayq::detail {
namespace {

namespace tsw = task_state_word;

class cancel_change final : public change {
 public:
  using change::change;
  void landed(settle_context& c) override {
    c.engine.note_cancelled(c.table, h);
    c.engine.erase_locked(c.table, h);
    c.call.found = true;
  }
  void failed(settle_context& c, const boost::system::error_code&) override {
    // Held: the failed removal may yet land (a timeout), and the task runs.
    c.engine.arm_locked(c.table, h, c.table.wheel.due_ms(h), &c.after);
  }
};

class cancel_queued_change final : public change {
 public:
  using change::change;
  void landed(settle_context& c) override {
    task_table& t = c.table;
    c.engine.note_cancelled(t, h);
    c.call.found = true;
    c.engine.workers().count_ready(t.wheel.kind(h), -1);
    c.engine.unindex_locked(t, h);
    // Its queue reference frees the record, unless a worker already let go
    // of it (orphaned): then nobody else will.
    auto word = tsw::word(t.wheel.tag(h));
    std::uint32_t w = word.load(std::memory_order_acquire);
    while (!(w & tsw::orphaned) && !word.compare_exchange_weak(w, tsw::with_state(w, tsw::dead),
                                                               std::memory_order_acq_rel)) {
    }
    if (w & tsw::orphaned) c.engine.erase_locked(t, h);
  }
  void failed(settle_context& c, const boost::system::error_code&) override {
    // The cancel failed: the task is due again, as it was.
    task_table& t = c.table;
    auto word = tsw::word(t.wheel.tag(h));
    std::uint32_t w = word.load(std::memory_order_acquire);
    while (!(w & tsw::orphaned) && !word.compare_exchange_weak(w, tsw::with_state(w, tsw::queued),
                                                               std::memory_order_acq_rel)) {
    }
    if (w & tsw::orphaned) {
      const std::uint32_t q = tsw::next_queued(w);
      word.store(q, std::memory_order_release);
      c.after.requeue.push_back(c.engine.ready_of(t, h, q));
    }
  }
};

}  // namespace

bool engine_core::cancel(std::string_view id, boost::system::error_code& ec) {
  ec = {};
  if (!running_check(ec)) return false;
  return change_id(
      id, change_kind::remove, id_must::be_held, [](boost::system::error_code&) { return true; },
      [&](id_change& d, boost::system::error_code&) {
        if (d.h == timer_wheel::npos) return false;
        task_table& t = *d.table;
        std::uint32_t w = t.tag(d.h);
        if (tsw::state_of(w) == tsw::armed) {
          t.wheel.disarm(d.h);
          t.set_tag(d.h, tsw::with_state(w, tsw::persisting));
          d.make<cancel_change>(&t, d.h);
          return true;
        }
        if (tsw::state_of(w) == tsw::queued &&
            tsw::word(t.wheel.tag(d.h))
                .compare_exchange_strong(w, tsw::with_state(w, tsw::cancelling),
                                         std::memory_order_acq_rel)) {
          // Due and not started: from here no worker can start it.
          d.make<cancel_queued_change>(&t, d.h);
          return true;
        }
        return false;  // running now (or a worker just won the swap)
      },
      ec);
}

}  // namespace delayq::detail
