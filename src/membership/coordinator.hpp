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
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "hmcast/types.hpp"
#include "membership/control_wire.hpp"
#include "core/rng.hpp"

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
};

class Coordinator {
 public:
  explicit Coordinator(CoordinatorConfig cfg) : cfg_(cfg), rng_(cfg.seed) {}

  /// A control message arrived on `conn` (already decoded).
  std::vector<ControlOut> on_message(ConnId conn, const ControlMessage& m);
  /// `conn` closed (EOF, reset, or dropped as malformed).
  std::vector<ControlOut> on_disconnect(ConnId conn);

  /// Views issued so far, oldest first (cleared by take_issued()).
  std::vector<IssuedView> take_issued() { return std::exchange(issued_, {}); }
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

  CoordinatorConfig cfg_;
  Rng rng_;
  std::map<std::string, Group> groups_;
  std::map<ConnId, Session> sessions_;
  std::vector<IssuedView> issued_;
};

}  // namespace hmcast::membership
