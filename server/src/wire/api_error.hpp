// wire/api_error.hpp - what an HTTP error answer says, and how engine errors
// map to it (the table in docs/server.md): the error half of the wire format,
// which the request decoders (request_codec.hpp) return too.
#pragma once

#include <boost/system/error_code.hpp>
#include <string>

namespace delayq::server {

/// An error answer: `{"error": name, "message": message}` with `status`.
/// Thread safety: a plain value.
struct api_error {
  unsigned status = 400;
  std::string name;
  std::string message;
};

/// 400 bad_request with `message`.
api_error bad_request(std::string message);
/// 404 not_found with `message`.
api_error not_found(std::string message);
/// 409 `name` with `message`.
api_error conflict(std::string name, std::string message);

/// The answer for an engine or store error (400 for bad input, 409 for
/// duplicate ids and full types, 413 for large payloads, 503 for the store,
/// back-pressure and a stopped engine). `context`, when given, prefixes the
/// message ("tasks[3]: ...").
api_error from_error_code(const boost::system::error_code& ec, const std::string& context = {});

}  // namespace delayq::server
