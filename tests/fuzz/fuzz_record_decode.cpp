// fuzz_record_decode - libFuzzer target for the stored-record codec.
//
// Every input is handed to every decode entry point (the DELAYQ_FUZZ_DECODER
// lines in LLVMFuzzerTestOneInput: decode_task, decode_dead_letter; and
// check_record_version for the header-only record_version). For
// each one it checks the contract of delayq/record_codec.hpp:
//   - the error_code form never throws, and no single allocation it makes is
//     larger than the input plus a little slack (a length prefix is never
//     trusted before it is checked against the bytes left);
//   - on failure: errc::corrupt_record, a non-empty reason, a default value;
//   - the throwing form agrees: the same value, or system_error with the same
//     code, and no other exception;
//   - on success, the value survives encode -> decode unchanged, re-encoding
//     is stable, and an input in the version the encoder writes comes back
//     byte for byte (the encoding is canonical). (Exact only while a dead
//     letter's error fits max_dead_letter_error, which inputs of at most
//     4096 bytes, run.sh's -max_len, guarantee.)
// Then: the two decoders agree with each other, and a task and a dead letter
// cut out of the same bytes (any strings, times, attempts; errors below and
// above the cap) survive encode -> decode, with cap_dead_letter_error()
// keeping its promises.
//
// Any violation calls __builtin_trap(), which libFuzzer reports as a crash.
// See tests/fuzz/README.md.
#include <sanitizer/allocator_interface.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <new>
#include <string>
#include <string_view>
#include <type_traits>

#include "delayq/error.hpp"
#include "delayq/record_codec.hpp"
#include "delayq/task.hpp"

namespace {

// ------------------------------------------------------------ allocation bound
//
// While a decode runs, alloc_limit holds the largest single allocation it may
// make, and the sanitizer's malloc hook notes the largest one made beyond it;
// alloc_bound reports it when the decode ends. (The hook only takes notes:
// trapping inside it would also fire while a sanitizer report is written, and
// hang libFuzzer's crash handler. An allocation too large to succeed at all
// is a sanitizer report of its own, or a length_error caught below.)
std::size_t alloc_limit = 0;  // 0: not decoding, no limit
std::size_t alloc_over = 0;   // the largest allocation above the limit

// Room for the bookkeeping of a decode (stream, locale, reason string)
// beyond the record's own fields.
constexpr std::size_t alloc_slack = 1024;

void malloc_hook(const volatile void*, std::size_t size) {
  if (alloc_limit != 0 && size > alloc_limit && size > alloc_over) alloc_over = size;
}

void free_hook(const volatile void*) {}

// Bounds the allocations of a decode for as long as it lives; traps when it
// ends (returned or threw) if one was larger.
class alloc_bound {
 public:
  alloc_bound(const char* entry, std::size_t input_size) : entry_(entry), input_size_(input_size) {
    alloc_over = 0;
    alloc_limit = input_size + alloc_slack;
  }
  ~alloc_bound() {
    alloc_limit = 0;
    if (alloc_over == 0) return;
    std::fprintf(stderr,
                 "fuzz_record_decode: %s: allocated %zu bytes at once for a record of %zu bytes "
                 "(a length prefix used before it was checked?)\n",
                 entry_, alloc_over, input_size_);
    __builtin_trap();
  }
  alloc_bound(const alloc_bound&) = delete;
  alloc_bound& operator=(const alloc_bound&) = delete;

