// For `hmcast soak --membership zookeeper`: several `hmcast manager --zookeeper`
// processes standing for the coordinator's seat (one coordinates, the others take
// over), the views they report, and killing the seated one or the ensemble's leader.
#pragma once

#include <sys/types.h>

#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace hmcast::tools {

class Managers {
 public:
  Managers() = default;
  ~Managers() { stop(); }
  Managers(const Managers&) = delete;
  Managers& operator=(const Managers&) = delete;

  /// Starts `count` managers on `host` (free ports); the views they issue are appended
  /// to `views` under `views_mu` ({view, members, left, t_ns}).
  void start(const std::string& exe, const std::string& ensemble, const std::string& root, const std::string& host,
             std::uint32_t count, std::mutex& views_mu, nlohmann::json& views);
  /// SIGKILLs the manager that said last that it coordinates: false if none did.
  bool kill_seated();
  /// Stops the rest (SIGTERM) and waits for them.
  void stop();

 private:
  struct Proc {
    pid_t pid = -1;
    int in_fd = -1;
    int out_fd = -1;
    bool killed = false;
    std::thread reader;
  };
  std::vector<Proc> procs_;
  std::mutex mu_;
  int seated_ = -1;  // index into procs_, under mu_
};

/// SIGKILLs the ZooKeeper server that leads its ensemble, found among $HMCAST_ZK_PIDS
/// (port:pid,...) by asking each `srvr`. "" on success, else why not.
std::string kill_zk_leader();

}  // namespace hmcast::tools
