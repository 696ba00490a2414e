// push_registry_unit_test.cpp - push targets kept in a store's settings.
#include <doctest/doctest.h>

#include <utility>

#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <delayq/error.hpp>
#include <delayq/log.hpp>
#include <delayq/memory_store.hpp>
#include <delayq/open_store.hpp>

#include "push/push_registry.hpp"
#include "unit_support.hpp"

using delayq::server::push_registry;
using delayq::server::push_target;
using namespace std::chrono_literals;
using delayq::server_test::log_capture;
using delayq::server_test::scratch_dir;

namespace {

const push_target mail{"http://127.0.0.1:9000/mail", 2500ms, 8};
const push_target sms{"http://[::1]:9001/sms?x=1", 10000ms, 64};

// The checks every store passes; `reopen` returns a fresh store object on the
// same data (for SQLite a new connection to the file; for memory the same).
void registry_round_trip(delayq::task_store& store,
                         const std::function<delayq::task_store&()>& reopen) {
  boost::system::error_code ec;
  {
    push_registry r{store};
    r.load(ec);
    REQUIRE_FALSE(ec);
    CHECK(r.all().empty());
    CHECK_FALSE(r.find("mail").has_value());

    r.put("mail", mail, ec);
    REQUIRE_FALSE(ec);
    r.put("sms", sms, ec);
    REQUIRE_FALSE(ec);
    REQUIRE(r.find("mail").has_value());
    CHECK(*r.find("mail") == mail);
    CHECK(r.all() == std::map<std::string, push_target>{{"mail", mail}, {"sms", sms}});

    // Replacing a target.
    push_target mail2 = mail;
    mail2.concurrency = 1;
    r.put("mail", mail2, ec);
    REQUIRE_FALSE(ec);
    CHECK(r.find("mail")->concurrency == 1);
    r.put("mail", mail, ec);
    REQUIRE_FALSE(ec);

    // Refused before the store is touched.
    r.put("", mail, ec);
    CHECK(ec == delayq::errc::invalid_type);
    r.put("bad type", mail, ec);
    CHECK(ec == delayq::errc::invalid_type);
    r.put("x", push_target{"https://h/"}, ec);
    CHECK(ec == boost::system::errc::invalid_argument);
    r.put("x", push_target{"http://h/", 0ms}, ec);
    CHECK(ec == boost::system::errc::invalid_argument);
    CHECK_FALSE(r.find("x").has_value());
  }
  {
    // A fresh registry on a fresh store object sees what was put, and names
    // the types it gained; a second load with nothing changed gains none.
    auto& again = reopen();
    push_registry r{again};
    CHECK(r.load(ec) == std::vector<std::string>{"mail", "sms"});
    REQUIRE_FALSE(ec);
    CHECK(r.all() == std::map<std::string, push_target>{{"mail", mail}, {"sms", sms}});
    CHECK(r.load(ec).empty());
    REQUIRE_FALSE(ec);

    CHECK(r.erase("mail", ec));
    REQUIRE_FALSE(ec);
    CHECK_FALSE(r.find("mail").has_value());
    CHECK_FALSE(r.erase("mail", ec));
    CHECK_FALSE(ec);
    CHECK_FALSE(r.erase("never", ec));
    CHECK_FALSE(ec);

    // Put by another server on the store, not reread here yet: the store
    // says it had one.
    push_registry other{again};
    other.put("late", mail, ec);
    REQUIRE_FALSE(ec);
    CHECK_FALSE(r.find("late").has_value());
    CHECK(r.erase("late", ec));
    CHECK_FALSE(ec);
    CHECK_FALSE(r.erase("late", ec));
  }
  {
    auto& again = reopen();
    push_registry r{again};
    r.load(ec);
    REQUIRE_FALSE(ec);
    CHECK(r.all() == std::map<std::string, push_target>{{"sms", sms}});

    // Corrupt values are skipped with a log line; other settings are not ours.
    again.settings()->save_setting("push:broken", "{not json", ec);
    REQUIRE_FALSE(ec);
    again.settings()->save_setting("push:refused", R"({"push_url":"https://h/"})", ec);
    REQUIRE_FALSE(ec);
    again.settings()->save_setting("other:setting", "whatever", ec);
    REQUIRE_FALSE(ec);
    log_capture logs;
    r.load(ec);
    REQUIRE_FALSE(ec);
    CHECK(r.all() == std::map<std::string, push_target>{{"sms", sms}});
    const auto lines = logs.taken();
    REQUIRE(lines.size() == 2);
    CHECK(lines[0].find("\"broken\"") != std::string::npos);
    CHECK(lines[1].find("\"refused\"") != std::string::npos);
    CHECK(lines[1].find("only http://") != std::string::npos);
  }
}

}  // namespace

TEST_CASE("push registry: put, find, erase and reload on SQLite") {
  scratch_dir dir;
  const std::string uri = "sqlite:" + (dir.path / "targets.db").string();
  auto store = delayq::open_store(uri);
  std::unique_ptr<delayq::task_store> reopened;
  registry_round_trip(*store, [&]() -> delayq::task_store& {
    reopened.reset();
    reopened = delayq::open_store(uri);
    return *reopened;
  });
}

TEST_CASE("push registry: put, find, erase and reload on the memory store") {
  delayq::memory_store store;
  registry_round_trip(store, [&]() -> delayq::task_store& { return store; });
}

TEST_CASE("push registry: a store error leaves the map unchanged") {
  // A store without settings support answers errc::unsupported.
  struct no_settings final : delayq::task_store {
    void save(std::span<const delayq::task>, boost::system::error_code&) override {}
    void remove(std::span<const std::string>, boost::system::error_code&) override {}
    delayq::list_summary list(const std::function<void(delayq::task&&)>&,
                              boost::system::error_code&) override {
      return {};
    }
    std::string describe() const override { return "no settings"; }
  } store;
  push_registry r{store};
  boost::system::error_code ec;
  r.load(ec);
  CHECK(ec == delayq::errc::unsupported);
  r.put("mail", mail, ec);
  CHECK(ec == delayq::errc::unsupported);
  CHECK_FALSE(r.find("mail").has_value());
  CHECK_FALSE(r.erase("mail", ec));
  CHECK(ec == delayq::errc::unsupported);
}
