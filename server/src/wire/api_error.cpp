#include "wire/api_error.hpp"

#include "delayq/error.hpp"

namespace delayq::server {

api_error bad_request(std::string message) { return {400, "bad_request", std::move(message)}; }
api_error not_found(std::string message) { return {404, "not_found", std::move(message)}; }
api_error conflict(std::string name, std::string message) {
  return {409, std::move(name), std::move(message)};
}

api_error from_error_code(const boost::system::error_code& ec, const std::string& context) {
  std::string message = context.empty() ? ec.message() : context + ": " + ec.message();
  if (ec.category() != delayq_category()) return {503, "store_error", std::move(message)};
  // Names are the errc enumerators: clients switch on them.
  switch (static_cast<errc>(ec.value())) {
    case errc::invalid_type: return {400, "invalid_type", std::move(message)};
    case errc::unknown_type: return {400, "unknown_type", std::move(message)};
    case errc::invalid_id: return {400, "invalid_id", std::move(message)};
    case errc::invalid_delay: return {400, "invalid_delay", std::move(message)};
    case errc::due_too_far: return {400, "due_too_far", std::move(message)};
    case errc::payload_too_large: return {413, "payload_too_large", std::move(message)};
    case errc::duplicate_id: return {409, "duplicate_id", std::move(message)};
    // 429, not 409: 409 stays for conflicts about one id or lease; a full
    // type is a rate of work the client must slow down to (try later).
    case errc::type_full: return {429, "type_full", std::move(message)};
    case errc::not_found: return {404, "not_found", std::move(message)};
    case errc::already_triggered: return {409, "already_triggered", std::move(message)};
    case errc::not_count_triggered: return {409, "not_count_triggered", std::move(message)};
    case errc::invalid_signal: return {400, "bad_request", std::move(message)};
    case errc::invalid_ttr: return {400, "bad_request", std::move(message)};
    case errc::invalid_schedule: return {400, "invalid_schedule", std::move(message)};
    case errc::queue_full: return {503, "queue_full", std::move(message)};
    case errc::busy: return {503, "busy", std::move(message)};
    case errc::not_running: return {503, "draining", std::move(message)};
    case errc::store_unavailable: return {503, "store_unavailable", std::move(message)};
    case errc::outcome_unknown: return {503, "outcome_unknown", std::move(message)};
    case errc::unsupported: return {501, "unsupported", std::move(message)};
    // 421 Misdirected Request: the task's shard is held by another instance
    // of the cluster (--cluster); ask that one.
    case errc::not_owner: return {421, "not_owner", std::move(message)};
    // The shard changed hands while the call decided: nothing changed, and
    // this instance no longer answers for the task.
    case errc::lease_lost: return {421, "not_owner", std::move(message)};
    default: return {503, "store_error", std::move(message)};
  }
}

}  // namespace delayq::server
