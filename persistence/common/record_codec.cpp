// The record codec: see delayq/record_codec.hpp for the format.
#include "delayq/record_codec.hpp"

#include <cereal/archives/portable_binary.hpp>
#include <cereal/cereal.hpp>
#include <chrono>
#include <cstring>
#include <istream>
#include <limits>
#include <ostream>
#include <streambuf>

#include "delayq/error.hpp"

namespace delayq {
namespace {

constexpr char magic[4] = {'D', 'Q', 'T', 'R'};

// A read-only streambuf over caller-owned bytes: decoding never copies the
// record, and remaining() lets a length prefix be checked before anything is
// allocated for it.
class view_buf final : public std::streambuf {
 public:
  void view(std::string_view bytes) {
    char* begin = const_cast<char*>(bytes.data());  // never written through
    setg(begin, begin, begin + bytes.size());
  }
  std::size_t remaining() const { return static_cast<std::size_t>(egptr() - gptr()); }
};

// A write-only streambuf appending to a std::string (no ostringstream copy).
class string_buf final : public std::streambuf {
 public:
  void target(std::string* out) noexcept { out_ = out; }

 protected:
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    out_->append(s, static_cast<std::size_t>(n));
    return n;
  }
  int_type overflow(int_type ch) override {
    if (!traits_type::eq_int_type(ch, traits_type::eof()))
      out_->push_back(traits_type::to_char_type(ch));
    return traits_type::not_eof(ch);
  }

 private:
  std::string* out_ = nullptr;
};

// One stream of each kind per thread, pointed at each record in turn:
// constructing a std::ostream or std::istream caches its locale's facets,
// about 900 instructions, a third of what encoding a task took (callgrind,
// a beanstalk put on SQLite). Each use points the buffer at its record and
// clears the state a failed use left (cereal reads and writes through the
// buffer, but the state is the stream's contract).
struct record_streams {
  string_buf out_buf;
  std::ostream out{&out_buf};
  view_buf in_buf;
  std::istream in{&in_buf};
};
record_streams& streams() {
  thread_local record_streams s;
  return s;
}

// While alive: the thread's output stream appends to `out`.
class output_to {
 public:
  explicit output_to(std::string& out) : s_(streams()) {
    s_.out_buf.target(&out);
    s_.out.clear();
  }
  ~output_to() { s_.out_buf.target(nullptr); }
  output_to(const output_to&) = delete;
  output_to& operator=(const output_to&) = delete;
  std::ostream& stream() noexcept { return s_.out; }

 private:
  record_streams& s_;
};

// While alive: the thread's input stream reads `bytes`.
class input_from {
 public:
  explicit input_from(std::string_view bytes) : s_(streams()) {
    s_.in_buf.view(bytes);
    s_.in.clear();
  }
  ~input_from() { s_.in_buf.view({}); }
  input_from(const input_from&) = delete;
  input_from& operator=(const input_from&) = delete;
  view_buf& buffer() noexcept { return s_.in_buf; }
  std::istream& stream() noexcept { return s_.in; }

 private:
  record_streams& s_;
};

struct corrupt {
  const char* why;
};

// task::ttr as the record's uint32 of milliseconds: a negative one is 0 and
// one past the field's range is cut to its largest value (the engine refuses
// both at schedule time; this keeps a task made by hand from wrapping).
std::uint32_t ttr_field(std::chrono::milliseconds ttr) noexcept {
  if (ttr.count() <= 0) return 0;
  if (ttr.count() >= std::numeric_limits<std::uint32_t>::max())
    return std::numeric_limits<std::uint32_t>::max();
  return static_cast<std::uint32_t>(ttr.count());
}

void put_bytes(cereal::PortableBinaryOutputArchive& ar, std::string_view s) {
  ar(static_cast<std::uint64_t>(s.size()));
  ar(cereal::binary_data(s.data(), s.size()));
}

void get_bytes(cereal::PortableBinaryInputArchive& ar, const view_buf& buf, std::string& s,
               const char* field) {
  std::uint64_t size = 0;
  ar(size);
  if (size > buf.remaining()) throw corrupt{field};
  s.resize(static_cast<std::size_t>(size));
  ar(cereal::binary_data(s.data(), s.size()));
}

// A time_point holds less than int64 ms (nanosecond ticks): converting a
// value beyond its range would overflow, so such a record is corrupt.
std::chrono::system_clock::time_point checked_time(std::int64_t ms, const char* field) {
  constexpr auto max_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::system_clock::duration::max())
                              .count();
  if (ms > max_ms || ms < -max_ms) throw corrupt{field};
  return from_epoch_ms(ms);
}

