#include "wire/task_json.hpp"

namespace delayq::server {

nlohmann::json task_json(const delayq::task& t) {
  return nlohmann::json{{"id", t.id},
                        {"type", t.type},
                        {"payload", t.payload},
                        {"due_ms", delayq::to_epoch_ms(t.due)},
                        {"attempts", t.attempts},
                        {"trigger_count", t.trigger_count},
                        {"signals", t.signals},
                        {"priority", t.priority},
                        {"ttr_ms", t.ttr.count()}};
}

}  // namespace delayq::server
