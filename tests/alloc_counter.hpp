// Counts the bytes the current thread allocates with operator new while a
// CountAllocations is alive (the test binary replaces the global operator new:
// alloc_counter.cpp). For checks that bad input is refused before anything is
// allocated for it.
#pragma once

#include <cstddef>

namespace hmcast::testing {

class CountAllocations {
 public:
  CountAllocations();
  ~CountAllocations();
  CountAllocations(const CountAllocations&) = delete;
  CountAllocations& operator=(const CountAllocations&) = delete;
  /// Bytes allocated on this thread since construction.
  [[nodiscard]] std::size_t bytes() const;
  /// Allocations made on this thread since construction.
  [[nodiscard]] std::size_t count() const;

 private:
  std::size_t bytes_at_start_;
  std::size_t count_at_start_;
};

}  // namespace hmcast::testing
