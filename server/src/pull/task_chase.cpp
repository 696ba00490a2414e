#include "pull/task_chase.hpp"

#include <optional>
#include <thread>

namespace delayq::server {

chase_result chase(delayq::engine& engine, lease_broker& broker,
                   const std::function<bool(const std::string& type)>& pushed,
                   const std::string& id,
                   const std::function<bool(boost::system::error_code&)>& act,
                   boost::system::error_code& ec, std::chrono::milliseconds patience,
                   std::chrono::milliseconds transit_patience) {
  using steady = std::chrono::steady_clock;
  const auto give_up = steady::now() + patience;
  std::optional<steady::time_point> unheld_since;
  bool gave_back = false;
  auto pause = std::chrono::milliseconds{1};
  while (steady::now() < give_up) {
    ec.clear();
    if (act(ec)) return chase_result::done;
    if (ec) return chase_result::failed;
    auto st = engine.status(id, ec);
    if (ec) return chase_result::failed;
    if (!st) return chase_result::not_found;
    if (st->state == task_state::running) {
      if (broker.release_ready(id)) {
        gave_back = true;
        pause = std::chrono::milliseconds{1};
        continue;
      }
      if (broker.state_of(id) == lease_broker::held::reserved) return chase_result::running;
      if (!gave_back) {
        if (pushed(st->task.type)) return chase_result::running;  // being pushed
        const auto now = steady::now();
        if (!unheld_since) unheld_since = now;
        if (now - *unheld_since >= transit_patience) return chase_result::running;
      }
    }
    // Settling, on its way to the broker, or moved between the two calls:
    // one tick is the window between a settled give-back and the next fire.
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds{4});
  }
  return chase_result::busy;
}

}  // namespace delayq::server
