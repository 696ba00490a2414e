#include "delayq/detail/record_codec.hpp"

#include <cereal/archives/portable_binary.hpp>
#include <cereal/cereal.hpp>
#include <chrono>
#include <cstring>
#include <istream>
#include <ostream>
#include <streambuf>

#include "delayq/error.hpp"

namespace delayq::detail {
namespace {

constexpr char magic[4] = {'D', 'Q', 'T', 'R'};

// A read-only streambuf over caller-owned bytes: decoding never copies the
// record, and remaining() lets a length prefix be checked before anything is
// allocated for it.
class view_buf final : public std::streambuf {
 public:
  explicit view_buf(std::string_view bytes) {
    char* begin = const_cast<char*>(bytes.data());  // never written through
    setg(begin, begin, begin + bytes.size());
  }
  std::size_t remaining() const { return static_cast<std::size_t>(egptr() - gptr()); }
};

// A write-only streambuf appending to a std::string (no ostringstream copy).
class string_buf final : public std::streambuf {
 public:
  explicit string_buf(std::string& out) : out_(out) {}

 protected:
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    out_.append(s, static_cast<std::size_t>(n));
    return n;
  }
  int_type overflow(int_type ch) override {
    if (!traits_type::eq_int_type(ch, traits_type::eof()))
      out_.push_back(traits_type::to_char_type(ch));
    return traits_type::not_eof(ch);
  }

 private:
  std::string& out_;
};

struct corrupt {
  const char* why;
};

void put_bytes(cereal::PortableBinaryOutputArchive& ar, const std::string& s) {
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

}  // namespace

std::string encode_record(const task& t) {
  std::string out;
  out.reserve(record_header_size + 3 * sizeof(std::uint64_t) + t.id.size() + t.type.size() +
              t.payload.size() + sizeof(std::int64_t) + sizeof(std::uint32_t));
  out.append(magic, sizeof magic);
  string_buf buf(out);
  std::ostream os(&buf);
  {
    // The archive writes its byte order flag (1) first, then our fields.
    cereal::PortableBinaryOutputArchive ar(
        os, cereal::PortableBinaryOutputArchive::Options::LittleEndian());
    ar(record_format_version);
    put_bytes(ar, t.id);
    put_bytes(ar, t.type);
    put_bytes(ar, t.payload);
    ar(static_cast<std::int64_t>(to_epoch_ms(t.due)));
    ar(static_cast<std::uint32_t>(t.attempts));
  }
  return out;
}

task decode_record(std::string_view bytes, boost::system::error_code& ec, std::string* reason) {
  ec = {};
  auto fail = [&](std::string why) {
    ec = make_error_code(errc::corrupt_record);
    if (reason) *reason = std::move(why);
    return task{};
  };
  if (bytes.size() < record_header_size) return fail("truncated header");
  if (std::memcmp(bytes.data(), magic, sizeof magic) != 0) return fail("bad magic");
  // cereal accepts any non-zero flag as little-endian; the format says 1.
  if (static_cast<unsigned char>(bytes[4]) != 1) return fail("bad byte order flag");

  view_buf buf(bytes.substr(sizeof magic));
  std::istream is(&buf);
  task t;
  try {
    cereal::PortableBinaryInputArchive ar(
        is, cereal::PortableBinaryInputArchive::Options::LittleEndian());
    std::uint16_t version = 0;
    ar(version);
    if (version == 0 || version > record_format_version)
      return fail("unknown format version " + std::to_string(version));
    // Version 1 fields. A version 2 decoder reads these, then `if (version >= 2)`
    // the fields v2 appended.
    get_bytes(ar, buf, t.id, "id length exceeds record");
    get_bytes(ar, buf, t.type, "type length exceeds record");
    get_bytes(ar, buf, t.payload, "payload length exceeds record");
    std::int64_t due_ms = 0;
    ar(due_ms);
    ar(t.attempts);
    // A time_point holds less than int64 ms (nanosecond ticks): converting a
    // value beyond its range would overflow, so such a record is corrupt.
    constexpr auto max_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::system_clock::duration::max())
                                .count();
    if (due_ms > max_ms || due_ms < -max_ms) throw corrupt{"due time out of range"};
    t.due = from_epoch_ms(due_ms);
  } catch (const corrupt& c) {
    return fail(c.why);
  } catch (const cereal::Exception&) {
    return fail("truncated");  // cereal throws when a read comes up short
  }
  if (buf.remaining() != 0)
    return fail(std::to_string(buf.remaining()) + " trailing bytes after the last field");
  return t;
}

task decode_record(std::string_view bytes) {
  boost::system::error_code ec;
  std::string why;
  task t = decode_record(bytes, ec, &why);
  if (ec) throw boost::system::system_error(ec, "delayq: decode record: " + why);
  return t;
}

}  // namespace delayq::detail
