// A member's control connection when coordinators succeed each other through
// ZooKeeper (zk_coordination.hpp): it finds the seated coordinator, joins through it
// (socket/manager_client.hpp), and when that coordinator is lost it finds the next
// one and says Rejoin (membership/control_wire.hpp), within a failover timeout. Only
// if none takes it back by then is the coordinator reported lost.
//
// Messages this member sent since the last view it installed (a suspicion, a
// Flushed, a failed probe) may have died with the old coordinator: they are sent
// again to the new one, which takes each of them as it would have (a report about a
// member no longer in the view changes nothing).
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "auth/group_key.hpp"
#include "transport/control_client.hpp"

namespace hmcast::socket {
class ManagerClient;
}

namespace hmcast::zk {

class Session;

struct FailoverOptions {
  std::string ensemble;  // "host:port,host:port,..."
  std::string root = "/hmcast";
  /// How long a member looks for a new coordinator after losing one.
  std::chrono::milliseconds failover_timeout{15000};
  /// The group key each coordinator must prove it holds (none: no key exchange).
  std::optional<auth::GroupKey> key;
};

class FailoverControlClient final : public transport::ControlClient {
 public:
  /// Connects to the ensemble (by `deadline`); the coordinator is found by join().
  FailoverControlClient(FailoverOptions opts, TimePoint deadline);
  ~FailoverControlClient() override;
  FailoverControlClient(const FailoverControlClient&) = delete;
  FailoverControlClient& operator=(const FailoverControlClient&) = delete;

  membership::Welcome join(const std::string& group, std::uint32_t expected_size, TimePoint deadline) override;
  void listening(const std::string& host, std::uint16_t port, std::uint64_t host_id) override;
  membership::ViewPush wait_view(TimePoint deadline) override;
  void start(MessageFn on_message, LostFn on_lost) override;
  void send(const membership::ControlMessage& m) override;
  void leave() override;
  void close() override;

  /// Coordinators this member rejoined after losing one.
  [[nodiscard]] std::uint64_t failovers() const;

 private:
  /// A client connected to the seated coordinator, waiting up to `deadline` for one.
  std::unique_ptr<socket::ManagerClient> connect(TimePoint deadline);
  void on_message(const membership::ControlMessage& m);
  void on_lost(const std::string& why);
  void run_failover();

  FailoverOptions opts_;
  std::unique_ptr<Session> zk_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::unique_ptr<socket::ManagerClient> current_;  // under mu_ once started
  // Who we are, to say Rejoin.
  std::string group_;
  GroupId group_id_ = 0;
  MemberId member_ = 0;
  ViewId view_ = 0;
  std::vector<membership::ControlMessage> since_view_;  // sent since the last view
  MessageFn on_message_;
  LostFn on_lost_;
  bool failing_over_ = false;
  bool no_failover_ = false;  // leaving, or refused back: a lost coordinator is reported
  bool closing_ = false;
  bool reported_lost_ = false;
  std::string lost_why_;
  std::uint64_t failovers_ = 0;
  std::thread failover_;
};

}  // namespace hmcast::zk
