// The record format: round trips, and rejection of every kind of damage.
#include "delayq/record_codec.hpp"

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "test_support.hpp"

using namespace delayq;

namespace {

bool rejected(std::string_view bytes) {
  boost::system::error_code ec;
  std::string why;
  decode_task(bytes, ec, &why);
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
    const std::string bytes = encode_task(t);
    boost::system::error_code ec;
    const task back = decode_task(bytes, ec);
    CHECK_FALSE(ec);
    CHECK(back == t);
    CHECK(decode_task(bytes) == t);
  }
}

TEST_CASE("codec: the header is magic, byte order 1, version 1 little-endian") {
  const std::string bytes = encode_task(sample);
  REQUIRE(bytes.size() > record_header_size);
  CHECK(bytes.substr(0, 4) == "DQTR");
  CHECK(bytes[4] == 1);
  CHECK(bytes[5] == 1);
  CHECK(bytes[6] == 0);
  // Fields start with the id: uint64 length, then its bytes.
  CHECK(bytes.substr(7, 8) == le64(sample.id.size()));
  CHECK(bytes.substr(15, sample.id.size()) == sample.id);
}

TEST_CASE("codec: every truncation of a valid record is rejected") {
  const std::string bytes = encode_task(sample);
  for (std::size_t n = 0; n < bytes.size(); ++n)
    CHECK_MESSAGE(rejected(std::string_view(bytes).substr(0, n)), "prefix of " << n << " bytes");
}

TEST_CASE("codec: a record that failed to decode leaves nothing behind for the next one") {
  // Each thread reuses one stream for every record it decodes: a rejected
  // record, left half read, must not shift where the next, good one is read.
  const std::string bytes = encode_task(sample);
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    REQUIRE(rejected(std::string_view(bytes).substr(0, n)));
    boost::system::error_code ec;
    CHECK_MESSAGE(decode_task(bytes, ec) == sample, "after a prefix of " << n << " bytes");
    CHECK_FALSE(ec);
  }
}

TEST_CASE("codec: threads encode and decode at once, each record its own") {
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([k, &wrong] {
      for (int i = 0; i < 500; ++i) {
        const task t = test::make_task("t" + std::to_string(k) + "-" + std::to_string(i),
                                       std::string(static_cast<std::size_t>(i % 40), 'a' + k),
                                       1'700'000'000'000 + i, static_cast<std::uint32_t>(k));
        boost::system::error_code ec;
        if (decode_task(encode_task(t), ec) != t || ec) ++wrong;
      }
    });
  for (auto& th : threads) th.join();
  CHECK(wrong.load() == 0);
}

TEST_CASE("codec: trailing bytes are rejected") {
  std::string bytes = encode_task(sample);
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
  std::string bad_magic = encode_task(sample);
  bad_magic[0] = 'X';
  CHECK(rejected(bad_magic));
  std::string bad_order = encode_task(sample);
  bad_order[4] = 0;  // big-endian flag: not our format
  CHECK(rejected(bad_order));
  // Every single flipped byte either still decodes or is rejected; never UB.
  const std::string good = encode_task(sample);
  for (std::size_t i = 0; i < good.size(); ++i) {
    std::string flipped = good;
    flipped[i] = static_cast<char>(flipped[i] ^ 0x5a);
    boost::system::error_code ec;
    decode_task(flipped, ec);
    CHECK((!ec || ec == errc::corrupt_record));
  }
}

