// beanstalk/reply.cpp - see reply.hpp.
#include "beanstalk/reply.hpp"

#include <charconv>

namespace delayq::server::beanstalk {

namespace {

void append_decimal(std::string& out, std::uint64_t v) {
  char buf[20];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

// "<word> <n>\r\n"
void append_word_number(std::string& out, std::string_view word, std::uint64_t n) {
  out += word;
  out += ' ';
  append_decimal(out, n);
  out += "\r\n";
}

// "<word> <id> <bytes>\r\n<body>\r\n"
void append_job_reply(std::string& out, std::string_view word, std::uint64_t id,
                      std::string_view body) {
  out.reserve(out.size() + word.size() + 44 + body.size());
  out += word;
  out += ' ';
  append_decimal(out, id);
  out += ' ';
  append_decimal(out, body.size());
  out += "\r\n";
  out += body;
  out += "\r\n";
}

}  // namespace

std::string_view error_reply(protocol_error e) noexcept {
  switch (e) {
    case protocol_error::bad_format: return replies::bad_format;
    case protocol_error::unknown_command: return replies::unknown_command;
    case protocol_error::expected_crlf: return replies::expected_crlf;
    case protocol_error::job_too_big: return replies::job_too_big;
  }
  return replies::internal_error;
}

void append_inserted(std::string& out, std::uint64_t id) {
  append_word_number(out, "INSERTED", id);
}

void append_buried(std::string& out, std::uint64_t id) { append_word_number(out, "BURIED", id); }

void append_reserved(std::string& out, std::uint64_t id, std::string_view body) {
  append_job_reply(out, "RESERVED", id, body);
}

void append_found(std::string& out, std::uint64_t id, std::string_view body) {
  append_job_reply(out, "FOUND", id, body);
}

void append_using(std::string& out, std::string_view tube) {
  out += "USING ";
  out += tube;
  out += "\r\n";
}

void append_watching(std::string& out, std::uint64_t count) {
  append_word_number(out, "WATCHING", count);
}

void append_kicked(std::string& out, std::uint64_t count) {
  append_word_number(out, "KICKED", count);
}

void append_ok(std::string& out, std::string_view data) {
  out.reserve(out.size() + 26 + data.size());
  append_word_number(out, "OK", data.size());
  out += data;
  out += "\r\n";
}

}  // namespace delayq::server::beanstalk