// Checks the magic and the byte order flag; `why` says what is wrong.
bool header_ok(std::string_view bytes, std::string& why) {
  if (bytes.size() < record_header_size) {
    why = "truncated header";
    return false;
  }
  if (std::memcmp(bytes.data(), magic, sizeof magic) != 0) {
    why = "bad magic";
    return false;
  }
  // cereal accepts any non-zero flag as little-endian; the format says 1.
  if (static_cast<unsigned char>(bytes[4]) != 1) {
    why = "bad byte order flag";
    return false;
  }
  return true;
}

// Writes the header and the fields of `version` (1 to 4; `error` and
// `died_at` are used from version 2, the trigger fields from version 3,
// priority and ttr from version 4).
std::string encode(std::uint16_t version, const task& t, std::string_view error,
                   std::chrono::system_clock::time_point died_at) {
  std::string out;
  out.reserve(record_header_size + 4 * sizeof(std::uint64_t) + t.id.size() + t.type.size() +
              t.payload.size() + error.size() + 2 * sizeof(std::int64_t) +
              5 * sizeof(std::uint32_t));
  out.append(magic, sizeof magic);
  output_to to(out);
  std::ostream& os = to.stream();
  {
    // The archive writes its byte order flag (1) first, then our fields.
    cereal::PortableBinaryOutputArchive ar(
        os, cereal::PortableBinaryOutputArchive::Options::LittleEndian());
    ar(version);
    put_bytes(ar, t.id);
    put_bytes(ar, t.type);
    put_bytes(ar, t.payload);
    ar(static_cast<std::int64_t>(to_epoch_ms(t.due)));
    ar(static_cast<std::uint32_t>(t.attempts));
    if (version >= 2) {
      put_bytes(ar, error);
      ar(static_cast<std::int64_t>(to_epoch_ms(died_at)));
    }
    if (version >= 3) {
      ar(static_cast<std::uint32_t>(t.trigger_count));
      ar(static_cast<std::uint32_t>(t.signals));
    }
    if (version >= 4) {
      ar(static_cast<std::uint32_t>(t.priority));
      ar(ttr_field(t.ttr));
    }
  }
  return out;
}

// Decodes a record of any known version into `out`; the fields of version 2
// stay empty for a version 1 record. Returns the record's version, or 0 with
// `why` set when it is rejected.
std::uint16_t decode(std::string_view bytes, dead_letter& out, std::string& why) {
  if (!header_ok(bytes, why)) return 0;

  input_from from(bytes.substr(sizeof magic));
  view_buf& buf = from.buffer();
  std::istream& is = from.stream();
  std::uint16_t version = 0;
  try {
    cereal::PortableBinaryInputArchive ar(
        is, cereal::PortableBinaryInputArchive::Options::LittleEndian());
    ar(version);
    if (version == 0 || version > record_format_version) {
      why = "unknown format version " + std::to_string(version);
      return 0;
    }
    task& t = out.task;
    get_bytes(ar, buf, t.id, "id length exceeds record");
    get_bytes(ar, buf, t.type, "type length exceeds record");
    get_bytes(ar, buf, t.payload, "payload length exceeds record");
    std::int64_t due_ms = 0;
    ar(due_ms);
    ar(t.attempts);
    t.due = checked_time(due_ms, "due time out of range");
    if (version >= 2) {
      get_bytes(ar, buf, out.error, "error length exceeds record");
      std::int64_t died_ms = 0;
      ar(died_ms);
      out.died_at = checked_time(died_ms, "died_at out of range");
    }
    if (version >= 3) {
      ar(t.trigger_count);
      ar(t.signals);
      // Version 3 is written only for count-triggered tasks: a 0 count
      // there is damage, and would not re-encode to the same record.
      // Version 4 carries the trigger fields of every task it is written
      // for, counted or not.
      if (version == 3 && t.trigger_count == 0)
        throw corrupt{"version 3 record without a trigger count"};
    }
    if (version >= 4) {
      std::uint32_t ttr_ms = 0;
      ar(t.priority);
      ar(ttr_ms);
      t.ttr = std::chrono::milliseconds{ttr_ms};
      // Version 4 is written only for a task with a priority or a ttr: both
      // 0 there is damage, and would not re-encode to the same record.
      if (t.priority == 0 && ttr_ms == 0)
        throw corrupt{"version 4 record without a priority or a ttr"};
    }
  } catch (const corrupt& c) {
    why = c.why;
    return 0;
  } catch (const cereal::Exception&) {
    why = "truncated";  // cereal throws when a read comes up short
    return 0;
  }
  if (buf.remaining() != 0) {
    why = std::to_string(buf.remaining()) + " trailing bytes after the last field";
    return 0;
  }
  return version;
}

