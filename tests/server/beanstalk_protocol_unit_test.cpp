// beanstalk_protocol_unit_test.cpp - beanstalkd's wire protocol without I/O
// (server/src/beanstalk/): the command reader on every command and every
// refusal, fed whole, pipelined and split at every byte; the exact bytes of
// the replies and YAML documents (the expected bytes are what beanstalkd 1.12
// sent to the same requests); tube names and their task types.
#include <doctest/doctest.h>

#include <string>
#include <string_view>
#include <vector>

#include "beanstalk/command_reader.hpp"
#include "beanstalk/reply.hpp"
#include "beanstalk/stats_yaml.hpp"
#include "beanstalk/tube_name.hpp"
#include "delayq/task.hpp"

namespace {

namespace bs = delayq::server::beanstalk;
using bs::command;
using bs::command_reader;
using bs::protocol_error;
using bs::read_result;
using bs::verb;

// A readable rendering of a result, so that a failed comparison shows what
// was read: "put pri=1 delay=2 ttr=3 body=[abc]", "error:bad_format".
std::string show(const read_result& r) {
  if (const auto* e = std::get_if<protocol_error>(&r)) {
    switch (*e) {
      case protocol_error::bad_format: return "error:bad_format";
      case protocol_error::unknown_command: return "error:unknown_command";
      case protocol_error::expected_crlf: return "error:expected_crlf";
      case protocol_error::job_too_big: return "error:job_too_big";
    }
  }
  const command& c = std::get<command>(r);
  std::string s(bs::name_of(c.name));
  if (c.id) s += " id=" + std::to_string(c.id);
  if (c.priority) s += " pri=" + std::to_string(c.priority);
  if (c.delay) s += " delay=" + std::to_string(c.delay);
  if (c.ttr) s += " ttr=" + std::to_string(c.ttr);
  if (c.timeout) s += " timeout=" + std::to_string(c.timeout);
  if (c.bound) s += " bound=" + std::to_string(c.bound);
  if (!c.tube.empty()) s += " tube=" + c.tube;
  if (c.name == verb::put) s += " body=[" + c.body + "]";
  return s;
}

// Feeds `bytes` in chunks of the given sizes (the last one repeated), reads
// everything the reader yields, and checks the memory bound after each call.
std::vector<std::string> read_chunked(command_reader& reader, std::string_view bytes,
                                      std::vector<std::size_t> chunks = {}) {
  std::vector<std::string> out;
  std::size_t i = 0, at = 0;
  while (at < bytes.size()) {
    std::size_t n = chunks.empty() ? bytes.size() : chunks[std::min(i, chunks.size() - 1)];
    n = std::min(std::max<std::size_t>(n, 1), bytes.size() - at);
    std::string_view in = bytes.substr(at, n);
    while (auto r = reader.next(in)) {
      out.push_back(show(*r));
      REQUIRE(reader.buffered() <= reader.max_buffered());
    }
    CHECK(in.empty());
    REQUIRE(reader.buffered() <= reader.max_buffered());
    at += n;
    ++i;
  }
  return out;
}

std::vector<std::string> read_all(std::string_view bytes, std::size_t max_job = 65535) {
  command_reader reader(max_job);
  return read_chunked(reader, bytes);
}

std::string one(std::string_view bytes) {
  const auto r = read_all(bytes);
  REQUIRE(r.size() == 1);
  return r[0];
}

}  // namespace

