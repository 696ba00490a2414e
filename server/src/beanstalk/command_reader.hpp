// beanstalk/command_reader.hpp - beanstalkd's request syntax: the bytes a
// client sends, cut into command lines and job bodies and parsed into
// commands, with no I/O (beanstalkd 1.13's doc/protocol.txt and prot.c).
//
// How beanstalkd reads, and so how this reader reads:
// - A command line ends at the first "\r\n" and holds at most
//   max_line_length bytes counting the "\r\n". A longer line is thrown away
//   up to its "\r\n" without being kept, then answered BAD_FORMAT; the
//   connection reads on after it.
// - The verb is matched as a prefix, in beanstalkd's order, so a few odd
//   lines mean what they mean there: "quitxyz" is quit, "reservex" and
//   "stats-job" (no space) are BAD_FORMAT (they match "reserve" and "stats"),
//   "kick" alone or "use" alone is UNKNOWN_COMMAND, an empty line too.
// - Numbers are decimal digits after one or more spaces: no sign, no other
//   whitespace, nothing after the last one (BAD_FORMAT otherwise). Ids are
//   below 2^64, everything else below 2^32.
// - Tube names are checked as beanstalkd does (tube_name.hpp): the name is
//   the rest of the line after "use ", "watch ", "ignore ", "stats-tube ",
//   so a second space or a trailing one makes it BAD_FORMAT.
// - `put`: the line is followed by exactly <bytes> + 2 bytes, read whatever
//   they hold; the last two must be "\r\n" (EXPECTED_CRLF otherwise, with the
//   body consumed). A <bytes> over the maximum job size is JOB_TOO_BIG: the
//   <bytes> + 2 bytes that follow are skipped without being kept, then the
//   error is reported, and the next command is read after them. This size
//   check comes before the check for trailing garbage on the line, as in
//   beanstalkd.
//
// Where this reader differs from beanstalkd 1.12/1.13 (which a client only
// sees on malformed input):
// - A command line holding a NUL or a lone CR is BAD_FORMAT. (beanstalkd:
//   BAD_FORMAT for NUL; a lone CR before the "\r\n" hides the line end from
//   its scanner, so it waits for more bytes until the line is too long.)
// - A line of 223 bytes plus "\r\n": BAD_FORMAT, and the next command is
//   read. (beanstalkd drops the '\r' with the first 224 bytes and then also
//   swallows the next line.)
// - `kick <bound>` and `reserve-with-timeout <seconds>` take numbers like the
//   other commands. (beanstalkd reads them with strtoul/strtol, so
//   `kick 5 `, `kick 1x`, `kick -1` (4294967295), `reserve-with-timeout x`
//   (0) and `reserve-with-timeout -1` (no timeout) pass there.)
//
// Memory: the reader keeps at most max_line_length bytes of a line and, for a
// put, the body being read (at most the maximum job size + 2), never both;
// bytes it skips are not kept. It stops consuming input as soon as a command
// or error is complete, so pipelined commands stay in the caller's buffer
// until the caller asks for them.
//
// Example (a session's read loop):
//
//   command_reader reader(max_job_size);
//   std::string_view in(buf.data(), n);       // what the socket gave
//   while (auto r = reader.next(in)) {        // consumes from `in`
//     if (auto* e = std::get_if<protocol_error>(&*r)) reply(error_reply(*e));
//     else run(std::get<command>(std::move(*r)));
//     // a blocking reserve may stop here, keeping the rest of `in`
//   }
//
// (delayq's session calls read(), the same with no result to move.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

