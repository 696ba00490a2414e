#include "web/openapi_document.hpp"

namespace delayq::server {

http_answer openapi_answer() {
  const detail::web_asset& doc = detail::openapi_assets[0];
  http_answer a;
  a.content_type = "application/json";
  a.body.assign(reinterpret_cast<const char*>(doc.bytes), doc.size);
  // A new server version serves a new document: never a stale one.
  a.headers.emplace_back("Cache-Control", "no-cache");
  a.headers.emplace_back("X-Content-Type-Options", "nosniff");
  return a;
}

}  // namespace delayq::server
