#include "detail/task_table.hpp"

#include <algorithm>

namespace delayq::detail {

task_table::task_table(std::uint32_t i, std::size_t slots, const timer_wheel* same_hash)
    : index(i), wheel(same_hash ? timer_wheel(slots, *same_hash) : timer_wheel(slots)) {}

task_table::trigger_counts task_table::trigger_of(timer_wheel::handle h) const {
  if (triggers_.empty()) return {};  // the usual case: no count-triggered task held
  const auto it = triggers_.find(h);
  return it == triggers_.end() ? trigger_counts{} : it->second;
}

void task_table::set_trigger(timer_wheel::handle h, std::uint32_t count, std::uint32_t signals) {
  if (count == 0)
    triggers_.erase(h);
  else
    triggers_[h] = trigger_counts{count, signals};
}

task_table::task_attrs task_table::attrs_of(timer_wheel::handle h) const {
  return h < attrs_.size() ? attrs_[h] : task_attrs{};
}

void task_table::set_attrs(timer_wheel::handle h, task_attrs a) {
  if (h >= attrs_.size()) {
    if (a.priority == 0 && a.ttr_ms == 0) return;
    attrs_.resize(std::max<std::size_t>(2 * attrs_.size(), h + 1024));
  }
  attrs_[h] = a;
}

void task_table::forget(timer_wheel::handle h) {
  if (!triggers_.empty()) triggers_.erase(h);
  if (h < attrs_.size()) attrs_[h] = {};
  wheel.erase(h);
}

}  // namespace delayq::detail
