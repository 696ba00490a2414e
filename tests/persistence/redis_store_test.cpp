// redis_store specifics: key layout, prefixes, reconnects, credentials.
#include "delayq/redis_store.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "delayq/record_codec.hpp"

#include "test_support.hpp"

using namespace delayq;
using namespace delayq::test;

namespace {

std::size_t count(task_store& s) {
  return s.list([](task&&) {}).tasks;
}

}  // namespace

TEST_CASE("redis: keys share one hash tag and can be read with plain commands") {
  raw_redis raw;
  const std::string prefix = unique_prefix("layout");
  prefix_guard guard{raw, prefix};
  redis_store store(redis_test_options(prefix));
  const task t = make_task("k1", "bytes", 1'700'000'000'500, 2);
  store.save(std::vector{t});

  const std::string tag = "{" + prefix + "}:";
  CHECK(raw.get({"HGET", tag + "tasks", "k1"}) == encode_task(t));
  CHECK(raw.get({"ZSCORE", tag + "due", "k1"}) == "1700000000500");
  CHECK(raw.get({"HGET", tag + "meta", "layout"}) == "1");
  // Every key carries the hash tag, so a cluster keeps them in one slot.
  auto keys = raw.run({"KEYS", "*" + prefix + "*"});
  REQUIRE(keys->type == REDIS_REPLY_ARRAY);
  CHECK(keys->elements == 3);  // tasks, due, meta
  for (std::size_t i = 0; i < keys->elements; ++i)
    CHECK(std::string(keys->element[i]->str, keys->element[i]->len).starts_with(tag));

  store.remove(std::vector<std::string>{"k1"});
  CHECK_FALSE(raw.get({"HGET", tag + "tasks", "k1"}));
  CHECK_FALSE(raw.get({"ZSCORE", tag + "due", "k1"}));
}

TEST_CASE("redis: dead letters live in {P}:dead and {P}:dead:by_time") {
  raw_redis raw;
  const std::string prefix = unique_prefix("deadkeys");
  prefix_guard guard{raw, prefix};
  redis_store store(redis_test_options(prefix));
  store.save(std::vector{make_task("k1")});
  const dead_letter d = make_letter("k1", "boom", 1'700'000'000'777);
  boost::system::error_code ec;
  store.dead_letters()->bury(std::vector{d}, ec);
  REQUIRE_FALSE(ec);

  const std::string tag = "{" + prefix + "}:";
  CHECK_FALSE(raw.get({"HGET", tag + "tasks", "k1"}));
  CHECK_FALSE(raw.get({"ZSCORE", tag + "due", "k1"}));
  CHECK(raw.get({"HGET", tag + "dead", "k1"}) == encode_dead_letter(d));
  CHECK(raw.get({"ZSCORE", tag + "dead:by_time", "k1"}) == "1700000000777");
  CHECK(raw.get({"HGET", tag + "meta", "layout"}) == "1");  // the new keys are additive
  auto keys = raw.run({"KEYS", "*" + prefix + "*"});
  REQUIRE(keys->type == REDIS_REPLY_ARRAY);
  CHECK(keys->elements == 3);  // meta, dead, dead:by_time (tasks and due are empty)
  for (std::size_t i = 0; i < keys->elements; ++i)
    CHECK(std::string(keys->element[i]->str, keys->element[i]->len).starts_with(tag));

  store.dead_letters()->revive(std::vector{d.task}, ec);
  REQUIRE_FALSE(ec);
  CHECK_FALSE(raw.get({"HGET", tag + "dead", "k1"}));
  CHECK_FALSE(raw.get({"ZSCORE", tag + "dead:by_time", "k1"}));
  CHECK(raw.get({"HGET", tag + "tasks", "k1"}) == encode_task(d.task));
}

TEST_CASE("redis: list_dead drops an index entry that has no record") {
  raw_redis raw;
  const std::string prefix = unique_prefix("dangling");
  prefix_guard guard{raw, prefix};
  redis_store store(redis_test_options(prefix));
  boost::system::error_code ec;
  store.dead_letters()->bury(std::vector{make_letter("a", "", 1), make_letter("c", "", 3)}, ec);
  REQUIRE_FALSE(ec);
  const std::string tag = "{" + prefix + "}:";
  raw.run({"ZADD", tag + "dead:by_time", "2", "ghost"});

  log_capture logs;
  const auto page = store.dead_letters()->list_dead(0, 2, ec);
  CHECK_FALSE(ec);
  REQUIRE(page.size() == 2);
  CHECK(page[0].task.id == "a");
  CHECK(page[1].task.id == "c");
  CHECK_FALSE(raw.get({"ZSCORE", tag + "dead:by_time", "ghost"}));
  CHECK(logs.contains("'ghost'"));
}

