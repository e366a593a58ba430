// How a group's paths send: every frame gets the group's header (group, view,
// self); a datagram goes by multicast or, once the group emulates multicast (the
// multicast probe failed somewhere), to each other member over its reliable link;
// a suspicion goes to the view authority once per member and view. The group
// engine owns one Emitter and lends it to its paths, so no path builds a header
// or decides how a datagram travels.
//
// Batching: a datagram offered with `may_hold` waits in a batch with others of this
// member, up to one MTU, and goes out as one Batch datagram when flush_batch() is
// called (the group engine's timer bounds the wait), when it is full, or ahead of
// any datagram that may not wait (the sender's datagrams keep their order). The
// batch is built in one buffer as its datagrams come (a body is encoded straight
// into it), and that buffer comes back through recycle() once sent: a stream of small
// messages allocates no buffer per message nor per batch.
#pragma once

#include <cstdint>
#include <set>
#include <span>
#include <vector>

#include "core/actions.hpp"
#include "core/assert.hpp"
#include "core/wire.hpp"
#include "hmcast/types.hpp"

namespace hmcast {

struct EmitterStats {
  std::uint64_t datagrams_sent = 0;       // multicast datagrams (or their emulation, counted once)
  std::uint64_t frames_sent = 0;          // point-to-point frames, emulated datagrams included
  std::uint64_t emulated_datagrams = 0;   // copies of datagrams sent over links instead of multicast
  std::uint64_t suspicions = 0;
  std::uint64_t batches_sent = 0;         // Batch datagrams (of two or more datagrams each)
  std::uint64_t datagrams_batched = 0;    // datagrams that went out inside a Batch
};

class Emitter {
 public:
  /// `mtu`: the largest datagram (a batch fills up to it); `max_items`: at most this
  /// many datagrams share one batch.
  Emitter(GroupId group, MemberId self, View view, std::uint32_t mtu, std::size_t max_items = wire::kMaxBatchItems)
      : group_(group), self_(self), view_(std::move(view)), mtu_(mtu), keep_bytes_(mtu), max_items_(max_items) {
    HMCAST_ASSERT(max_items_ >= 2 && max_items_ <= wire::kMaxBatchItems);
  }

  /// Frames from now on carry `view`'s id; suspicions start afresh. A held batch
  /// (encoded for the old view) must have been flushed.
  void set_view(const View& view) {
    HMCAST_ASSERT(held_ == 0);
    view_ = view;
    suspected_.clear();
  }
  /// For good: every later datagram goes to each member over its link.
  void emulate_multicast() { emulated_ = true; }
  [[nodiscard]] bool multicast_emulated() const { return emulated_; }

  [[nodiscard]] wire::Header header() const { return wire::Header{{}, group_, view_.id, self_}; }
  [[nodiscard]] GroupId group() const { return group_; }
  [[nodiscard]] MemberId self() const { return self_; }

