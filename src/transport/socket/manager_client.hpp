// A member's control connection to the membership manager (manager_server.hpp).
//
// join() and wait_view() block the caller (Node::join); after start(), the
// manager's messages and its loss are reported on the client's reader thread
// (transport/queued_control.hpp). Sends are small and may come from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "auth/group_key.hpp"
#include "membership/control_wire.hpp"
#include "transport/queued_control.hpp"

namespace hmcast::socket {

class ManagerClient final : public transport::QueuedControlClient {
 public:
  /// Connects to the manager at host:port, retrying until `deadline` (the manager
  /// may start a moment after its members). Throws hmcast::Error(join_timeout) if
  /// it cannot be reached by then. With a group `key`, the two first prove to each
  /// other that they hold it (auth/handshake.hpp); hmcast::Error(invalid_config)
  /// if the manager does not.
  ManagerClient(const std::string& host, std::uint16_t port, std::chrono::steady_clock::time_point deadline,
                const auth::GroupKey* key = nullptr);
  /// Closes the connection (the manager treats it as this member leaving).
  ~ManagerClient() override;
  ManagerClient(const ManagerClient&) = delete;
  ManagerClient& operator=(const ManagerClient&) = delete;

  void send(const membership::ControlMessage& m) override;
  void leave() override;
  void close() override;
  [[nodiscard]] std::string manager_address() const { return address_; }

 private:
  void read_loop();
  /// Writes one frame (its length, then `body`); false if the connection failed.
  bool send_frame(std::span<const std::byte> body);
  /// The key exchange, before the reader starts. Throws hmcast::Error.
  void prove_key(const auth::GroupKey& key, std::chrono::steady_clock::time_point deadline);

  std::string address_;
  int fd_ = -1;
  std::mutex send_mu_;
  std::thread reader_;
};

}  // namespace hmcast::socket
