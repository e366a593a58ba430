// The two-level group's link (issue 18): members that share this member's host are
// reached through shared memory (a shm link), the others through the network (a
// socket or verbs link). A datagram goes once into our shared-memory log for the
// local members and once onto the network for the other hosts, where every member
// receives it as hardware multicast delivers to every queue pair of a host; copies
// of local members' datagrams that the network loops back are dropped (counted).
// Reliable frames take whichever side reaches their peer. The ACK trees follow the
// same hosts (ack_tree/host_tree.hpp), so only a host's leader ACKs across the
// network, for its whole host, and repairs inside a host stay in its memory.
//
// wait() looks at both sides in turns, polls both while its PollPacer says so
// (hybrid mode, as every transport), and then sleeps on the shared memory's
// doorbell. Only while it sleeps does a watcher thread wait on the network link's
// readiness_fd(), ringing that doorbell when the network has work: one thread
// drains both sides, a sleeping one wakes for either, and a polling one pays no
// thread hand-off per arrival.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "transport/poll_pacer.hpp"
#include "transport/transport.hpp"

namespace hmcast::transport {

class HostLink final : public Link {
 public:
  /// `local` (shared memory) and `network` belong to the same member; `network`
  /// must have a readiness_fd(), and `local` should sleep at once in wait() (its
  /// polling is this link's, paced by `pacer`).
  HostLink(std::unique_ptr<Link> local, std::unique_ptr<Link> network, PollPacer pacer);
  ~HostLink() override;
  HostLink(const HostLink&) = delete;
  HostLink& operator=(const HostLink&) = delete;

  [[nodiscard]] MemberId id() const override { return network_->id(); }
  void multicast(std::span<const std::byte> bytes) override;
  bool unicast(MemberId to, std::vector<std::byte> frame) override;
  bool unicast_datagram(MemberId to, std::vector<std::byte> frame) override;
  [[nodiscard]] std::size_t direct_datagram_limit(MemberId to) const override;
  bool send_block(MemberId to, std::vector<std::byte> head, std::span<const std::byte> payload, std::uint64_t length,
                  std::shared_ptr<const void> keep) override;
  void set_local_peers(std::vector<MemberId> local) override;
  void add_peer(MemberId id, const std::string& host, std::uint16_t port) override;
  void remove_peer(MemberId id) override;
  LargeBuffer allocate_large(std::size_t size) override { return network_->allocate_large(size); }
  void offer_region(MemberId sender, Seq seq, LargeBuffer buffer) override {
    network_->offer_region(sender, seq, std::move(buffer));
  }
  void retire_region(MemberId sender, Seq seq) override { network_->retire_region(sender, seq); }

  std::optional<Inbound> wait(std::chrono::steady_clock::time_point deadline) override;
  void wake() override;
  /// The network side receives large datagrams into buffers of their own (socket).
  void recycle(std::vector<std::byte>&& bytes) override { network_->recycle(std::move(bytes)); }
  void set_block_placer(BlockPlacer placer) override;
  /// The host's shared memory places them (its network's datagrams arrive whole).
  [[nodiscard]] bool places_datagrams() const override { return local_->places_datagrams(); }
  [[nodiscard]] std::uint64_t regions_held() const override { return network_->regions_held(); }
  [[nodiscard]] std::uint64_t bytes_placed() const override {
    return local_->bytes_placed() + network_->bytes_placed();
  }
  [[nodiscard]] std::uint64_t bad_input() const override { return local_->bad_input() + network_->bad_input(); }
  [[nodiscard]] std::uint64_t multicast_datagrams_sent() const override {
    return network_->multicast_datagrams_sent() + local_->multicast_datagrams_sent();
  }
  [[nodiscard]] std::uint64_t link_bytes_sent() const override {
    return local_->link_bytes_sent() + network_->link_bytes_sent();
  }
  [[nodiscard]] std::uint64_t locks_recovered() const override { return local_->locks_recovered(); }
  [[nodiscard]] std::uint64_t partial_frames_dropped() const override { return local_->partial_frames_dropped(); }
  [[nodiscard]] LogStats log_stats() const override { return local_->log_stats(); }
  void close() override;

  [[nodiscard]] const Link& network() const { return *network_; }
  [[nodiscard]] const Link& local() const { return *local_; }
  /// Datagrams of local members the network looped back to us, dropped.
  [[nodiscard]] std::uint64_t looped_dropped() const { return looped_dropped_.load(); }

 private:
  [[nodiscard]] bool is_local(MemberId id) const;
  /// The network's next item, without sleeping; copies of local datagrams skipped.
  std::optional<Inbound> from_network();
  void watch();

  std::unique_ptr<Link> local_;
  std::unique_ptr<Link> network_;

  mutable std::mutex peers_mu_;
  std::set<MemberId> local_ids_;  // named by set_local_peers()
  std::set<MemberId> local_peers_, remote_peers_;  // added and not removed

  // wait() arms the watcher before it sleeps and disarms it when it wakes; the
  // watcher rings the doorbell for the network only while armed.
  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  bool armed_ = false;     // under watch_mu_
  bool stopping_ = false;  // under watch_mu_
  std::thread watcher_;

  std::atomic<bool> woken_{false};
  std::atomic<bool> closed_{false};
  // The wait() thread's: whose turn is first (the other side had the last item), and
  // how long to poll.
  bool network_first_ = false;
  PollPacer pacer_;
  std::atomic<std::uint64_t> looped_dropped_{0};
};

}  // namespace hmcast::transport
