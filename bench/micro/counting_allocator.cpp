// The counting replacement of the global operator new and delete; see
// counting_allocator.hpp.
#include "counting_allocator.hpp"

#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <new>

namespace delayq::bench {
namespace {

std::atomic<bool> counting{false};
std::atomic<std::int64_t> live{0};

void* allocate(std::size_t n) {
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p != nullptr && counting.load(std::memory_order_relaxed))
    live.fetch_add(static_cast<std::int64_t>(malloc_usable_size(p)), std::memory_order_relaxed);
  return p;
}

void* allocate_aligned(std::size_t n, std::align_val_t al) {
  void* p = nullptr;
  const auto a = static_cast<std::size_t>(al);
  if (posix_memalign(&p, a < sizeof(void*) ? sizeof(void*) : a, n == 0 ? 1 : n) != 0)
    return nullptr;
  if (counting.load(std::memory_order_relaxed))
    live.fetch_add(static_cast<std::int64_t>(malloc_usable_size(p)), std::memory_order_relaxed);
  return p;
}

void release(void* p) noexcept {
  if (p == nullptr) return;
  if (counting.load(std::memory_order_relaxed))
    live.fetch_sub(static_cast<std::int64_t>(malloc_usable_size(p)), std::memory_order_relaxed);
  std::free(p);
}

void* allocate_or_throw(std::size_t n) {
  if (void* p = allocate(n)) return p;
  throw std::bad_alloc();
}

void* allocate_aligned_or_throw(std::size_t n, std::align_val_t al) {
  if (void* p = allocate_aligned(n, al)) return p;
  throw std::bad_alloc();
}

}  // namespace

void set_counting(bool on) noexcept { counting.store(on, std::memory_order_relaxed); }
std::int64_t counted_live_bytes() noexcept { return live.load(std::memory_order_relaxed); }

}  // namespace delayq::bench

using delayq::bench::allocate;
using delayq::bench::allocate_aligned;
using delayq::bench::allocate_aligned_or_throw;
using delayq::bench::allocate_or_throw;
using delayq::bench::release;

void* operator new(std::size_t n) { return allocate_or_throw(n); }
void* operator new[](std::size_t n) { return allocate_or_throw(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return allocate(n); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return allocate(n); }
void* operator new(std::size_t n, std::align_val_t al) { return allocate_aligned_or_throw(n, al); }
void* operator new[](std::size_t n, std::align_val_t al) {
  return allocate_aligned_or_throw(n, al);
}
void* operator new(std::size_t n, std::align_val_t al, const std::nothrow_t&) noexcept {
  return allocate_aligned(n, al);
}
void* operator new[](std::size_t n, std::align_val_t al, const std::nothrow_t&) noexcept {
  return allocate_aligned(n, al);
}

void operator delete(void* p) noexcept { release(p); }
void operator delete[](void* p) noexcept { release(p); }
void operator delete(void* p, std::size_t) noexcept { release(p); }
void operator delete[](void* p, std::size_t) noexcept { release(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { release(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { release(p); }
void operator delete(void* p, std::align_val_t) noexcept { release(p); }
void operator delete[](void* p, std::align_val_t) noexcept { release(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { release(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { release(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { release(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { release(p); }
