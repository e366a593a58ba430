// The membership control protocol: what a member and the membership manager say
// to each other over one TCP connection (framed like the socket transport's links,
// socket/framing.hpp). Versioned, and decoded with bounds checks like wire.hpp:
// a malformed message decodes to nothing and the connection is dropped.
//
//   member -> manager   Join{group, expected_size}     ask for an id in `group`
//   manager -> member   Welcome{group_id, member, multicast address and port}
//   member -> manager   Listening{host, port, host id}  where peers reach our links, which host we are on
//   manager -> member   ViewPush{view id, members with addresses, stream starts}
//   member -> manager   Suspect{view, member}           a link broke / budget spent
//   member -> manager   Leave{}                         graceful goodbye
//   manager -> member   Refused{reason}                 and the manager hangs up
//   manager -> member   FlushRequest{view}              a member wants in: pause
//   member -> manager   Flushed{view, next seqs}        all I sent is all-acked
//   member -> manager   MulticastFailed{view, silent}   my multicast probe went unconfirmed
//   manager -> member   MulticastFallback{view}         the group now emulates multicast
//   member -> manager   Rejoin{group, group id, member, view}  a new coordinator took over
//
// Coordinator failover (membership/group_record.hpp): a coordinator that takes over
// a group from one that died finds its record (view, ids, multicast address) in the
// store; each member of that view connects to it and says Rejoin, naming the view it
// holds. The new coordinator then flushes the group (as for a join) and issues the
// next view; members that did not come back in time are left out of it.
//
// Multicast fallback (group/multicast_probe.hpp): a member whose probe some
// members never confirmed tells the manager, which switches the whole group at once
// to multicast emulated over reliable links, and says so in every later ViewPush
// (`multicast_emulated`), so joiners start that way too. It never switches back.
//
// Joining a running group (the flush): the manager asks every member of the
// current view to stop starting broadcasts and to say when everything it has sent
// is all-acked (Flushed, with the seq its next small and large message will get).
// Once all have, every member holds every message sent so far, so the next view
// can take in the joiners: its ViewPush names each sender's first seq in the new
// view (`starts`) and ends the pause (`ends_flush`). A joiner delivers from there
// on; older messages are not its business (state transfer is the application's).
// A member lost during a flush is removed by a view that does not end the pause.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "hmcast/types.hpp"

namespace hmcast::membership {

inline constexpr std::uint8_t kControlVersion = 5;  // v5: host identities (host_layout.hpp)
/// Longest string field (group names, host names, reasons).
inline constexpr std::size_t kMaxControlString = 255;
/// Most members a ViewPush may name.
inline constexpr std::size_t kMaxViewMembers = 65536;

struct MemberAddress {
  MemberId id = 0;
  std::string host;
  std::uint16_t port = 0;
  /// The host the member runs on (transport/host_identity.hpp; 0: not said, a host
  /// of its own). Members with the same one can share memory.
  std::uint64_t host_id = 0;
  friend bool operator==(const MemberAddress&, const MemberAddress&) = default;
};

struct Join {
  std::string group;
  std::uint32_t expected_size = 0;
  friend bool operator==(const Join&, const Join&) = default;
};
struct Welcome {
  GroupId group_id = 0;
  MemberId member = 0;
  std::uint32_t multicast_address = 0;  // IPv4, host byte order
  std::uint16_t multicast_port = 0;
  friend bool operator==(const Welcome&, const Welcome&) = default;
};
struct Listening {
  std::string host;
  std::uint16_t port = 0;
  std::uint64_t host_id = 0;  // as in MemberAddress
  friend bool operator==(const Listening&, const Listening&) = default;
};
/// Where a sender's streams stand at a flush: its next small and large seqs.
struct StreamStart {
  MemberId member = 0;
  Seq next_small = 1;
  Seq next_large = 1;
  friend bool operator==(const StreamStart&, const StreamStart&) = default;
};
struct ViewPush {
  ViewId view = 0;
  std::vector<MemberAddress> members;  // sorted by id
  /// Set on the view that ends a flush: per member of the flushed view (sorted by id).
  std::vector<StreamStart> starts;
  bool ends_flush = false;
  /// The group emulates multicast over reliable links (a probe failed).
  bool multicast_emulated = false;
  friend bool operator==(const ViewPush&, const ViewPush&) = default;
};
struct SuspectReport {
  ViewId view = 0;
  MemberId member = 0;
  friend bool operator==(const SuspectReport&, const SuspectReport&) = default;
};
struct Leave {
  friend bool operator==(const Leave&, const Leave&) = default;
};
struct Refused {
  std::string reason;
  friend bool operator==(const Refused&, const Refused&) = default;
};

struct FlushRequest {
  ViewId view = 0;
  friend bool operator==(const FlushRequest&, const FlushRequest&) = default;
};
struct Flushed {
  ViewId view = 0;  // the view the request named
  Seq next_small = 1;
  Seq next_large = 1;
  friend bool operator==(const Flushed&, const Flushed&) = default;
};

struct MulticastFailed {
  ViewId view = 0;
  std::vector<MemberId> silent;  // sorted, distinct: the members that never confirmed
  friend bool operator==(const MulticastFailed&, const MulticastFailed&) = default;
};
struct MulticastFallback {
  ViewId view = 0;  // the view in which the manager decided
  friend bool operator==(const MulticastFallback&, const MulticastFallback&) = default;
};

struct Rejoin {
  std::string group;
  GroupId group_id = 0;
  MemberId member = 0;
  ViewId view = 0;  // the last view this member installed
  friend bool operator==(const Rejoin&, const Rejoin&) = default;
};

using ControlMessage = std::variant<Join, Welcome, Listening, ViewPush, SuspectReport, Leave, Refused, FlushRequest,
                                    Flushed, MulticastFailed, MulticastFallback, Rejoin>;

std::vector<std::byte> encode(const ControlMessage& m);
/// A ViewPush's body alone (no magic, version or type): also part of group records.
void encode_view(const ViewPush& v, std::vector<std::byte>& out);
/// Nothing if `bytes` is not exactly one well-formed message of this version.
std::optional<ControlMessage> decode_control(std::span<const std::byte> bytes);

/// The plain view (ids only) of a ViewPush.
View view_of(const ViewPush& v);

}  // namespace hmcast::membership
