// Points where a test steps into the engine's own threads, to make a race
// happen every time rather than by chance (tests/engine/engine_wakeup_test.cpp).
// Each is null in every build and costs one relaxed load where it is read;
// only tests set one.
#pragma once

#include <atomic>
#include <cstdint>

namespace delayq::detail::test_seams {

/// Called by engine_core::rearm(), on the ticker's strand with no lock held,
/// after it has read every table and before it stores the tick it found
/// (`wake`, timer_wheel::no_tick when nothing is armed) over the one there
/// (`before`): a task armed from here is one armed by another thread in
/// that window.
inline std::atomic<void (*)(std::uint64_t before, std::uint64_t wake)> rearm_scanned{nullptr};

}  // namespace delayq::detail::test_seams