TEST_CASE("redis: dead-letter calls reconnect like the others") {
  raw_redis raw;
  const std::string prefix = unique_prefix("deadreconnect");
  prefix_guard guard{raw, prefix};
  redis_store store(redis_test_options(prefix));
  boost::system::error_code ec;
  REQUIRE(raw.kill_store_connections(prefix) == 1);
  store.dead_letters()->bury(std::vector{make_letter("x")}, ec);
  CHECK_FALSE(ec);
  REQUIRE(raw.kill_store_connections(prefix) == 1);
  CHECK(store.dead_letters()->count_dead(ec) == 1);
  CHECK_FALSE(ec);
  REQUIRE(raw.kill_store_connections(prefix) == 1);
  CHECK(store.dead_letters()->list_dead(0, 10, ec).size() == 1);
  CHECK_FALSE(ec);
  REQUIRE(raw.kill_store_connections(prefix) == 1);
  CHECK(store.dead_letters()->find_dead("x", ec).has_value());
  CHECK_FALSE(ec);
  REQUIRE(raw.kill_store_connections(prefix) == 1);
  store.dead_letters()->purge(std::vector<std::string>{"x"}, ec);
  CHECK_FALSE(ec);
  CHECK(store.dead_letters()->count_dead(ec) == 0);
}

TEST_CASE("redis: two prefixes on one server do not see each other") {
  raw_redis raw;
  const std::string p1 = unique_prefix("left"), p2 = unique_prefix("right");
  prefix_guard g1{raw, p1}, g2{raw, p2};
  redis_store left(redis_test_options(p1)), right(redis_test_options(p2));
  left.save(std::vector{make_task("same-id", "left")});
  right.save(std::vector{make_task("same-id", "right"), make_task("only-right")});

  std::vector<task> seen;
  left.list([&](task&& t) { seen.push_back(std::move(t)); });
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].payload == "left");
  CHECK(count(right) == 2);

  right.remove(std::vector<std::string>{"same-id"});
  CHECK(count(left) == 1);
  CHECK(count(right) == 1);
}

TEST_CASE("redis: a call after the server closed the connection reconnects") {
  raw_redis raw;
  const std::string prefix = unique_prefix("reconnect");
  prefix_guard guard{raw, prefix};
  redis_store store(redis_test_options(prefix));
  store.save(std::vector{make_task("before")});

  log_capture logs;
  REQUIRE(raw.kill_store_connections(prefix) == 1);
  boost::system::error_code ec;
  store.save(std::vector{make_task("after")}, ec);
  CHECK_FALSE(ec);
  CHECK(logs.contains("reconnect"));
  CHECK(count(store) == 2);

  // list() reads on a connection of its own: the store's dead one does not
  // matter to it; remove() then reconnects.
  REQUIRE(raw.kill_store_connections(prefix) == 1);
  CHECK(store.list([](task&&) {}, ec).tasks == 2);
  CHECK_FALSE(ec);
  store.remove(std::vector<std::string>{"before"}, ec);
  CHECK_FALSE(ec);
  CHECK(count(store) == 1);

  // A large batch written into a dead socket must not raise SIGPIPE.
  REQUIRE(raw.kill_store_connections(prefix) == 1);
  std::vector<task> batch;
  for (int i = 0; i < 2000; ++i)
    batch.push_back(make_task("b" + std::to_string(i), std::string(1000, 'x')));
  store.save(batch, ec);
  CHECK_FALSE(ec);
  CHECK(count(store) == 2001);
}

TEST_CASE("redis: the password never reaches describe() or the log") {
  raw_redis raw;
  const std::string prefix = unique_prefix("acl");
  prefix_guard guard{raw, prefix};
  const std::string user = "u-" + prefix;
  const std::string password = "s3cret-" + prefix;
  REQUIRE(raw.run({"ACL", "SETUSER", user, "on", ">" + password, "~*", "+@all"})->type ==
          REDIS_REPLY_STATUS);
  struct drop_user {
    raw_redis& raw;
    std::string user;
    ~drop_user() { raw.run({"ACL", "DELUSER", user}); }
  } drop{raw, user};

  redis_options opts = redis_test_options(prefix);
  opts.user = user;
  opts.password = password;
  log_capture logs;
  {
    redis_store store(opts);
    CHECK(store.describe().find(password) == std::string::npos);
    CHECK(store.describe().find(user) != std::string::npos);
    store.save(std::vector{make_task("x")});
    REQUIRE(raw.kill_store_connections(prefix) == 1);
    store.save(std::vector{make_task("y")});
    CHECK(count(store) == 2);
  }

  SUBCASE("a wrong password is a store_error, and is not logged either") {
    opts.password = "wrong-" + password;
    boost::system::error_code ec;
    std::string message;
    auto store = redis_store::open(opts, ec, &message);
    CHECK(store == nullptr);
    CHECK(ec == errc::store_error);
    CHECK(message.find("authentication failed") != std::string::npos);
    CHECK(message.find(password) == std::string::npos);
  }
  for (const auto& [level, line] : logs.lines()) CHECK(line.find(password) == std::string::npos);
}

