// The doctest main of delayq_dashboard_tests. SIGPIPE is ignored, as in the
// server process tests: a write to a closed connection must fail, not end
// the test process (the browser and the server get the default back).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <csignal>

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  doctest::Context context(argc, argv);
  return context.run();
}
