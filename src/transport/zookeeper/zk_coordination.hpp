// The coordinator role held through ZooKeeper, and how members find its holder.
//
// Layout under a root (default "/hmcast"):
//   ROOT/leader          ephemeral: "HOST:PORT" of the manager that coordinates
//                        (empty for the moment between winning and listening)
//   ROOT/groups/HEXNAME  persistent: each group's record (membership/group_record.hpp)
//
// Managers (`hmcast manager --zookeeper`) stand for the seat: whoever creates the
// leader node coordinates, adopting every stored record, until its session ends; the
// node goes with the session, and a standing manager takes over. A manager whose
// session expired stops at once (the ensemble may already have seated another).
// Members read the leader node when they join and when their coordinator is lost
// (zk_failover_control.hpp); their liveness stays with their control connection.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "membership/coordinator.hpp"
#include "membership/group_record.hpp"
#include "transport/zookeeper/zk_session.hpp"

namespace hmcast::zk {

std::string leader_path(const std::string& root);
std::string groups_path(const std::string& root);
/// A group's node: its name in hex (any byte may be in a group name, not in a znode's).
std::string group_path(const std::string& root, const std::string& group);

/// HOST:PORT of the coordinator, if one is seated and listening.
std::optional<std::pair<std::string, std::uint16_t>> find_coordinator(Session& s, const std::string& root);

/// A manager's seat: its session, whether it holds the coordinator role, and the
/// store of group records while it does.
class Seat {
 public:
  Seat(const std::string& ensemble, std::string root, std::chrono::milliseconds session_timeout,
       std::chrono::milliseconds connect_timeout);
  /// Takes the role if nobody holds it: true if this seat now coordinates.
  bool try_take();
  /// Every stored record that decodes (`undecodable` counts the others; they are left).
  std::vector<membership::GroupRecord> records(std::size_t* undecodable = nullptr);
  /// Says where this coordinator listens.
  void publish(const std::string& host, std::uint16_t port);
  /// Stores records (ManagerServer's Succession::store). Throws if the session is gone.
  void store(const std::vector<membership::IssuedView>& issued, const std::vector<std::string>& dropped);
  /// The session expired: the role may be someone else's now.
  [[nodiscard]] bool lost() const { return session_.expired(); }

 private:
  Session session_;
  std::string root_;
  bool seated_ = false;
};

}  // namespace hmcast::zk
