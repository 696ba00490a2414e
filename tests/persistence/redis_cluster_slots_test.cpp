// The pieces of redis_store's Redis Cluster support that need no cluster:
// the hash slot of a key, the CLUSTER SLOTS and redirect replies, and the
// redis-cluster:// URI. The tests on a real cluster are in
// redis_cluster_test.cpp.
#include <hiredis/hiredis.h>
#include <hiredis/read.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "cluster_support.hpp"
#include "delayq/open_store.hpp"
#include "delayq/redis_store.hpp"
#include "key_schema.hpp"
#include "test_support.hpp"

using namespace delayq;
using namespace delayq::test;
namespace dr = delayq::detail::redis;

namespace {

// A reply as hiredis would build it from these RESP bytes.
dr::reply_ptr resp(const std::string& bytes) {
  redisReader* reader = redisReaderCreate();
  REQUIRE(redisReaderFeed(reader, bytes.data(), bytes.size()) == REDIS_OK);
  void* raw = nullptr;
  REQUIRE(redisReaderGetReply(reader, &raw) == REDIS_OK);
  redisReaderFree(reader);
  REQUIRE(raw != nullptr);
  return dr::reply_ptr(static_cast<redisReply*>(raw));
}

}  // namespace

TEST_CASE("redis cluster slots: crc16 and key_slot follow the Cluster spec") {
  CHECK(dr::crc16("123456789") == 0x31C3);
  CHECK(dr::crc16("") == 0);
  CHECK(dr::key_slot("123456789") == (0x31C3 & 16383));
  // Known slots (CLUSTER KEYSLOT of Redis 7).
  CHECK(dr::key_slot("foo") == 12182);
  CHECK(dr::key_slot("bar") == 5061);
  // A hash tag: only what is between the first '{' and the first '}' after it.
  CHECK(dr::key_slot("{user1000}.following") == dr::key_slot("{user1000}.followers"));
  CHECK(dr::key_slot("{user1000}.following") == dr::key_slot("user1000"));
  // An empty tag: the whole key is hashed.
  CHECK(dr::key_slot("foo{}{bar}") == (dr::crc16("foo{}{bar}") & 16383));
  CHECK(dr::key_slot("foo{}{bar}") != dr::key_slot("bar"));
  // The first '}' after the first '{' closes the tag.
  CHECK(dr::key_slot("foo{{bar}}zap") == dr::key_slot("{bar"));
  CHECK(dr::key_slot("foo{bar}{zap}") == dr::key_slot("bar"));
  // No closing brace: the whole key.
  CHECK(dr::key_slot("foo{bar") == (dr::crc16("foo{bar") & 16383));
  // Every key of a store shares its tag.
  const dr::store_keys keys("billing");
  for (const std::string* k : {&keys.due, &keys.dead, &keys.meta, &keys.settings})
    CHECK(dr::key_slot(*k) == dr::key_slot(keys.tasks));
}

TEST_CASE("redis cluster slots: CLUSTER SLOTS replies are parsed") {
  // Two ranges on one master, one on another with a replica; an empty host
  // is the node asked.
  const auto r = resp(
      "*3\r\n"
      "*3\r\n:0\r\n:5460\r\n*3\r\n$9\r\n127.0.0.1\r\n:7000\r\n$2\r\nid\r\n"
      "*4\r\n:5461\r\n:10922\r\n*3\r\n$0\r\n\r\n:7001\r\n$2\r\nid\r\n"
      "*3\r\n$9\r\n127.0.0.1\r\n:7004\r\n$2\r\nid\r\n"
      "*3\r\n:10923\r\n:16383\r\n*2\r\n$3\r\n::1\r\n:7002\r\n");
  const auto ranges = dr::parse_cluster_slots(r.get(), "10.0.0.9");
  REQUIRE(ranges.size() == 3);
  CHECK(ranges[0].first == 0);
  CHECK(ranges[0].last == 5460);
  CHECK(ranges[0].host == "127.0.0.1");
  CHECK(ranges[0].port == 7000);
  CHECK(ranges[1].first == 5461);
  CHECK(ranges[1].host == "10.0.0.9");
  CHECK(ranges[1].port == 7001);
  CHECK(ranges[2].host == "::1");
  CHECK(ranges[2].last == 16383);

  SUBCASE("malformed replies are store errors") {
    for (const char* bad :
         {":1\r\n",                                                  // not an array
          "*1\r\n*2\r\n:0\r\n:1\r\n",                                // no master
          "*1\r\n*3\r\n:5\r\n:1\r\n*2\r\n$1\r\na\r\n:1\r\n",         // last < first
          "*1\r\n*3\r\n:0\r\n:16384\r\n*2\r\n$1\r\na\r\n:1\r\n",     // past the last slot
          "*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$1\r\na\r\n:0\r\n",         // port 0
          "-ERR This instance has cluster support disabled\r\n"}) {  // not a cluster
      CAPTURE(bad);
      try {
        dr::parse_cluster_slots(resp(bad).get(), "h");
        FAIL("parsed");
      } catch (const dr::redis_failure& f) {
        CHECK(f.code == errc::store_error);
        CHECK_FALSE(f.message.empty());
      }
    }
  }
}

