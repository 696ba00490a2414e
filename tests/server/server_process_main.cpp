// The doctest main of delayq_server_process_tests; the test cases live in
// *_process_test.cpp. A write to a connection the server closed must fail
// with EPIPE, not end the test process: SIGPIPE is ignored here (the servers
// the tests start get the default disposition back, server_test_support.hpp).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <csignal>

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  doctest::Context context(argc, argv);
  return context.run();
}
