// The two-level group's block schedule (issue 18): each block crosses the network
// once per host and is then relayed inside the host through its shared memory.
//
// Level one is the chosen algorithm's schedule among the hosts, each represented by
// the root on the root's host and by its leader (smallest rank) elsewhere, so the
// pipeline's one-copy-per-link optimum holds between hosts. Level two is a chain
// inside each host from its representative through its other members in rank order,
// block by block in the order the representative gets them: every member receives
// every block once and sends it on at most once, and a relay inside a host costs a
// memory copy, not a share of the host's network link.
//
// Like schedule.hpp, a pure function of its arguments: every member computes its own
// part from the view alone. Only the transfers of one rank are built (a whole plan
// is blocks x members long).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "hmcast/config.hpp"
#include "large/schedule.hpp"

namespace hmcast::large {

/// What one rank sends and receives, each in the order it happens.
struct RankPlan {
  std::vector<Hop> sends;
  std::vector<Hop> receives;
};

/// Whether `host_of` (a host per rank) calls for the two-level schedule: two hosts
/// or more, and some host with two members or more. Otherwise the flat schedule is
/// the same thing.
[[nodiscard]] bool by_host(std::span<const std::uint64_t> host_of);

/// Rank `me`'s part of the two-level schedule of `blocks` blocks from `root` over
/// `host_of.size()` ranks, `algorithm` between hosts. Throws std::invalid_argument
/// as make_schedule() does.
[[nodiscard]] RankPlan host_plan(LargeAlgorithm algorithm, std::uint32_t root, std::uint32_t blocks,
                                 std::span<const std::uint64_t> host_of, std::uint32_t me);

}  // namespace hmcast::large