TEST_CASE("codec: version 0 and versions newer than this build are rejected") {
  for (std::uint16_t v :
       {std::uint16_t{0}, std::uint16_t{record_format_version + 1}, std::uint16_t{0xffff}}) {
    std::string bytes = encode_task(sample);
    bytes[5] = static_cast<char>(v & 0xff);
    bytes[6] = static_cast<char>(v >> 8);
    boost::system::error_code ec;
    std::string why;
    decode_task(bytes, ec, &why);
    CHECK(ec == errc::corrupt_record);
    CHECK(why.find("version") != std::string::npos);
    CHECK_THROWS_AS(decode_task(bytes), boost::system::system_error);
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
  std::string bytes = encode_task(test::make_task("i", "p"));
  const std::size_t payload_len_at = 7 + 8 + 1 + 8 + sample.type.size();
  REQUIRE(bytes.substr(payload_len_at, 8) == le64(1));
  bytes.replace(payload_len_at, 8, le64(std::uint64_t{1} << 60));
  CHECK(rejected(bytes));
}

TEST_CASE("codec: a due time beyond what a time_point holds is rejected") {
  std::string bytes = encode_task(sample);
  const std::size_t due_at = bytes.size() - 4 - 8;
  bytes.replace(due_at, 8, le64(static_cast<std::uint64_t>(INT64_MAX)));
  CHECK(rejected(bytes));
}

// ---- dead letters (format version 2) ---------------------------------------

namespace {

bool dead_rejected(std::string_view bytes) {
  boost::system::error_code ec;
  std::string why;
  decode_dead_letter(bytes, ec, &why);
  return ec == errc::corrupt_record && !why.empty();
}

const dead_letter sample_letter =
    test::make_letter("id:{2}", std::string("it\0failed \xe6\x97\xa5\xff", 14), -1'234);

}  // namespace

TEST_CASE("codec: dead letter round trip of every field") {
  for (const dead_letter& d :
       {sample_letter, dead_letter{}, test::make_letter("x", "", 1'700'000'000'999),
        test::make_letter("y", std::string(max_dead_letter_error, '\0'), 0)}) {
    const std::string bytes = encode_dead_letter(d);
    boost::system::error_code ec;
    const dead_letter back = decode_dead_letter(bytes, ec);
    CHECK_FALSE(ec);
    CHECK(back == d);
    CHECK(decode_dead_letter(bytes) == d);
  }
}

TEST_CASE("codec: a dead letter is version 2: the task's fields, then error and died_at") {
  const std::string bytes = encode_dead_letter(sample_letter);
  CHECK(bytes.substr(0, 5) == std::string("DQTR\x01", 5));
  CHECK(bytes[5] == 2);
  CHECK(bytes[6] == 0);
  // A version 1 task record followed by the two version 2 fields.
  std::string task_part = encode_task(sample_letter.task);
  task_part[5] = 2;
  CHECK(bytes.starts_with(task_part));
  CHECK(bytes.substr(task_part.size()) == le64(sample_letter.error.size()) + sample_letter.error +
                                              le64(static_cast<std::uint64_t>(-1'234)));
  // Live tasks are still written as version 1, so older builds read them.
  CHECK(encode_task(sample)[5] == 1);
}

TEST_CASE("codec: decode_task reads a version 2 record as its task") {
  const std::string bytes = encode_dead_letter(sample_letter);
  boost::system::error_code ec;
  CHECK(decode_task(bytes, ec) == sample_letter.task);
  CHECK_FALSE(ec);
}

TEST_CASE("codec: a version 1 record is not a dead letter") {
  boost::system::error_code ec;
  std::string why;
  decode_dead_letter(encode_task(sample), ec, &why);
  CHECK(ec == errc::corrupt_record);
  CHECK(why.find("version 1") != std::string::npos);
  CHECK_THROWS_AS(decode_dead_letter(encode_task(sample)), boost::system::system_error);
}

TEST_CASE("codec: every truncation of a dead letter is rejected by both decoders") {
  const std::string bytes = encode_dead_letter(sample_letter);
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    const std::string_view prefix = std::string_view(bytes).substr(0, n);
    CHECK_MESSAGE(dead_rejected(prefix), "prefix of " << n << " bytes");
    CHECK_MESSAGE(rejected(prefix), "prefix of " << n << " bytes");
  }
  std::string trailing = bytes + std::string(1, '\0');
  CHECK(dead_rejected(trailing));
  CHECK(rejected(trailing));
}

TEST_CASE("codec: damaged dead letters are rejected, never misread") {
  const std::string good = encode_dead_letter(sample_letter);
  for (std::size_t i = 0; i < good.size(); ++i) {
    std::string flipped = good;
    flipped[i] = static_cast<char>(flipped[i] ^ 0x5a);
    boost::system::error_code ec;
    decode_dead_letter(flipped, ec);
    CHECK((!ec || ec == errc::corrupt_record));
  }
  for (std::uint16_t v :
       {std::uint16_t{0}, std::uint16_t{record_format_version + 1}, std::uint16_t{0xffff}}) {
    std::string bytes = good;
    bytes[5] = static_cast<char>(v & 0xff);
    bytes[6] = static_cast<char>(v >> 8);
    CHECK(dead_rejected(bytes));
  }
  // An absurd error length, checked against the bytes left before allocating.
  const std::size_t error_len_at = good.size() - 8 - sample_letter.error.size() - 8;
  REQUIRE(good.substr(error_len_at, 8) == le64(sample_letter.error.size()));
  for (std::uint64_t huge : {std::uint64_t{1} << 62, ~std::uint64_t{0}, std::uint64_t{1} << 32}) {
    std::string bytes = good;
    bytes.replace(error_len_at, 8, le64(huge));
    CHECK(dead_rejected(bytes));
  }
  // A died_at beyond what a time_point holds.
  std::string bytes = good;
  bytes.replace(bytes.size() - 8, 8, le64(static_cast<std::uint64_t>(INT64_MIN)));
  CHECK(dead_rejected(bytes));
}

TEST_CASE("codec: a dead letter's error is capped without splitting a character") {
  const std::size_t keep = max_dead_letter_error - dead_letter_error_cut.size();

  const std::string exact(max_dead_letter_error, 'e');
  CHECK(cap_dead_letter_error(exact) == exact);

  const std::string over(max_dead_letter_error + 1, 'o');
  CHECK(cap_dead_letter_error(over) == std::string(keep, 'o') + std::string(dead_letter_error_cut));

  // A three-byte character across the cut is dropped whole.
  std::string utf8(keep - 1, 'a');
  utf8 += "\xe6\x97\xa5";
  utf8 += std::string(10'000, 'b');
  const std::string capped = cap_dead_letter_error(utf8);
  CHECK(capped == std::string(keep - 1, 'a') + std::string(dead_letter_error_cut));
  CHECK(capped.size() <= max_dead_letter_error);

  dead_letter d = test::make_letter("long", utf8);
  const dead_letter back = decode_dead_letter(encode_dead_letter(d));
  CHECK(back.error == capped);
  CHECK(back.task == d.task);
}

TEST_CASE("codec: record_version reads the header without decoding the fields") {
  CHECK(record_version(encode_task(sample)) == task_record_version);
  CHECK(record_version(encode_dead_letter(sample_letter)) == dead_letter_record_version);
  // A future version is reported as it is, though decode_task() rejects it.
  std::string future = encode_task(sample);
  future[5] = 7;
  future[6] = 1;
  boost::system::error_code ec;
  CHECK(record_version(future, ec) == 0x0107);
  CHECK_FALSE(ec);
  // A damaged header is corrupt, in both forms.
  std::string why;
  for (const std::string& bad : {std::string("DQTR\x01\x01", 6), std::string("XQTR\x01\x01\x00", 7),
                                 std::string("DQTR\x02\x01\x00", 7)}) {
    CHECK(record_version(bad, ec, &why) == 0);
    CHECK(ec == errc::corrupt_record);
    CHECK_FALSE(why.empty());
    CHECK_THROWS_AS(record_version(bad), boost::system::system_error);
  }
}

// ---- count-triggered tasks (format version 3) ------------------------------

TEST_CASE("codec: an old version 1 record, written byte by byte, decodes with no trigger") {
  // As a build from before count-triggered tasks wrote it (the documented
  // layout, not this build's encoder).
  std::string old = std::string("DQTR\x01\x01\x00", 7);
  old += le64(2) + "id" + le64(1) + "t" + le64(3) + "pay";
  old += le64(static_cast<std::uint64_t>(1'700'000'000'000));
  old += std::string("\x04\x00\x00\x00", 4);  // attempts 4
  boost::system::error_code ec;
  const task back = decode_task(old, ec);
  REQUIRE_FALSE(ec);
  CHECK(back.id == "id");
  CHECK(back.payload == "pay");
  CHECK(back.attempts == 4);
  CHECK(back.trigger_count == 0);
  CHECK(back.signals == 0);
  // And this build writes such a task the same way, byte for byte.
  CHECK(encode_task(back) == old);
}

TEST_CASE("codec: a count-triggered task is version 3 and round-trips its count and signals") {
  task t = sample;
  t.trigger_count = 5;
  t.signals = 0xfffffffeu;
  const std::string bytes = encode_task(t);
  CHECK(record_version(bytes) == trigger_record_version);
  CHECK(bytes[5] == 3);
  // The version 1 fields, the version 2 ones (empty error, died_at 0), then
  // trigger_count and signals.
  std::string head = encode_task(sample);
  head[5] = 3;
  CHECK(bytes.starts_with(head));
  CHECK(bytes.substr(head.size()) == le64(0) + le64(0) + std::string("\x05\x00\x00\x00", 4) +
                                         std::string("\xfe\xff\xff\xff", 4));
  boost::system::error_code ec;
  CHECK(decode_task(bytes, ec) == t);
  CHECK_FALSE(ec);
  for (std::size_t n = 0; n < bytes.size(); ++n)
    CHECK_MESSAGE(rejected(std::string_view(bytes).substr(0, n)), "prefix of " << n << " bytes");
  CHECK(rejected(bytes + std::string(1, '\0')));

  dead_letter d{t, "boom", from_epoch_ms(1'700'000'000'999)};
  const std::string dead = encode_dead_letter(d);
  CHECK(dead[5] == 3);
  CHECK(decode_dead_letter(dead, ec) == d);
  CHECK_FALSE(ec);
}

// ---- priority and ttr (format version 4) ------------------------------------

TEST_CASE("codec: a task with a priority or a ttr is version 4 and round-trips them") {
  task t = sample;
  t.priority = 0xfffffff0u;
  t.ttr = std::chrono::milliseconds{120'000};
  const std::string bytes = encode_task(t);
  CHECK(record_version(bytes) == priority_record_version);
  CHECK(bytes[5] == 4);
  // The version 1 fields, the version 2 ones (empty error, died_at 0), the
  // version 3 ones (trigger_count 0: allowed in version 4), then priority
  // and ttr in milliseconds.
  std::string head = encode_task(sample);
  head[5] = 4;
  CHECK(bytes.starts_with(head));
  CHECK(bytes.substr(head.size()) == le64(0) + le64(0) + std::string(8, '\0') +
                                         std::string("\xf0\xff\xff\xff", 4) +
                                         std::string("\xc0\xd4\x01\x00", 4));
  boost::system::error_code ec;
  CHECK(decode_task(bytes, ec) == t);
  CHECK_FALSE(ec);
  for (std::size_t n = 0; n < bytes.size(); ++n)
    CHECK_MESSAGE(rejected(std::string_view(bytes).substr(0, n)), "prefix of " << n << " bytes");
  CHECK(rejected(bytes + std::string(1, '\0')));

  SUBCASE("either field alone is enough, with or without a trigger count") {
    task only_ttr = sample;
    only_ttr.ttr = std::chrono::milliseconds{1};
    CHECK(record_version(encode_task(only_ttr)) == 4);
    CHECK(decode_task(encode_task(only_ttr)) == only_ttr);
    task counted = sample;
    counted.priority = 7;
    counted.trigger_count = 3;
    counted.signals = 2;
    CHECK(record_version(encode_task(counted)) == 4);
    CHECK(decode_task(encode_task(counted)) == counted);
  }
  SUBCASE("a task with neither stays version 1 or 3") {
    CHECK(record_version(encode_task(sample)) == 1);
    task counted = sample;
    counted.trigger_count = 3;
    CHECK(record_version(encode_task(counted)) == 3);
  }
  SUBCASE("a ttr past the field is stored as its largest value, a negative one as 0") {
    task longer = sample;
    longer.priority = 1;
    longer.ttr = std::chrono::milliseconds{std::int64_t{1} << 40};
    CHECK(decode_task(encode_task(longer)).ttr.count() == 0xffffffffLL);
    longer.ttr = std::chrono::milliseconds{-5};
    CHECK(decode_task(encode_task(longer)).ttr.count() == 0);
  }
  SUBCASE("a dead letter with a priority is version 4") {
    dead_letter d{t, "buried", from_epoch_ms(1'700'000'000'999)};
    const std::string dead = encode_dead_letter(d);
    CHECK(dead[5] == 4);
    CHECK(decode_dead_letter(dead, ec) == d);
    CHECK_FALSE(ec);
    for (std::size_t n = 0; n < dead.size(); ++n) {
      boost::system::error_code dec;
      decode_dead_letter(std::string_view(dead).substr(0, n), dec);
      CHECK_MESSAGE(dec == errc::corrupt_record, "prefix of " << n << " bytes");
    }
  }
}

TEST_CASE("codec: a version 4 record with neither a priority nor a ttr is rejected") {
  // It would not re-encode to the same bytes (the encoder writes version 1).
  task t = sample;
  t.priority = 1;
  std::string bytes = encode_task(t);
  bytes[bytes.size() - 8] = 0;  // priority 1 -> 0, ttr is 0 already
  boost::system::error_code ec;
  std::string why;
  decode_task(bytes, ec, &why);
  CHECK(ec == errc::corrupt_record);
  CHECK(why.find("version 4") != std::string::npos);
  // A version 3 record still needs its trigger count.
  task counted = sample;
  counted.trigger_count = 1;
  std::string v3 = encode_task(counted);
  v3[v3.size() - 8] = 0;
  CHECK(rejected(v3));
}