TEST_CASE("beanstalk protocol: every command is parsed") {
  CHECK(one("put 1 2 3 5\r\nhello\r\n") == "put pri=1 delay=2 ttr=3 body=[hello]");
  CHECK(one("put 4294967295 0 7 0\r\n\r\n") == "put pri=4294967295 ttr=7 body=[]");
  CHECK(one("use emails\r\n") == "use tube=emails");
  CHECK(one("reserve\r\n") == "reserve");
  CHECK(one("reserve-with-timeout 0\r\n") == "reserve-with-timeout");
  CHECK(one("reserve-with-timeout 30\r\n") == "reserve-with-timeout timeout=30");
  CHECK(one("reserve-job 18446744073709551615\r\n") == "reserve-job id=18446744073709551615");
  CHECK(one("delete 42\r\n") == "delete id=42");
  CHECK(one("release 42 7 9\r\n") == "release id=42 pri=7 delay=9");
  CHECK(one("bury 42 7\r\n") == "bury id=42 pri=7");
  CHECK(one("touch 42\r\n") == "touch id=42");
  CHECK(one("watch a+/;.$_()Z9\r\n") == "watch tube=a+/;.$_()Z9");
  CHECK(one("ignore default\r\n") == "ignore tube=default");
  CHECK(one("peek 1\r\n") == "peek id=1");
  CHECK(one("peek-ready\r\n") == "peek-ready");
  CHECK(one("peek-delayed\r\n") == "peek-delayed");
  CHECK(one("peek-buried\r\n") == "peek-buried");
  CHECK(one("kick 100\r\n") == "kick bound=100");
  CHECK(one("kick-job 3\r\n") == "kick-job id=3");
  CHECK(one("stats-job 3\r\n") == "stats-job id=3");
  CHECK(one("stats-tube default\r\n") == "stats-tube tube=default");
  CHECK(one("stats\r\n") == "stats");
  CHECK(one("list-tubes\r\n") == "list-tubes");
  CHECK(one("list-tube-used\r\n") == "list-tube-used");
  CHECK(one("list-tubes-watched\r\n") == "list-tubes-watched");
  CHECK(one("pause-tube default 60\r\n") == "pause-tube delay=60 tube=default");
  CHECK(one("quit\r\n") == "quit");

  SUBCASE("the fields of a command") {
    command_reader reader;
    std::string_view in = "release 18446744073709551615 4294967295 4294967295\r\n";
    const auto r = reader.next(in);
    REQUIRE(r);
    const auto& c = std::get<command>(*r);
    CHECK(c.name == verb::release);
    CHECK(c.id == 18446744073709551615ull);
    CHECK(c.priority == 4294967295u);
    CHECK(c.delay == 4294967295u);
    CHECK(c.ttr == 0);
    CHECK(c.tube.empty());
    CHECK(in.empty());
    CHECK(reader.idle());
  }
}

TEST_CASE("beanstalk protocol: names of the verbs") {
  CHECK(bs::name_of(verb::delete_) == "delete");
  CHECK(bs::name_of(verb::reserve_with_timeout) == "reserve-with-timeout");
  CHECK(bs::name_of(verb::list_tubes_watched) == "list-tubes-watched");
  // Every verb's name, followed by what it needs, reads back as that verb.
  for (std::size_t i = 0; i < bs::verb_count; ++i) {
    const auto v = static_cast<verb>(i);
    CHECK(bs::name_of(v) != "?");
  }
}

TEST_CASE("beanstalk protocol: put's ttr of 0 is raised to 1") {
  CHECK(one("put 0 0 0 1\r\nx\r\n") == "put ttr=1 body=[x]");
}

TEST_CASE("beanstalk protocol: spaces between arguments") {
  // beanstalkd skips any number of spaces before a number (read_u32).
  CHECK(one("put  0  0  0  3\r\nabc\r\n") == "put ttr=1 body=[abc]");
  CHECK(one("peek  1\r\n") == "peek id=1");
  CHECK(one("release 1  2   3\r\n") == "release id=1 pri=2 delay=3");
  CHECK(one("pause-tube  default  1\r\n") == "pause-tube delay=1 tube=default");
  // ... but a tube name is the rest of the line: one space only.
  CHECK(one("use  foo\r\n") == "error:bad_format");
  CHECK(one("use foo \r\n") == "error:bad_format");
  // A trailing space after a number is trailing garbage.
  CHECK(one("peek 1 \r\n") == "error:bad_format");
  CHECK(one("put 1 2 3 3 \r\n") == "error:bad_format");
  // Tabs are not spaces.
  CHECK(one("peek\t1\r\n") == "error:unknown_command");
  CHECK(one("delete \t1\r\n") == "error:bad_format");
}

TEST_CASE("beanstalk protocol: prefix matching as beanstalkd's which_cmd") {
  CHECK(one("quitxyz\r\n") == "quit");
  CHECK(one("reservex\r\n") == "error:bad_format");
  CHECK(one("reserve \r\n") == "error:bad_format");
  CHECK(one("reserve-with-timeout\r\n") == "error:bad_format");  // matches "reserve"
  CHECK(one("stats-job\r\n") == "error:bad_format");             // matches "stats"
  CHECK(one("statsx\r\n") == "error:bad_format");
  CHECK(one("peek-readyx\r\n") == "error:bad_format");
  CHECK(one("list-tubesx\r\n") == "error:bad_format");
  CHECK(one("list-tubes-watchedx\r\n") == "error:bad_format");
  CHECK(one("pause-tubedefault 1\r\n") == "pause-tube delay=1 tube=default");
  CHECK(one("peek\r\n") == "error:unknown_command");
  CHECK(one("kick\r\n") == "error:unknown_command");
  CHECK(one("kick-job\r\n") == "error:unknown_command");
  CHECK(one("use\r\n") == "error:unknown_command");
  CHECK(one("\r\n") == "error:unknown_command");
  CHECK(one("PUT 0 0 0 0\r\n") == "error:unknown_command");
  CHECK(one("hello\r\n") == "error:unknown_command");
}

