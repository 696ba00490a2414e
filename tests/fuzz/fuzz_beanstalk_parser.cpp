// fuzz_beanstalk_parser: arbitrary bytes through the beanstalk command
// reader (server/src/beanstalk/command_reader.hpp), as a client's stream cut
// into arbitrary reads, plus the tube name mapping (tube_name.hpp) and the
// job replies (reply.hpp).
//
// Input: byte 0 picks the maximum job size (0-63, or the default 65535);
// bytes 1-2 seed the chunk sizes; the rest is the stream.
//
// Checked:
// - the same stream read in one piece, in random chunks and one byte at a
//   time gives the same results, in the same order, and so does read() into
//   one command reused for every result (as the session reads);
// - next() makes progress: it returns a result only after consuming a byte,
//   and nullopt only with the input used up;
// - never more held than max_buffered() (max of the line limit and the
//   maximum job size + 2), whatever the stream;
// - what a command carries is what the protocol allows: a put's body within
//   the maximum and its ttr at least 1, tube names valid, a type for every
//   tube that has one and the same tube back from it;
// - tube_of_type() of any bytes: a tube that maps back to the same bytes;
// - a RESERVED reply is its header, the body and "\r\n", exactly.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "beanstalk/command_reader.hpp"
#include "beanstalk/reply.hpp"
#include "beanstalk/tube_name.hpp"

namespace {

namespace bs = delayq::server::beanstalk;

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_beanstalk_parser: %s\n", what);
    std::abort();
  }
}

// A small deterministic generator for chunk sizes (xorshift32).
struct chunk_sizes {
  std::uint32_t state;
  std::size_t next() {
    state ^= state << 13;
    state ^= state >> 17;
    state ^= state << 5;
    // Mostly small reads, sometimes large ones.
    return (state & 0x300) == 0 ? 1 + (state >> 16) % 2048 : 1 + (state >> 16) % 17;
  }
};

void check_command(const bs::command& c, std::size_t max_job) {
  if (c.name == bs::verb::put) {
    check(c.body.size() <= max_job, "put body over the maximum job size");
    check(c.ttr >= 1, "put ttr below 1");
  } else {
    check(c.body.empty(), "body on a command other than put");
  }
  switch (c.name) {
    case bs::verb::use:
    case bs::verb::watch:
    case bs::verb::ignore:
    case bs::verb::stats_tube:
    case bs::verb::pause_tube: {
      check(bs::is_valid_tube_name(c.tube), "invalid tube name accepted");
      const auto type = bs::type_of_tube(c.tube);
      if (type) check(bs::tube_of_type(*type) == c.tube, "tube -> type -> tube changed");
      break;
    }
    default: check(c.tube.empty(), "tube on a command without one");
  }
  std::string out;
  bs::append_reserved(out, c.id, c.body);
  const std::string head =
      "RESERVED " + std::to_string(c.id) + " " + std::to_string(c.body.size()) + "\r\n";
  check(out == head + c.body + "\r\n", "RESERVED reply bytes");
}

// Reads `stream` cut by `cut` (a function giving each read's size) and
// returns every result.
// `reuse`: through read() into one command kept across results.
template <typename Cut>
std::vector<bs::read_result> read_stream(std::string_view stream, std::size_t max_job, Cut cut,
                                         bool reuse = false) {
  bs::command_reader reader(max_job);
  std::vector<bs::read_result> out;
  bs::command reused;
  const auto next = [&](std::string_view& in) -> std::optional<bs::read_result> {
    if (!reuse) return reader.next(in);
    bs::protocol_error e{};
    switch (reader.read(in, reused, e)) {
      case bs::command_reader::status::more: return std::nullopt;
      case bs::command_reader::status::command: return bs::read_result(reused);
      case bs::command_reader::status::error: return bs::read_result(e);
    }
    return std::nullopt;
  };
  while (!stream.empty()) {
    const std::size_t n = std::min(cut(), stream.size());
    std::string_view in = stream.substr(0, n);
    stream.remove_prefix(n);
    for (;;) {
      const std::size_t before = in.size();
      auto r = next(in);
      check(reader.buffered() <= reader.max_buffered(), "buffered more than max_buffered()");
      if (!r) {
        check(in.empty(), "nullopt with input left");
        break;
      }
      check(in.size() < before, "a result without consuming a byte");
      if (const auto* c = std::get_if<bs::command>(&*r)) check_command(*c, max_job);
      out.push_back(std::move(*r));
    }
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 3) return 0;
  const std::size_t max_job = data[0] < 64 ? data[0] : bs::command_reader::default_max_job_size;
  const std::uint32_t seed = 1u + (std::uint32_t{data[1]} << 8 | data[2]);
  const std::string_view stream(reinterpret_cast<const char*>(data) + 3, size - 3);

  const auto whole = read_stream(stream, max_job, [&] { return stream.size(); });
  chunk_sizes sizes{seed};
  const auto chunked = read_stream(stream, max_job, [&] { return sizes.next(); });
  check(chunked == whole, "chunked reads disagree with one read");
  chunk_sizes again{seed};
  const auto reused = read_stream(
      stream, max_job, [&] { return again.next(); }, true);
  check(reused == whole, "read() into a reused command disagrees with next()");
  if (stream.size() <= 1024) {
    const auto bytes = read_stream(stream, max_job, [] { return std::size_t{1}; });
    check(bytes == whole, "byte-at-a-time reads disagree with one read");
  }

  // The stream as a task type: a tube, if any, that maps back to it.
  if (const auto tube = bs::tube_of_type(stream)) {
    check(bs::is_valid_tube_name(*tube), "tube_of_type gave an invalid tube");
    check(bs::type_of_tube(*tube) == stream, "type -> tube -> type changed");
  }
  if (const auto type = bs::type_of_tube(stream))
    check(bs::tube_of_type(*type) == stream, "tube -> type -> tube changed");
  return 0;
}
