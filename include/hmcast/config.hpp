// Tuning knobs of the protocol. Defaults suit a LAN or RDMA fabric; every bound
// here is what keeps memory finite, so none of them can be "unlimited".
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace hmcast {

struct ProtocolConfig {
  /// ACK-tree radix (2 = binomial). Higher radix: shallower tree, more ACKs per parent.
  std::uint32_t radix = 2;
  /// Largest datagram the transport carries, header included (the UD path MTU).
  std::uint32_t mtu = 4096;
  /// Sender window: at most this many of a sender's messages are not yet all-acked.
  std::uint32_t window_messages = 64;
  /// The window opens at this many messages and grows by one per completion (slow
  /// start), so a group's first burst does not flood receivers before any delay
  /// has been measured.
  std::uint32_t initial_window_messages = 8;
  /// Sender window in bytes of payload not yet all-acked.
  std::uint64_t window_bytes = 16U << 20;
  /// Largest message the small (datagram) path carries; larger ones take the large
  /// path (blocks over reliable links, RDMC's binomial pipeline).
  std::uint32_t max_small_message = 1U << 20;
  /// Largest message a member accepts on the large path (it allocates this much).
  std::uint64_t max_large_message = 16ULL << 30;
  /// Block size of the large path.
  std::uint64_t block_size = 1U << 20;
  /// A block moves in segments of this many bytes (at most block_size), and a member
  /// forwards each segment as soon as it holds it, instead of waiting for the whole
  /// block. Smaller segments cut the delay each relay adds; each one is a separate
  /// transfer, so it should take longer on the wire than posting it costs.
  std::uint64_t segment_size = 64U << 10;
  /// First ACK after a quiet period goes at once; later ones are merged for this long.
  std::int64_t ack_interval_ns = 1'000;
  /// Round trip of one hop assumed until measured (scaled by tree level for timeouts).
  std::int64_t initial_hop_rtt_ns = 10'000;
  /// Repair timeouts are clamped to [min_timeout_ns, max_timeout_ns].
  std::int64_t min_timeout_ns = 2'000;
  std::int64_t max_timeout_ns = 200'000'000;
  /// Unanswered repair attempts to a member before it is suspected and removed.
  std::uint32_t repair_budget = 8;
  /// At most this many messages go in one round of repairs to one member.
  std::uint32_t repair_batch = 64;
  /// Packets of a view not yet installed are held (not dropped) up to this many.
  std::uint32_t future_packet_limit = 4096;
  /// A sender announces its all-acked prefix this long after the last advance
  /// when no data packet carried it (lets receivers free retained messages).
  std::int64_t stable_announce_ns = 20'000;
};

/// Which fabric a Node uses. More come with later transports (verbs).
enum class TransportKind : std::uint8_t {
  /// Nodes in one process that name the same `fabric`; real threads and real time.
  /// For tests, examples and applications that want the API without a network.
  inproc,
  /// Processes on any Linux hosts: UDP IP multicast for datagrams, TCP for reliable
  /// links, and a membership manager reached over TCP (SocketOptions).
  socket,
};

/// The socket transport. Members find each other through a membership manager: a
/// standalone `hmcast manager --listen HOST:PORT`, or one member with embed_manager.
/// The manager gives each group its own multicast address and port.
struct SocketOptions {
  /// HOST:PORT of the membership manager.
  std::string manager = "127.0.0.1:17700";
  /// Run the manager inside this Node, listening on `manager`. If this Node's
  /// process dies, the group's members fail with ErrorCode::manager_lost.
  bool embed_manager = false;
  /// Local IPv4 address: the interface datagrams use, where reliable links listen,
  /// and what peers are told to connect to.
  std::string interface_address = "127.0.0.1";
  /// IP_MULTICAST_TTL: 1 keeps datagrams on the local network.
  std::uint8_t ttl = 1;
  /// Largest datagram sent (hmcast header included). Above the network's MTU the
  /// kernel fragments, and losing one fragment loses the datagram.
  std::uint32_t mtu = 8192;
};

/// Seeded faults injected on the datagram path (tests; off by default). A Node also
/// reads HMCAST_FAULT_LOSS, HMCAST_FAULT_DUP and HMCAST_FAULT_SEED from its
/// environment; when set they override these fields.
struct FaultConfig {
  double datagram_loss = 0.0;       // chance each received datagram is dropped
  double datagram_duplicate = 0.0;  // chance each received datagram is delivered twice
  std::uint64_t seed = 1;
};

struct Config {
  TransportKind transport = TransportKind::inproc;
  /// inproc: nodes naming the same fabric see each other.
  std::string fabric = "default";
  /// Members a group waits for before its first view is installed. Every member of
  /// a group must pass the same number. On the socket transport a member may join
  /// later (with the same number): it comes in mid-stream (see Node::join).
  std::uint32_t group_size = 1;
  /// join() fails with ErrorCode::join_timeout after this long.
  std::chrono::milliseconds join_timeout{10'000};
  /// socket: how to reach the manager and which interface to use.
  SocketOptions socket;
  /// Protocol tuning; empty means the transport's profile.
  std::optional<ProtocolConfig> protocol;
  FaultConfig faults;
};

}  // namespace hmcast