TEST_CASE("beanstalk protocol: numbers: decimal, no sign, in range, nothing after") {
  SUBCASE("ids: 64 bits") {
    CHECK(one("delete 18446744073709551615\r\n") == "delete id=18446744073709551615");
    CHECK(one("delete 18446744073709551616\r\n") == "error:bad_format");
    CHECK(one("delete 99999999999999999999999\r\n") == "error:bad_format");
    CHECK(one("delete 007\r\n") == "delete id=7");
  }
  SUBCASE("priorities, seconds, sizes, bounds: 32 bits") {
    CHECK(one("bury 1 4294967296\r\n") == "error:bad_format");
    CHECK(one("put 4294967296 0 0 1\r\n") == "error:bad_format");
    CHECK(one("put 0 4294967296 0 1\r\n") == "error:bad_format");
    CHECK(one("put 0 0 4294967296 1\r\n") == "error:bad_format");
    CHECK(one("put 0 0 0 4294967296\r\n") == "error:bad_format");
    CHECK(one("reserve-with-timeout 4294967296\r\n") == "error:bad_format");
    CHECK(one("kick 4294967296\r\n") == "error:bad_format");
    CHECK(one("kick 4294967295\r\n") == "kick bound=4294967295");
    CHECK(one("pause-tube t 4294967296\r\n") == "error:bad_format");
  }
  SUBCASE("signs") {
    for (const char* line :
         {"peek +1\r\n", "peek -1\r\n", "put -1 0 0 1\r\n", "release 1 +2 3\r\n", "kick -1\r\n",
          "reserve-with-timeout -1\r\n", "pause-tube t -1\r\n", "touch +0\r\n"})
      CHECK_MESSAGE(one(line) == "error:bad_format", line);
  }
  SUBCASE("garbage, missing numbers, extra arguments") {
    for (const char* line : {"peek 1x\r\n",
                             "peek x\r\n",
                             "peek \r\n",
                             "peek 0x10\r\n",
                             "peek 1.0\r\n",
                             "kick 1x\r\n",
                             "kick \r\n",
                             "kick 5 \r\n",
                             "reserve-with-timeout x\r\n",
                             "reserve-with-timeout 0 \r\n",
                             "put 0 0 0\r\n",
                             "put 0 0 0 1 1\r\n",
                             "release 1 2\r\n",
                             "release 1 2 3 4\r\n",
                             "bury 1\r\n",
                             "bury 1 2 3\r\n",
                             "delete 1 2\r\n",
                             "pause-tube t\r\n",
                             "pause-tube t1\r\n",
                             "pause-tube 5\r\n",
                             "pause-tube t 1 \r\n",
                             "stats-job 1 2\r\n"})
      CHECK_MESSAGE(one(line) == "error:bad_format", line);
  }
}

TEST_CASE("beanstalk protocol: tube names in commands") {
  const std::string n200(200, 'a');
  CHECK(one("use " + n200 + "\r\n") == "use tube=" + n200);
  CHECK(one("use " + n200 + "b\r\n") == "error:bad_format");
  for (const char* line :
       {"use -foo\r\n", "use \r\n", "use a:b\r\n", "use a,b\r\n", "watch a b\r\n", "ignore -\r\n",
        "stats-tube -x\r\n", "stats-tube \r\n", "pause-tube -x 1\r\n", "use \xc3\xa9\r\n"})
    CHECK_MESSAGE(one(line) == "error:bad_format", line);
  CHECK(one("pause-tube " + n200 + " 1\r\n") == "pause-tube delay=1 tube=" + n200);
  CHECK(one("pause-tube " + n200 + "a 1\r\n") == "error:bad_format");
}

