// counting_allocator.hpp - live heap bytes of this process, for "bytes per
// pending task". counting_allocator.cpp replaces the global operator new and
// delete of the benchmark binary (every form: plain, array, sized, nothrow,
// aligned); they call malloc/free and, while counting is on, add and subtract
// malloc_usable_size() of each block, i.e. what the allocator really granted
// (rounding included, glibc's 8-byte chunk header not).
//
// Counting is switched on only around the untimed fill of a structure, so the
// timed loops pay one relaxed load per allocation and nothing else.
#pragma once

#include <cstdint>

namespace delayq::bench {

/// Turns counting on or off (off at start).
void set_counting(bool on) noexcept;
/// Bytes allocated minus bytes freed while counting was on.
std::int64_t counted_live_bytes() noexcept;

/// Counts the heap bytes that stay allocated across its lifetime.
class heap_meter {
 public:
  heap_meter() noexcept : start_(counted_live_bytes()) { set_counting(true); }
  ~heap_meter() { set_counting(false); }
  heap_meter(const heap_meter&) = delete;
  heap_meter& operator=(const heap_meter&) = delete;
  /// Net bytes allocated since construction.
  std::int64_t bytes() const noexcept { return counted_live_bytes() - start_; }

 private:
  std::int64_t start_;
};

}  // namespace delayq::bench
