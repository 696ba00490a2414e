// open_store(), default_store_uri() and copy_tasks().
#include "delayq/open_store.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>

#include "delayq/memory_store.hpp"
#include "test_support.hpp"

using namespace delayq;
using namespace delayq::test;

namespace {

// A loopback port nothing listens on: bind an ephemeral port, then close it.
unsigned closed_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  ::close(fd);
  return ntohs(addr.sin_port);
}

std::string thrown_message(std::string_view uri, boost::system::error_code& code) {
  try {
    open_store(uri);
  } catch (const boost::system::system_error& e) {
    code = e.code();
    return e.what();
  }
  FAIL("open_store(" << uri << ") did not throw");
  return {};
}

// Restores DELAYQ_STORE as it was.
struct env_guard {
  std::optional<std::string> saved;
  env_guard() {
    if (const char* v = std::getenv("DELAYQ_STORE")) saved = v;
  }
  ~env_guard() {
    if (saved)
      setenv("DELAYQ_STORE", saved->c_str(), 1);
    else
      unsetenv("DELAYQ_STORE");
  }
};

}  // namespace

TEST_CASE("open_store: every accepted form opens") {
  temp_dir dir;
  const auto redis = redis_options::parse(redis_test_uri());
  const std::string prefix = unique_prefix("open");
  raw_redis raw;
  struct cleanup {
    raw_redis& raw;
    std::string prefix;
    ~cleanup() { raw.drop_prefix(prefix); }
  } guard{raw, prefix};

  std::vector<std::string> uris{
      "memory:",
      "sqlite:" + dir.file("a.db"),
      "sqlite://" + dir.file("b.db"),  // sqlite:///abs/path
      "sqlite:" + dir.file("c.db") + "?synchronous=normal&busy_timeout_ms=100",
      redis_test_uri() + (redis_test_uri().find('?') == std::string::npos ? "?" : "&") +
          "prefix=" + prefix + "&connect_timeout_ms=1000&command_timeout_ms=3000",
  };
  for (const std::string& uri : uris) {
    CAPTURE(uri);
    boost::system::error_code ec;
    auto store = open_store(uri, ec);
    REQUIRE_FALSE(ec);
    REQUIRE(store);
    store->save(std::vector{make_task("t")});
    CHECK(store->list([](task&&) {}).tasks == 1);
  }
  CHECK(open_store("sqlite://" + dir.file("b.db"))->describe() == "sqlite:" + dir.file("b.db"));

  // A relative path is relative to the working directory.
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  auto relative = open_store("sqlite:rel.db");
  std::filesystem::current_path(cwd);
  CHECK(relative->describe() == "sqlite:rel.db");
  CHECK(std::filesystem::exists(dir.path() / "rel.db"));
}

TEST_CASE("open_store: bad URIs are invalid_store_uri and list the accepted forms") {
  for (const char* uri : {"http://x", "redis://", "redis://host:notaport", "sqlite:", "foo", "",
                          "memory", "sqlite://relative.db", "sqlite:x.db?synchronous=sometimes",
                          "unix://", "redis://:hunter2@host:notaport", "rediss://:hunter2@host",
                          "redis://:hun?ter2@host", "redis://:hunter2@host/x", "hunter2@x"}) {
    const std::string shown = uri;
    CAPTURE(shown);
    boost::system::error_code ec;
    std::string message;
    CHECK(open_store(uri, ec, &message) == nullptr);
    CHECK(ec == errc::invalid_store_uri);
    const std::string what = thrown_message(uri, ec);
    CHECK(ec == errc::invalid_store_uri);
    for (const char* form : {"redis://", "unix://", "sqlite:", "memory:"})
      CHECK_MESSAGE(what.find(form) != std::string::npos, what);
    CHECK(what.find("hunter2") == std::string::npos);
  }
}

TEST_CASE("open_store: an unreachable Redis is store_unavailable and suggests sqlite") {
  const unsigned port = closed_port();
  const std::string uri =
      "redis://127.0.0.1:" + std::to_string(port) + "/0?connect_timeout_ms=2000";
  boost::system::error_code ec;
  log_capture logs;
  CHECK(open_store(uri, ec) == nullptr);
  CHECK(ec == errc::store_unavailable);
  CHECK(logs.contains("sqlite:delayq.db"));  // the error-code form logs the advice

  const std::string what = thrown_message(uri, ec);
  CHECK(ec == errc::store_unavailable);
  CHECK(what.find("Redis at 127.0.0.1:" + std::to_string(port) + " is unreachable") !=
        std::string::npos);
  CHECK(what.find("sqlite:delayq.db") != std::string::npos);
  CHECK(what.find("DELAYQ_STORE") != std::string::npos);
}

TEST_CASE("open_store: default_store_uri honours DELAYQ_STORE") {
  env_guard guard;
  unsetenv("DELAYQ_STORE");
  CHECK(default_store_uri() == "redis://127.0.0.1:6379/0");
  setenv("DELAYQ_STORE", "", 1);
  CHECK(default_store_uri() == "redis://127.0.0.1:6379/0");
  setenv("DELAYQ_STORE", "sqlite:/var/lib/x.db", 1);
  CHECK(default_store_uri() == "sqlite:/var/lib/x.db");
}

TEST_CASE("open_store: copy_tasks moves a whole set between backends") {
  temp_dir dir;
  memory_store from;
  std::vector<task> tasks;
  for (int i = 0; i < 2500; ++i)
    tasks.push_back(make_task("c" + std::to_string(i), std::string(i % 7, '\0'), i, i % 3));
  from.save(tasks);

  auto sqlite = open_store("sqlite:" + dir.file("copy.db"));
  CHECK(copy_tasks(from, *sqlite) == 2500);

  const std::string prefix = unique_prefix("copy");
  raw_redis raw;
  struct cleanup {
    raw_redis& raw;
    std::string prefix;
    ~cleanup() { raw.drop_prefix(prefix); }
  } guard{raw, prefix};
  redis_store redis(redis_test_options(prefix));
  boost::system::error_code ec;
  CHECK(copy_tasks(*sqlite, redis, ec) == 2500);
  CHECK_FALSE(ec);

  memory_store back;
  CHECK(copy_tasks(redis, back) == 2500);
  std::map<std::string, task> got;
  back.list([&](task&& t) { got.emplace(t.id, std::move(t)); });
  REQUIRE(got.size() == tasks.size());
  for (const task& t : tasks) CHECK(got.at(t.id) == t);
}

TEST_CASE("open_store: copy_tasks stops at a failing save") {
  struct failing_store final : task_store {
    using task_store::save;
    std::size_t saves = 0;
    void save(std::span<const task>, boost::system::error_code& ec) override {
      ec = ++saves >= 2 ? make_error_code(errc::store_error) : boost::system::error_code{};
    }
    void remove(std::span<const std::string>, boost::system::error_code& ec) override { ec = {}; }
    list_summary list(const std::function<void(task&&)>&, boost::system::error_code& ec) override {
      ec = {};
      return {};
    }
    std::string describe() const override { return "failing:"; }
  } to;
  memory_store from;
  std::vector<task> tasks;
  for (int i = 0; i < 3500; ++i) tasks.push_back(make_task("f" + std::to_string(i)));
  from.save(tasks);
  boost::system::error_code ec;
  CHECK(copy_tasks(from, to, ec) == 1000);
  CHECK(ec == errc::store_error);
  CHECK_THROWS_AS(copy_tasks(from, to), boost::system::system_error);
}