TEST_CASE("beanstalk protocol: NUL or a lone CR in a command line") {
  CHECK(one(std::string("use a\0b\r\n", 9)) == "error:bad_format");
  CHECK(one(std::string("\0\r\n", 3)) == "error:bad_format");
  CHECK(one("foo\rbar\r\n") == "error:bad_format");
  CHECK(one("quit\r\r\n") == "error:bad_format");
  // A bare LF does not end a line.
  CHECK(read_all("stats\nstats\r\n") == std::vector<std::string>{"error:bad_format"});
}

TEST_CASE("beanstalk protocol: put bodies are any bytes") {
  const std::string body("a\r\nb\0c\r\n\r\n\xff", 11);
  const std::string bytes = "put 1 0 1 11\r\n" + body + "\r\nquit\r\n";
  command_reader reader;
  std::string_view in = bytes;
  auto r = reader.next(in);
  REQUIRE(r);
  const command& c = std::get<command>(*r);
  CHECK(c.name == verb::put);
  CHECK(c.body == body);
  r = reader.next(in);
  REQUIRE(r);
  CHECK(std::get<command>(*r).name == verb::quit);
  CHECK(!reader.next(in));

  SUBCASE("a body that looks like commands is a body") {
    CHECK(read_all("put 0 0 0 7\r\nstats\r\n\r\nstats\r\n") ==
          std::vector<std::string>{"put ttr=1 body=[stats\r\n]", "stats"});
  }
}

TEST_CASE("beanstalk protocol: EXPECTED_CRLF consumes the body and reads on") {
  CHECK(read_all("put 0 0 0 3\r\nabcXYlist-tube-used\r\n") ==
        std::vector<std::string>{"error:expected_crlf", "list-tube-used"});
  CHECK(read_all("put 0 0 0 3\r\nabc\rXlist-tube-used\r\n") ==
        std::vector<std::string>{"error:expected_crlf", "list-tube-used"});
  CHECK(read_all("put 0 0 0 3\r\nabc\n\rstats\r\n") ==
        std::vector<std::string>{"error:expected_crlf", "stats"});
  // A body too short: its CRLF is taken as body, the next bytes as its end.
  CHECK(read_all("put 0 0 0 5\r\nabc\r\nstats\r\n") ==
        std::vector<std::string>{"error:expected_crlf", "error:unknown_command"});
}

TEST_CASE("beanstalk protocol: JOB_TOO_BIG skips the body and reads on") {
  SUBCASE("default maximum: 65535 accepted, 65536 refused") {
    const std::string ok = "put 0 0 0 65535\r\n" + std::string(65535, 'x') + "\r\n";
    const auto r = read_all(ok + "stats\r\n");
    REQUIRE(r.size() == 2);
    CHECK(r[0].size() == std::string("put ttr=1 body=[]").size() + 65535);
    CHECK(r[1] == "stats");
    const std::string big = "put 0 0 0 65536\r\n" + std::string(65536, 'x') + "\r\n";
    CHECK(read_all(big + "list-tube-used\r\n") ==
          std::vector<std::string>{"error:job_too_big", "list-tube-used"});
  }
  SUBCASE("the size is checked before trailing garbage, as beanstalkd") {
    const std::string big = "put 1 2 3 99 junk\r\n" + std::string(99, 'x') + "\r\n";
    CHECK(read_all(big + "stats\r\n", 10) ==
          std::vector<std::string>{"error:job_too_big", "stats"});
  }
  SUBCASE("reported once the body is skipped, holding none of it") {
    command_reader reader(10);
    std::string_view in = "put 0 0 0 4000000000\r\n";
    CHECK(!reader.next(in));
    const std::string chunk(1 << 20, 'y');
    for (int i = 0; i < 8; ++i) {
      std::string_view c = chunk;
      CHECK(!reader.next(c));
      CHECK(reader.buffered() == 0);
    }
    CHECK(reader.max_buffered() == command_reader::max_line_length);
  }
  SUBCASE("the skip counts the CRLF too, whatever it holds") {
    CHECK(read_all("put 0 0 0 11\r\n0123456789ABCstats\r\n", 10) ==
          std::vector<std::string>{"error:job_too_big", "stats"});
  }
}

