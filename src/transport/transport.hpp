// What the runtime needs of a transport, and what a Node's progress thread waits
// on. A transport only moves bytes: datagram multicast with an MTU, reliable
// ordered frames to a peer, optionally payloads placed straight into registered
// buffers. It decides nothing about reliability. Implementations: inproc/,
// socket/, verbs/, and the simulator's (testing/sim, outside libhmcast).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "hmcast/types.hpp"

namespace hmcast::transport {

/// `head` then `tail` in one buffer: a datagram given in two parts
/// (multicast_gathered) where it must travel whole.
inline std::vector<std::byte> joined(std::span<const std::byte> head, std::span<const std::byte> tail) {
  std::vector<std::byte> out;
  out.reserve(head.size() + tail.size());
  out.insert(out.end(), head.begin(), head.end());
  out.insert(out.end(), tail.begin(), tail.end());
  return out;
}

/// Something that arrived: a datagram, or a frame from a peer's reliable link.
struct Inbound {
  bool datagram = false;
  MemberId from = 0;
  std::vector<std::byte> bytes;
  /// A Block frame whose payload the transport already wrote into its final buffer
  /// (socket placement, verbs RDMA WRITE): `bytes` is the frame without it. Or a
  /// datagram (Transport::places_datagrams) whose payload, `placed_size` bytes, it
  /// wrote at `placed_at`, where the placer said: `bytes` is its head, and
  /// `placed_into` the keeper the placer gave, held until the datagram is handed in
  /// (so that the buffer behind `placed_at` is no other message's meanwhile).
  bool placed = false;
  /// A datagram sent to this member alone (Transport::unicast_datagram), not to the group.
  bool direct = false;
  /// A placed datagram's payload size, where it went, and its buffer's keeper (see `placed`).
  std::size_t placed_size = 0;
  std::shared_ptr<const void> placed_into = nullptr;
  const std::byte* placed_at = nullptr;
};

/// Where an arriving Block frame's payload goes (a destination of exactly its
/// size), and what keeps that memory alive meanwhile.
struct Placement {
  std::span<std::byte> dest;
  std::shared_ptr<const void> keep;
};

/// Given the sending peer, an arriving Block frame's head (wire header and Block
/// fields, wire::kBlockHeadSize bytes) and the frame's whole size: where its payload
/// goes, or nothing to receive the frame whole as usual. A transport that places
/// datagrams (Transport::places_datagrams) also asks about a multicast Data
/// datagram: its head is then wire::kDataOverhead bytes.
using BlockPlacer =
    std::function<std::optional<Placement>(MemberId from, std::span<const std::byte> head, std::size_t frame_size)>;

/// A large message's final buffer. Null for transports that carry no payload
/// bytes (the simulator models their time on the wire only).
using LargeBuffer = std::shared_ptr<std::vector<std::byte>>;

/// The sending side: what the runtime turns actions into.
class Transport {
 public:
  virtual ~Transport() = default;
  [[nodiscard]] virtual MemberId id() const = 0;
  virtual void multicast(std::span<const std::byte> bytes) = 0;
  /// The same, for a frame the caller gives up: a layer that appends to what it
  /// sends (sealed/) does so in place rather than into a copy. By default multicast();
  /// ForwardingLink keeps that default, so a layer that overrides only multicast()
  /// (faulty/) still sees every datagram.
  virtual void multicast_owned(std::vector<std::byte>&& frame) { multicast(frame); }
  /// Whether multicast_gathered() writes its two parts where the datagram goes
  /// without joining them first (shm: into the log). Layers keep the default, false:
  /// what they see is whole datagrams.
  [[nodiscard]] virtual bool gathers_multicast() const { return false; }
  /// Whether the Link's BlockPlacer is also asked where a multicast datagram's
  /// payload goes (shm: it reads the head from its log, then copies the payload
  /// straight into the message being reassembled). Layers that see whole datagrams
  /// (sealed/) say no.
  [[nodiscard]] virtual bool places_datagrams() const { return false; }
  /// The datagram `head` then `tail` (a fragment's header and its payload, read from
  /// the message where it lies: one copy fewer on the sender). By default joined,
  /// then multicast_owned().
  virtual void multicast_gathered(std::span<const std::byte> head, std::span<const std::byte> tail) {
    multicast_owned(joined(head, tail));
  }
  /// False: the link to `to` is broken (the protocol then suspects it).
  virtual bool unicast(MemberId to, std::vector<std::byte> frame) = 0;
  /// A frame that may be lost, duplicated or overtaken on its way (a cumulative ACK:
  /// its sender's repair timer covers a loss), sent as a datagram to `to` alone where
  /// the transport can; by default it travels as unicast() does, reliably. False, as
  /// for unicast(): it went by a link to `to` that is broken.
  virtual bool unicast_datagram(MemberId to, std::vector<std::byte> frame) { return unicast(to, std::move(frame)); }
  /// The largest frame unicast_datagram() sends to `to` as a datagram (0: none, all go
  /// by unicast()). A layer that marks what it sends (sealed/) marks a datagram apart.
  [[nodiscard]] virtual std::size_t direct_datagram_limit(MemberId /*to*/) const { return 0; }
  /// One segment of a large message: `head` is its encoded Block frame without
  /// payload, `payload` the segment's `length` bytes (empty where the transport
  /// carries none) and `keep` what holds their memory. By default the two travel as
  /// one frame, copied together; transports that can send the payload from where it
  /// lies (socket: one vectored write) keep `keep` until it is written.
  /// A null `keep` lends the payload for this call only: what a transport queues
  /// past it, it copies (keep_copy).
  virtual bool send_block(MemberId to, std::vector<std::byte> head, std::span<const std::byte> payload,
                          std::uint64_t length, std::shared_ptr<const void> keep) {
    (void)length;
    (void)keep;
    head.insert(head.end(), payload.begin(), payload.end());
    return unicast(to, std::move(head));
  }
  /// Where peer `id` listens (transports that need addresses; others ignore it).
  virtual void add_peer(MemberId id, const std::string& host, std::uint16_t port) = 0;
  /// The members that share this member's host (ordered, from the view), named
  /// before add_peer() names any of them: a transport that reaches them another way
  /// (HostLink: shared memory) routes by it. Others ignore it.
  virtual void set_local_peers(std::vector<MemberId> /*local*/) {}
  /// Peer `id` left the view: what the transport holds for it can go (shm: its
  /// reader slot, and the file of a peer whose process died). Others ignore it.
  virtual void remove_peer(MemberId /*id*/) {}
  /// A final buffer for a large message of `size` bytes. Transports that let peers
  /// write into it (verbs) lend one from their registration cache.
  virtual LargeBuffer allocate_large(std::size_t size) { return std::make_shared<std::vector<std::byte>>(size); }
  /// The final buffer of large message (sender, seq) exists: transports that let
  /// peers write Block payloads straight into it (verbs: RDMA WRITE) register it and
  /// hold it until no peer can write into it any more. Others ignore it.
  virtual void offer_region(MemberId /*sender*/, Seq /*seq*/, LargeBuffer /*buffer*/) {}
  /// The runtime dropped that buffer (it may still live on in the transport, see above).
  virtual void retire_region(MemberId /*sender*/, Seq /*seq*/) {}
};

/// A transport a Node's progress thread waits on.
class Link : public Transport {
 public:
  /// What arrived, or nothing when woken or at the deadline. Throws
  /// hmcast::Error(transport_failed) if the transport itself failed.
  virtual std::optional<Inbound> wait(std::chrono::steady_clock::time_point deadline) = 0;
  /// What has already arrived, without waiting: a round's drain after its first
  /// input. By default wait() until now; a transport whose wait() has more to do
  /// than look (shm: clocks, its pacer, the wake-up flag) may only look. A wake-up
  /// it leaves shows in the next wait() (one round too many at worst).
  virtual std::optional<Inbound> poll() { return wait(std::chrono::steady_clock::now()); }
  virtual void wake() = 0;
  /// Hands back an Inbound's bytes once nothing refers to them: a transport may
  /// receive into them again (socket: large datagrams arrive in buffers of their
  /// own, without a copy). Others let them go.
  virtual void recycle(std::vector<std::byte>&& /*bytes*/) {}
  /// Where Block payloads go, for transports that can read them straight into their
  /// final buffer (socket). Others ignore it.
  virtual void set_block_placer(BlockPlacer /*placer*/) {}
  /// Whether the thread that waits from now on is the member's only polling thread:
  /// one that borrows the progress thread's rounds while that thread is parked. A
  /// transport that yields its CPU between polls because another thread of the member
  /// may need it (cpu_share.hpp) may keep it then. Others ignore it.
  virtual void set_sole_poller(bool /*sole*/) {}
  /// A file descriptor that polls readable whenever wait() may find something
  /// without sleeping (socket: its epoll set), for a link that waits on this one and
  /// another at once (HostLink); -1: none.
  [[nodiscard]] virtual int readiness_fd() const { return -1; }
  /// Buffers offered with offer_region() that the transport still holds.
  [[nodiscard]] virtual std::uint64_t regions_held() const { return 0; }
  /// Payload bytes the transport read straight into their final buffer.
  [[nodiscard]] virtual std::uint64_t bytes_placed() const { return 0; }
  /// Input the transport dropped as malformed before the protocol saw it.
  [[nodiscard]] virtual std::uint64_t bad_input() const { return 0; }
  /// Datagrams the transport multicast and bytes it sent on reliable links (verbs:
  /// the UD QP and RC QPs; transports that do not count them say 0).
  [[nodiscard]] virtual std::uint64_t multicast_datagrams_sent() const { return 0; }
  [[nodiscard]] virtual std::uint64_t link_bytes_sent() const { return 0; }
  /// A peer that died while writing to us (shm): inbox locks taken over from a dead
  /// owner, and frames dropped unfinished because their writer left the view.
  [[nodiscard]] virtual std::uint64_t locks_recovered() const { return 0; }
  [[nodiscard]] virtual std::uint64_t partial_frames_dropped() const { return 0; }
  /// shm: datagrams that could not go into the multicast log at once. They waited
  /// for a reader to move on, or were dropped past a log's worth waiting; datagrams
  /// also copied into the inbox of a member not yet reading the log.
  struct LogStats {
    std::uint64_t overruns = 0;
    std::uint64_t waited = 0;
    std::uint64_t copied = 0;
  };
  [[nodiscard]] virtual LogStats log_stats() const { return {}; }
  /// Stop sending and receiving; peers see this member's links break.
  virtual void close() = 0;
};

/// A payload lent for one call only (send_block's null `keep`) that must wait: copies
/// it, points `bytes` at the copy, and returns what keeps the copy alive.
inline std::shared_ptr<const void> keep_copy(std::span<const std::byte>& bytes) {
  auto copy = std::make_shared<const std::vector<std::byte>>(bytes.begin(), bytes.end());
  bytes = std::span<const std::byte>(*copy);
  return copy;
}

}  // namespace hmcast::transport
