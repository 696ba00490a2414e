// persistence/roles/dead_record.hpp - a dead-letter record as a backend
// reads it back: decoded, and filed under the id it holds. Internal.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "delayq/dead_letter_store.hpp"
#include "delayq/record_codec.hpp"

namespace delayq::detail::roles {

/// Decodes a dead-letter record read under `id`; a record filed under
/// another id is as corrupt as one that does not decode (both: nullopt,
/// with `why` saying so, for the quarantine).
inline std::optional<dead_letter> decode_dead(std::string_view id, std::string_view raw,
                                              std::string& why) {
  boost::system::error_code dec;
  dead_letter d = decode_dead_letter(raw, dec, &why);
  if (dec) return std::nullopt;
  if (d.task.id != id) {
    why = "record holds id '" + d.task.id + "'";
    return std::nullopt;
  }
  return d;
}

}  // namespace delayq::detail::roles
