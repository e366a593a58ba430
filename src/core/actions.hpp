// What the protocol engines ask their runtime to do. Engines never perform I/O:
// they append actions to an Outbox and the runtime (src/runtime, the same for a
// Node and for the simulator) carries them out in order: frames to the transport,
// reports to the view authority, the rest to the application.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "core/message_buffer.hpp"
#include "hmcast/types.hpp"

namespace hmcast {

namespace action {
struct SendDatagram {
  std::vector<std::byte> bytes;
  /// Where set, the datagram is `bytes` (a fragment's header) then `tail`, which lies
  /// in `keep` (the message): a transport that gathers writes it from there
  /// (Emitter::fragment).
  std::span<const std::byte> tail;
  MessageBuffer keep;
};
struct SendP2P {
  MemberId to = 0;
  std::vector<std::byte> bytes;
  /// It may be lost or overtaken on its way (a cumulative ACK): a transport that can
  /// sends it as a datagram (Transport::unicast_datagram).
  bool datagram = false;
};
struct Deliver {
  MemberId sender = 0;
  Seq seq = 0;
  MessageBuffer message;
  bool large = false;  // seq counts the sender's large messages
};
/// This node's own message `seq` is held by every member of the current view.
struct Completed {
  Seq seq = 0;
};
struct ViewInstalled {
  View view;
  std::vector<MemberId> left;
};
/// The view authority removed this node from the group; the engine stops participating.
struct Removed {
  ViewId view = 0;
};

// Reports to the view authority (the coordinator, src/membership).

/// `member` seems gone (its link broke, or it ignored a whole repair budget).
struct ReportSuspect {
  MemberId member = 0;
};
/// These members never confirmed our multicast probe in `view`
/// (group/multicast_probe.hpp); the view authority decides the fallback.
struct MulticastUnusable {
  ViewId view = 0;
  std::vector<MemberId> silent;
};
/// Answer to a flush request for `view`: every message this member sent is
/// all-acked, and its next small and large messages will get these seqs.
struct Flushed {
  ViewId view = 0;
  Seq next_small = 1;
  Seq next_large = 1;
};

// The large path. The engine never touches a large message's bytes: it names the
// ranges, and the runtime moves them between the two members' buffers.

/// Move bytes [offset, offset + length) of large message (sender, seq) from this
/// member's buffer into `to`'s buffer at the same offset, then hand `to` the frame
/// (a wire::Block description) once the bytes are in place. The range is one segment:
/// a whole block or part of one, which the engine may name before the rest of its
/// block has arrived here (it only names bytes this member holds).
struct SendBlock {
  MemberId to = 0;
  MemberId sender = 0;
  Seq seq = 0;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::vector<std::byte> frame;
};
/// A large message is coming: provide a buffer of `size` bytes, then call buffer_ready().
struct NeedBuffer {
  MemberId sender = 0;
  Seq seq = 0;
  std::uint64_t size = 0;
};
/// Every byte of large message (sender, seq) is in this member's buffer.
struct DeliverLarge {
  MemberId sender = 0;
  Seq seq = 0;
  std::uint64_t size = 0;
  MessageBuffer message;  // the buffer, filled in by the runtime (null where no bytes are carried)
};
/// This member's own large message is held by every member of the view.
struct CompletedLarge {
  Seq seq = 0;
};
/// This member's own large message will not complete (the view changed under it);
/// the application may send it again.
struct FailedLarge {
  Seq seq = 0;
  std::string reason;
};
/// A large message this member was receiving was abandoned: free its buffer.
struct DiscardLarge {
  MemberId sender = 0;
  Seq seq = 0;
};
/// The block frame (one segment) just handed to the engine is valid: its `length`
/// bytes belong at `offset` of the (sender, seq) buffer. (Runtimes that carry payloads
/// in frames copy them now, after validation, never before, and only this once.)
struct BlockAccepted {
  MemberId sender = 0;
  Seq seq = 0;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
};
/// No more blocks will be read from or written to (sender, seq)'s buffer here.
struct ReleaseLarge {
  MemberId sender = 0;
  Seq seq = 0;
};
}  // namespace action

using Action = std::variant<action::SendDatagram, action::SendP2P, action::Deliver, action::Completed,
                            action::ViewInstalled, action::Removed, action::SendBlock, action::NeedBuffer,
                            action::DeliverLarge, action::CompletedLarge, action::FailedLarge,
                            action::DiscardLarge, action::BlockAccepted, action::ReleaseLarge,
                            action::ReportSuspect, action::MulticastUnusable, action::Flushed>;
using Outbox = std::vector<Action>;

/// What of the actions reaches the application (the runtime carries out the rest).
using AppEvent = std::variant<action::Deliver, action::DeliverLarge, action::Completed, action::CompletedLarge,
                              action::FailedLarge, action::ViewInstalled, action::Removed>;
using AppEvents = std::vector<AppEvent>;

}  // namespace hmcast
