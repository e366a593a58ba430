// What the protocol assumes of the simulated network (its transport profile).
#pragma once

#include <algorithm>

#include "hmcast/config.hpp"
#include "hmcast/types.hpp"

namespace hmcast::sim {

/// Hop round trip until measured; no repair sooner than five hop round trips, so
/// queueing behind other senders' bursts is not taken for loss.
inline ProtocolConfig protocol_profile(TimeNs latency_ns, ProtocolConfig base = {}) {
  base.initial_hop_rtt_ns = std::max<TimeNs>(2 * latency_ns, 1000);
  base.min_timeout_ns = 5 * base.initial_hop_rtt_ns;
  return base;
}

}  // namespace hmcast::sim
