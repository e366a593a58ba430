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
#include "core/rng.hpp"

namespace hmcast::tools {

struct SprayStats {
  std::uint64_t datagrams = 0;
  std::uint64_t link_frames = 0;       // verbs: bad frames sent over RC links to members
  std::uint64_t tcp_attempts = 0;      // bad TCP streams a member accepted
  std::uint64_t tcp_disconnected = 0;  // ...that the member closed on us
  /// Connections refused: the member no longer listens (killed, or done and gone
  /// while the sprayer went round); no bad input reached it.
  std::uint64_t tcp_unreachable = 0;
};

/// Sprays at the group `target` describes until `stop` is set (at most every `pause_us`).
SprayStats spray(const membership::IssuedView& target, const std::string& interface_address, std::uint64_t seed,
                 const std::atomic<bool>& stop, std::uint32_t pause_us = 200);

/// The same over verbs (verbs_sprayer.cpp): a non-member endpoint joins the group's
/// UD multicast and sends the same kinds of bad datagrams (the "over the MTU" kind is
/// cut to the UD MTU: the fabric carries no more), and opens RC links to every member
/// and sends them bad frames (garbage, truncated, stale view, another group). Throws
/// hmcast::Error if hmcast was built without verbs or the device is missing.
SprayStats spray_verbs(const membership::IssuedView& target, const std::string& interface_address,
                       const std::string& device, std::uint64_t seed, const std::atomic<bool>& stop,
                       std::uint32_t pause_us = 200);

/// The `round`-th bad datagram of the rotation (8 kinds); `oversize` bytes of garbage
/// for the "over the MTU" kind.
std::vector<std::byte> bad_datagram(const membership::IssuedView& target, Rng& rng,
                                    std::uint64_t round, std::size_t oversize);

}  // namespace hmcast::tools
