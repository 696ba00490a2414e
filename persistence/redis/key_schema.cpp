// persistence/redis/key_schema.cpp - the key names of redis_store (see
// key_schema.hpp).
#include "key_schema.hpp"

namespace delayq::detail::redis {

store_keys::store_keys(const std::string& prefix) {
  const std::string tag = "{" + prefix + "}:";
  tasks = tag + "tasks";
  due = tag + "due";
  quarantine = tag + "quarantine";
  quarantine_reason = tag + "quarantine:reason";
  meta = tag + "meta";
  dead = tag + "dead";
  dead_by_time = tag + "dead:by_time";
  dead_quarantine = tag + "dead:quarantine";
  dead_quarantine_reason = tag + "dead:quarantine:reason";
  settings = tag + "settings";
  sequences = tag + "sequences";
  schedules = tag + "schedules";
}

store_keys::store_keys(const std::string& prefix, std::uint32_t shard)
    : store_keys(prefix + ":" + std::to_string(shard)) {}

}  // namespace delayq::detail::redis
