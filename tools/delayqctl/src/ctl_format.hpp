// delayqctl's parsing and formatting helpers: durations, percent-encoding,
// times for people, payload escaping and aligned tables. Pure functions, no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace delayq::ctl {

/// Parses `500ms`, `30s`, `5m`, `2h`, `1d` or a plain number of milliseconds;
/// std::nullopt for anything else (signs, fractions, spaces, overflow).
std::optional<std::int64_t> parse_duration_ms(std::string_view text);

/// Percent-encodes every byte outside RFC 3986's unreserved set
/// (ALPHA / DIGIT / "-" / "." / "_" / "~"), for a path segment or a query value.
std::string percent_encode(std::string_view text);

/// `2026-11-26T01:30:00.250Z` for milliseconds since the Unix epoch.
std::string iso8601_utc(std::int64_t epoch_ms);

/// A compact span: `4m30s`, `2h5m`, `1d3h`, `12s`, `250ms` (two largest units).
std::string compact_span(std::int64_t ms);

/// `in 4m30s`, `5s ago` or `now` for `when_ms` relative to `now_ms`.
std::string relative_time(std::int64_t when_ms, std::int64_t now_ms);

/// `iso8601_utc(when) (relative_time(when, now))`.
std::string when_for_people(std::int64_t when_ms, std::int64_t now_ms);

/// The payload as one printable line: valid UTF-8 kept, control characters
/// and invalid bytes escaped (`\n`, `\t`, `\x00`...). When `max_chars` is
/// not 0 and the result is longer, it is cut to that many characters, the
/// last one being `…`.
std::string printable(std::string_view bytes, std::size_t max_chars = 0);

/// Display width of UTF-8 text (one column per code point).
std::size_t display_width(std::string_view utf8);

/// Rows of cells printed with aligned columns (two spaces apart, the last
/// column not padded). The first row is the header.
std::string render_table(const std::vector<std::vector<std::string>>& rows);

}  // namespace delayq::ctl
