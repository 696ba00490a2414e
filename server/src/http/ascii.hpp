// ascii: case folding for protocol text (host names, media types), which is
// ASCII whatever the locale.
#pragma once

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>

namespace delayq::server {

/// `s` with A-Z lowered. Thread safety: a pure function.
inline std::string ascii_lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

}  // namespace delayq::server
