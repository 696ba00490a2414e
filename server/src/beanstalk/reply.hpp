// beanstalk/reply.hpp - the exact bytes of every beanstalkd reply
// (beanstalkd 1.13's doc/protocol.txt; checked against beanstalkd 1.12).
//
// Replies that never vary are constants; the others are appended to a
// caller's string, so that the replies of pipelined commands can go out in
// one write:
//
//   std::string out;
//   append_inserted(out, 7);          // "INSERTED 7\r\n"
//   out += replies::deleted;          // "DELETED\r\n"
//   out += error_reply(protocol_error::bad_format);
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "beanstalk/command_reader.hpp"

namespace delayq::server::beanstalk {

/// The fixed replies.
namespace replies {
inline constexpr std::string_view out_of_memory = "OUT_OF_MEMORY\r\n";
inline constexpr std::string_view internal_error = "INTERNAL_ERROR\r\n";
inline constexpr std::string_view draining = "DRAINING\r\n";
inline constexpr std::string_view bad_format = "BAD_FORMAT\r\n";
inline constexpr std::string_view unknown_command = "UNKNOWN_COMMAND\r\n";
inline constexpr std::string_view expected_crlf = "EXPECTED_CRLF\r\n";
inline constexpr std::string_view job_too_big = "JOB_TOO_BIG\r\n";
inline constexpr std::string_view not_found = "NOT_FOUND\r\n";
inline constexpr std::string_view deadline_soon = "DEADLINE_SOON\r\n";
inline constexpr std::string_view timed_out = "TIMED_OUT\r\n";
inline constexpr std::string_view deleted = "DELETED\r\n";
inline constexpr std::string_view released = "RELEASED\r\n";
/// release's out-of-memory answer and bury's success (put's is append_buried).
inline constexpr std::string_view buried = "BURIED\r\n";
inline constexpr std::string_view touched = "TOUCHED\r\n";
/// kick-job's success (kick's is append_kicked).
inline constexpr std::string_view kicked = "KICKED\r\n";
inline constexpr std::string_view not_ignored = "NOT_IGNORED\r\n";
inline constexpr std::string_view paused = "PAUSED\r\n";
}  // namespace replies

/// The reply to a refused request: BAD_FORMAT, UNKNOWN_COMMAND, EXPECTED_CRLF
/// or JOB_TOO_BIG, "\r\n" included.
std::string_view error_reply(protocol_error e) noexcept;

/// "INSERTED <id>\r\n".
void append_inserted(std::string& out, std::uint64_t id);
/// put's "BURIED <id>\r\n".
void append_buried(std::string& out, std::uint64_t id);
/// "RESERVED <id> <bytes>\r\n<body>\r\n".
void append_reserved(std::string& out, std::uint64_t id, std::string_view body);
/// "FOUND <id> <bytes>\r\n<body>\r\n" (the peek commands).
void append_found(std::string& out, std::uint64_t id, std::string_view body);
/// "USING <tube>\r\n" (use, list-tube-used).
void append_using(std::string& out, std::string_view tube);
/// "WATCHING <count>\r\n" (watch, ignore).
void append_watching(std::string& out, std::uint64_t count);
/// kick's "KICKED <count>\r\n".
void append_kicked(std::string& out, std::uint64_t count);
/// "OK <bytes>\r\n<data>\r\n": stats, stats-job, stats-tube, list-tubes,
/// list-tubes-watched, `data` made by stats_yaml.hpp.
void append_ok(std::string& out, std::string_view data);

}  // namespace delayq::server::beanstalk
