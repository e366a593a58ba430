#include "sim/fabric.hpp"

#include <algorithm>
#include <cmath>
#include <memory>

namespace hmcast::sim {

Fabric::Fabric(std::uint32_t nodes, NetworkModel model, std::uint64_t seed)
    : model_(model), rng_(seed), crashed_(nodes, false), crashed_at_(nodes, 0), multicast_blocked_(nodes, false), tx_free_(nodes, 0), post_free_(nodes, 0), rx_busy_(nodes),
      fifo_(nodes),
      bulk_fifo_(nodes),
      mcast_fifo_(nodes),
      node_speed_(nodes, 1.0) {}

TimeNs Fabric::serialize_ns(std::uint64_t bytes, double speed) const {
  return static_cast<TimeNs>(std::ceil(static_cast<double>(bytes) * 8.0 / (model_.link_gbps * speed)));
}

void Fabric::slow_link(std::uint32_t a, std::uint32_t b, double factor) {
  link_speed_[{std::min(a, b), std::max(a, b)}] = factor;
}

double Fabric::link_speed(std::uint32_t from, std::uint32_t to) const {
  auto it = link_speed_.find({std::min(from, to), std::max(from, to)});
  return it == link_speed_.end() ? 1.0 : it->second;
}

// The NIC model. A sender's NIC sends one packet at a time at its speed; a
// receiver's NIC takes one at a time. Transfers are cut-through: the receiver
// takes in the bytes while the sender puts them out, so a transfer ends at the
// later of (sender done + latency) and (receiver free + its own serialization).
//
// A NIC arbitrates between its queue pairs packet by packet, so a small control
// packet on one QP waits for at most the packet on the wire, not for a burst
// queued on another QP. Control packets therefore slip past the data backlog
// (their bandwidth is negligible); data packets queue in order.
Fabric::Slot Fabric::transmit(std::uint32_t from, std::uint64_t bytes, double speed, TimeNs overhead) {
  stats_.bytes_on_wire += bytes;
  const TimeNs ser = serialize_ns(bytes, speed * node_speed_[from]);
  if (bytes <= model_.control_bytes) {
    const TimeNs start = std::min(std::max(now_, tx_free_[from]), now_ + serialize_ns(model_.control_bytes * 16));
    return Slot{start, start + ser};
  }
  // Posting a transfer costs `overhead` of the node's own time, one post after the
  // other: a burst of segments posted at once pays it once per segment, while posts
  // made as the NIC drains earlier ones hide behind its work.
  post_free_[from] = std::max(now_, post_free_[from]) + overhead;
  const TimeNs start = std::max(post_free_[from], tx_free_[from]);
  tx_free_[from] = start + ser;
  return Slot{start, start + ser};
}

TimeNs Fabric::receive(std::uint32_t to, Slot tx, std::uint64_t bytes, double speed, TimeNs extra_delay) {
  const TimeNs first_bit = tx.start + model_.latency_ns + extra_delay;
  const TimeNs ser = serialize_ns(bytes, speed * node_speed_[to]);
  if (bytes <= model_.control_bytes)
    return tx.end + model_.latency_ns + extra_delay + ser;  // slips between data packets
  // The receiver is busy for as long as the slower side needs. Transfers are booked
  // when posted, which is not the order they reach the receiver (a sender may post
  // a whole queue at once), so each takes the earliest gap in the receiver's
  // bookings that fits it, not the end of the last booking.
  const TimeNs length = std::max(ser, tx.end - tx.start);
  auto& busy = rx_busy_[to];
  while (!busy.empty() && busy.begin()->second <= now_) busy.erase(busy.begin());
  TimeNs start = first_bit;
  auto it = busy.upper_bound(start);
  if (it != busy.begin() && std::prev(it)->second > start) start = std::prev(it)->second;
  for (it = busy.lower_bound(start); it != busy.end() && it->first < start + length; ++it)
    start = std::max(start, it->second);
  // Bookings that touch are merged, so a backlog is one interval and the search
  // above skips it in one step (it walked every queued packet before).
  TimeNs end = start + length;
  auto next = busy.lower_bound(start);
  if (next != busy.end() && next->first == end) {
    end = next->second;
    next = busy.erase(next);
  }
  if (next != busy.begin() && std::prev(next)->second == start) {
    std::prev(next)->second = end;
  } else {
    busy.emplace_hint(next, start, end);
  }
  return start + length;
}

void Fabric::push(TimeNs at, Kind kind, std::uint32_t node, std::uint32_t from,
                  std::shared_ptr<const std::vector<std::byte>> bytes, TimeNs tx_start) {
  events_.push(at, Event{kind, node, from, std::move(bytes), tx_start});
}

void Fabric::multicast(std::uint32_t from, std::vector<std::byte> bytes) {
  if (crashed_[from]) return;
  ++stats_.datagrams_sent;
  const Slot tx = transmit(from, bytes.size(), 1.0, 0);
  auto shared = std::make_shared<const std::vector<std::byte>>(std::move(bytes));
  for (std::uint32_t to = 0; to < crashed_.size(); ++to) {
    if (to == from || multicast_blocked_[to]) continue;  // the switch does not loop our own multicast back
    datagram_copies(from, to, tx, shared);
  }
}

void Fabric::direct_datagram(std::uint32_t from, std::uint32_t to, std::vector<std::byte> bytes) {
  if (crashed_[from]) return;
  ++stats_.direct_datagrams_sent;
  const Slot tx = transmit(from, bytes.size(), 1.0, 0);
  datagram_copies(from, to, tx, std::make_shared<const std::vector<std::byte>>(std::move(bytes)));
}

void Fabric::datagram_copies(std::uint32_t from, std::uint32_t to, const Slot& tx,
                             const std::shared_ptr<const std::vector<std::byte>>& shared) {
  if (rng_.chance(model_.loss)) {
    ++stats_.datagram_copies_lost;
    return;
  }
  const int copies = rng_.chance(model_.duplicate) ? 2 : 1;
  for (int c = 0; c < copies; ++c) {
    TimeNs delay = static_cast<TimeNs>(rng_.below(static_cast<std::uint64_t>(model_.jitter_ns) + 1));
    const bool held_back = rng_.chance(model_.reorder);
    if (held_back) delay += static_cast<TimeNs>(rng_.below(static_cast<std::uint64_t>(model_.reorder_delay_ns) + 1));
    TimeNs at = receive(to, tx, shared->size(), 1.0, delay);
    // One sender's datagrams take one path to a receiver and leave its queue in
    // order: only those the model holds back overtake or are overtaken (a short
    // datagram must not slip into a gap of the receiver's bookings ahead of a
    // longer one sent before it, which no switch does).
    if (!held_back) {
      auto& last = mcast_fifo_[from];
      if (last.empty()) last.assign(crashed_.size(), 0);
      at = std::max(at, last[to]);
      last[to] = at;
    }
    push(at, Kind::datagram, to, from, shared, tx.start);
  }
}

void Fabric::send_reliable(std::uint32_t from, std::uint32_t to, std::vector<std::byte> frame,
                           std::uint64_t wire_bytes, TimeNs overhead, Channel channel) {
  if (crashed_[from]) return;
  ++stats_.p2p_sent;
  if (crashed_[to]) {
    // A reliable transport retries, then reports the peer lost to the sender.
    push(now_ + model_.link_failure_ns, Kind::link_failed, from, to, nullptr);
    return;
  }
  const double speed = link_speed(from, to);
  const Slot tx = transmit(from, wire_bytes, speed, overhead);
  const TimeNs jitter = static_cast<TimeNs>(rng_.below(static_cast<std::uint64_t>(model_.jitter_ns) + 1));
  TimeNs at = receive(to, tx, wire_bytes, speed, jitter);
  // Reliable links deliver in order. Bulk blocks and control frames use separate
  // channels (queue pairs), so a credit or ACK never waits behind a block.
  auto& last = (channel == Channel::bulk ? bulk_fifo_ : fifo_)[from];
  if (last.empty()) last.assign(crashed_.size(), 0);
  at = std::max(at, last[to]);
  last[to] = at;
  push(at, Kind::p2p, to, from, std::make_shared<const std::vector<std::byte>>(std::move(frame)), tx.start);
}

void Fabric::unicast(std::uint32_t from, std::uint32_t to, std::vector<std::byte> bytes) {
  const auto size = bytes.size();
  // Frames too big to slip between data packets (whole-message repairs) go the bulk way.
  send_reliable(from, to, std::move(bytes), size, 0,
                size > model_.control_bytes * 16 ? Channel::bulk : Channel::control);
}

void Fabric::control(std::uint32_t from, std::uint32_t to, std::vector<std::byte> bytes) {
  const auto size = bytes.size();
  send_reliable(from, to, std::move(bytes), size, 0, Channel::bulk);
}

void Fabric::transfer(std::uint32_t from, std::uint32_t to, std::vector<std::byte> frame, std::uint64_t wire_bytes) {
  send_reliable(from, to, std::move(frame), std::max<std::uint64_t>(wire_bytes, model_.control_bytes + 1),
                model_.block_overhead_ns, Channel::bulk);
}

void Fabric::wake(std::uint32_t node, TimeNs at) { push(std::max(at, now_), Kind::timer, node, node, nullptr); }

void Fabric::crash(std::uint32_t node) {
  crashed_[node] = true;
  crashed_at_[node] = now_;
}

void Fabric::run(Host& host, TimeNs until) {
  stopped_ = false;
  while (!stopped_ && !events_.empty() && events_.next_at() <= until) {
    const auto [at, e] = events_.pop();
    now_ = at;
    if (crashed_[e.node]) continue;
    // A crashed node's NIC sends nothing more: what was still queued behind its
    // earlier sends is lost (what was on the wire arrives).
    if ((e.kind == Kind::datagram || e.kind == Kind::p2p) && e.from != e.node && crashed_[e.from] &&
        e.tx_start >= crashed_at_[e.from]) {
      ++stats_.lost_in_crashed_nic;
      continue;
    }
    ++stats_.events;
    // The trace names each event by its time, place, kind, size and first bytes (every
    // header): enough to tell two runs apart, without hashing every repaired payload.
    const std::uint64_t content =
        e.bytes ? hash_bytes(e.bytes->size(), std::span(*e.bytes).first(std::min<std::size_t>(e.bytes->size(), 64)))
                : 0;
    trace_ = mix_hash(mix_hash(mix_hash(trace_, static_cast<std::uint64_t>(at)),
                               (std::uint64_t{e.node} << 32) | e.from),
                      mix_hash(static_cast<std::uint64_t>(e.kind), content));
    switch (e.kind) {
      case Kind::datagram: host.on_datagram(e.node, e.bytes, now_); break;
      case Kind::p2p: host.on_p2p(e.node, e.from, *e.bytes, now_); break;
      case Kind::timer: host.on_timer(e.node, now_); break;
      case Kind::link_failed: host.on_link_failed(e.node, e.from, now_); break;
    }
  }
}

}  // namespace hmcast::sim
