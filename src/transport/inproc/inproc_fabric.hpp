// An in-process fabric: endpoints in one process exchange frames through queues.
// Each group is a scope of its own (its group id, which the coordinator salts):
// datagrams reach every other endpoint of the scope (unreliable only through the
// fault layer a Node puts on top, faulty/faulty_link.hpp); point-to-point frames
// are reliable and FIFO. Membership is the production path: a coordinator
// (membership/coordinator.hpp) lives in the fabric, and members reach it through
// inproc_control.hpp as if over a connection.
// Thread-safe: any thread may send; each endpoint is drained by its owner.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "hmcast/types.hpp"
#include "membership/coordinator.hpp"
#include "transport/transport.hpp"

namespace hmcast::inproc {

using transport::Inbound;

class Endpoint {
 public:
  explicit Endpoint(MemberId id) : id_(id) {}
  [[nodiscard]] MemberId id() const { return id_; }
  /// Waits until a frame arrives, wake() is called, or `deadline` passes.
  std::optional<Inbound> wait(std::chrono::steady_clock::time_point deadline);
  void wake();
  void deliver(Inbound in);  // called by senders
  void close();

 private:
  MemberId id_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Inbound> inbox_;
  bool woken_ = false;
  bool closed_ = false;
};

class Fabric {
 public:
  /// What the coordinator sends one connection: a message, or (nullopt) the end.
  using ControlFn = std::function<void(std::optional<membership::ControlMessage>)>;

  /// The fabric of this name in this process (created on first use).
  static std::shared_ptr<Fabric> named(const std::string& name);

  std::shared_ptr<Endpoint> attach(std::uint64_t scope, MemberId id);
  void detach(std::uint64_t scope, MemberId id);
  void multicast(std::uint64_t scope, MemberId from, std::span<const std::byte> bytes);
  /// False if `to` is gone (its node was destroyed): the link is broken.
  bool unicast(std::uint64_t scope, MemberId from, MemberId to, std::vector<std::byte> bytes);

  // The fabric's coordinator. A connection's messages go to its ControlFn, called
  // with no fabric lock held, in order.
  membership::ConnId connect(ControlFn to_member);
  void to_coordinator(membership::ConnId conn, const membership::ControlMessage& m);
  void disconnect(membership::ConnId conn);

 private:
  void carry_out(std::vector<membership::ControlOut> outs);

  std::mutex mu_;
  std::map<std::pair<std::uint64_t, MemberId>, std::shared_ptr<Endpoint>> endpoints_;
  std::mutex control_mu_;  // serializes the coordinator and the order of what it sends
  membership::Coordinator coordinator_{membership::CoordinatorConfig{}};
  membership::ConnId next_conn_ = 1;
  std::map<membership::ConnId, ControlFn> conns_;
};

}  // namespace hmcast::inproc