// The version a record of `t` is written as: the oldest that holds
// everything it carries (`plain` when it carries nothing more).
std::uint16_t version_for(const task& t, std::uint16_t plain) noexcept {
  if (t.priority != 0 || ttr_field(t.ttr) != 0) return priority_record_version;
  return t.trigger_count != 0 ? trigger_record_version : plain;
}

}  // namespace

std::string encode_task(const task& t) {
  // Only a count-triggered task needs version 3, and only one with a
  // priority or a ttr version 4: every other task stays readable by builds
  // that know version 1.
  return encode(version_for(t, task_record_version), t, {}, {});
}

task decode_task(std::string_view bytes, boost::system::error_code& ec, std::string* reason) {
  ec = {};
  dead_letter d;
  std::string why;
  if (decode(bytes, d, why) == 0) {
    ec = make_error_code(errc::corrupt_record);
    if (reason) *reason = std::move(why);
    return task{};
  }
  return std::move(d.task);
}

task decode_stored_task(std::string_view id, std::string_view bytes, boost::system::error_code& ec,
                        std::string* reason) {
  task t = decode_task(bytes, ec, reason);
  if (!ec && t.id != id) {
    ec = make_error_code(errc::corrupt_record);
    if (reason) *reason = "record holds id '" + t.id + "'";
  }
  return t;
}

task decode_task(std::string_view bytes) {
  boost::system::error_code ec;
  std::string why;
  task t = decode_task(bytes, ec, &why);
  if (ec) throw boost::system::system_error(ec, "delayq: decode task record: " + why);
  return t;
}

std::string cap_dead_letter_error(std::string_view error) {
  if (error.size() <= max_dead_letter_error) return std::string(error);
  std::size_t keep = max_dead_letter_error - dead_letter_error_cut.size();
  // Back off over UTF-8 continuation bytes (10xxxxxx) so the cut does not
  // split a character; a sequence is at most 4 bytes, so at most 3 steps.
  for (int i = 0; i < 3 && keep > 0 && (static_cast<unsigned char>(error[keep]) & 0xc0) == 0x80;
       ++i)
    --keep;
  std::string out;
  out.reserve(keep + dead_letter_error_cut.size());
  out.append(error.substr(0, keep));
  out.append(dead_letter_error_cut);
  return out;
}

std::string encode_dead_letter(const dead_letter& d) {
  const std::uint16_t version = version_for(d.task, dead_letter_record_version);
  if (d.error.size() <= max_dead_letter_error) return encode(version, d.task, d.error, d.died_at);
  return encode(version, d.task, cap_dead_letter_error(d.error), d.died_at);
}

dead_letter decode_dead_letter(std::string_view bytes, boost::system::error_code& ec,
                               std::string* reason) {
  ec = {};
  dead_letter d;
  std::string why;
  const std::uint16_t version = decode(bytes, d, why);
  if (version == 1) why = "a version 1 record holds a live task, not a dead letter";
  if (version < dead_letter_record_version) {
    ec = make_error_code(errc::corrupt_record);
    if (reason) *reason = std::move(why);
    return dead_letter{};
  }
  return d;
}

dead_letter decode_dead_letter(std::string_view bytes) {
  boost::system::error_code ec;
  std::string why;
  dead_letter d = decode_dead_letter(bytes, ec, &why);
  if (ec) throw boost::system::system_error(ec, "delayq: decode dead letter: " + why);
  return d;
}

std::uint16_t record_version(std::string_view bytes, boost::system::error_code& ec,
                             std::string* reason) {
  ec = {};
  std::string why;
  if (!header_ok(bytes, why)) {
    ec = make_error_code(errc::corrupt_record);
    if (reason) *reason = std::move(why);
    return 0;
  }
  // Little-endian uint16 after the magic and the byte order flag.
  return static_cast<std::uint16_t>(static_cast<unsigned char>(bytes[5]) |
                                    (static_cast<unsigned char>(bytes[6]) << 8));
}

std::uint16_t record_version(std::string_view bytes) {
  boost::system::error_code ec;
  std::string why;
  const std::uint16_t v = record_version(bytes, ec, &why);
  if (ec) throw boost::system::system_error(ec, "delayq: record version: " + why);
  return v;
}

}  // namespace delayq
