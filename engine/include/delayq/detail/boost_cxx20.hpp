// delayq/detail/boost_cxx20.hpp - the one place for a Boost 1.74 + C++20 fix.
//
// Boost 1.74's <boost/asio/awaitable.hpp> calls std::exchange without
// including <utility>. g++ 12's standard headers (<string>, <memory>,
// <functional>, ...) no longer bring std::exchange in on their own, so under
// C++20 any translation unit that reaches awaitable.hpp (through
// <boost/asio/co_spawn.hpp>, <boost/asio/use_awaitable.hpp> or
// <boost/asio.hpp>) fails with "'exchange' is not a member of 'std'" unless
// <utility> came first. Newer Boost includes it itself.
//
// Every public delayq header that pulls in Boost.Asio includes this one
// first, so a user's program that includes a delayq header before its own
// coroutine headers compiles. delayq's own targets get it force-included
// (cmake/delayq_targets.cmake), so no source file of ours has to remember it.
#pragma once

#include <utility>
