// A whole large-message run in the simulator: the RC pipeline over a bandwidth
// model (full-duplex NICs, per-link latency, a posting cost per transfer, slow
// links or nodes), optional crashes, and a checker. Every segment of a block is a
// transfer of its own bytes, so cut-through forwarding is modelled, not assumed. Used by `hmcast sim large` and tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hmcast/config.hpp"
#include "large/schedule.hpp"
#include "sim/fabric.hpp"
#include "sim/run_result.hpp"

namespace hmcast::sim {

struct LargeScenario {
  std::uint32_t nodes = 8;
  std::uint32_t senders = 1;
  std::uint32_t messages = 1;  // per sender
  std::uint64_t size = 64U << 20;
  std::uint64_t block = 1U << 20;
  std::uint64_t segment = ProtocolConfig{}.segment_size;  // bytes per transfer (cut-through)
  std::uint64_t credit_lead = ProtocolConfig{}.large_credit_lead_bytes;  // see large/pipeline.hpp
  LargeAlgorithm algorithm = LargeAlgorithm::binomial_pipeline;
  double link_gbps = 100.0;
  TimeNs latency_ns = 2'000;
  TimeNs block_overhead_ns = 0;
  std::uint32_t slow_links = 0;  // links the schedule uses, slowed to slow_factor
  std::uint32_t slow_nodes = 0;  // nodes whose NIC runs at slow_factor
  double slow_factor = 0.5;
  std::uint32_t crash = 0;       // non-sender members crashed during the transfer
  /// Senders crashed during the transfer (never the first): the survivors must
  /// deliver each of their messages all or none of them.
  std::uint32_t crash_senders = 0;
  std::uint32_t receive_window = 1;  // blocks a receiver lets come at once
  /// Members per host (0 or 1: a host each): blocks cross to each host once, then
  /// move inside it (large/host_schedule.hpp).
  std::uint32_t per_host = 1;
  std::uint64_t seed = 1;

  [[nodiscard]] std::string command_line() const;
};

struct LargeResult : RunResult {
  std::string algorithm;
  std::uint64_t size = 0;
  std::uint64_t block = 0;
  std::uint64_t segment = 0;
  std::uint32_t blocks = 0;
  std::uint32_t steps = 0;
  double sim_time_us = 0;       // last completion at a sender (all ACKed)
  double last_delivery_us = 0;  // last member holding every byte of every message
  double unicast_time_us = 0;   // one transfer of the same bytes over one link
  double ratio_vs_unicast = 0;  // last_delivery / (messages x unicast)
  std::uint64_t failures = 0;
  std::string failure_reason;
  std::uint64_t restarted = 0;  // messages a sender started again over a new view
  std::uint64_t redeliveries_suppressed = 0;  // restarts received again by members that had them
  std::uint64_t invalid_dropped = 0;
  std::uint64_t blocks_sent = 0;
  std::uint64_t segments_sent = 0;
  std::uint64_t bytes_on_wire = 0;
  std::uint64_t senders_crashed = 0;
  /// Crashed senders' messages some live members delivered and others did not.
  std::uint64_t disagreements = 0;
  /// Crashed senders' messages every live member delivered (those none did: the rest).
  std::uint64_t dead_sender_delivered = 0;
  std::uint64_t delivered_on_relay = 0;  // ...of which members delivered on a survivor's relayed commit
  std::uint64_t uncommitted_discarded = 0;

  [[nodiscard]] std::string to_json() const;
};

LargeResult run_large(const LargeScenario& scenario);

}  // namespace hmcast::sim
