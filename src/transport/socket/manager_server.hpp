// The membership manager on the network: a TCP server, one thread, that feeds the
// sans-I/O Coordinator (membership/coordinator.hpp) with each member's control
// messages and connection losses, and sends what it decides. A member's control
// connection doubles as its failure detector: when its process dies, the kernel
// closes the connection and the manager removes it by a new view at once.
//
// Runs standalone (`hmcast manager --listen ADDR`) or inside a member's Node
// (SocketOptions::embed_manager). If the manager dies, members lose their control
// connection and fail their pending operations (ErrorCode::manager_lost): views can
// no longer change, so the group cannot promise completion any more.
//
// Unless it has successors (`hmcast manager --zookeeper`, Succession): then every
// view's group record is stored before any member hears of the view, a manager
// that takes over adopts the stored records and waits for the members to rejoin,
// and members find whoever leads through the store (zookeeper/zk_coordination.hpp).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "auth/group_key.hpp"
#include "membership/coordinator.hpp"

namespace hmcast::socket {

struct ManagerStats {
  std::uint64_t connections = 0;
  std::uint64_t malformed = 0;  // connections dropped for a bad frame or message
  std::uint64_t views_issued = 0;
  /// With a group key: connections that ended before they proved they hold it (a
  /// wrong proof, a control message instead of the key exchange, too slow, or a
  /// member that found the manager's key wrong and hung up).
  std::uint64_t refused_without_key = 0;
  /// With a group key: exchanges closed unfinished to make room for newer
  /// connections (at most a fixed number are under way at once).
  std::uint64_t exchanges_evicted = 0;
};

/// A coordinator configuration seeded from the clock and process id. Group ids and multicast
/// addresses come from the seed: two managers with one seed hand out the same
/// address to their first groups, and those groups hear each other's datagrams.
membership::CoordinatorConfig fresh_coordinator_config();

/// What a manager that can be succeeded does besides serving.
struct Succession {
  /// Groups a dead predecessor recorded, to take over.
  std::vector<membership::GroupRecord> adopt;
  /// How long members of an adopted group have to rejoin before they are removed.
  std::chrono::milliseconds rejoin_window{3000};
  /// Stores the records of the views just issued and forgets dropped groups, before
  /// any member hears of those views. Throws if it cannot: the manager then stops
  /// serving (what it decided is never sent) and members turn to its successor.
  std::function<void(const std::vector<membership::IssuedView>& issued, const std::vector<std::string>& dropped)>
      store;
};

class ManagerServer {
 public:
  using ViewLog = std::function<void(const membership::IssuedView&)>;

  /// Listens on host:port (port 0: an ephemeral port, see port()) and starts serving.
  /// With a `key`, a connection must prove it holds that group key (auth/handshake.hpp)
  /// before anything it says reaches the Coordinator. Throws TransportError if the
  /// address cannot be bound.
  ManagerServer(const std::string& host, std::uint16_t port, membership::CoordinatorConfig cfg, ViewLog log = {},
                Succession succession = {}, std::optional<auth::GroupKey> key = std::nullopt);
  /// Stops serving and closes every connection (members see manager_lost).
  ~ManagerServer();
  ManagerServer(const ManagerServer&) = delete;
  ManagerServer& operator=(const ManagerServer&) = delete;

  [[nodiscard]] std::uint16_t port() const { return port_; }
  [[nodiscard]] ManagerStats stats() const;
  /// Why the manager stopped serving on its own (its store failed), or "".
  [[nodiscard]] std::string failure() const;

 private:
  void run();

  membership::Coordinator coordinator_;
  ViewLog log_;
  Succession succession_;
  std::optional<auth::GroupKey> key_;
  std::string failure_;  // under stats_mu_
  int listen_fd_ = -1;
  int wake_fd_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  mutable std::mutex stats_mu_;
  ManagerStats stats_;
  std::thread thread_;
};

}  // namespace hmcast::socket
