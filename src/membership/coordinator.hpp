// The membership manager, sans-I/O: assigns member ids, forms each group's first
// view once its expected members listen, and issues a new view when a member
// leaves, its control connection drops (its process died), or another member
// reports it. The network side (socket/manager_server) feeds it connection events
// and control messages and carries out what it returns.
//
// What it decides:
// - A group is created by its first Join, with the expected size that Join names;
//   later Joins must name the same size. Ids are never reused within a group.
// - The first view forms when `expected_size` members have said where they listen.
// - A Join after that (with the same expected size) is a joiner: once it listens,
//   the manager flushes the current view (control_wire.hpp) and then issues a view
//   with every joiner in it, the `starts` of each sender, and the end of the pause.
//   Joiners that arrive during a flush wait for it and come in with it.
// - A member is removed by a new view, pushed to every member of the old view
//   (the removed one too, so a falsely suspected member learns it is out).
// - A member of the view whose multicast probe went unconfirmed (MulticastFailed)
//   switches the whole group to emulated multicast: every member is told at once,
//   and every later ViewPush says so. There is no way back within a group's life.
// - Each group gets its own multicast address and port and a group id salted with
//   a random value, so two runs of one group name on one network cannot mix.
// - Taking over (adopt): a coordinator that succeeds one that died starts from the
//   group's record (group_record.hpp). Every member of the recorded view is awaited
//   until a deadline: each says Rejoin on a new connection; the group is flushed at
//   once (members of the old coordinator's flush may be paused, and its Flushed
//   answers are lost), each member that rejoins is asked too, and the flush ends as
//   usual once every member still in the view has answered. Members still absent
//   at the deadline (on_tick) are removed like any member whose connection dropped.
//   A rejoin names the view its member holds: the next view is numbered above every
//   view any member holds, even one the old coordinator issued but never recorded.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "hmcast/types.hpp"
#include "core/rng.hpp"
#include "membership/control_wire.hpp"
#include "membership/group_record.hpp"

namespace hmcast::membership {

using ConnId = std::uint64_t;

struct CoordinatorConfig {
  std::uint64_t seed = 1;
  /// Fixed multicast address (IPv4, host order) and port for every group; unset:
  /// drawn per group from 239.255.0.0/16 and ports 20000..59999.
  std::optional<std::uint32_t> multicast_address;
  std::optional<std::uint16_t> multicast_port;
};

struct ControlOut {
  ConnId conn = 0;
  std::optional<ControlMessage> message;  // sent first, if any
  bool close = false;                     // then the connection is closed
};

/// A view the coordinator issued (for logs, measurements and test tools).
struct IssuedView {
  std::string group;
  View view;
  std::vector<MemberId> left;
  GroupId group_id = 0;
  std::uint32_t multicast_address = 0;
  std::uint16_t multicast_port = 0;
  ViewPush push;  // with addresses
  GroupRecord record;  // what a successor needs, as of this view
};

class Coordinator {
 public:
  explicit Coordinator(CoordinatorConfig cfg) : cfg_(cfg), rng_(cfg.seed) {}

  /// A control message arrived on `conn` (already decoded).
  std::vector<ControlOut> on_message(ConnId conn, const ControlMessage& m);
  /// `conn` closed (EOF, reset, or dropped as malformed).
  std::vector<ControlOut> on_disconnect(ConnId conn);

  /// Takes over the group a dead coordinator recorded; members absent at
  /// `rejoin_deadline` (on_tick's clock) are removed. A group of that name here already
  /// is a programmer error.
  std::vector<ControlOut> adopt(const GroupRecord& record, std::int64_t rejoin_deadline);
  /// The clock moved on (any monotonic time, in the unit of adopt's deadline).
  std::vector<ControlOut> on_tick(std::int64_t now);

  /// Views issued so far, oldest first (cleared by take_issued()).
  std::vector<IssuedView> take_issued() { return std::exchange(issued_, {}); }
  /// Groups whose last member left since the last call: their records can go.
  std::vector<std::string> take_dropped() { return std::exchange(dropped_, {}); }
  [[nodiscard]] std::size_t groups() const { return groups_.size(); }

 private:
  struct Member {
    ConnId conn = 0;
    std::optional<MemberAddress> address;  // once Listening arrived
  };
  struct Group {
    std::string name;
    GroupId id = 0;
    std::uint32_t expected = 0;
    std::uint32_t multicast_address = 0;
    std::uint16_t multicast_port = 0;
    MemberId next_id = 1;
    std::map<MemberId, Member> members;  // joined and not gone (joiners too)
    std::optional<ViewPush> view;        // once formed
    // A flush in progress: members of the view that have not said Flushed yet,
    // and what those that have said.
    bool multicast_emulated = false;  // a probe failed: every member emulates multicast
    bool flushing = false;
    std::set<MemberId> flush_pending;
    std::vector<StreamStart> starts;
    // Adopted: members of the recorded view not yet rejoined, and until when they may.
    std::set<MemberId> absent;
    std::int64_t rejoin_deadline = 0;
  };
  struct Session {
    std::string group;
    MemberId member = 0;
  };

  void refuse(ConnId conn, const std::string& reason, std::vector<ControlOut>& out);
  void remove(Group& g, MemberId member, std::vector<ControlOut>& out);
  /// Issues the next view: the current members without `left`, or (ending a
  /// flush) every member that listens, joiners included.
  void push_view(Group& g, const std::vector<MemberId>& left, bool ends_flush, std::vector<ControlOut>& out);
  void start_flush(Group& g, std::vector<ControlOut>& out);
  void maybe_end_flush(Group& g, std::vector<ControlOut>& out);
  [[nodiscard]] static bool in_view(const Group& g, MemberId m);
  void rejoin(ConnId conn, const Rejoin& r, std::vector<ControlOut>& out);
  [[nodiscard]] static GroupRecord record_of(const Group& g);

  CoordinatorConfig cfg_;
  Rng rng_;
  std::map<std::string, Group> groups_;
  std::map<ConnId, Session> sessions_;
  std::vector<IssuedView> issued_;
  std::vector<std::string> dropped_;
};

}  // namespace hmcast::membership
