// What a tool process knows about itself: its CPU time so far and its own path
// (to start more of itself), and how it starts others.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

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

/// Starts argv[0] (searched in PATH) with its stdin and stdout on pipes: in_fd is
/// written to its stdin, out_fd reads its stdout (stderr is shared). Throws
/// std::runtime_error if it cannot be started.
pid_t spawn(const std::vector<std::string>& argv, int& in_fd, int& out_fd);

}  // namespace hmcast::tools