namespace delayq::server::beanstalk {

/// The commands of beanstalkd 1.13's protocol.
enum class verb : std::uint8_t {
  put,
  use,
  reserve,
  reserve_with_timeout,
  reserve_job,
  delete_,
  release,
  bury,
  touch,
  watch,
  ignore,
  peek,
  peek_ready,
  peek_delayed,
  peek_buried,
  kick,
  kick_job,
  stats_job,
  stats_tube,
  stats,
  list_tubes,
  list_tube_used,
  list_tubes_watched,
  pause_tube,
  quit,
};

/// Number of verbs (for tables indexed by verb, e.g. stats' cmd-* counts).
inline constexpr std::size_t verb_count = static_cast<std::size_t>(verb::quit) + 1;

/// The command's name on the wire: "put", "reserve-with-timeout",
/// "delete", ... (stats' counters are "cmd-" + this).
std::string_view name_of(verb v) noexcept;

/// A well-formed command. Only the fields its verb takes are set; the others
/// stay zero or empty.
///
/// Thread safety: a plain value.
struct command {
  verb name = verb::quit;
  /// Job id: peek, reserve-job, delete, release, bury, touch, kick-job,
  /// stats-job.
  std::uint64_t id = 0;
  /// put, release, bury.
  std::uint32_t priority = 0;
  /// Seconds: put's and release's delay, pause-tube's pause (0 as sent: it
  /// ends a pause, as in beanstalkd 1.12).
  std::uint32_t delay = 0;
  /// put's time to run in seconds, at least 1: a 0 sent is raised to 1, as
  /// the protocol says.
  std::uint32_t ttr = 0;
  /// reserve-with-timeout's seconds (0: answer at once).
  std::uint32_t timeout = 0;
  /// kick's upper bound.
  std::uint32_t bound = 0;
  /// use, watch, ignore, stats-tube, pause-tube: a valid tube name.
  std::string tube;
  /// put's job body, without its "\r\n": any bytes.
  std::string body;

  friend bool operator==(const command&, const command&) = default;
};

/// A request the reader refuses; the session answers error_reply() of it
/// (reply.hpp) and reads on: the reader has consumed the offending bytes.
enum class protocol_error : std::uint8_t {
  bad_format,       ///< BAD_FORMAT: a malformed or too long line
  unknown_command,  ///< UNKNOWN_COMMAND
  expected_crlf,    ///< EXPECTED_CRLF: a put's body not followed by "\r\n"
  job_too_big,      ///< JOB_TOO_BIG: put <bytes> over the maximum; body skipped
};

/// One thing read: a command, or an error to answer.
using read_result = std::variant<command, protocol_error>;

/// Cuts a connection's byte stream into commands (see the top of this file).
///
/// Thread safety: none; one reader per connection, used by one strand.
class command_reader {
 public:
  /// The longest command line, "\r\n" included (beanstalkd's LINE_BUF_SIZE).
  static constexpr std::size_t max_line_length = 224;
  /// beanstalkd's default maximum job size (-z).
  static constexpr std::size_t default_max_job_size = 65535;

  /// A reader refusing put bodies over `max_job_size` bytes.
  explicit command_reader(std::size_t max_job_size = default_max_job_size);

  /// Consumes bytes from the front of `input` until one command or error is
  /// complete and returns it; returns nullopt once `input` is used up (all of
  /// it consumed, kept for the next call). Bytes after a complete command are
  /// left in `input`: call again to read the next one. Never throws but
  /// std::bad_alloc.
  std::optional<read_result> next(std::string_view& input);

  /// What read() found.
  enum class status : std::uint8_t {
    more,     ///< `input` is used up, the command not complete yet
    command,  ///< `out` holds a command
    error,    ///< `error` says what to answer
  };
  /// next() without its result's moves, for a session's read loop: a
  /// command is parsed into `out` (every field set, as a fresh command's),
  /// an error into `error`. After status::more or status::error, what `out`
  /// holds is unspecified (a command begun and refused).
  status read(std::string_view& input, command& out, protocol_error& error);

  /// Bytes held between calls: a partial line, or a put's partial body.
  std::size_t buffered() const noexcept { return line_.size() + body_.size(); }

  /// The most buffered() can reach: max(max_line_length, max job size + 2).
  std::size_t max_buffered() const noexcept;

  /// True when no partial command is held (between commands).
  bool idle() const noexcept { return state_ == state::line && line_.empty(); }

  std::size_t max_job_size() const noexcept { return max_job_size_; }

 private:
  enum class state : std::uint8_t { line, discard_line, body, skip_body };

  // Each: status::more, or what it read into `out` or `error`.
  status finish_line(std::string_view line, command& out, protocol_error& error);
  status read_line(std::string_view& input, command& out, protocol_error& error);
  status discard_line(std::string_view& input, protocol_error& error);
  status read_body(std::string_view& input, command& out, protocol_error& error);
  status skip_body(std::string_view& input, protocol_error& error);

  std::size_t max_job_size_;
  state state_ = state::line;
  std::string line_;             // a partial command line (state::line)
  bool after_cr_ = false;        // discard_line: the last byte thrown away was '\r'
  command put_;                  // the put whose body is being read
  std::string body_;             // its body so far, with the "\r\n" to come
  std::size_t body_size_ = 0;    // the body's size + 2
  std::uint64_t skip_left_ = 0;  // skip_body: bytes still to throw away
};

}  // namespace delayq::server::beanstalk
