// The doctest main of delayq_engine_tests; the test cases live in *_test.cpp.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