TEST_CASE("beanstalk protocol: lines too long") {
  // 224 bytes with the CRLF is the longest line (beanstalkd's LINE_BUF_SIZE):
  // checked on beanstalkd 1.12 with "quit" + 218 'x' (quits) and + 219, 220
  // (BAD_FORMAT).
  const std::string ok = "quit" + std::string(218, 'x') + "\r\n";
  REQUIRE(ok.size() == command_reader::max_line_length);
  CHECK(read_all(ok) == std::vector<std::string>{"quit"});
  for (std::size_t extra : {219u, 220u, 221u, 1000u, 100000u}) {
    const std::string bytes = "quit" + std::string(extra, 'x') + "\r\nlist-tube-used\r\n";
    const std::vector<std::string> want{"error:bad_format", "list-tube-used"};
    CHECK_MESSAGE(read_all(bytes) == want, extra);
  }
  SUBCASE("the CR of the line end as the 224th byte") {
    const std::string bytes = std::string(223, 'a') + "\r\nstats\r\n";
    CHECK(read_all(bytes) == std::vector<std::string>{"error:bad_format", "stats"});
  }
  SUBCASE("nothing of a long line is kept") {
    command_reader reader;
    const std::string chunk(4096, 'z');
    for (int i = 0; i < 100; ++i) {
      std::string_view in = chunk;
      CHECK(!reader.next(in));
      CHECK(reader.buffered() <= command_reader::max_line_length);
    }
    std::string_view end = "\r\nstats\r\n";
    auto r = reader.next(end);
    REQUIRE(r);
    CHECK(show(*r) == "error:bad_format");
    r = reader.next(end);
    REQUIRE(r);
    CHECK(show(*r) == "stats");
  }
}

TEST_CASE("beanstalk protocol: split anywhere, the same commands") {
  const std::string body("x\r\ny\0z", 6);
  const std::string bytes = "use jobs\r\nput 5 0 60 6\r\n" + body +
                            "\r\n"
                            "put 1 2 3 70\r\n" +
                            std::string(70, 'q') +
                            "\r\n"
                            "put 0 0 0 2\r\nabXY"
                            "reserve-with-timeout 5\r\n" +
                            std::string(300, 'L') +
                            "\r\n"
                            "frob\r\n"
                            "peek -1\r\n"
                            "delete 9\r\nrelease 9 1 2\r\nwatch a(b)\r\nquit\r\n";
  const std::vector<std::string> want{"use tube=jobs",
                                      "put pri=5 ttr=60 body=[" + body + "]",
                                      "error:job_too_big",
                                      "error:expected_crlf",
                                      "reserve-with-timeout timeout=5",
                                      "error:bad_format",
                                      "error:unknown_command",
                                      "error:bad_format",
                                      "delete id=9",
                                      "release id=9 pri=1 delay=2",
                                      "watch tube=a(b)",
                                      "quit"};
  CHECK(read_all(bytes, 64) == want);
  for (std::size_t cut = 1; cut < bytes.size(); ++cut) {
    command_reader reader(64);
    CHECK_MESSAGE((read_chunked(reader, bytes, {cut, bytes.size()}) == want), "cut at ", cut);
  }
  for (std::size_t size : {1u, 2u, 3u, 7u, 13u, 223u, 224u, 225u}) {
    command_reader reader(64);
    CHECK_MESSAGE(read_chunked(reader, bytes, {size}) == want, "chunks of ", size);
  }
}

TEST_CASE("beanstalk protocol: next() stops after each command") {
  command_reader reader;
  std::string_view in = "stats\r\nlist-tubes\r\nput 0 0 1 1\r\nx\r\n";
  auto r = reader.next(in);
  REQUIRE(r);
  CHECK(show(*r) == "stats");
  CHECK(in == "list-tubes\r\nput 0 0 1 1\r\nx\r\n");
  r = reader.next(in);
  REQUIRE(r);
  CHECK(show(*r) == "list-tubes");
  CHECK(in == "put 0 0 1 1\r\nx\r\n");
  r = reader.next(in);
  REQUIRE(r);
  CHECK(in.empty());
  CHECK(!reader.next(in));
  CHECK(reader.idle());
}

TEST_CASE("beanstalk protocol: fixed replies") {
  CHECK(bs::error_reply(protocol_error::bad_format) == "BAD_FORMAT\r\n");
  CHECK(bs::error_reply(protocol_error::unknown_command) == "UNKNOWN_COMMAND\r\n");
  CHECK(bs::error_reply(protocol_error::expected_crlf) == "EXPECTED_CRLF\r\n");
  CHECK(bs::error_reply(protocol_error::job_too_big) == "JOB_TOO_BIG\r\n");
  CHECK(bs::replies::out_of_memory == "OUT_OF_MEMORY\r\n");
  CHECK(bs::replies::internal_error == "INTERNAL_ERROR\r\n");
  CHECK(bs::replies::draining == "DRAINING\r\n");
  CHECK(bs::replies::not_found == "NOT_FOUND\r\n");
  CHECK(bs::replies::deadline_soon == "DEADLINE_SOON\r\n");
  CHECK(bs::replies::timed_out == "TIMED_OUT\r\n");
  CHECK(bs::replies::deleted == "DELETED\r\n");
  CHECK(bs::replies::released == "RELEASED\r\n");
  CHECK(bs::replies::buried == "BURIED\r\n");
  CHECK(bs::replies::touched == "TOUCHED\r\n");
  CHECK(bs::replies::kicked == "KICKED\r\n");
  CHECK(bs::replies::not_ignored == "NOT_IGNORED\r\n");
  CHECK(bs::replies::paused == "PAUSED\r\n");
}

