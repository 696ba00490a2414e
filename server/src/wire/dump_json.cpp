#include "wire/dump_json.hpp"

namespace delayq::server {

std::string dump_json(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace delayq::server
