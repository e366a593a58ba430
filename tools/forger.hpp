// A stranger who has heard the group (`hmcast soak --spray-forged`): it listens to
// the group's multicast address like a member, and from what it captures (the
// group id, the current view, the members' ids and how far each has sent) it
// forges datagrams "from" real members: data carrying the next sequence numbers
// (tools/workload.hpp kForgedMarker, so a member that delivers one can tell), and
// stability announcements far ahead; and it sends captured datagrams again. Over
// TCP it opens links to members with a hello naming another member and sends
// forged ACKs and repairs on them, and it asks the manager to join the group. A
// group without a key accepts what it forges (and the stranger as a member); with a
// key it must drop all of it, and the manager must refuse the stranger.
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
  std::uint64_t link_frames = 0;    // ACKs and repairs sent on links opened as another member
  std::uint64_t joins_tried = 0;    // attempts to join the group through its manager
  std::uint64_t joins_admitted = 0; // ...that the manager welcomed
};

/// Listens and forges at the group `target` describes (its multicast address and
/// port and its members' link addresses; the rest it learns by listening) until
/// `stop` is set, a round every `pause_us`; joins through the manager at
/// `manager` (HOST:PORT; empty: no join attempts) as a member of a group of
/// `group_size`. Throws std::runtime_error if it cannot listen.
ForgeStats spray_forged(const membership::IssuedView& target, const std::string& interface_address,
                        const std::string& manager, std::uint32_t group_size, std::uint64_t seed,
                        const std::atomic<bool>& stop, std::uint32_t pause_us = 200);

}  // namespace hmcast::tools
