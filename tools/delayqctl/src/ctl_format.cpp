#include "ctl_format.hpp"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <limits>

namespace delayq::ctl {

std::optional<std::int64_t> parse_duration_ms(std::string_view text) {
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0) return std::nullopt;
  const std::string_view unit = text.substr(digits);
  std::int64_t scale = 0;
  if (unit.empty() || unit == "ms")
    scale = 1;
  else if (unit == "s")
    scale = 1000;
  else if (unit == "m")
    scale = 60'000;
  else if (unit == "h")
    scale = 3'600'000;
  else if (unit == "d")
    scale = 86'400'000;
  else
    return std::nullopt;
  constexpr std::int64_t max = std::numeric_limits<std::int64_t>::max();
  std::int64_t value = 0;
  for (char ch : text.substr(0, digits)) {
    const int d = ch - '0';
    if (value > (max - d) / 10) return std::nullopt;
    value = value * 10 + d;
  }
  if (value > max / scale) return std::nullopt;
  return value * scale;
}

std::string percent_encode(std::string_view text) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    const auto b = static_cast<unsigned char>(ch);
    const bool unreserved = (b >= 'A' && b <= 'Z') || (b >= 'a' && b <= 'z') ||
                            (b >= '0' && b <= '9') || b == '-' || b == '.' || b == '_' || b == '~';
    if (unreserved) {
      out += ch;
    } else {
      out += '%';
      out += hex[b >> 4];
      out += hex[b & 0xF];
    }
  }
  return out;
}

std::string iso8601_utc(std::int64_t epoch_ms) {
  // Floor division, so times before 1970 still print correctly.
  std::int64_t secs = epoch_ms / 1000;
  std::int64_t ms = epoch_ms % 1000;
  if (ms < 0) {
    ms += 1000;
    secs -= 1;
  }
  const auto t = static_cast<std::time_t>(secs);
  std::tm tm{};
  if (gmtime_r(&t, &tm) == nullptr) return std::to_string(epoch_ms) + "ms";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}

std::string compact_span(std::int64_t ms) {
  if (ms < 0) ms = ms == std::numeric_limits<std::int64_t>::min() ? 0 : -ms;
  if (ms < 1000) return std::to_string(ms) + "ms";
  struct unit {
    std::int64_t ms;
    const char* name;
  };
  static constexpr unit units[] = {{86'400'000, "d"}, {3'600'000, "h"}, {60'000, "m"}, {1000, "s"}};
  std::string out;
  int shown = 0;
  for (const unit& u : units) {
    const std::int64_t n = ms / u.ms;
    ms %= u.ms;
    if (n == 0 && shown == 0) continue;
    if (n != 0) out += std::to_string(n) + u.name;
    if (++shown == 2) break;
  }
  return out;
}

std::string relative_time(std::int64_t when_ms, std::int64_t now_ms) {
  const std::int64_t diff = when_ms - now_ms;
  if (diff > -1000 && diff < 1000) return "now";
  return diff > 0 ? "in " + compact_span(diff) : compact_span(diff) + " ago";
}

std::string when_for_people(std::int64_t when_ms, std::int64_t now_ms) {
  return iso8601_utc(when_ms) + " (" + relative_time(when_ms, now_ms) + ")";
}

namespace {

// Length of the valid UTF-8 sequence at the start of `s` (0: invalid), refusing
// overlong forms, surrogates and code points past U+10FFFF.
std::size_t utf8_sequence(std::string_view s) {
  const auto b0 = static_cast<unsigned char>(s[0]);
  std::size_t n = 0;
  std::uint32_t cp = 0;
  if (b0 < 0x80) return 1;
  if (b0 >= 0xC2 && b0 <= 0xDF)
    n = 2, cp = b0 & 0x1F;
  else if (b0 >= 0xE0 && b0 <= 0xEF)
    n = 3, cp = b0 & 0x0F;
  else if (b0 >= 0xF0 && b0 <= 0xF4)
    n = 4, cp = b0 & 0x07;
  else
    return 0;
  if (s.size() < n) return 0;
  for (std::size_t i = 1; i < n; ++i) {
    const auto b = static_cast<unsigned char>(s[i]);
    if ((b & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3F);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF))) return 0;
  if (cp >= 0xD800 && cp <= 0xDFFF) return 0;
  return n;
}

// Display width of one code point: C1 controls and U+2028/2029 are escaped
// like C0 ones, so they never reach a terminal raw.
bool printable_code_point(std::string_view seq) {
  if (seq.size() == 2 && static_cast<unsigned char>(seq[0]) == 0xC2 &&
      static_cast<unsigned char>(seq[1]) < 0xA0)
    return false;  // U+0080-U+009F
  if (seq == "\u2028" || seq == "\u2029") return false;
  return true;
}

}  // namespace

std::string printable(std::string_view bytes, std::size_t max_chars) {
  static constexpr char hex[] = "0123456789abcdef";
  // Each element is one displayed character (an escape counts as its length).
  std::vector<std::string> chars;
  std::size_t width = 0;
  const std::size_t stop = max_chars == 0 ? std::numeric_limits<std::size_t>::max() : max_chars;
  std::string out;
  std::size_t i = 0;
  bool cut = false;
  while (i < bytes.size()) {
    std::string piece;
    std::size_t piece_width = 1;
    const std::size_t n = utf8_sequence(bytes.substr(i));
    const auto b = static_cast<unsigned char>(bytes[i]);
    if (n == 1 && b >= 0x20 && b < 0x7F && b != '\\') {
      piece.assign(1, bytes[i]);
    } else if (n > 1 && printable_code_point(bytes.substr(i, n))) {
      piece.assign(bytes.substr(i, n));
    } else {
      const std::size_t len = n == 0 ? 1 : n;
      for (std::size_t k = 0; k < len; ++k) {
        const auto c = static_cast<unsigned char>(bytes[i + k]);
        switch (c) {
          case '\\': piece += "\\\\"; break;
          case '\n': piece += "\\n"; break;
          case '\r': piece += "\\r"; break;
          case '\t': piece += "\\t"; break;
          default:
            piece += "\\x";
            piece += hex[c >> 4];
            piece += hex[c & 0xF];
        }
      }
      piece_width = piece.size();
    }
    if (width + piece_width > stop) {
      cut = true;
      break;
    }
    width += piece_width;
    out += piece;
    chars.push_back(std::move(piece));
    i += n == 0 ? 1 : n;
  }
  if (cut) {
    // Make room for the ellipsis: drop whole characters until one column frees.
    while (!chars.empty() && width + 1 > stop) {
      width -= display_width(chars.back());
      out.resize(out.size() - chars.back().size());
      chars.pop_back();
    }
    out += "\u2026";
  }
  return out;
}

std::size_t display_width(std::string_view utf8) {
  std::size_t w = 0;
  for (char ch : utf8) {
    if ((static_cast<unsigned char>(ch) & 0xC0) != 0x80) ++w;
  }
  return w;
}

std::string render_table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> widths;
  for (const auto& row : rows) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (std::size_t c = 0; c < row.size(); ++c)
      widths[c] = std::max(widths[c], display_width(row[c]));
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line.append(widths[c] - display_width(row[c]) + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line;
    out += '\n';
  }
  return out;
}

}  // namespace delayq::ctl
