// A whole small-message run in the simulator: n whole nodes and the coordinator
// on one fabric (cluster.hpp), S senders each broadcasting M messages as fast as
// their windows allow, optional crashes (detected, or found only by suspicion),
// members joining mid-run (with the coordinator's flush), a member that multicast
// does not reach (the probe and the group-wide fallback), and a checker that
// watches every delivery. Used by `hmcast sim small` and by the randomized tests,
// so a failing seed replays exactly from the command line.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "hmcast/config.hpp"
#include "policy/defaults.hpp"
#include "sim/fabric.hpp"
#include "sim/run_result.hpp"

namespace hmcast::sim {

struct SmallScenario {
  SmallScenario() { set_latency(network.latency_ns); }
  /// Sets the hop latency, the reordering spread, and what the protocol assumes of
  /// the network (policy/defaults.hpp).
  void set_latency(TimeNs ns) {
    network.latency_ns = ns;
    network.reorder_delay_ns = std::max<TimeNs>(3 * ns, 1000);
    protocol = policy::sim_defaults(ns, protocol);
  }

  std::uint32_t nodes = 8;
  std::uint32_t senders = 1;
  std::uint32_t messages = 100;  // per sender
  std::uint32_t size = 1024;     // bytes per message
  std::uint32_t crash = 0;       // non-sender members crashed mid-run
  /// Senders crashed mid-run (never the first, and always at least one left): the
  /// survivors must deliver the same messages of each (the proxy root finishes its
  /// stream), and at least every one it saw completed.
  std::uint32_t crash_senders = 0;
  /// Chance that a crash is a process death the coordinator sees at once (its
  /// control connection closes); otherwise a silent host, found by suspicion.
  double crash_detected = 0.5;
  std::uint32_t joins = 0;       // members that join mid-run (each with a flush)
  /// Multicast stops reaching one member from the start: the multicast probe must
  /// find it and the whole group switch to emulated multicast.
  bool block_multicast = false;
  /// Members per host (node i on host i / per_host; 0 or 1: a host each): ACK trees
  /// follow hosts (ack_tree/host_tree.hpp).
  std::uint32_t per_host = 1;
  std::uint64_t seed = 1;
  NetworkModel network;
  ProtocolConfig protocol = policy::transport_defaults("sim", ProtocolConfig{}.mtu);
  TimeNs time_limit_ns = 60'000'000'000;  // virtual; a run past this is a liveness failure

  /// The `hmcast sim small` command line that replays this scenario.
  [[nodiscard]] std::string command_line() const;
};

struct SmallResult : RunResult {
  std::uint64_t fifo_violations = 0;
  std::uint64_t corrupt_delivered = 0;
  std::uint64_t joined = 0;            // joiners that got in and delivered to the end
  std::uint64_t members_emulating = 0; // live members that emulate multicast at the end
  std::uint64_t removed_alive = 0;  // live members removed by a false suspicion
  std::uint64_t senders_crashed = 0;
  /// Per crashed sender, live members whose delivered prefix of its stream differs
  /// from the longest any live member delivered (summed over crashed senders).
  std::uint64_t disagreements = 0;
  TimeNs sim_time_us = 0;
  std::uint64_t datagrams_sent = 0;
  std::uint64_t p2p_messages_sent = 0;
  std::uint64_t acks_sent = 0;
  std::uint64_t repairs = 0;
  std::uint64_t remulticasts = 0;
  std::uint64_t pulls = 0;
  std::uint64_t nacks = 0;
  std::uint64_t fragment_repairs = 0;
  std::uint64_t repair_datagrams = 0;  // SmallStats::repair_datagrams over all members
  std::uint64_t datagrams_lost = 0;    // datagram copies the fabric dropped (per receiver)
  double wall_s = 0;                   // the simulator's own run time
  double events_per_s = 0;
  std::uint64_t bad_packets_dropped = 0;
  std::uint64_t max_held_messages = 0;  // largest number of messages any member held at once
  std::uint64_t held_bound = 0;         // what the windows allow
  double completion_p50_us = 0;
  double completion_p99_us = 0;
  double completion_max_us = 0;
  std::uint64_t events = 0;
  std::uint64_t trace_hash = 0;

  [[nodiscard]] std::string to_json() const;
};

SmallResult run_small(const SmallScenario& scenario);

}  // namespace hmcast::sim
