// store_health_unit_test.cpp - /healthz's state: kept by a probe of its own,
// never a probe per question, and stale when the probe hangs.
#include <doctest/doctest.h>

#include <atomic>
#include <future>
#include <string>
#include <thread>

#include "ops/store_health.hpp"

using delayq::server::store_health;

namespace {

// Waits until `h` reads unhealthy; false after a minute (a broken state
// machine fails the test instead of hanging it).
bool health_turns_bad(const store_health& h) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::minutes{1};
  while (h.now().ok)
    if (std::chrono::steady_clock::now() > give_up)
      return false;
    else
      std::this_thread::yield();
  return true;
}

}  // namespace

TEST_CASE("store health: asking costs no probe, the state follows the probes") {
  std::atomic<int> probes{0};
  std::atomic<bool> up{true};
  store_health h(
      [&](std::string& why) {
        ++probes;
        if (!up) why = "store down";
        return up.load();
      },
      {std::chrono::milliseconds{1}, std::chrono::hours{1}});
  CHECK_FALSE(h.now().ok);  // not started: not known to be healthy
  h.start();
  CHECK(h.now().ok);  // the first probe ran before start() returned
  h.stop();           // no probe runs from here on
  const int before = probes.load();
  for (int i = 0; i < 1000; ++i) CHECK(h.now().ok);
  CHECK(probes.load() == before);
}

TEST_CASE("store health: a failed probe is reported with its reason") {
  std::atomic<bool> told{false};
  std::atomic<bool> seen_up{false};
  store_health h(
      [&](std::string& why) {
        if (!told.exchange(true)) return true;  // the first probe: up
        // The second probe fails only once the test saw the first's answer:
        // at 1 ms between probes, a slow machine (TSan) could otherwise
        // report the failure before the test asks.
        while (!seen_up) std::this_thread::yield();
        why = "connection refused";
        return false;
      },
      {std::chrono::milliseconds{1}, std::chrono::hours{1}});
  h.start();
  CHECK(h.now().ok);
  seen_up = true;
  // Waits for the state to change, not for a time.
  REQUIRE(health_turns_bad(h));
  const auto s = h.now();
  CHECK(s.why == "connection refused");
}

TEST_CASE("store health: a probe that hangs leaves no ok standing") {
  std::promise<void> release;
  auto released = release.get_future().share();
  std::atomic<int> probes{0};
  store_health h(
      [&](std::string&) {
        if (probes++ > 0) released.wait();  // every probe after the first hangs
        return true;
      },
      {std::chrono::milliseconds{1}, std::chrono::milliseconds{1}});
  h.start();
  // The second probe hangs: once the state is older than stale_after it
  // reads as unhealthy, whatever the last probe said.
  REQUIRE(health_turns_bad(h));
  CHECK(h.now().why.find("did not answer a probe") != std::string::npos);
  release.set_value();
  h.stop();
}