TEST_CASE("redis cluster slots: redirect replies are recognised") {
  auto moved = dr::parse_redirect(resp("-MOVED 3999 127.0.0.1:6381\r\n").get());
  CHECK(moved.kind == dr::cluster_redirect::moved);
  CHECK(moved.slot == 3999);
  CHECK(moved.host == "127.0.0.1");
  CHECK(moved.port == 6381);
  auto ask = dr::parse_redirect(resp("-ASK 12 ::1:7000\r\n").get());
  CHECK(ask.kind == dr::cluster_redirect::ask);
  CHECK(ask.host == "::1");
  CHECK(ask.port == 7000);
  CHECK(
      dr::parse_redirect(resp("-TRYAGAIN Multiple keys request during rehashing\r\n").get()).kind ==
      dr::cluster_redirect::retry);
  CHECK(dr::parse_redirect(resp("-CLUSTERDOWN The cluster is down\r\n").get()).kind ==
        dr::cluster_redirect::retry);
  for (const char* other : {"-ERR MOVED\r\n", "-MOVED x 1.2.3.4:5\r\n", "-MOVED 1 nohost\r\n",
                            "-MOVED 20000 a:1\r\n", "+OK\r\n", "$5\r\nMOVED\r\n"})
    CHECK(dr::parse_redirect(resp(other).get()).kind == dr::cluster_redirect::none);
}

TEST_CASE("redis cluster slots: redis-cluster:// URIs") {
  const auto o = redis_options::parse(
      "redis-cluster://app:s3cret@10.0.0.1:7000,10.0.0.2,[::1]:7002?prefix=billing");
  CHECK(o.cluster);
  REQUIRE(o.seeds.size() == 3);
  CHECK(o.seeds[0] == std::pair<std::string, unsigned>{"10.0.0.1", 7000});
  CHECK(o.seeds[1] == std::pair<std::string, unsigned>{"10.0.0.2", 6379});
  CHECK(o.seeds[2] == std::pair<std::string, unsigned>{"::1", 7002});
  CHECK(o.user == "app");
  CHECK(o.password == "s3cret");
  CHECK(o.prefix == "billing");
  CHECK(o.describe() ==
        "redis-cluster://app@10.0.0.1:7000,10.0.0.2:6379,[::1]:7002?prefix=billing");

  for (const char* bad :
       {"redis-cluster://h:1/0", "redis-cluster://h:1,h:2/3", "redis-cluster://h:1?db=2",
        "redis-cluster://", "redis-cluster://h:1,", "redis-cluster://h:99999"}) {
    CAPTURE(bad);
    boost::system::error_code ec;
    std::string message;
    redis_options::parse(bad, ec, &message);
    CHECK(ec == errc::invalid_store_uri);
    CHECK_FALSE(message.empty());
  }
  boost::system::error_code ec;
  std::string message;
  redis_options::parse("redis-cluster://h:1/0", ec, &message);
  CHECK(message.find("only database 0") != std::string::npos);
  // open_store() knows the scheme (its parse error, not "unsupported").
  open_store("redis-cluster://h:1/2", ec, &message);
  CHECK(ec == errc::invalid_store_uri);
  CHECK(message.find("only database 0") != std::string::npos);
}