 private:
  const char* entry_;
  std::size_t input_size_;
};

[[noreturn]] void fail(const char* entry, const char* what) {
  alloc_limit = 0;
  std::fprintf(stderr, "fuzz_record_decode: %s: %s\n", entry, what);
  __builtin_trap();
}

#define DELAYQ_FUZZ_EXPECT(cond, what) \
  do {                                 \
    if (!(cond)) fail(name, what);     \
  } while (0)

// ------------------------------------------------------------ one entry point

// Checks one decoder. `decode_ec(bytes, ec, reason)` is the error_code form,
// `decode_throw(bytes)` the throwing form, `encode(value)` its inverse; all
// three are lambdas so that overloaded functions can be named.
template <class T, class DecodeEc, class DecodeThrow, class Encode>
void check_decoder(const char* name, std::string_view bytes, DecodeEc decode_ec,
                   DecodeThrow decode_throw, Encode encode) {
  boost::system::error_code ec;
  std::string reason;
  T value{};
  try {
    alloc_bound bound(name, bytes.size());
    value = decode_ec(bytes, ec, &reason);
  } catch (...) {
    fail(name, "the error_code form threw");
  }

  if (ec) {
    DELAYQ_FUZZ_EXPECT(ec == delayq::errc::corrupt_record,
                       "failed with a code other than corrupt_record");
    DELAYQ_FUZZ_EXPECT(!reason.empty(), "failed without a reason");
    DELAYQ_FUZZ_EXPECT(value == T{}, "failed but returned a non-default value");
  }

  // The throwing form must agree.
  try {
    T thrown_value{};
    {
      alloc_bound bound(name, bytes.size());
      thrown_value = decode_throw(bytes);
    }
    DELAYQ_FUZZ_EXPECT(!ec, "the throwing form accepted what the error_code form rejected");
    DELAYQ_FUZZ_EXPECT(thrown_value == value, "the two forms decoded different values");
  } catch (const boost::system::system_error& e) {
    DELAYQ_FUZZ_EXPECT(ec, "the throwing form rejected what the error_code form accepted");
    DELAYQ_FUZZ_EXPECT(e.code() == ec, "the throwing form threw another code");
  } catch (...) {
    fail(name, "the throwing form threw something other than system_error");
  }
  if (ec) return;

  // Round trip: encode, decode again, same value; re-encoding is stable.
  const std::string encoded = encode(value);
  boost::system::error_code ec2;
  std::string reason2;
  T again{};
  try {
    alloc_bound bound(name, encoded.size());
    again = decode_ec(encoded, ec2, &reason2);
  } catch (...) {
    fail(name, "decoding a re-encoded value threw");
  }
  DELAYQ_FUZZ_EXPECT(!ec2, "a re-encoded value does not decode");
  DELAYQ_FUZZ_EXPECT(again == value, "round trip changed the value");
  DELAYQ_FUZZ_EXPECT(encode(again) == encoded, "re-encoding is not stable");
  // Same header (magic, byte order flag, version) as the encoder writes: the
  // input was in the current format, and there is one way to encode a value.
  const std::size_t header = delayq::record_header_size;
  // Versions 3 and 4 are shared by live tasks (count-triggered, or with a
  // priority or ttr) and dead letters: decode_task() of such a dead letter
  // keeps only the task, so the identity holds there for
  // decode_dead_letter() alone.
  boost::system::error_code vec;
  const bool shared_version =
      std::is_same_v<T, delayq::task> && delayq::record_version(bytes, vec, nullptr) >= 3 && !vec;
  if (!shared_version && bytes.size() >= header && encoded.size() >= header &&
      bytes.substr(0, header) == std::string_view(encoded).substr(0, header)) {
    DELAYQ_FUZZ_EXPECT(encoded == bytes, "a current-version record does not re-encode to itself");
  }
}

// Registers one decoder: the type it yields, its name, its inverse.
#define DELAYQ_FUZZ_DECODER(T, decode, encode)                               \
  check_decoder<T>(                                                          \
      #decode, bytes,                                                        \
      [](std::string_view b, boost::system::error_code& e, std::string* r) { \
        return decode(b, e, r);                                              \
      },                                                                     \
      [](std::string_view b) { return decode(b); }, [](const T& v) { return encode(v); })

// ------------------------------------------------------------ encoder side

// Takes values out of the input front to back; 0 bytes past its end.
class input_reader {
 public:
  explicit input_reader(std::string_view bytes) : bytes_(bytes) {}
  std::uint64_t integer(unsigned width) {
    std::uint64_t v = 0;
    for (unsigned i = 0; i < width; ++i) v |= std::uint64_t{byte()} << (8 * i);
    return v;
  }
  // A string of up to 255 bytes (its length is the next byte).
  std::string short_string() { return take(byte()); }
  std::string rest() { return take(bytes_.size() - at_); }
  // Any time_point: int64 nanoseconds (the encoder keeps milliseconds).
  std::chrono::system_clock::time_point time() {
    return std::chrono::system_clock::time_point{std::chrono::system_clock::duration{
        static_cast<std::chrono::system_clock::rep>(integer(8))}};
  }

