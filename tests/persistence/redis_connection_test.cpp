// redis_connection_test.cpp - the Redis connection is plain RESP: the store's
// scripts and its key layout check come only with the store's handshake
// (persistence/redis/store_handshake.hpp), never with the connection itself.
#include <doctest/doctest.h>

#include <optional>
#include <string>

#include "connection.hpp"
#include "delayq/redis_store.hpp"
#include "store_handshake.hpp"
#include "test_support.hpp"

using namespace delayq;
using namespace delayq::test;
namespace dr = delayq::detail::redis;

namespace {

// Dials `c`; the failure, if the handshake refused the connection.
std::optional<dr::redis_failure> dial_connection(dr::connection& c) {
  dr::sigpipe_guard guard;
  try {
    c.ensure_connected();
  } catch (const dr::redis_failure& f) {
    return f;
  }
  return std::nullopt;
}

bool script_cached(dr::connection& c, const std::string& sha) {
  dr::sigpipe_guard guard;
  auto replies = c.exchange({dr::command().arg("SCRIPT").arg("EXISTS").arg(sha)});
  const redisReply* r = replies[0].get();
  return r->type == REDIS_REPLY_ARRAY && r->elements == 1 && r->element[0]->integer == 1;
}

}  // namespace

TEST_CASE("redis connection: a plain one knows no key layout, the store's handshake checks it") {
  raw_redis raw;
  const std::string prefix = unique_prefix("conn-layout");
  prefix_guard guard{raw, prefix};
  raw.run({"HSET", "{" + prefix + "}:meta", "layout", "9"});
  const redis_options opts = redis_test_options(prefix);

  dr::connection plain(opts, "test", dr::client_name_for(opts, ":plain"));
  const auto plain_failure = dial_connection(plain);
  CHECK_MESSAGE(!plain_failure, (plain_failure ? plain_failure->message : std::string()));
  CHECK(plain.script_sha(0).empty());

  SUBCASE("reader") {
    dr::connection reader(opts, "test", dr::client_name_for(opts, ":reader"),
                          dr::store_handshake::reader(opts));
    const auto failure = dial_connection(reader);
    REQUIRE(failure);
    CHECK(failure->code == errc::store_error);
    CHECK(failure->message.find("key layout version '9'") != std::string::npos);
    CHECK(!reader.connected());
  }
  SUBCASE("writer") {
    dr::connection writer(opts, "test", dr::client_name_for(opts, ":writer"),
                          dr::store_handshake::writer(opts));
    const auto failure = dial_connection(writer);
    REQUIRE(failure);
    CHECK(failure->code == errc::store_error);
    CHECK(!writer.connected());
  }
}

TEST_CASE(
    "redis connection: only a writer's handshake loads the store's scripts and creates meta") {
  raw_redis raw;
  const std::string prefix = unique_prefix("conn-scripts");
  prefix_guard guard{raw, prefix};
  const redis_options opts = redis_test_options(prefix);
  const std::string meta = "{" + prefix + "}:meta";

  dr::connection reader(opts, "test", dr::client_name_for(opts, ":reader"),
                        dr::store_handshake::reader(opts));
  REQUIRE(!dial_connection(reader));
  CHECK(dr::write_sha(reader).empty());
  CHECK(raw.get({"HGET", meta, "layout"}) == std::nullopt);  // a reader creates nothing

  dr::connection writer(opts, "test", dr::client_name_for(opts, ":writer"),
                        dr::store_handshake::writer(opts));
  REQUIRE(!dial_connection(writer));
  CHECK(dr::write_sha(writer).size() == 40);
  CHECK(dr::due_sha(writer).size() == 40);
  CHECK(dr::write_sha(writer) != dr::due_sha(writer));
  CHECK(script_cached(writer, dr::write_sha(writer)));
  CHECK(script_cached(writer, dr::due_sha(writer)));
  CHECK(raw.get({"HGET", meta, "layout"}) == std::to_string(redis_store::layout_version));
}
