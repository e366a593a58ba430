// A Link that passes every call to the Link it wraps: the base of the layers that
// sit between a transport and the runtime (faulty/, sealed/), which override only
// what they change, so a call added to Link reaches the transport through all of them.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "transport/transport.hpp"

namespace hmcast::transport {

class ForwardingLink : public Link {
 public:
  explicit ForwardingLink(std::unique_ptr<Link> inner) : inner_(std::move(inner)) {}
  ForwardingLink(const ForwardingLink&) = delete;
  ForwardingLink& operator=(const ForwardingLink&) = delete;

  [[nodiscard]] MemberId id() const override { return inner_->id(); }
  void multicast(std::span<const std::byte> bytes) override { inner_->multicast(bytes); }
  bool unicast(MemberId to, std::vector<std::byte> bytes) override { return inner_->unicast(to, std::move(bytes)); }
  bool unicast_datagram(MemberId to, std::vector<std::byte> bytes) override {
    return inner_->unicast_datagram(to, std::move(bytes));
  }
  [[nodiscard]] std::size_t direct_datagram_limit(MemberId to) const override {
    return inner_->direct_datagram_limit(to);
  }
  bool send_block(MemberId to, std::vector<std::byte> head, std::span<const std::byte> payload, std::uint64_t length,
                  std::shared_ptr<const void> keep) override {
    return inner_->send_block(to, std::move(head), payload, length, std::move(keep));
  }
  std::optional<Inbound> wait(std::chrono::steady_clock::time_point deadline) override {
    return inner_->wait(deadline);
  }
  void wake() override { inner_->wake(); }
  void recycle(std::vector<std::byte>&& bytes) override { inner_->recycle(std::move(bytes)); }
  void remove_peer(MemberId id) override { inner_->remove_peer(id); }
  void set_local_peers(std::vector<MemberId> local) override { inner_->set_local_peers(std::move(local)); }
  [[nodiscard]] int readiness_fd() const override { return inner_->readiness_fd(); }
  void add_peer(MemberId id, const std::string& host, std::uint16_t port) override { inner_->add_peer(id, host, port); }
  [[nodiscard]] std::uint64_t bad_input() const override { return inner_->bad_input(); }
  void set_block_placer(BlockPlacer placer) override { inner_->set_block_placer(std::move(placer)); }
  [[nodiscard]] bool places_datagrams() const override { return inner_->places_datagrams(); }
  void set_sole_poller(bool sole) override { inner_->set_sole_poller(sole); }
  [[nodiscard]] std::uint64_t bytes_placed() const override { return inner_->bytes_placed(); }
  LargeBuffer allocate_large(std::size_t size) override { return inner_->allocate_large(size); }
  void offer_region(MemberId sender, Seq seq, LargeBuffer buffer) override {
    inner_->offer_region(sender, seq, std::move(buffer));
  }
  void retire_region(MemberId sender, Seq seq) override { inner_->retire_region(sender, seq); }
  [[nodiscard]] std::uint64_t regions_held() const override { return inner_->regions_held(); }
  [[nodiscard]] std::uint64_t multicast_datagrams_sent() const override { return inner_->multicast_datagrams_sent(); }
  [[nodiscard]] std::uint64_t link_bytes_sent() const override { return inner_->link_bytes_sent(); }
  [[nodiscard]] std::uint64_t locks_recovered() const override { return inner_->locks_recovered(); }
  [[nodiscard]] std::uint64_t partial_frames_dropped() const override { return inner_->partial_frames_dropped(); }
  [[nodiscard]] LogStats log_stats() const override { return inner_->log_stats(); }
  void close() override { inner_->close(); }

  [[nodiscard]] const Link& inner() const { return *inner_; }

 protected:
  std::unique_ptr<Link> inner_;
};

}  // namespace hmcast::transport