 private:
  std::uint8_t byte() { return at_ < bytes_.size() ? static_cast<std::uint8_t>(bytes_[at_++]) : 0; }
  std::string take(std::size_t n) {
    n = std::min(n, bytes_.size() - at_);
    std::string s(bytes_.substr(at_, n));
    at_ += n;
    return s;
  }
  std::string_view bytes_;
  std::size_t at_ = 0;
};

// What a time_point reads back as: its whole milliseconds.
std::chrono::system_clock::time_point to_ms(std::chrono::system_clock::time_point t) {
  return delayq::from_epoch_ms(delayq::to_epoch_ms(t));
}

delayq::task task_from(input_reader& in) {
  delayq::task t;
  t.id = in.short_string();
  t.type = in.short_string();
  t.due = in.time();
  t.attempts = static_cast<std::uint32_t>(in.integer(4));
  return t;
}

// Encoder side: a task cut out of the input (any bytes, any time_point, any
// attempts) survives encode_task -> decode_task, times to the millisecond.
void check_task_round_trip(std::string_view bytes) {
  const char* name = "encode_task(task from input)";
  input_reader in(bytes);
  delayq::task t = task_from(in);
  t.payload = in.rest();

  const std::string encoded = delayq::encode_task(t);
  boost::system::error_code ec;
  delayq::task back;
  try {
    alloc_bound bound(name, encoded.size());
    back = delayq::decode_task(encoded, ec);
  } catch (...) {
    fail(name, "decoding an encoded task threw");
  }
  DELAYQ_FUZZ_EXPECT(!ec, "an encoded task does not decode");
  t.due = to_ms(t.due);
  DELAYQ_FUZZ_EXPECT(back == t, "encode -> decode changed the task");
}

// Whether `s` is well-formed UTF-8 (structure only: lead bytes and the
// number of continuation bytes after them).
bool is_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t len = c < 0x80             ? 1
                            : (c & 0xe0) == 0xc0 ? 2
                            : (c & 0xf0) == 0xe0 ? 3
                            : (c & 0xf8) == 0xf0 ? 4
                                                 : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (std::size_t k = 1; k < len; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return false;
    i += len;
  }
  return true;
}

// Encoder side: a dead letter cut out of the input survives
// encode_dead_letter -> decode_dead_letter, its error capped as
// cap_dead_letter_error() says; the cap itself keeps its promises. The error
// repeats the rest of the input up to 2 * max_dead_letter_error bytes, so
// errors both below and above the cap occur.
void check_dead_letter_round_trip(std::string_view bytes) {
  using delayq::cap_dead_letter_error;
  using delayq::dead_letter_error_cut;
  using delayq::max_dead_letter_error;
  const char* name = "encode_dead_letter(dead letter from input)";
  input_reader in(bytes);
  delayq::dead_letter d;
  d.task = task_from(in);
  d.task.payload = in.short_string();
  d.died_at = in.time();
  const std::size_t error_size = in.integer(2) % (2 * max_dead_letter_error + 1);
  const std::string unit = in.rest();
  if (!unit.empty()) {
    d.error = unit;
    while (d.error.size() < error_size) d.error += d.error;
    d.error.resize(error_size);
  }

  const std::string capped = cap_dead_letter_error(d.error);
  DELAYQ_FUZZ_EXPECT(capped.size() <= max_dead_letter_error, "a capped error is too long");
  if (d.error.size() <= max_dead_letter_error) {
    DELAYQ_FUZZ_EXPECT(capped == d.error, "an error that fits was changed");
  } else {
    const std::string_view kept =
        std::string_view(capped).substr(0, capped.size() - dead_letter_error_cut.size());
    DELAYQ_FUZZ_EXPECT(std::string_view(capped).ends_with(dead_letter_error_cut),
                       "a cut error does not end with the marker");
    DELAYQ_FUZZ_EXPECT(std::string_view(d.error).starts_with(kept),
                       "a cut error does not keep the start of the error");
    DELAYQ_FUZZ_EXPECT(kept.size() + 3 >= max_dead_letter_error - dead_letter_error_cut.size(),
                       "a cut error keeps less than it has room for");
    if (is_utf8(d.error)) {
      DELAYQ_FUZZ_EXPECT((static_cast<unsigned char>(d.error[kept.size()]) & 0xc0) != 0x80,
                         "a cut error splits a UTF-8 character");
    }
  }

  const std::string encoded = delayq::encode_dead_letter(d);
  boost::system::error_code ec;
  delayq::dead_letter back;
  try {
    alloc_bound bound(name, encoded.size());
    back = delayq::decode_dead_letter(encoded, ec);
  } catch (...) {
    fail(name, "decoding an encoded dead letter threw");
  }
  DELAYQ_FUZZ_EXPECT(!ec, "an encoded dead letter does not decode");
  d.task.due = to_ms(d.task.due);
  d.died_at = to_ms(d.died_at);
  d.error = capped;
  DELAYQ_FUZZ_EXPECT(back == d, "encode -> decode changed the dead letter");
  // A dead letter's record also reads as its task.
  delayq::task as_task;
  try {
    as_task = delayq::decode_task(encoded, ec);
  } catch (...) {
    fail(name, "decode_task of a dead letter threw");
  }
  DELAYQ_FUZZ_EXPECT(!ec && as_task == d.task, "decode_task does not read a dead letter's task");
}

