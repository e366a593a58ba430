// A hostile peer for tests: sprays bad input at a live group on the socket
// transport. Datagrams to the group's multicast address: random garbage, truncated
// and corrupted hmcast packets, datagrams over the MTU, well-formed packets of a
// stale view, of a future view, of another group, and from a non-member. TCP to each
// member's link port: garbage instead of a hello, and a valid hello followed by a
// frame whose length is over the limit (the member must hang up).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "membership/coordinator.hpp"

namespace hmcast::tools {

struct SprayStats {
  std::uint64_t datagrams = 0;
  std::uint64_t tcp_attempts = 0;
  std::uint64_t tcp_disconnected = 0;  // connections the member closed on us after bad input
};

/// Sprays at the group `target` describes until `stop` is set (at most every `pause_us`).
SprayStats spray(const membership::IssuedView& target, const std::string& interface_address, std::uint64_t seed,
                 const std::atomic<bool>& stop, std::uint32_t pause_us = 200);

}  // namespace hmcast::tools
