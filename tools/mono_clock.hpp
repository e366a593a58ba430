// Monotonic time in nanoseconds (CLOCK_MONOTONIC): comparable between the
// processes of one host, so a parent can set a member's report beside its own.
#pragma once

#include <chrono>
#include <cstdint>

namespace hmcast::tools {

inline std::int64_t mono_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace hmcast::tools
