// An in-process fabric: endpoints in one process exchange frames through queues.
// Datagrams reach every other endpoint (unreliable only through the fault layer
// a Node puts on top, api/faulty_link.hpp); point-to-point frames are reliable and FIFO.
// It also offers the bootstrap rendezvous that forms a group's first view.
// Thread-safe: any thread may send; each endpoint is drained by its owner.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "hmcast/types.hpp"

namespace hmcast::inproc {

struct Inbound {
  bool datagram = false;
  MemberId from = 0;
  std::vector<std::byte> bytes;
  /// A Block frame whose payload the transport already wrote into its final buffer
  /// (socket placement): `bytes` is the frame without it.
  bool placed = false;
};

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
  /// The fabric of this name in this process (created on first use).
  static std::shared_ptr<Fabric> named(const std::string& name);

  std::shared_ptr<Endpoint> attach();
  void detach(MemberId id);
  void multicast(MemberId from, const std::vector<std::byte>& bytes);
  /// False if `to` is gone (its node was destroyed): the link is broken.
  bool unicast(MemberId from, MemberId to, std::vector<std::byte> bytes);
  /// Blocks until `size` endpoints joined `group`; returns the first view, or nothing on timeout.
  std::optional<View> rendezvous(GroupId group, MemberId self, std::uint32_t size,
                                 std::chrono::milliseconds timeout);

 private:
  std::mutex mu_;
  std::condition_variable joined_;
  MemberId next_id_ = 1;
  std::map<MemberId, std::shared_ptr<Endpoint>> endpoints_;
  std::map<GroupId, std::vector<MemberId>> joining_;
  std::map<GroupId, View> formed_;
};

}  // namespace hmcast::inproc
