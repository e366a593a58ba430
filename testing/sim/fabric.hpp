// A deterministic in-process network: virtual time, full-duplex NICs with a
// bandwidth, per-hop latency, datagram multicast with per-receiver loss,
// duplication, reordering and delay, reliable FIFO point-to-point links, and
// crash-stop nodes. Everything random comes from one seed, and every event is
// folded into a trace hash, so two runs with one seed can be compared bit for bit.
//
// The fabric only moves bytes; what a node does with them is the Host's business
// (in hmcast, a protocol engine per node).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>
#include <memory>
#include <span>
#include <vector>

#include "hmcast/types.hpp"
#include "core/rng.hpp"
#include "sim/event_queue.hpp"

namespace hmcast::sim {

struct NetworkModel {
  TimeNs latency_ns = 2'000;        // one hop, sender NIC to receiver NIC
  double link_gbps = 100.0;         // per-node NIC bandwidth, each direction
  double loss = 0.0;                // datagram loss, per receiver
  double duplicate = 0.0;           // datagram duplication, per receiver
  double reorder = 0.0;             // chance a datagram is held back (reordered)
  TimeNs reorder_delay_ns = 6'000;  // how far back at most
  TimeNs jitter_ns = 200;           // extra uniform delay on every packet
  std::size_t control_bytes = 256;  // packets this small are scheduled past queued data (QP arbitration)
  TimeNs block_overhead_ns = 0;     // software cost of posting one bulk transfer (one segment of a block)
  TimeNs link_failure_ns = 100'000; // a send to a crashed node fails at the sender after this long
  /// A host that dies silently (no connection reset) is found by the coordinator's
  /// TCP keepalive on its control connection after this long, if no suspicion
  /// removed it first (socket/manager_server.cpp sets the same on real sockets).
  TimeNs keepalive_ns = 20'000'000;
};

/// What the fabric calls when something arrives or a node's timer is due.
class Host {
 public:
  virtual ~Host() = default;
  /// `bytes` is shared by every receiver of the multicast, as a NIC's receive buffer
  /// would be its own: the node may keep slices of it (small messages delivered in place).
  virtual void on_datagram(std::uint32_t node, const std::shared_ptr<const std::vector<std::byte>>& bytes,
                           TimeNs now) = 0;
  virtual void on_p2p(std::uint32_t node, std::uint32_t from, std::span<const std::byte> bytes, TimeNs now) = 0;
  virtual void on_timer(std::uint32_t node, TimeNs now) = 0;
  /// A reliable send from `node` to `peer` failed (the peer crashed).
  virtual void on_link_failed(std::uint32_t node, std::uint32_t peer, TimeNs now) {
    (void)node;
    (void)peer;
    (void)now;
  }
};

struct FabricStats {
  std::uint64_t datagrams_sent = 0;      // multicasts (one per send, not per receiver)
  std::uint64_t direct_datagrams_sent = 0;  // datagrams to one member (direct_datagram())
  std::uint64_t datagram_copies_lost = 0;
  std::uint64_t p2p_sent = 0;
  std::uint64_t bytes_on_wire = 0;       // bytes leaving NICs
  std::uint64_t events = 0;
  std::uint64_t lost_in_crashed_nic = 0;  // sent by a node that crashed before its NIC began them
};

class Fabric {
 public:
  Fabric(std::uint32_t nodes, NetworkModel model, std::uint64_t seed);

  void multicast(std::uint32_t from, std::vector<std::byte> bytes);
  void unicast(std::uint32_t from, std::uint32_t to, std::vector<std::byte> bytes);
  /// A datagram to `to` alone (Transport::unicast_datagram): lost, duplicated,
  /// delayed and held back as one receiver's copy of a multicast is.
  void direct_datagram(std::uint32_t from, std::uint32_t to, std::vector<std::byte> bytes);
  /// A message between a member and the view authority: one connection, so in order
  /// whatever its size (a small FlushRequest must not pass a large ViewPush).
  void control(std::uint32_t from, std::uint32_t to, std::vector<std::byte> bytes);
  /// A bulk transfer (one segment of a block): `frame` (its description) arrives as a
  /// p2p frame once `wire_bytes` have crossed the link; the payload itself is not
  /// simulated. Each transfer is booked on both NICs on its own, so a relay that
  /// forwards a segment as soon as it arrives overlaps receiving and sending.
  void transfer(std::uint32_t from, std::uint32_t to, std::vector<std::byte> frame, std::uint64_t wire_bytes);
  /// A node whose NIC runs at `factor` of the link speed (0 < factor <= 1).
  void slow_node(std::uint32_t node, double factor) { node_speed_[node] = factor; }
  /// A link (both directions) that runs at `factor` of the link speed.
  void slow_link(std::uint32_t a, std::uint32_t b, double factor);
  /// Ask for host.on_timer(node) at `at` (extra or stale requests are harmless).
  void wake(std::uint32_t node, TimeNs at);
  /// Crash-stop: from now on the node neither sends nor receives.
  void crash(std::uint32_t node);
  /// Multicast stops reaching `node` (no IGMP, a filtering switch): it receives no
  /// datagram any more; its reliable links still work.
  void block_multicast(std::uint32_t node) { multicast_blocked_[node] = true; }
  [[nodiscard]] bool crashed(std::uint32_t node) const { return crashed_[node]; }

