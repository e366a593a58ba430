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

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "auth/group_key.hpp"
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

/// A manager standing for the seat on a thread of its own: when it wins, it adopts the
/// stored records and serves (socket::ManagerServer) until its session ends, which
/// it reports through failure(). Used by `hmcast manager --zookeeper` and by a
/// member with SocketOptions::embed_manager and zookeeper (any member can take over).
class StandingManager {
 public:
  struct Options {
    std::string ensemble;
    std::string root = "/hmcast";
    std::string host = "127.0.0.1";  // where it listens once seated (port chosen free)
    std::uint16_t port = 0;
    std::chrono::milliseconds session_timeout{1000};
    std::chrono::milliseconds rejoin_window{3000};
    /// Each view issued, and (once) "seated at HOST:PORT" / why it stopped.
    std::function<void(const membership::IssuedView&)> on_view;
    std::function<void(const std::string&)> on_event;
    /// Members must prove they hold this group key before they are heard (none: anyone).
    std::optional<auth::GroupKey> key;
  };
  /// Connects its session (throws hmcast::Error if the ensemble cannot be reached) and
  /// starts standing.
  explicit StandingManager(Options o);
  /// Stops serving (members turn to another seat) and leaves the stand.
  ~StandingManager();
  StandingManager(const StandingManager&) = delete;
  StandingManager& operator=(const StandingManager&) = delete;
  [[nodiscard]] bool seated() const { return seated_.load(); }
  /// Why it stopped on its own (its session expired, its store failed), or "".
  [[nodiscard]] std::string failure() const;

 private:
  void run();
  Options o_;
  std::unique_ptr<Seat> seat_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> seated_{false};
  mutable std::mutex mu_;
  std::string failure_;
  std::thread thread_;
};

}  // namespace hmcast::zk
