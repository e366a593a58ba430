// Which members of a view share a host, and which of them leads it: the ground
// issue 18's two-level group stands on (leaders run the network protocol between
// hosts and relay into their host's shared memory). Members name their host when
// they join (Listening::host_id) and every view carries it, so the layout is a
// function of the view: every member computes the same without a word more, and a
// leader's death makes the next member of its host leader in the very view that
// removes it.
#pragma once

#include <cstdint>
#include <vector>

#include "hmcast/types.hpp"
#include "membership/control_wire.hpp"

namespace hmcast::membership {

struct HostLayout {
  /// Distinct hosts in the view (a member whose host_id is 0 is a host of its own).
  std::uint32_t hosts = 0;
  /// The members on `self`'s host, `self` included, sorted.
  std::vector<MemberId> local;
  /// Each host's leader (its member with the smallest id), sorted.
  std::vector<MemberId> leaders;
  /// `self`'s host's leader.
  MemberId leader = 0;
};

/// The layout of view `v` as seen by `self` (a member of it).
HostLayout host_layout(const ViewPush& v, MemberId self);

}  // namespace hmcast::membership
