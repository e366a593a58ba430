#include "transport/host_link.hpp"

#include <cerrno>
#include <poll.h>

#include "core/assert.hpp"
#include "transport/cpu_share.hpp"

namespace hmcast::transport {

HostLink::HostLink(std::unique_ptr<Link> local, std::unique_ptr<Link> network, PollPacer pacer)
    : local_(std::move(local)), network_(std::move(network)), pacer_(pacer) {
  HMCAST_ASSERT(local_ && network_);
  HMCAST_ASSERT(local_->id() == network_->id());
  HMCAST_ASSERT(network_->readiness_fd() >= 0);
  watcher_ = std::thread([this] { watch(); });
}

HostLink::~HostLink() { close(); }

bool HostLink::is_local(MemberId id) const {
  std::lock_guard lock(peers_mu_);
  return local_ids_.count(id) != 0;
}

void HostLink::multicast(std::span<const std::byte> bytes) {
  bool local = false;
  bool remote = false;
  {
    std::lock_guard lock(peers_mu_);
    local = !local_peers_.empty();
    remote = !remote_peers_.empty();
  }
  // Nobody on one side: that side's copy would be read by no one.
  if (local) local_->multicast(bytes);
  if (remote) network_->multicast(bytes);
}

bool HostLink::unicast_datagram(MemberId to, std::vector<std::byte> frame) {
  return (is_local(to) ? *local_ : *network_).unicast_datagram(to, std::move(frame));
}

std::size_t HostLink::direct_datagram_limit(MemberId to) const {
  return (is_local(to) ? *local_ : *network_).direct_datagram_limit(to);
}

bool HostLink::unicast(MemberId to, std::vector<std::byte> frame) {
  return (is_local(to) ? *local_ : *network_).unicast(to, std::move(frame));
}

bool HostLink::send_block(MemberId to, std::vector<std::byte> head, std::span<const std::byte> payload,
                          std::uint64_t length, std::shared_ptr<const void> keep) {
  return (is_local(to) ? *local_ : *network_).send_block(to, std::move(head), payload, length, std::move(keep));
}

void HostLink::set_local_peers(std::vector<MemberId> local) {
  std::lock_guard lock(peers_mu_);
  local_ids_.insert(local.begin(), local.end());  // a member's host never changes
}

void HostLink::add_peer(MemberId id, const std::string& host, std::uint16_t port) {
  const bool local = is_local(id);
  {
    std::lock_guard lock(peers_mu_);
    (local ? local_peers_ : remote_peers_).insert(id);
  }
  (local ? *local_ : *network_).add_peer(id, host, port);
}

void HostLink::remove_peer(MemberId id) {
  {
    std::lock_guard lock(peers_mu_);
    local_peers_.erase(id);
    remote_peers_.erase(id);
  }
  local_->remove_peer(id);
  network_->remove_peer(id);
}

void HostLink::set_block_placer(BlockPlacer placer) {
  local_->set_block_placer(placer);
  network_->set_block_placer(std::move(placer));
}

void HostLink::watch() {
  const int fd = network_->readiness_fd();
  std::unique_lock lock(watch_mu_);
  for (;;) {
    watch_cv_.wait(lock, [&] { return armed_ || stopping_; });
    if (stopping_) return;
    lock.unlock();
    // Level-triggered: work that came before we looked is seen at once.
    pollfd p{fd, POLLIN, 0};
    const int n = ::poll(&p, 1, -1);
    HMCAST_ASSERT(n >= 0 || errno == EINTR);  // the fd is the network link's, open until close() joins us
    lock.lock();
    if (stopping_) return;
    if (n > 0 && armed_) {
      armed_ = false;
      local_->wake();  // wait() leaves the doorbell and drains the network
    }
  }
}

std::optional<Inbound> HostLink::from_network() {
  for (;;) {
    auto in = network_->wait(std::chrono::steady_clock::time_point::min());
    if (!in) return std::nullopt;
    if (in->datagram && is_local(in->from)) {
      looped_dropped_.fetch_add(1, std::memory_order_relaxed);  // it came through shared memory too
      continue;
    }
    return in;
  }
}

std::optional<Inbound> HostLink::wait(std::chrono::steady_clock::time_point deadline) {
  using Clock = std::chrono::steady_clock;
  for (;;) {
    if (closed_.load()) return std::nullopt;
    // Turns: the side that did not have the last item is looked at first, so a busy
    // network never starves the host's members, nor the reverse.
    for (int turn = 0; turn < 2; ++turn) {
      const bool network_turn = (turn == 0) == network_first_;
      auto in = network_turn ? from_network() : local_->wait(Clock::time_point::min());
      if (in) {
        network_first_ = !network_turn;
        pacer_.on_arrival(Clock::now());
        return in;
      }
    }
    if (woken_.exchange(false)) return std::nullopt;
    const auto now = Clock::now();
    pacer_.on_empty(now);
    if (now >= deadline) return std::nullopt;
    if (pacer_.spin(now) && !transport::cpu_contended()) {  // cpu_share.hpp: else asleep on the doorbell
      transport::yield_cpu();
      continue;
    }
    // Asleep on the doorbell: a local writer rings it, and so does the watcher when
    // the network has work.
    {
      std::lock_guard lock(watch_mu_);
      armed_ = true;
    }
    watch_cv_.notify_one();
    auto in = local_->wait(deadline);
    {
      std::lock_guard lock(watch_mu_);
      armed_ = false;
    }
    if (in) {
      network_first_ = true;
      pacer_.on_arrival(Clock::now());
      return in;
    }
  }
}

void HostLink::wake() {
  woken_.store(true);
  local_->wake();
}

void HostLink::close() {
  if (closed_.exchange(true)) return;
  {
    std::lock_guard lock(watch_mu_);
    stopping_ = true;
  }
  watch_cv_.notify_all();
  network_->wake();  // its readiness fd turns readable: the watcher's poll returns
  if (watcher_.joinable()) watcher_.join();
  local_->wake();  // a thread in wait() sees closed_
  local_->close();
  network_->close();
}

}  // namespace hmcast::transport