TEST_CASE("redis: a newer key layout is refused") {
  raw_redis raw;
  const std::string prefix = unique_prefix("layout-v9");
  prefix_guard guard{raw, prefix};
  raw.run({"HSET", "{" + prefix + "}:meta", "layout", "9"});
  boost::system::error_code ec;
  std::string message;
  CHECK(redis_store::open(redis_test_options(prefix), ec, &message) == nullptr);
  CHECK(ec == errc::store_error);
  CHECK(message.find("layout") != std::string::npos);
}

TEST_CASE("redis: a key of the wrong type is a store_error, not a crash") {
  raw_redis raw;
  const std::string prefix = unique_prefix("wrongtype");
  prefix_guard guard{raw, prefix};
  redis_store store(redis_test_options(prefix));
  raw.run({"SET", "{" + prefix + "}:tasks", "a string"});
  boost::system::error_code ec;
  store.save(std::vector{make_task("x")}, ec);
  CHECK(ec == errc::store_error);
  store.list([](task&&) {}, ec);
  CHECK(ec == errc::store_error);
  // The connection is still in step: a good call afterwards works.
  raw.run({"DEL", "{" + prefix + "}:tasks"});
  store.save(std::vector{make_task("x")}, ec);
  CHECK_FALSE(ec);
}

TEST_CASE("redis: URI parsing") {
  const auto o = redis_options::parse(
      "redis://al%40ice:p%3Ass@example.org:6380/"
      "3?prefix=app.v2&connect_timeout_ms=150&command_timeout_ms=900");
  CHECK(o.host == "example.org");
  CHECK(o.port == 6380);
  CHECK(o.db == 3);
  CHECK(o.user == "al@ice");
  CHECK(o.password == "p:ss");
  CHECK(o.prefix == "app.v2");
  CHECK(o.connect_timeout.count() == 150);
  CHECK(o.command_timeout.count() == 900);
  CHECK(o.describe() == "redis://al%40ice@example.org:6380/3?prefix=app.v2");

  const auto d = redis_options::parse("redis://localhost");
  CHECK(d.port == 6379);
  CHECK(d.db == 0);
  CHECK(d.prefix == "delayq");
  CHECK(d.password.empty());
  CHECK(d.describe() == "redis://localhost:6379/0");

  const auto v6 = redis_options::parse("redis://:pw@[::1]:7000/1");
  CHECK(v6.host == "::1");
  CHECK(v6.port == 7000);
  CHECK(v6.user.empty());
  CHECK(v6.password == "pw");
  CHECK(v6.address() == "[::1]:7000");
  CHECK(v6.describe().find("pw") == std::string::npos);

  const auto u = redis_options::parse("unix:///run/redis/redis.sock?db=4&prefix=x");
  CHECK(u.unix_socket == "/run/redis/redis.sock");
  CHECK(u.db == 4);
  CHECK(u.prefix == "x");
  CHECK(u.describe() == "unix:///run/redis/redis.sock?db=4&prefix=x");

  for (const char* bad :
       {"redis://", "redis://host:notaport", "redis://host:0", "redis://host:65536",
        "redis://host:", "redis://host/x", "redis://host/-1", "redis://user@host",
        "redis://host?prefix=a{b}", "redis://host?prefix=", "redis://host?what=1",
        "redis://host?db=2", "redis://[::1", "unix://", "unix://relative.sock", "unix:///s?db=x",
        "http://x", "redis://:@host", "redis://:%zz@host"}) {
    boost::system::error_code ec;
    std::string message;
    redis_options::parse(bad, ec, &message);
    CHECK_MESSAGE(ec == errc::invalid_store_uri, bad);
    CHECK_FALSE(message.empty());
  }
}

TEST_CASE("redis: a server that accepts but never answers is store_unavailable") {
  // A listening socket nobody accepts from: the TCP handshake completes in
  // the kernel's backlog, and then no reply ever comes.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(fd, 4) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  const std::string uri = "redis://127.0.0.1:" + std::to_string(ntohs(addr.sin_port)) +
                          "?command_timeout_ms=100&connect_timeout_ms=1000";
  boost::system::error_code ec;
  std::string message;
  CHECK(redis_store::open(redis_options::parse(uri), ec, &message) == nullptr);
  ::close(fd);
  CHECK(ec == errc::store_unavailable);
  CHECK(message.find("no answer within 100 ms") != std::string::npos);
}
