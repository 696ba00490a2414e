# How delayq's own targets are compiled: warnings, and the Boost 1.74 + C++20
# fix. Included by the top-level CMakeLists.txt; every library, program, test
# and benchmark of this tree calls delayq_target_defaults() on itself.
# Nothing here reaches a user's program: the settings are PRIVATE, and what a
# user compiles against (the public headers) carries its own fix
# (delayq/detail/boost_cxx20.hpp).
#
# No precompiled headers: measured on this tree with g++ 12 (docs/testing.md,
# "Build speed"), one shared header of Asio, Beast and nlohmann-json saved
# 4-16% of the CPU time of the heaviest files under ASan at -O1 -g1 and 0-4%
# at -O2 -g, cost 16-56% more on the small ones, and took 13 s to make: code
# generation and debug information, not parsing, are where the time goes.
# The unity builds of the two largest test targets (tests/CMakeLists.txt,
# tests/server/CMakeLists.txt) are what saves the parsing.

# Warnings for delayq's own targets only (never for code that includes us).
# g++ 12 flags every designated initializer that leaves a member out
# (task{.id = "a", .type = "t"}) under -Wextra; leaving members out is the
# point of that syntax.
function(delayq_target_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic
                         -Wno-missing-field-initializers
                         $<$<BOOL:${DELAYQ_WERROR}>:-Werror>)
endfunction()

# delayq_target_defaults(<target>): the warnings above, and the Boost fix
# force-included ahead of every translation unit, so that no source file of
# ours has to remember it (a test or benchmark that includes
# <boost/asio/co_spawn.hpp> first compiles all the same).
function(delayq_target_defaults target)
  delayq_target_warnings(${target})
  target_compile_options(${target} PRIVATE
    "SHELL:-include ${PROJECT_SOURCE_DIR}/engine/include/delayq/detail/boost_cxx20.hpp")
endfunction()

# Test code is compiled at -O0: it is not what is tested (the libraries and
# programs under test keep the build's flags), and -O0 compiles the
# template-heavy test files (doctest, Beast, nlohmann-json) in about a third
# less time than -O2 (docs/testing.md, "Build speed"). No test depends on
# how fast its own code runs.

# delayq_test_code(<target>): a test program that calls delayq in process
# (the engine, store, server unit and delayqctl tests). -O0 in a build without
# sanitizers; in a sanitizer build it keeps the build's flags, since it is
# instrumented code (and -O0 compiles no faster under ASan or TSan).
function(delayq_test_code target)
  if(DELAYQ_SANITIZE STREQUAL "")
    target_compile_options(${target} PRIVATE -O0)
  endif()
endfunction()

# delayq_test_driver(<target>): a test program that only drives other
# processes (delayq-server, the crash worker, a browser) and
# checks what they answer. -O0 in every build, and in a sanitizer build its
# own code is compiled without instrumentation, while the programs it drives
# keep theirs: the code under test is the child, and the driver's Beast
# client, JSON and process helpers were the largest files of each sanitizer
# build (docs/testing.md, "Build speed"). It still links the sanitizer's
# runtime, which the delayq libraries it uses need, and LeakSanitizer still
# sees its allocations.
function(delayq_test_driver target)
  target_compile_options(${target} PRIVATE -O0)
  if(NOT DELAYQ_SANITIZE STREQUAL "")
    target_compile_options(${target} PRIVATE -fno-sanitize=all)
  endif()
endfunction()
