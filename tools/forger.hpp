// A stranger who has heard the group (`hmcast soak --spray-forged`): it listens to
// the group's multicast address like a member, and from what it captures (the
// group id, the current view, the members' ids and how far each has sent) it
// forges datagrams "from" real members: data carrying the next sequence numbers
// (tools/workload.hpp kForgedMarker, so a member that delivers one can tell), and
// stability announcements far ahead; and it sends captured datagrams again. A group
// without a key accepts what it forges; with a key it must drop all of it.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "membership/coordinator.hpp"

namespace hmcast::tools {

struct ForgeStats {
  std::uint64_t captured = 0;       // the group's datagrams heard
  std::uint64_t replayed = 0;       // captured datagrams sent again
  std::uint64_t forged_data = 0;    // data datagrams forged as a member's
  std::uint64_t forged_stable = 0;  // stability announcements forged as a member's
};

/// Listens and forges at the group `target` describes (its multicast address and
/// port; the rest it learns by listening) until `stop` is set, a round every
/// `pause_us`. Throws std::runtime_error if it cannot listen.
ForgeStats spray_forged(const membership::IssuedView& target, const std::string& interface_address, std::uint64_t seed,
                        const std::atomic<bool>& stop, std::uint32_t pause_us = 200);

}  // namespace hmcast::tools
