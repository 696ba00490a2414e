// peer_directory_unit_test.cpp - the instances' API addresses, kept in a
// store's settings (a real SQLite file, opened twice as two instances would).
#include <doctest/doctest.h>

#include <utility>

#include <algorithm>
#include <memory>
#include <string>

#include <delayq/open_store.hpp>

#include "cluster/peer_directory.hpp"
#include "push/push_registry.hpp"
#include "unit_support.hpp"

using delayq::server::peer_directory;
using delayq::server_test::log_capture;
using delayq::server_test::scratch_dir;

TEST_CASE("peer directory: announce, find from another connection, change, withdraw") {
  scratch_dir dir;
  const std::string uri = "sqlite:" + (dir.path / "peers.db").string();
  auto store_a = delayq::open_store(uri);
  auto store_b = delayq::open_store(uri);
  peer_directory a{*store_a};
  peer_directory b{*store_b};
  boost::system::error_code ec;

  // Announced after b's last read (none yet): a miss reads the store.
  a.announce("a", "http://127.0.0.1:7001", ec);
  REQUIRE_FALSE(ec);
  CHECK(b.url_of("a", ec) == "http://127.0.0.1:7001");
  REQUIRE_FALSE(ec);

  // A new address is seen at the next load() (url_of() answers from the map).
  a.announce("a", "http://[::1]:7002", ec);
  REQUIRE_FALSE(ec);
  CHECK(b.url_of("a", ec) == "http://127.0.0.1:7001");
  b.load(ec);
  REQUIRE_FALSE(ec);
  CHECK(b.url_of("a", ec) == "http://[::1]:7002");

  // Refused before the store is touched: not http, or with a path.
  a.announce("c", "https://127.0.0.1:7003", ec);
  CHECK(ec == boost::system::errc::invalid_argument);
  a.announce("c", "http://127.0.0.1:7003/api", ec);
  CHECK(ec == boost::system::errc::invalid_argument);
  b.load(ec);
  CHECK_FALSE(b.url_of("c", ec).has_value());

  // Lost by the store (a settings key erased): announced again by its owner
  // at its next reread, and only by it.
  store_b->settings()->erase_setting("instance:a", ec);
  REQUIRE_FALSE(ec);
  b.load(ec);
  b.keep_announced(ec);  // b announced nothing: nothing to keep
  REQUIRE_FALSE(ec);
  CHECK_FALSE(b.url_of("a", ec).has_value());
  a.load(ec);
  a.keep_announced(ec);
  REQUIRE_FALSE(ec);
  b.load(ec);
  CHECK(b.url_of("a", ec) == "http://[::1]:7002");

  // Withdrawn: gone at the next load().
  a.withdraw(ec);
  REQUIRE_FALSE(ec);
  b.load(ec);
  REQUIRE_FALSE(ec);
  CHECK_FALSE(b.url_of("a", ec).has_value());
  CHECK_FALSE(ec);
}

TEST_CASE("peer directory: a withdraw leaves a successor's entry under the same name") {
  scratch_dir dir;
  const std::string uri = "sqlite:" + (dir.path / "peers.db").string();
  auto store_old = delayq::open_store(uri);
  auto store_new = delayq::open_store(uri);
  peer_directory old_one{*store_old};
  peer_directory successor{*store_new};
  boost::system::error_code ec;
  old_one.announce("a", "http://127.0.0.1:7001", ec);
  REQUIRE_FALSE(ec);
  successor.announce("a", "http://127.0.0.1:7002", ec);
  REQUIRE_FALSE(ec);
  old_one.withdraw(ec);  // the old process ends its drain late
  REQUIRE_FALSE(ec);
  peer_directory reader{*store_old};
  reader.load(ec);
  REQUIRE_FALSE(ec);
  CHECK(reader.url_of("a", ec) == "http://127.0.0.1:7002");
}

TEST_CASE("peer directory: a bad stored address is skipped, and push targets are not addresses") {
  scratch_dir dir;
  auto store = delayq::open_store("sqlite:" + (dir.path / "peers.db").string());
  boost::system::error_code ec;
  store->settings()->save_setting("instance:bad", "not json", ec);
  REQUIRE_FALSE(ec);
  store->settings()->save_setting("instance:ftp", R"({"url":"ftp://h/"})", ec);
  REQUIRE_FALSE(ec);
  peer_directory peers{*store};
  peers.announce("good", "http://10.0.0.5:7700", ec);
  REQUIRE_FALSE(ec);
  delayq::server::push_registry targets{*store};
  targets.put("mail", {"http://127.0.0.1:9000/mail"}, ec);
  REQUIRE_FALSE(ec);

  log_capture log;
  peer_directory again{*store};
  again.load(ec);
  REQUIRE_FALSE(ec);
  CHECK(again.url_of("good", ec) == "http://10.0.0.5:7700");
  CHECK_FALSE(again.url_of("bad", ec).has_value());
  CHECK_FALSE(again.url_of("ftp", ec).has_value());
  const auto lines = log.taken();
  const auto names = [&](const std::string& what) {
    return std::count_if(lines.begin(), lines.end(),
                         [&](const std::string& l) { return l.find(what) != std::string::npos; });
  };
  CHECK(names("\"bad\"") >= 1);
  CHECK(names("\"ftp\"") >= 1);
  CHECK(names("mail") == 0);

  // And the registry reads its own keys only.
  delayq::server::push_registry reread{*store};
  reread.load(ec);
  REQUIRE_FALSE(ec);
  CHECK(reread.all().size() == 1);
}