TEST_CASE("beanstalk protocol: replies with values") {
  std::string out;
  bs::append_inserted(out, 1);
  CHECK(out == "INSERTED 1\r\n");
  out.clear();
  bs::append_buried(out, 18446744073709551615ull);
  CHECK(out == "BURIED 18446744073709551615\r\n");
  out.clear();
  bs::append_reserved(out, 5, std::string_view("a\0\r\n", 4));
  CHECK(out == std::string("RESERVED 5 4\r\na\0\r\n\r\n", 20));
  out.clear();
  bs::append_found(out, 1, "abc");
  CHECK(out == "FOUND 1 3\r\nabc\r\n");
  out.clear();
  bs::append_found(out, 2, "");
  CHECK(out == "FOUND 2 0\r\n\r\n");
  out.clear();
  bs::append_using(out, "default");
  CHECK(out == "USING default\r\n");
  out.clear();
  bs::append_watching(out, 2);
  CHECK(out == "WATCHING 2\r\n");
  out.clear();
  bs::append_kicked(out, 0);
  CHECK(out == "KICKED 0\r\n");
  out.clear();
  // Replies append, so pipelined answers go out in one write.
  bs::append_inserted(out, 3);
  out += bs::replies::deleted;
  bs::append_ok(out, bs::tube_list_yaml(std::vector<std::string>{"default"}));
  CHECK(out == "INSERTED 3\r\nDELETED\r\nOK 14\r\n---\n- default\n\r\n");
}