// The two decoders read the same format: whatever decode_dead_letter accepts,
// decode_task accepts as the same task; what decode_task accepts at
// version 2 or later, decode_dead_letter accepts.
void check_decoders_agree(std::string_view bytes) {
  const char* name = "decode_task vs decode_dead_letter";
  boost::system::error_code task_ec;
  boost::system::error_code dead_ec;
  const delayq::task t = delayq::decode_task(bytes, task_ec);
  const delayq::dead_letter d = delayq::decode_dead_letter(bytes, dead_ec);
  if (!dead_ec) {
    DELAYQ_FUZZ_EXPECT(!task_ec, "decode_task rejects a valid dead letter");
    DELAYQ_FUZZ_EXPECT(t == d.task, "decode_task reads another task than decode_dead_letter");
  }
  if (!task_ec && dead_ec) {
    const auto version = static_cast<std::uint16_t>(static_cast<unsigned char>(bytes[5]) |
                                                    static_cast<unsigned char>(bytes[6]) << 8);
    DELAYQ_FUZZ_EXPECT(version < delayq::dead_letter_record_version,
                       "decode_dead_letter rejects a valid record of a dead-letter version");
  }
}

// record_version() reads only the header: it never throws (but bad_alloc),
// fails exactly when the header is short or damaged, agrees with both forms,
// and returns the version any successful decode read.
void check_record_version(std::string_view bytes) {
  const char* name = "record_version";
  boost::system::error_code ec;
  std::string why;
  std::uint16_t version = 0;
  try {
    version = delayq::record_version(bytes, ec, &why);
  } catch (const std::bad_alloc&) {
    return;
  } catch (...) {
    fail(name, "the error_code form threw");
  }
  if (ec) {
    DELAYQ_FUZZ_EXPECT(ec == delayq::errc::corrupt_record && !why.empty() && version == 0,
                       "failed without corrupt_record, a reason and version 0");
    boost::system::error_code task_ec;
    delayq::decode_task(bytes, task_ec);
    DELAYQ_FUZZ_EXPECT(task_ec, "decode_task accepts a record whose header record_version rejects");
  } else {
    DELAYQ_FUZZ_EXPECT(bytes.size() >= delayq::record_header_size, "accepted a short header");
    boost::system::error_code task_ec;
    delayq::decode_task(bytes, task_ec);
    if (!task_ec)
      DELAYQ_FUZZ_EXPECT(version >= 1 && version <= delayq::record_format_version,
                         "a decodable record reports a version this build does not read");
  }
  try {
    DELAYQ_FUZZ_EXPECT(delayq::record_version(bytes) == version && !ec,
                       "the throwing form disagrees");
  } catch (const boost::system::system_error& e) {
    DELAYQ_FUZZ_EXPECT(ec && e.code() == ec, "the throwing form threw another error");
  } catch (const std::bad_alloc&) {
  } catch (...) {
    fail(name, "the throwing form threw something else");
  }
}

}  // namespace

// NOLINTNEXTLINE(readability-identifier-naming): the name libFuzzer calls
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  __sanitizer_install_malloc_and_free_hooks(malloc_hook, free_hook);
  return 0;
}

// NOLINTNEXTLINE(readability-identifier-naming): the name libFuzzer calls
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);

  // One line per decode entry point of the codec.
  DELAYQ_FUZZ_DECODER(delayq::task, delayq::decode_task, delayq::encode_task);
  DELAYQ_FUZZ_DECODER(delayq::dead_letter, delayq::decode_dead_letter, delayq::encode_dead_letter);
  check_decoders_agree(bytes);
  check_record_version(bytes);

  check_task_round_trip(bytes);
  check_dead_letter_round_trip(bytes);
  return 0;
}
