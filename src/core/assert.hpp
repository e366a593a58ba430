// Programmer errors stop the process, in every build (release included): a broken
// invariant means the state is already wrong, and going on would turn it into lost
// or corrupt messages far from the cause. Bad input from peers is never asserted
// on: it is counted and dropped where it is decoded or admitted.
#pragma once

namespace hmcast::detail {
/// Prints "hmcast: assertion failed: <what> (<file>:<line>)" to stderr and aborts.
[[noreturn]] void assertion_failed(const char* what, const char* file, int line) noexcept;
}  // namespace hmcast::detail

/// Always on. `cond` must have no side effects the program relies on.
#define HMCAST_ASSERT(cond) \
  ((cond) ? static_cast<void>(0) : ::hmcast::detail::assertion_failed(#cond, __FILE__, __LINE__))