TEST_CASE("beanstalk protocol: YAML documents as beanstalkd 1.12 writes them") {
  SUBCASE("list-tubes") {
    CHECK(bs::tube_list_yaml(std::vector<std::string>{}) == "---\n");
    CHECK(bs::tube_list_yaml(std::vector<std::string>{"default", "a(b)"}) ==
          "---\n- default\n- a(b)\n");
  }
  SUBCASE("stats-job") {
    bs::job_stats s;
    s.id = 1;
    s.tube = "default";
    s.state = "ready";
    s.age = 10;
    s.ttr = 1;
    std::string out;
    bs::append_ok(out, bs::job_stats_yaml(s));
    CHECK(out ==
          "OK 144\r\n---\nid: 1\ntube: default\nstate: ready\npri: 0\nage: 10\ndelay: 0\n"
          "ttr: 1\ntime-left: 0\nfile: 0\nreserves: 0\ntimeouts: 0\nreleases: 0\nburies: 0\n"
          "kicks: 0\n\r\n");
  }
  SUBCASE("stats-tube") {
    bs::tube_stats s;
    s.name = "default";
    s.current_jobs_urgent = 3;
    s.current_jobs_ready = 3;
    s.total_jobs = 3;
    s.current_using = 1;
    s.current_watching = 1;
    s.cmd_pause_tube = 3;
    s.pause = 1;
    std::string out;
    bs::append_ok(out, bs::tube_stats_yaml(s));
    CHECK(out ==
          "OK 265\r\n---\nname: default\ncurrent-jobs-urgent: 3\ncurrent-jobs-ready: 3\n"
          "current-jobs-reserved: 0\ncurrent-jobs-delayed: 0\ncurrent-jobs-buried: 0\n"
          "total-jobs: 3\ncurrent-using: 1\ncurrent-watching: 1\ncurrent-waiting: 0\n"
          "cmd-delete: 0\ncmd-pause-tube: 3\npause: 1\npause-time-left: 0\n\r\n");
  }
  SUBCASE("stats") {
    bs::server_stats s;
    s.current_jobs_urgent = 3;
    s.current_jobs_ready = 3;
    auto cmd = [&](verb v, std::uint64_t n) { s.cmd[static_cast<std::size_t>(v)] = n; };
    cmd(verb::put, 9);
    cmd(verb::peek, 3);
    cmd(verb::reserve_with_timeout, 3);
    cmd(verb::use, 2);
    cmd(verb::watch, 2);
    cmd(verb::ignore, 3);
    cmd(verb::kick, 4);
    cmd(verb::stats, 1);
    cmd(verb::stats_job, 1);
    cmd(verb::stats_tube, 2);
    cmd(verb::list_tubes, 1);
    cmd(verb::list_tube_used, 10);
    cmd(verb::list_tubes_watched, 1);
    cmd(verb::pause_tube, 5);
    cmd(verb::reserve_job, 99);  // not a line of beanstalkd's stats
    s.total_jobs = 3;
    s.max_job_size = 65535;
    s.current_tubes = 1;
    s.current_connections = 1;
    s.total_connections = 28;
    s.pid = 7554;
    s.version = "1.12";
    s.rusage_utime_us = 4724;
    s.rusage_stime_us = 18897;
    s.uptime = 28;
    s.binlog_max_size = 10485760;
    s.id = "c5c764ff2d4b2ee5";
    s.hostname = "vm";
    s.os = "#1 SMP PREEMPT_DYNAMIC @0";
    s.platform = "x86_64";
    std::string out;
    bs::append_ok(out, bs::server_stats_yaml(s));
    CHECK(out ==
          "OK 958\r\n---\ncurrent-jobs-urgent: 3\ncurrent-jobs-ready: 3\n"
          "current-jobs-reserved: 0\ncurrent-jobs-delayed: 0\ncurrent-jobs-buried: 0\n"
          "cmd-put: 9\ncmd-peek: 3\ncmd-peek-ready: 0\ncmd-peek-delayed: 0\n"
          "cmd-peek-buried: 0\ncmd-reserve: 0\ncmd-reserve-with-timeout: 3\ncmd-delete: 0\n"
          "cmd-release: 0\ncmd-use: 2\ncmd-watch: 2\ncmd-ignore: 3\ncmd-bury: 0\n"
          "cmd-kick: 4\ncmd-touch: 0\ncmd-stats: 1\ncmd-stats-job: 1\ncmd-stats-tube: 2\n"
          "cmd-list-tubes: 1\ncmd-list-tube-used: 10\ncmd-list-tubes-watched: 1\n"
          "cmd-pause-tube: 5\njob-timeouts: 0\ntotal-jobs: 3\nmax-job-size: 65535\n"
          "current-tubes: 1\ncurrent-connections: 1\ncurrent-producers: 0\n"
          "current-workers: 0\ncurrent-waiting: 0\ntotal-connections: 28\npid: 7554\n"
          "version: \"1.12\"\nrusage-utime: 0.004724\nrusage-stime: 0.018897\nuptime: 28\n"
          "binlog-oldest-index: 0\nbinlog-current-index: 0\nbinlog-records-migrated: 0\n"
          "binlog-records-written: 0\nbinlog-max-size: 10485760\ndraining: false\n"
          "id: c5c764ff2d4b2ee5\nhostname: vm\nos: #1 SMP PREEMPT_DYNAMIC @0\n"
          "platform: x86_64\n\r\n");
  }
  SUBCASE("the builder") {
    bs::stats_yaml y;
    y.add("a", 0).add_signed("b", -3).add_plain("c", "x y").add_quoted("d", "q\"\\");
    y.add_micros("e", 12'000'001);
    CHECK(y.str() == "---\na: 0\nb: -3\nc: x y\nd: \"q\\\"\\\\\"\ne: 12.000001\n");
  }
}

TEST_CASE("beanstalk protocol: tube names") {
  CHECK(bs::is_valid_tube_name("default"));
  CHECK(bs::is_valid_tube_name("a-+/;.$_()Z9"));
  CHECK(bs::is_valid_tube_name("_"));
  CHECK(bs::is_valid_tube_name(std::string(200, 'x')));
  CHECK(!bs::is_valid_tube_name(std::string(201, 'x')));
  CHECK(!bs::is_valid_tube_name(""));
  CHECK(!bs::is_valid_tube_name("-a"));
  CHECK(!bs::is_valid_tube_name("a:b"));
  CHECK(!bs::is_valid_tube_name("a b"));
  CHECK(!bs::is_valid_tube_name(std::string_view("a\0", 2)));
  for (int c = 0; c < 256; ++c) {
    const char ch = static_cast<char>(c);
    const bool want = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      std::string_view("-+/;.$_()").find(ch) != std::string_view::npos;
    CHECK_MESSAGE(bs::is_tube_name_char(ch) == want, c);
  }
}

