// The cluster test runner. Lease tests read DELAYQ_TEST_REDIS (set by
// scripts/with-redis.sh) and fail without it.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
