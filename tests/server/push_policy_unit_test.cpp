// push_policy_unit_test.cpp - which addresses a push may reach (--push-allow).
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>

#include "push/push_policy.hpp"

namespace {

namespace ip = boost::asio::ip;
using delayq::server::push_policy;

const ip::tcp::endpoint policy_self{ip::make_address("127.0.0.1"), 7700};

// Whether `p` lets a push to `host`:`port` connect to `addr`.
bool policy_allows(const push_policy& p, const std::string& host, std::uint16_t port,
                   const std::string& addr) {
  std::string why;
  const bool ok = p.allows(host, port, ip::make_address(addr), why);
  INFO(host, ":", port, " -> ", addr, ": ", why);
  CHECK(ok == why.empty());
  return ok;
}

}  // namespace

TEST_CASE("push policy: without rules only loopback, never link-local or this server") {
  const push_policy p({}, policy_self);
  CHECK(policy_allows(p, "127.0.0.1", 9000, "127.0.0.1"));
  CHECK(policy_allows(p, "localhost", 9000, "::1"));
  CHECK(policy_allows(p, "127.0.0.5", 9000, "127.0.0.5"));
  CHECK_FALSE(policy_allows(p, "10.0.0.1", 80, "10.0.0.1"));
  CHECK_FALSE(policy_allows(p, "example.com", 80, "93.184.216.34"));
  CHECK_FALSE(policy_allows(p, "169.254.169.254", 80, "169.254.169.254"));
  CHECK_FALSE(policy_allows(p, "x", 80, "::ffff:169.254.169.254"));
  CHECK_FALSE(policy_allows(p, "x", 80, "fe80::1"));
  CHECK_FALSE(policy_allows(p, "0.0.0.0", 80, "0.0.0.0"));
  CHECK_FALSE(policy_allows(p, "::", 80, "::"));
  // This server, by any loopback address and name.
  CHECK_FALSE(policy_allows(p, "127.0.0.1", 7700, "127.0.0.1"));
  CHECK_FALSE(policy_allows(p, "localhost", 7700, "::1"));
  CHECK(policy_allows(p, "127.0.0.1", 7701, "127.0.0.1"));
}

TEST_CASE("push policy: rules allow blocks and names, link-local only when named alone") {
  const push_policy p({"10.0.0.0/8", "fd00::/8", "hooks.internal:8080", "Mail.Internal",
                       "169.254.0.0/16", "0.0.0.0/0"},
                      policy_self);
  CHECK(policy_allows(p, "10.1.2.3", 80, "10.1.2.3"));
  CHECK(policy_allows(p, "a", 80, "fd12::7"));
  CHECK(policy_allows(p, "hooks.internal", 8080, "192.168.3.3"));
  CHECK(policy_allows(p, "HOOKS.internal", 8080, "192.168.3.3"));
  CHECK(policy_allows(p, "mail.internal", 25, "192.168.3.4"));
  CHECK(policy_allows(p, "anything", 80, "8.8.8.8"));  // 0.0.0.0/0
  CHECK_FALSE(policy_allows(p, "b", 80, "2001:db8::1"));
  // Broad rules do not reach metadata or this server, and a name does not
  // either, wherever it resolves.
  CHECK_FALSE(policy_allows(p, "169.254.169.254", 80, "169.254.169.254"));
  CHECK_FALSE(policy_allows(p, "hooks.internal", 8080, "169.254.169.254"));
  CHECK_FALSE(policy_allows(p, "hooks.internal", 7700, "127.0.0.1"));
  CHECK_FALSE(policy_allows(p, "0.0.0.0", 80, "0.0.0.0"));

  // Broad IPv6 rules do not open them through their IPv6 forms either.
  const push_policy wide({"::/0", "0.0.0.0/0"}, policy_self);
  CHECK(policy_allows(wide, "a", 80, "2001:db8::1"));
  CHECK(policy_allows(wide, "a", 80, "::ffff:10.0.0.1"));
  for (const std::string addr :
       {"::ffff:169.254.169.254", "64:ff9b::a9fe:a9fe", "::ffff:0.0.0.0", "0.1.2.3",
        "100.100.100.200", "192.0.0.192", "fd00:ec2::254", "::"}) {
    INFO(addr);
    CHECK_FALSE(policy_allows(wide, "a", 80, addr));
  }
  CHECK_FALSE(policy_allows(wide, "a", 7700, "::ffff:127.0.0.1"));  // this server

  const push_policy named({"169.254.169.254", "[::1]"}, policy_self);
  CHECK(policy_allows(named, "169.254.169.254", 80, "169.254.169.254"));
  CHECK_FALSE(policy_allows(named, "169.254.169.253", 80, "169.254.169.253"));
  CHECK(policy_allows(named, "::1", 9000, "::1"));
  CHECK_FALSE(policy_allows(named, "127.0.0.1", 9000, "127.0.0.1"));  // rules replace the default
}

TEST_CASE("push policy: a malformed rule is refused, naming it") {
  for (const std::string rule : {"", "10.0.0.0/33", "10.0.0.0/", "10.0.0.0/x", "::/129", "host:0",
                                 "host:70000", "host:http", "bad host", "a/b"}) {
    INFO("rule '", rule, "'");
    try {
      push_policy p({rule}, policy_self);
      FAIL("accepted");
    } catch (const std::invalid_argument& e) {
      CHECK(std::string(e.what()).find("--push-allow") != std::string::npos);
    }
  }
}

TEST_CASE("push policy: check() resolves the URL's host and checks every address") {
  const push_policy p({}, policy_self);
  CHECK(p.check({"localhost", "9000", "/"}).empty());
  CHECK(p.check({"127.0.0.1", "9000", "/"}).empty());
  CHECK(p.check({"169.254.169.254", "80", "/"}).find("link-local") != std::string::npos);
  CHECK(p.check({"localhost", "7700", "/"}).find("this server") != std::string::npos);
  CHECK(p.check({"no-such-host.invalid", "80", "/"}).find("does not resolve") != std::string::npos);
}
