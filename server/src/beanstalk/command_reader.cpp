// beanstalk/command_reader.cpp - see command_reader.hpp.
#include "beanstalk/command_reader.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <utility>

#include "beanstalk/tube_name.hpp"

namespace delayq::server::beanstalk {

namespace {

struct verb_prefix {
  std::string_view text;
  verb v;
};

// beanstalkd's which_cmd(): the first prefix the line starts with wins, so
// the order matters ("reserve-job " before "reserve", "stats-job " before
// "stats", "list-tubes-watched" before "list-tubes").
constexpr std::array<verb_prefix, verb_count> verb_prefixes{{
    {"put ", verb::put},
    {"peek ", verb::peek},
    {"peek-ready", verb::peek_ready},
    {"peek-delayed", verb::peek_delayed},
    {"peek-buried", verb::peek_buried},
    {"reserve-with-timeout ", verb::reserve_with_timeout},
    {"reserve-job ", verb::reserve_job},
    {"reserve", verb::reserve},
    {"delete ", verb::delete_},
    {"release ", verb::release},
    {"bury ", verb::bury},
    {"kick ", verb::kick},
    {"kick-job ", verb::kick_job},
    {"touch ", verb::touch},
    {"stats-job ", verb::stats_job},
    {"stats-tube ", verb::stats_tube},
    {"stats", verb::stats},
    {"use ", verb::use},
    {"watch ", verb::watch},
    {"ignore ", verb::ignore},
    {"list-tubes-watched", verb::list_tubes_watched},
    {"list-tube-used", verb::list_tube_used},
    {"list-tubes", verb::list_tubes},
    {"quit", verb::quit},
    {"pause-tube", verb::pause_tube},
}};

constexpr std::uint64_t u32_max = std::numeric_limits<std::uint32_t>::max();
constexpr std::uint64_t u64_max = std::numeric_limits<std::uint64_t>::max();

bool is_ascii_digit(char c) { return c >= '0' && c <= '9'; }

// beanstalkd's read_u64()/read_u32(): spaces, then at least one digit, then
// as many digits as there are; a value over `max` fails. `pos` moves past
// the digits.
bool read_number(std::string_view line, std::size_t& pos, std::uint64_t max, std::uint64_t& out) {
  while (pos < line.size() && line[pos] == ' ') ++pos;
  if (pos == line.size() || !is_ascii_digit(line[pos])) return false;
  std::uint64_t v = 0;
  bool over = false;
  for (; pos < line.size() && is_ascii_digit(line[pos]); ++pos) {
    const auto d = static_cast<std::uint64_t>(line[pos] - '0');
    if (v > (max - d) / 10) over = true;
    if (!over) v = v * 10 + d;
  }
  if (over) return false;
  out = v;
  return true;
}

// read_number() that must end the line (beanstalkd's `end == NULL` form).
bool read_last_number(std::string_view line, std::size_t pos, std::uint64_t max,
                      std::uint64_t& out) {
  return read_number(line, pos, max, out) && pos == line.size();
}

bool read_u32(std::string_view line, std::size_t& pos, std::uint32_t& out) {
  std::uint64_t v = 0;
  if (!read_number(line, pos, u32_max, v)) return false;
  out = static_cast<std::uint32_t>(v);
  return true;
}

bool read_last_u32(std::string_view line, std::size_t pos, std::uint32_t& out) {
  return read_u32(line, pos, out) && pos == line.size();
}

const verb_prefix* match_verb(std::string_view line) {
  if (line.empty()) return nullptr;
  // The first byte rules out most prefixes without a compare.
  for (const verb_prefix& p : verb_prefixes)
    if (p.text[0] == line[0] && line.substr(0, p.text.size()) == p.text) return &p;
  return nullptr;
}

// Finds the first "\r\n" of `input` ending within its first `limit` bytes,
// `after_cr` saying whether the byte before `input` was '\r'. Returns the
// index of its '\n', or npos.
std::size_t find_line_end(std::string_view input, std::size_t limit, bool after_cr) {
  const std::string_view window = input.substr(0, limit);
  if (window.empty()) return std::string_view::npos;
  if (after_cr && window[0] == '\n') return 0;
  const std::size_t cr = window.find("\r\n");
  return cr == std::string_view::npos ? cr : cr + 1;
}

}  // namespace

std::string_view name_of(verb v) noexcept {
  switch (v) {
    case verb::put: return "put";
    case verb::use: return "use";
    case verb::reserve: return "reserve";
    case verb::reserve_with_timeout: return "reserve-with-timeout";
    case verb::reserve_job: return "reserve-job";
    case verb::delete_: return "delete";
    case verb::release: return "release";
    case verb::bury: return "bury";
    case verb::touch: return "touch";
    case verb::watch: return "watch";
    case verb::ignore: return "ignore";
    case verb::peek: return "peek";
    case verb::peek_ready: return "peek-ready";
    case verb::peek_delayed: return "peek-delayed";
    case verb::peek_buried: return "peek-buried";
    case verb::kick: return "kick";
    case verb::kick_job: return "kick-job";
    case verb::stats_job: return "stats-job";
    case verb::stats_tube: return "stats-tube";
    case verb::stats: return "stats";
    case verb::list_tubes: return "list-tubes";
    case verb::list_tube_used: return "list-tube-used";
    case verb::list_tubes_watched: return "list-tubes-watched";
    case verb::pause_tube: return "pause-tube";
    case verb::quit: return "quit";
  }
  return "?";
}

command_reader::command_reader(std::size_t max_job_size) : max_job_size_(max_job_size) {
  line_.reserve(max_line_length);
}

std::size_t command_reader::max_buffered() const noexcept {
  // max_job_size_ + 2 cannot wrap for any size a server would configure,
  // but a fuzzer or a test may pass SIZE_MAX.
  const std::size_t body = max_job_size_ > std::numeric_limits<std::size_t>::max() - 2
                               ? std::numeric_limits<std::size_t>::max()
                               : max_job_size_ + 2;
  return std::max(max_line_length, body);
}

std::optional<read_result> command_reader::next(std::string_view& input) {
  command c;
  protocol_error e{};
  switch (read(input, c, e)) {
    case status::more: return std::nullopt;
    case status::command: return read_result(std::move(c));
    case status::error: return read_result(e);
  }
  return std::nullopt;
}

command_reader::status command_reader::read(std::string_view& input, command& out,
                                            protocol_error& error) {
  while (!input.empty()) {
    status r = status::more;
    switch (state_) {
      case state::line: r = read_line(input, out, error); break;
      case state::discard_line: r = discard_line(input, error); break;
      case state::body: r = read_body(input, out, error); break;
      case state::skip_body: r = skip_body(input, error); break;
    }
    if (r != status::more) return r;
  }
  return status::more;
}

command_reader::status command_reader::read_line(std::string_view& input, command& out,
                                                 protocol_error& error) {
  const std::size_t room = max_line_length - line_.size();
  const bool after_cr = !line_.empty() && line_.back() == '\r';
  const std::size_t lf = find_line_end(input, room, after_cr);
  if (lf == std::string_view::npos) {
    const std::size_t n = std::min(room, input.size());
    line_.append(input.substr(0, n));
    input.remove_prefix(n);
    if (line_.size() == max_line_length) {
      // Too long: throw it away up to its end, keeping nothing.
      after_cr_ = line_.back() == '\r';
      line_.clear();
      state_ = state::discard_line;
    }
    return status::more;
  }
  status r;
  if (line_.empty()) {
    // The usual case, a whole line in `input`: parsed in place.
    r = finish_line(input.substr(0, lf - 1), out, error);
  } else {
    line_.append(input.substr(0, lf + 1));
    line_.resize(line_.size() - 2);
    r = finish_line(line_, out, error);
    line_.clear();
  }
  input.remove_prefix(lf + 1);
  return r;
}

command_reader::status command_reader::discard_line(std::string_view& input,
                                                    protocol_error& error) {
  const std::size_t lf = find_line_end(input, input.size(), after_cr_);
  if (lf == std::string_view::npos) {
    after_cr_ = input.back() == '\r';
    input = {};
    return status::more;
  }
  input.remove_prefix(lf + 1);
  state_ = state::line;
  error = protocol_error::bad_format;
  return status::error;
}

command_reader::status command_reader::read_body(std::string_view& input, command& out,
                                                 protocol_error& error) {
  const std::size_t n = std::min(body_size_ - body_.size(), input.size());
  body_.append(input.substr(0, n));
  input.remove_prefix(n);
  if (body_.size() < body_size_) return status::more;
  state_ = state::line;
  if (body_.compare(body_.size() - 2, 2, "\r\n") != 0) {
    body_.clear();
    put_ = command{};
    error = protocol_error::expected_crlf;
    return status::error;
  }
  body_.resize(body_.size() - 2);
  out = std::move(put_);
  out.body = std::move(body_);
  put_ = command{};
  body_ = std::string();
  return status::command;
}

command_reader::status command_reader::skip_body(std::string_view& input, protocol_error& error) {
  const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(skip_left_, input.size()));
  input.remove_prefix(n);
  skip_left_ -= n;
  if (skip_left_ > 0) return status::more;
  state_ = state::line;
  error = protocol_error::job_too_big;
  return status::error;
}

