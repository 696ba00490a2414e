// The doctest main of delayq_schedule_tests; the cases live in *_test.cpp.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
