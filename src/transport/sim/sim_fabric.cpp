#include "transport/sim/sim_fabric.hpp"

#include <algorithm>
#include <cmath>
#include <memory>

namespace hmcast::sim {

Fabric::Fabric(std::uint32_t nodes, NetworkModel model, std::uint64_t seed)
    : model_(model), rng_(seed), crashed_(nodes, false), tx_free_(nodes, 0), rx_free_(nodes, 0),
      fifo_(nodes) {}

TimeNs Fabric::serialize_ns(std::size_t bytes) const {
  return static_cast<TimeNs>(std::ceil(static_cast<double>(bytes) * 8.0 / model_.link_gbps));
}

// A NIC arbitrates between its queue pairs packet by packet, so a small control
// packet on one QP waits for at most the packet on the wire, not for a burst
// queued on another QP. Control packets therefore slip past the data backlog
// (their bandwidth is negligible); data packets queue in order.
TimeNs Fabric::depart(std::uint32_t from, std::size_t bytes) {
  stats_.bytes_on_wire += bytes;
  if (bytes <= model_.control_bytes) return std::min(std::max(now_, tx_free_[from]), now_ + serialize_ns(model_.control_bytes * 16)) + serialize_ns(bytes);
  const TimeNs start = std::max(now_, tx_free_[from]);
  tx_free_[from] = start + serialize_ns(bytes);
  return tx_free_[from];
}

TimeNs Fabric::arrive(std::uint32_t to, TimeNs at_nic, std::size_t bytes) {
  if (bytes <= model_.control_bytes)
    return std::min(std::max(at_nic, rx_free_[to]), at_nic + serialize_ns(model_.control_bytes * 16)) + serialize_ns(bytes);
  const TimeNs start = std::max(at_nic, rx_free_[to]);
  rx_free_[to] = start + serialize_ns(bytes);
  return rx_free_[to];
}

void Fabric::push(TimeNs at, Kind kind, std::uint32_t node, std::uint32_t from,
                  std::shared_ptr<const std::vector<std::byte>> bytes) {
  events_.push(Event{at, serial_++, kind, node, from, std::move(bytes)});
}

void Fabric::multicast(std::uint32_t from, std::vector<std::byte> bytes) {
  if (crashed_[from]) return;
  ++stats_.datagrams_sent;
  const TimeNs sent = depart(from, bytes.size());
  auto shared = std::make_shared<const std::vector<std::byte>>(std::move(bytes));
  for (std::uint32_t to = 0; to < crashed_.size(); ++to) {
    if (to == from) continue;  // the switch does not loop our own multicast back
    if (rng_.chance(model_.loss)) {
      ++stats_.datagram_copies_lost;
      continue;
    }
    const int copies = rng_.chance(model_.duplicate) ? 2 : 1;
    for (int c = 0; c < copies; ++c) {
      TimeNs at = sent + model_.latency_ns + static_cast<TimeNs>(rng_.below(static_cast<std::uint64_t>(model_.jitter_ns) + 1));
      if (rng_.chance(model_.reorder))
        at += static_cast<TimeNs>(rng_.below(static_cast<std::uint64_t>(model_.reorder_delay_ns) + 1));
      push(arrive(to, at, shared->size()), Kind::datagram, to, from, shared);
    }
  }
}

void Fabric::unicast(std::uint32_t from, std::uint32_t to, std::vector<std::byte> bytes) {
  if (crashed_[from]) return;
  ++stats_.p2p_sent;
  const TimeNs sent = depart(from, bytes.size());
  TimeNs at = sent + model_.latency_ns + static_cast<TimeNs>(rng_.below(static_cast<std::uint64_t>(model_.jitter_ns) + 1));
  at = arrive(to, at, bytes.size());
  auto& last = fifo_[from];
  if (last.empty()) last.assign(crashed_.size(), 0);
  at = std::max(at, last[to]);  // reliable links deliver in order
  last[to] = at;
  push(at, Kind::p2p, to, from, std::make_shared<const std::vector<std::byte>>(std::move(bytes)));
}

void Fabric::wake(std::uint32_t node, TimeNs at) { push(std::max(at, now_), Kind::timer, node, node, nullptr); }

void Fabric::crash(std::uint32_t node) { crashed_[node] = true; }

void Fabric::run(Host& host, TimeNs until) {
  stopped_ = false;
  while (!stopped_ && !events_.empty() && events_.top().at <= until) {
    Event e = events_.top();
    events_.pop();
    now_ = e.at;
    if (crashed_[e.node]) continue;
    ++stats_.events;
    std::uint64_t content = e.bytes ? e.bytes->size() : 0;
    if (e.bytes) {
      for (std::size_t i = 0; i < e.bytes->size(); i += 8) {
        std::uint64_t w = 0;
        for (std::size_t j = i; j < std::min(i + 8, e.bytes->size()); ++j)
          w = (w << 8) | std::to_integer<std::uint64_t>((*e.bytes)[j]);
        content = mix_hash(content, w);
      }
    }
    trace_ = mix_hash(mix_hash(mix_hash(trace_, static_cast<std::uint64_t>(e.at)),
                               (std::uint64_t{e.node} << 32) | e.from),
                      mix_hash(static_cast<std::uint64_t>(e.kind), content));
    switch (e.kind) {
      case Kind::datagram: host.on_datagram(e.node, *e.bytes, now_); break;
      case Kind::p2p: host.on_p2p(e.node, e.from, *e.bytes, now_); break;
      case Kind::timer: host.on_timer(e.node, now_); break;
    }
  }
}

}  // namespace hmcast::sim
