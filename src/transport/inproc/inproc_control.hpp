// A member's connection to the in-process fabric's coordinator: the same
// membership path as the socket transport's manager connection, with the
// coordinator's messages carried by a queue and handed on by the client's own
// thread (as the socket client's reader does), never from inside the fabric.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "transport/inproc/inproc_fabric.hpp"
#include "transport/queued_control.hpp"

namespace hmcast::inproc {

class ControlClient final : public transport::QueuedControlClient {
 public:
  explicit ControlClient(const std::string& fabric);
  ~ControlClient() override;
  ControlClient(const ControlClient&) = delete;
  ControlClient& operator=(const ControlClient&) = delete;

  void send(const membership::ControlMessage& m) override;
  void leave() override;
  void close() override;

 private:
  void run();

  std::shared_ptr<Fabric> fabric_;
  membership::ConnId conn_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::optional<membership::ControlMessage>> inbox_;  // nullopt: the coordinator hung up
  bool closing_ = false;
  bool hung_up_ = false;
  std::thread thread_;
};

}  // namespace hmcast::inproc