// Parses one command line (without its "\r\n"). A put moves to reading its
// body (or skipping it) and returns status::more.
command_reader::status command_reader::finish_line(std::string_view line, command& out,
                                                   protocol_error& error) {
  const auto fail = [&error](protocol_error e) {
    error = e;
    return status::error;
  };
  // One pass (find_first_of asks char_traits once per byte and character).
  for (const char ch : line)
    if (ch == '\0' || ch == '\r') return fail(protocol_error::bad_format);
  const verb_prefix* p = match_verb(line);
  if (p == nullptr) return fail(protocol_error::unknown_command);

  if (p->v == verb::put) {
    // Parsed into the reader's own command, which the body completes.
    command& c = put_;
    std::size_t pos = p->text.size();
    std::uint32_t bytes = 0;
    if (!read_u32(line, pos, c.priority) || !read_u32(line, pos, c.delay) ||
        !read_u32(line, pos, c.ttr) || !read_u32(line, pos, bytes)) {
      c = command{};
      return fail(protocol_error::bad_format);
    }
    if (bytes > max_job_size_) {
      c = command{};
      skip_left_ = std::uint64_t{bytes} + 2;
      state_ = state::skip_body;
      return status::more;
    }
    if (pos != line.size()) {
      c = command{};
      return fail(protocol_error::bad_format);
    }
    c.name = verb::put;
    c.ttr = std::max<std::uint32_t>(c.ttr, 1);
    body_size_ = std::size_t{bytes} + 2;
    body_.clear();
    body_.reserve(body_size_);
    state_ = state::body;
    return status::more;
  }

  command& c = out;
  c = command{};
  c.name = p->v;
  std::size_t pos = p->text.size();
  const std::string_view rest = line.substr(pos);
  bool ok = false;
  switch (p->v) {
    case verb::put: break;  // above
    case verb::peek:
    case verb::reserve_job:
    case verb::delete_:
    case verb::touch:
    case verb::kick_job:
    case verb::stats_job: ok = read_last_number(line, pos, u64_max, c.id); break;
    case verb::reserve_with_timeout: ok = read_last_u32(line, pos, c.timeout); break;
    case verb::kick: ok = read_last_u32(line, pos, c.bound); break;
    case verb::release:
      ok = read_number(line, pos, u64_max, c.id) && read_u32(line, pos, c.priority) &&
           read_last_u32(line, pos, c.delay);
      break;
    case verb::bury:
      ok = read_number(line, pos, u64_max, c.id) && read_last_u32(line, pos, c.priority);
      break;
    case verb::use:
    case verb::watch:
    case verb::ignore:
    case verb::stats_tube:
      ok = is_valid_tube_name(rest);
      if (ok) c.tube = std::string(rest);
      break;
    case verb::pause_tube: {
      // beanstalkd's read_tube_name(): spaces, then the longest run of name
      // characters (checked as a whole name only after the number).
      while (pos < line.size() && line[pos] == ' ') ++pos;
      const std::size_t start = pos;
      while (pos < line.size() && is_tube_name_char(line[pos])) ++pos;
      const std::string_view name = line.substr(start, pos - start);
      ok = !name.empty() && read_last_u32(line, pos, c.delay) && is_valid_tube_name(name);
      if (ok) c.tube = std::string(name);
      break;
    }
    case verb::peek_ready:
    case verb::peek_delayed:
    case verb::peek_buried:
    case verb::reserve:
    case verb::stats:
    case verb::list_tubes:
    case verb::list_tube_used:
    case verb::list_tubes_watched: ok = rest.empty(); break;
    case verb::quit: ok = true; break;
  }
  if (!ok) return fail(protocol_error::bad_format);
  return status::command;
}

}  // namespace delayq::server::beanstalk
