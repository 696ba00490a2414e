// The runner of delayq_server_unit_tests (in-process tests of delayq_server_core).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
