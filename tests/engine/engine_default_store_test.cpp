// The default store, open_store(default_store_uri()): Redis at the default
// address, unless the DELAYQ_STORE environment variable names another. The
// engine itself needs a store given to it.

#include <doctest/doctest.h>

#include <unistd.h>
#include "engine_test_support.hpp"

#include <boost/asio/io_context.hpp>
#include <cstdlib>
#include <delayq/delayq.hpp>
#include <string>

using namespace std::chrono_literals;

namespace {

// Sets or clears DELAYQ_STORE for one scope.
struct store_env {
  explicit store_env(const char* value) {
    if (value)
      ::setenv("DELAYQ_STORE", value, 1);
    else
      ::unsetenv("DELAYQ_STORE");
  }
  ~store_env() { ::unsetenv("DELAYQ_STORE"); }
};

}  // namespace

TEST_CASE("engine: a null store is refused") {
  boost::asio::io_context io;
  delayq::executor_factory f;
  f.add("t", [](const delayq::task&) {});
  try {
    delayq::engine eng(io, f, nullptr);
    FAIL("an engine without a store was made");
  } catch (const boost::system::system_error& e) {
    CHECK(e.code() == delayq::errc::invalid_options);
  }
}

TEST_CASE("engine: the default store is Redis at 127.0.0.1:6379/0") {
  boost::asio::io_context io;
  delayq::executor_factory f;
  f.add("t", [](const delayq::task&) {});
  store_env env(nullptr);
  CHECK(delayq::default_store_uri() == "redis://127.0.0.1:6379/0");
  try {
    delayq::engine eng(io, f, delayq::open_store(delayq::default_store_uri()));
    // Some machine may run a Redis there; then it is the one in use.
    CHECK(eng.store() == "redis://127.0.0.1:6379/0");
  } catch (const boost::system::system_error& e) {
    // The usual case in CI: nothing listens there, and the error says so.
    CHECK(e.code() == delayq::errc::store_unavailable);
    const std::string what = e.what();
    CHECK(what.find("127.0.0.1:6379") != std::string::npos);
    CHECK(what.find("sqlite:") != std::string::npos);
  }
}

TEST_CASE("engine: DELAYQ_STORE overrides the default store") {
  boost::asio::io_context io;
  delayq::executor_factory f;
  f.add("t", [](const delayq::task&) {});

  SUBCASE("memory") {
    store_env env("memory:");
    delayq::engine eng(io, f, delayq::open_store(delayq::default_store_uri()));
    CHECK(eng.store() == "memory:");
  }
  SUBCASE("a real Redis, where the scheduled task lands") {
    const std::string base = delayq_test::test_redis_uri();
    const std::string uri = base + "/0?prefix=engine-default-" + std::to_string(::getpid());
    store_env env(uri.c_str());
    std::string id;
    {
      delayq::engine eng(io, f, delayq::open_store(delayq::default_store_uri()));
      CHECK(eng.store().rfind("redis://", 0) == 0);
      eng.start();
      id = eng.schedule("t", "to redis", 1h);
      eng.stop();
    }
    auto direct = delayq::open_store(uri);
    std::vector<delayq::task> found;
    direct->list([&](delayq::task&& t) { found.push_back(std::move(t)); });
    REQUIRE(found.size() == 1);
    CHECK(found[0].id == id);
    CHECK(found[0].payload == "to redis");
    direct->remove(std::vector<std::string>{id});
  }
  SUBCASE("a bad URI is refused with the accepted forms") {
    store_env env("mysql://nope");
    try {
      delayq::engine eng(io, f, delayq::open_store(delayq::default_store_uri()));
      FAIL("a bad DELAYQ_STORE was accepted");
    } catch (const boost::system::system_error& e) {
      CHECK(e.code() == delayq::errc::invalid_store_uri);
      CHECK(std::string(e.what()).find("sqlite:") != std::string::npos);
    }
  }
}

TEST_CASE("engine: records a store quarantines at start are counted in stats()") {
  // A store whose list() set one record aside, as redis_store and sqlite_store
  // do with a record they cannot decode (their own tests cover the decoding).
  class quarantining_store final : public delayq_test::borrowed_store {
   public:
    quarantining_store() : borrowed_store(inner_) {}
    using task_store::list;
    delayq::list_summary list(const std::function<void(delayq::task&&)>& sink,
                              boost::system::error_code& ec) override {
      auto summary = borrowed_store::list(sink, ec);
      summary.quarantined = 1;
      return summary;
    }
    delayq::memory_store inner_;
  };
  boost::asio::io_context io;
  delayq::executor_factory f;
  f.add("t", [](const delayq::task&) {});
  auto store = std::make_unique<quarantining_store>();
  store->inner_.save(
      std::vector<delayq::task>{{"good", "t", "", std::chrono::system_clock::now() + 1h, 0}});
  delayq::engine eng(io, f, std::move(store));
  eng.start();
  const auto s = eng.stats();
  CHECK(s.loaded == 1);
  CHECK(s.quarantined == 1);
  CHECK(eng.find("good").has_value());
}
