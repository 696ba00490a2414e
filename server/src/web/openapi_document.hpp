// openapi_document: the OpenAPI 3.1 description of the HTTP API
// (server/openapi/openapi.json), built into the binary by
// cmake/embed_files.cmake and served at `GET /v1/openapi.json`
// (docs/server.md, "OpenAPI"). tests/openapi/ checks it against the server.
#pragma once

#include <cstddef>

#include "http/http_server.hpp"
#include "web/static_files.hpp"

namespace delayq::server {

namespace detail {
/// The document, one entry (the generated openapi_asset.cpp defines it).
extern const web_asset openapi_assets[];
extern const std::size_t openapi_assets_count;
}  // namespace detail

/// 200 with the document (`application/json`, `Cache-Control: no-cache`).
/// The route asks for the token like every /v1/ path: the same document
/// is in the repository and in the package for anyone without one.
/// Thread safety: reads constant data only; safe from any thread.
http_answer openapi_answer();

}  // namespace delayq::server
