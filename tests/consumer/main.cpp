// Uses the installed delayq headers and library the way a user's program
// would. Includes delayq headers first and nothing else before them, so a
// header that is not self-contained fails here.
#include "delayq/memory_store.hpp"
#include "delayq/timer_wheel.hpp"

#include <cstdio>
#include <string>
#include <vector>

int main() {
  delayq::timer_wheel wheel(64);
  if (wheel.insert(delayq::timer_wheel::item{.id = "a", .payload = "p"}, 5) ==
      delayq::timer_wheel::npos) {
    std::puts("consumer: insert failed");
    return 1;
  }

  std::vector<delayq::task> fired;
  wheel.advance(5, [&](delayq::timer_wheel::handle h) {
    fired.push_back(delayq::task{
        .id = std::string(wheel.id(h)), .type = "t", .payload = std::string(wheel.payload(h))});
    wheel.erase(h);
  });
  if (fired.size() != 1 || fired[0].id != "a") {
    std::printf("consumer: %zu tasks fired at tick 5, expected 1\n", fired.size());
    return 1;
  }

  delayq::memory_store store;
  store.save(fired);
  std::size_t listed = 0;
  store.list([&](delayq::task&&) { ++listed; });
  if (store.size() != 1 || listed != 1) {
    std::puts("consumer: memory_store did not keep the saved task");
    return 1;
  }

  std::puts("consumer: ok");
  return 0;
}
