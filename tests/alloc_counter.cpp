#include "alloc_counter.hpp"

#include <cstdlib>
#include <new>

namespace {
thread_local std::size_t g_bytes = 0;
thread_local std::size_t g_count = 0;

void* counted(std::size_t n) {
  g_bytes += n;
  ++g_count;
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
}  // namespace

// Replacing the global operator new is how a test sees every allocation (the
// sanitizer builds replace malloc underneath, which stays as it is).
void* operator new(std::size_t n) { return counted(n); }
void* operator new[](std::size_t n) { return counted(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return counted(n);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace hmcast::testing {

CountAllocations::CountAllocations() : bytes_at_start_(g_bytes), count_at_start_(g_count) {}
CountAllocations::~CountAllocations() = default;
std::size_t CountAllocations::bytes() const { return g_bytes - bytes_at_start_; }
std::size_t CountAllocations::count() const { return g_count - count_at_start_; }

}  // namespace hmcast::testing
