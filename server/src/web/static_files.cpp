#include "web/static_files.hpp"

#include <string>

namespace delayq::server {

const detail::web_asset* find_web_asset(std::string_view name) {
  for (std::size_t i = 0; i < detail::web_asset_count; ++i)
    if (name == detail::web_assets[i].name) return &detail::web_assets[i];
  return nullptr;
}

std::string_view web_content_type(std::string_view name) {
  if (name.ends_with(".html")) return "text/html; charset=utf-8";
  if (name.ends_with(".js")) return "text/javascript; charset=utf-8";
  if (name.ends_with(".css")) return "text/css; charset=utf-8";
  if (name.ends_with(".svg")) return "image/svg+xml";
  if (name.ends_with(".png")) return "image/png";
  return "application/octet-stream";
}

http_answer web_file_answer(std::string_view name) {
  const detail::web_asset* f = find_web_asset(name);
  if (!f) return error_answer(404, "not_found", "no such file: /ui/" + std::string(name));
  http_answer a;
  a.content_type = std::string(web_content_type(name));
  a.body.assign(reinterpret_cast<const char*>(f->bytes), f->size);
  // no-cache: the browser asks again (cheap), so a new server version is
  // never shown with the old page's script.
  a.headers.emplace_back("Cache-Control", "no-cache");
  a.headers.emplace_back("X-Content-Type-Options", "nosniff");
  // Payloads are user input that the page shows: even a rendering bug must
  // not run a script from one. Only our own files, no inline script, no
  // other origin, and no framing (clickjacking of the purge buttons).
  a.headers.emplace_back("Content-Security-Policy",
                         "default-src 'none'; script-src 'self'; style-src 'self'; "
                         "connect-src 'self'; img-src 'self' data:; base-uri 'none'; "
                         "form-action 'none'; frame-ancestors 'none'");
  return a;
}

}  // namespace delayq::server
