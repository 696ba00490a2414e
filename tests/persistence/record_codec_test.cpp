// The record format: round trips, and rejection of every kind of damage.
#include "delayq/detail/record_codec.hpp"

#include <cstring>

#include "test_support.hpp"

using namespace delayq;
using delayq::detail::decode_record;
using delayq::detail::encode_record;

namespace {

bool rejected(std::string_view bytes) {
  boost::system::error_code ec;
  std::string why;
  decode_record(bytes, ec, &why);
  return ec == errc::corrupt_record && !why.empty();
}

std::string le64(std::uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

const task sample =
    test::make_task("id:{1}", std::string("pay\0load\xff", 9), 1'700'000'000'123, 9);

}  // namespace

TEST_CASE("codec: round trip of every field") {
  for (const task& t :
       {sample, task{}, test::make_task("x", std::string(70000, '\0'), -5, 0xffffffffu)}) {
    const std::string bytes = encode_record(t);
    boost::system::error_code ec;
    const task back = decode_record(bytes, ec);
    CHECK_FALSE(ec);
    CHECK(back == t);
    CHECK(decode_record(bytes) == t);
  }
}

TEST_CASE("codec: the header is magic, byte order 1, version 1 little-endian") {
  const std::string bytes = encode_record(sample);
  REQUIRE(bytes.size() > detail::record_header_size);
  CHECK(bytes.substr(0, 4) == "DQTR");
  CHECK(bytes[4] == 1);
  CHECK(bytes[5] == 1);
  CHECK(bytes[6] == 0);
  // Fields start with the id: uint64 length, then its bytes.
  CHECK(bytes.substr(7, 8) == le64(sample.id.size()));
  CHECK(bytes.substr(15, sample.id.size()) == sample.id);
}

TEST_CASE("codec: every truncation of a valid record is rejected") {
  const std::string bytes = encode_record(sample);
  for (std::size_t n = 0; n < bytes.size(); ++n)
    CHECK_MESSAGE(rejected(std::string_view(bytes).substr(0, n)), "prefix of " << n << " bytes");
}

TEST_CASE("codec: trailing bytes are rejected") {
  std::string bytes = encode_record(sample);
  bytes.push_back('\0');
  CHECK(rejected(bytes));
  bytes += "more";
  CHECK(rejected(bytes));
}

TEST_CASE("codec: garbage is rejected") {
  CHECK(rejected(""));
  CHECK(rejected("hello"));
  CHECK(rejected(std::string(100, '\0')));
  CHECK(rejected(std::string(100, '\xff')));
  std::string bad_magic = encode_record(sample);
  bad_magic[0] = 'X';
  CHECK(rejected(bad_magic));
  std::string bad_order = encode_record(sample);
  bad_order[4] = 0;  // big-endian flag: not our format
  CHECK(rejected(bad_order));
  // Every single flipped byte either still decodes or is rejected; never UB.
  const std::string good = encode_record(sample);
  for (std::size_t i = 0; i < good.size(); ++i) {
    std::string flipped = good;
    flipped[i] = static_cast<char>(flipped[i] ^ 0x5a);
    boost::system::error_code ec;
    decode_record(flipped, ec);
    CHECK((!ec || ec == errc::corrupt_record));
  }
}

TEST_CASE("codec: version 0 and versions newer than this build are rejected") {
  for (std::uint16_t v : {std::uint16_t{0}, std::uint16_t{detail::record_format_version + 1},
                          std::uint16_t{0xffff}}) {
    std::string bytes = encode_record(sample);
    bytes[5] = static_cast<char>(v & 0xff);
    bytes[6] = static_cast<char>(v >> 8);
    boost::system::error_code ec;
    std::string why;
    decode_record(bytes, ec, &why);
    CHECK(ec == errc::corrupt_record);
    CHECK(why.find("version") != std::string::npos);
    CHECK_THROWS_AS(decode_record(bytes), boost::system::system_error);
  }
}

TEST_CASE("codec: an absurd length prefix is rejected without allocating it") {
  // A header and an id length of 2^62: honouring it would try to allocate
  // exabytes (or under ASan, abort). It must be checked against the bytes left.
  for (std::uint64_t huge :
       {std::uint64_t{1} << 62, ~std::uint64_t{0}, std::uint64_t{1} << 32, std::uint64_t{1000}}) {
    std::string bytes = std::string("DQTR\x01\x01\x00", 7) + le64(huge) + "short";
    CHECK(rejected(bytes));
  }
  // The same check for a later field (payload).
  std::string bytes = encode_record(test::make_task("i", "p"));
  const std::size_t payload_len_at = 7 + 8 + 1 + 8 + sample.type.size();
  REQUIRE(bytes.substr(payload_len_at, 8) == le64(1));
  bytes.replace(payload_len_at, 8, le64(std::uint64_t{1} << 60));
  CHECK(rejected(bytes));
}

TEST_CASE("codec: a due time beyond what a time_point holds is rejected") {
  std::string bytes = encode_record(sample);
  const std::size_t due_at = bytes.size() - 4 - 8;
  bytes.replace(due_at, 8, le64(static_cast<std::uint64_t>(INT64_MAX)));
  CHECK(rejected(bytes));
}
