// How long a parent waits for a child's cumulative ACK before repairing it.
//
// The wait covers the child's whole subtree (a child ACKs only when its subtree
// holds the message), so it starts from a cautious level-scaled guess, twice
// (subtree height + 1) hop round trips (ACKs queue behind a burst of data), and then follows the measured delay between this node holding
// a message and the child's ACK covering it (Jacobson's estimator: srtt + 4 rttvar).
// The ACK coalescing interval is added, since a merged ACK may wait that long.
// A level term keeps a parent's timer behind its child's own repair timers, so a
// child that is busy repairing its subtree is not repaired itself for nothing.
#pragma once

#include <algorithm>
#include <cstdint>

#include "hmcast/types.hpp"

namespace hmcast::ack_tree {

class AckTimeout {
 public:
  AckTimeout() = default;
  AckTimeout(TimeNs hop_rtt, std::uint32_t subtree_height, TimeNs min_timeout, TimeNs max_timeout,
             TimeNs ack_interval)
      : hop_rtt_(hop_rtt),
        ack_interval_(ack_interval),
        level_(subtree_height),
        min_(min_timeout),
        max_(max_timeout),
        srtt_(2 * hop_rtt * (subtree_height + 1)),
        rttvar_(srtt_ / 2) {}

  /// A measured delay from holding a message to the child's ACK covering it.
  void sample(TimeNs delay) {
    if (delay < 0) return;
    if (!measured_) {
      srtt_ = delay;
      rttvar_ = delay / 2;
      measured_ = true;
      return;
    }
    const TimeNs err = delay > srtt_ ? delay - srtt_ : srtt_ - delay;
    rttvar_ = (3 * rttvar_ + err) / 4;
    srtt_ = (7 * srtt_ + delay) / 8;
  }

  /// The timeout for the `attempt`-th repair round (0 = first wait), doubling per attempt.
  [[nodiscard]] TimeNs timeout(std::uint32_t attempt = 0) const {
    // Twice the smoothed delay at least: steady samples shrink rttvar to nearly
    // nothing, and a burst's later messages wait a little longer for their ACK.
    TimeNs t = std::max(2 * srtt_, srtt_ + 4 * rttvar_) + ack_interval_ +
               static_cast<TimeNs>(level_) * hop_rtt_ / 2;
    t = std::clamp(t, min_, max_);
    for (std::uint32_t i = 0; i < attempt && t < max_; ++i) t *= 2;
    return std::min(t, max_);
  }
  [[nodiscard]] TimeNs smoothed() const { return srtt_; }

 private:
  TimeNs hop_rtt_ = 10'000;
  TimeNs ack_interval_ = 0;  // ACKs may be held back this long to merge
  std::uint32_t level_ = 0;
  TimeNs min_ = 1'000;
  TimeNs max_ = 1'000'000'000;
  TimeNs srtt_ = 10'000;
  TimeNs rttvar_ = 5'000;
  bool measured_ = false;
};

}  // namespace hmcast::ack_tree