  /// `body` as a datagram with this group's header. `may_hold`: as datagram_bytes();
  /// a body that waits is encoded straight into the batch.
  void datagram(const wire::Body& body, Outbox& out, bool may_hold = false);
  /// `body` encoded with this group's header, in the buffer of a datagram sent
  /// earlier (recycle()) where one is kept. A message of many datagrams would
  /// otherwise allocate all of them at once and free them together once sent, and
  /// glibc gives such a freed megabyte back to the kernel, to be faulted in again
  /// page by page for the next message (docs/benchmarks.md, "Buffers that stay mapped").
  std::vector<std::byte> encode(const wire::Body& body);
  /// A sent datagram's buffer, kept for a later encode() if it holds a datagram of
  /// `keep_buffers_of()` bytes and fewer than a large message's worth are kept;
  /// otherwise freed. A moved-from buffer is ignored.
  void recycle(std::vector<std::byte>&& bytes);
  /// The datagrams whose buffers recycle() keeps: those of `bytes` (the size a long
  /// message is cut into, ProtocolConfig::fragment_mtu where it is below the MTU; by
  /// default the MTU), so encode() takes the last one kept for any fragment.
  void keep_buffers_of(std::uint32_t bytes) {
    HMCAST_ASSERT(bytes > 0 && bytes <= mtu_);
    keep_bytes_ = bytes;
  }
  /// Fragments with at least `bytes` of payload go as their header and the part of
  /// the message they carry (action::SendDatagram::tail), for a transport that
  /// writes the two where the datagram goes (Transport::gathers_multicast): the
  /// payload is then copied once, not encoded first. 0: never.
  void gather_from(std::size_t bytes) { gather_from_ = bytes; }
  /// Fragment `d` of `message` (its payload lies within it) as a datagram: gathered
  /// (gather_from()) where it may not wait in a batch, else as datagram().
  void fragment(const wire::Data& d, const MessageBuffer& message, Outbox& out, bool may_hold = false);
  /// An encoded datagram (fragments are encoded by the small path's fragmenter).
  /// `may_hold`: it may wait in the batch (a Data or Stable small enough to share
  /// a datagram); otherwise the batch goes first, then this.
  void datagram_bytes(std::vector<std::byte> bytes, Outbox& out, bool may_hold = false);
  /// Sends what the batch holds (nothing if empty).
  void flush_batch(Outbox& out);
  [[nodiscard]] bool batch_held() const { return held_ != 0; }
  void frame(MemberId to, const wire::Body& body, Outbox& out) {
    ++stats_.frames_sent;
    out.emplace_back(action::SendP2P{to, wire::encode(header(), body)});
  }
  /// A frame the protocol can afford to lose (action::SendP2P::datagram): as a
  /// datagram to `to`, unless datagrams are emulated over links (then multicast is
  /// unusable and so, maybe, are datagrams of any kind).
  void frame_datagram(MemberId to, const wire::Body& body, Outbox& out) {
    ++stats_.frames_sent;
    out.emplace_back(action::SendP2P{to, wire::encode(header(), body), !emulated_});
  }
  /// `member` seems gone (a broken link, a spent repair budget): tell the view
  /// authority, once per view. Nobody suspects itself or a non-member.
  void suspect(MemberId member, Outbox& out) {
    if (member == self_ || !view_.contains(member) || !suspected_.insert(member).second) return;
    ++stats_.suspicions;
    out.emplace_back(action::ReportSuspect{member});
  }
  [[nodiscard]] const EmitterStats& stats() const { return stats_; }

 private:
  GroupId group_;
  MemberId self_;
  View view_;
  std::uint32_t mtu_;
  std::uint32_t keep_bytes_;  // recycle() keeps buffers that hold a datagram this large
  std::size_t max_items_;
  bool emulated_ = false;
  std::size_t gather_from_ = 0;  // fragments with this much payload go gathered (0: none)
  std::set<MemberId> suspected_;
  /// The batch being built: room for its head (written by flush_batch()), then each
  /// held datagram's u16 length and bytes, as a Batch encodes them. Its size is the
  /// Batch datagram's while held_ > 0.
  std::vector<std::byte> batch_;
  std::size_t held_ = 0;                       // datagrams in batch_
  std::vector<std::vector<std::byte>> spare_;  // sent datagrams' buffers, for encode() and batches
  std::size_t spare_bytes_ = 0;                 // their capacity
  /// Whether a datagram of `size` bytes and type `t` may wait in a batch: only what
  /// two of could share one datagram is worth holding.
  [[nodiscard]] bool holdable(std::size_t size, wire::Type t) const {
    return wire::kBatchOverhead + 2 * (wire::kBatchItemOverhead + size) <= mtu_ && wire::is_batchable_type(t);
  }
  /// Room for a datagram of `size` bytes at the end of the batch (flushed first if
  /// it would not fit), its length written in front.
  std::span<std::byte> hold(std::size_t size, Outbox& out);
  /// A kept buffer (recycle()), emptied, or a new one.
  std::vector<std::byte> take_buffer();
  void send(std::vector<std::byte> bytes, Outbox& out);
  EmitterStats stats_;
};

}  // namespace hmcast