TEST_CASE("beanstalk protocol: tube names to task types and back") {
  CHECK(bs::type_of_tube("emails") == "emails");
  CHECK(bs::type_of_tube("a-b.c_D9") == "a-b.c_D9");
  CHECK(bs::type_of_tube("app/mail(high)") == "app:2Fmail:28high:29");
  CHECK(bs::type_of_tube("+/;$()") == ":2B:2F:3B:24:28:29");
  CHECK(bs::tube_of_type("app:2Fmail:28high:29") == "app/mail(high)");
  CHECK(bs::tube_of_type(":2B:2F:3B:24:28:29") == "+/;$()");

  SUBCASE("invalid tubes have no type") {
    CHECK(!bs::type_of_tube(""));
    CHECK(!bs::type_of_tube("-x"));
    CHECK(!bs::type_of_tube("a:b"));
    CHECK(!bs::type_of_tube(std::string(201, 'a')));
  }
  SUBCASE("a type over 128 bytes is refused") {
    CHECK(bs::type_of_tube(std::string(128, 'a')) == std::string(128, 'a'));
    CHECK(!bs::type_of_tube(std::string(129, 'a')));
    CHECK(bs::type_of_tube(std::string(125, 'a') + "$") == std::string(125, 'a') + ":24");
    CHECK(!bs::type_of_tube(std::string(126, 'a') + "$"));
    CHECK(!bs::type_of_tube(std::string(43, '(')));  // 129 bytes as a type
  }
  SUBCASE("types that are no tube's") {
    for (std::string_view t : {"a:b", "a:", "a:2", ":2b", "a:41", ":2D", ":5F", ":3A", ":00", "-x",
                               ":2Dx", "", "a b", "a/b"})
      CHECK_MESSAGE(!bs::tube_of_type(t), t);
    CHECK(!bs::tube_of_type(std::string(129, 'a')));
  }
  SUBCASE("round trips, and the types are delayq's") {
    std::vector<std::string> tubes{"default", "a", "_", "Z9", std::string(128, 'q'), "x+y", "a/b/c",
                                   "f(x);g$", "(", ")", "9-"};
    std::string every;
    for (int c = 0; c < 128; ++c)
      if (bs::is_tube_name_char(static_cast<char>(c)) && c != '-') every += static_cast<char>(c);
    tubes.push_back(every.substr(0, 40));
    tubes.push_back(every.substr(40));
    for (const std::string& tube : tubes) {
      const auto type = bs::type_of_tube(tube);
      REQUIRE_MESSAGE(type, tube);
      CHECK_MESSAGE(delayq::is_valid_type(*type), *type);
      CHECK(bs::tube_of_type(*type) == tube);
    }
  }
  SUBCASE("every valid type that has a tube comes back unchanged") {
    for (std::string_view type : {"emails", "a.b_c-d", "x:2By", "report:2Fdaily"}) {
      REQUIRE(delayq::is_valid_type(type));
      const auto tube = bs::tube_of_type(type);
      REQUIRE_MESSAGE(tube, type);
      CHECK(bs::type_of_tube(*tube) == type);
    }
  }
}

TEST_CASE("beanstalk reader: read() into one command reused gives what next() gives") {
  // The session parses every command into one object: nothing of a command
  // (a tube, an id, a body) may show in the next one.
  const std::string stream =
      "use tube-a\r\nput 5 6 7 3\r\nabc\r\nreserve\r\ndelete 42\r\nwatch b\r\n"
      "put 1 2 0 0\r\n\r\nbury 9 3\r\nbogus\r\nput 1 2 3 x\r\npeek-ready\r\n"
      "release 3 4 5\r\nput 0 0 1 2\r\nxyZZ\r\nkick 7\r\nquit\r\n";
  command_reader fresh, reusing;
  std::vector<std::string> expected, got;
  std::string_view a = stream;
  while (auto r = fresh.next(a)) expected.push_back(show(*r));
  command c;
  std::string_view b = stream;
  for (;;) {
    protocol_error e{};
    const auto s = reusing.read(b, c, e);
    if (s == command_reader::status::more) break;
    got.push_back(s == command_reader::status::command ? show(read_result(c))
                                                       : show(read_result(e)));
  }
  CHECK(b.empty());
  REQUIRE(expected.size() == 15);
  CHECK(got == expected);
}
