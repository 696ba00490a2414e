#include "wire/schedule_json.hpp"

#include "delayq/task.hpp"

namespace delayq::server {

nlohmann::json schedule_json(const delayq::schedule& s) {
  nlohmann::json j{{"id", s.id}, {"type", s.type}, {"payload", s.payload}};
  if (!s.cron.empty()) {
    j["cron"] = s.cron;
    j["timezone"] = s.timezone.empty() ? std::string("UTC") : s.timezone;
  } else {
    j["every_ms"] = s.every.count();
  }
  if (s.start) j["start_ms"] = to_epoch_ms(*s.start);
  if (s.end) j["end_ms"] = to_epoch_ms(*s.end);
  j["missed"] = std::string(to_string(s.missed));
  j["priority"] = s.priority;
  j["ttr_ms"] = s.ttr.count();
  j["conflict"] = s.conflict == on_conflict::keep      ? "keep"
                  : s.conflict == on_conflict::replace ? "replace"
                                                       : "reject";
  return j;
}

nlohmann::json schedule_json(const delayq::schedule& s,
                             const std::vector<std::chrono::system_clock::time_point>& next) {
  nlohmann::json j = schedule_json(s);
  nlohmann::json due = nlohmann::json::array();
  for (const auto& t : next) due.push_back(to_epoch_ms(t));
  j["next_due_ms"] = std::move(due);
  return j;
}

}  // namespace delayq::server
