// static_files: the dashboard's files (server/web/), built into the binary
// by cmake/embed_files.cmake, and the answers that serve them at `/` and
// `/ui/<file>` (docs/server.md, "Dashboard").
//
// They are served without the token: they hold no data, and the page asks
// for the token itself and sends it with its /v1 calls.
#pragma once

#include <cstddef>
#include <string_view>

#include "http/http_server.hpp"

namespace delayq::server {

namespace detail {
/// One embedded file (the generated web_assets.cpp defines the table).
struct web_asset {
  const char* name;
  const unsigned char* bytes;
  std::size_t size;
};
extern const web_asset web_assets[];
extern const std::size_t web_asset_count;
}  // namespace detail

/// An embedded file by its name ("app.js"), or null.
/// Thread safety: reads constant data only; safe from any thread.
const detail::web_asset* find_web_asset(std::string_view name);

/// The Content-Type for a file name, from its extension.
std::string_view web_content_type(std::string_view name);

/// The answer to `GET /ui/<name>` (`name` decoded; "index.html" for `GET /`):
/// 200 with the file, its Content-Type, `Cache-Control: no-cache` and a
/// Content-Security-Policy that allows nothing from elsewhere; 404
/// `not_found` for an unknown name. Thread safety: safe from any thread.
http_answer web_file_answer(std::string_view name);

}  // namespace delayq::server
