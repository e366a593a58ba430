// Waiting the way the transports' hybrid mode waits: poll, yielding the CPU between
// polls, for a window after which the caller sleeps. Completions and the MPI shim's
// receiving ranks wait this way, so a result that comes soon costs no wake-up.
#pragma once

#include <chrono>
#include <thread>

#include "hmcast/config.hpp"
#include "transport/cpu_share.hpp"

namespace hmcast::detail {

/// How long to poll before sleeping: the transport's window in hybrid mode, for
/// ever in poll mode, not at all in interrupt mode.
inline std::chrono::nanoseconds poll_window(CompletionMode mode, std::chrono::nanoseconds window) {
  if (mode == CompletionMode::poll) return std::chrono::nanoseconds::max();
  return mode == CompletionMode::hybrid ? window : std::chrono::nanoseconds{0};
}

/// Polls `ready()` for up to `window` (measured as elapsed time, so max() is safe);
/// whether it became true. Stops early where yielding costs a slice
/// (transport::cpu_contended()): the caller's sleep is then woken sooner.
template <class Ready>
bool spin_until(Ready&& ready, std::chrono::nanoseconds window) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    if (ready()) return true;
    if (std::chrono::steady_clock::now() - start >= window || transport::cpu_contended()) return ready();
    transport::yield_cpu();
  }
}

}  // namespace hmcast::detail
