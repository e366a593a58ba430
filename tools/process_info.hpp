// What a tool process knows about itself: its CPU time so far and its own path
// (to start more of itself).
#pragma once

#include <string>

namespace hmcast::tools {

/// CPU seconds this process used so far (its threads included): user and system.
struct CpuSeconds {
  double user = 0;
  double system = 0;
  [[nodiscard]] double total() const { return user + system; }
};
CpuSeconds process_cpu_seconds();

/// This program's path (/proc/self/exe). Throws std::runtime_error if /proc is missing.
std::string self_exe();

}  // namespace hmcast::tools