  /// Process events in time order until `until`, no events remain, or stop() is called.
  void run(Host& host, TimeNs until);
  void stop() { stopped_ = true; }
  [[nodiscard]] TimeNs now() const { return now_; }
  [[nodiscard]] std::uint64_t trace_hash() const { return trace_; }
  [[nodiscard]] const FabricStats& stats() const { return stats_; }
  Rng& rng() { return rng_; }
  [[nodiscard]] const NetworkModel& model() const { return model_; }

 private:
  enum class Kind : std::uint8_t { datagram, p2p, timer, link_failed };
  struct Event {
    Kind kind;
    std::uint32_t node;
    std::uint32_t from;
    std::shared_ptr<const std::vector<std::byte>> bytes;
    TimeNs tx_start = 0;  // when its sender's NIC began sending it (datagrams and frames)
  };
  struct Slot {
    TimeNs start;
    TimeNs end;
  };
  [[nodiscard]] TimeNs serialize_ns(std::uint64_t bytes, double speed = 1.0) const;
  [[nodiscard]] double link_speed(std::uint32_t from, std::uint32_t to) const;
  Slot transmit(std::uint32_t from, std::uint64_t bytes, double speed, TimeNs overhead);
  TimeNs receive(std::uint32_t to, Slot tx, std::uint64_t bytes, double speed, TimeNs extra_delay);
  /// Reliable links keep order per channel: bulk blocks and control frames travel on
  /// separate queue pairs, so a credit or ACK never waits behind a block.
  enum class Channel : std::uint8_t { control, bulk };
  void send_reliable(std::uint32_t from, std::uint32_t to, std::vector<std::byte> frame, std::uint64_t wire_bytes,
                     TimeNs overhead, Channel channel);
  void push(TimeNs at, Kind kind, std::uint32_t node, std::uint32_t from,
            std::shared_ptr<const std::vector<std::byte>> bytes, TimeNs tx_start = 0);
  /// One receiver's copies of a datagram sent in `tx` (none if lost, two if duplicated).
  void datagram_copies(std::uint32_t from, std::uint32_t to, const Slot& tx,
                       const std::shared_ptr<const std::vector<std::byte>>& bytes);

  NetworkModel model_;
  Rng rng_;
  TimeNs now_ = 0;
  bool stopped_ = false;
  std::uint64_t trace_ = 0;
  std::vector<bool> crashed_;
  std::vector<TimeNs> crashed_at_;  // what its NIC had not begun to send by then is lost
  std::vector<bool> multicast_blocked_;
  std::vector<TimeNs> tx_free_;  // when each NIC's send side is idle again
  std::vector<TimeNs> post_free_;  // when each node is done posting bulk transfers (block_overhead_ns each)
  std::vector<std::map<TimeNs, TimeNs>> rx_busy_;  // each NIC's booked receive intervals: start -> end
  std::vector<std::vector<TimeNs>> fifo_;  // last arrival per (from, to) control channel, for FIFO order
  std::vector<std::vector<TimeNs>> bulk_fifo_;  // the same for the bulk (block) channel
  std::vector<std::vector<TimeNs>> mcast_fifo_;  // last arrival per (from, to) of multicast not held back
  std::vector<double> node_speed_;
  std::map<std::pair<std::uint32_t, std::uint32_t>, double> link_speed_;
  EventQueue<Event> events_;
  FabricStats stats_;
};

}  // namespace hmcast::sim
