#include "small/engine.hpp"

#include <algorithm>
#include <bit>

#include "ack_tree/tree.hpp"
#include "small/fragmenter.hpp"

namespace hmcast::small {

Engine::Engine(GroupId group, MemberId self, View initial, ProtocolConfig config, TimeNs now)
    : group_(group), self_(self), view_(std::move(initial)), cfg_(config), view_start_(now),
      window_(std::clamp<std::uint32_t>(cfg_.initial_window_messages, 1, std::max(cfg_.window_messages, 1U))),
      pipeline_(group, self, view_, cfg_), pipeline_stall_ns_(cfg_.large_stall_ns),
      probe_(ProbeConfig{cfg_.multicast_probe_resend_ns, cfg_.multicast_probe_deadline_ns}) {
  (void)fragment_payload(cfg_.mtu);  // validates the MTU up front
  if (!view_.contains(self_)) removed_ = true;
  if (!view_.members.empty() && manager() == self_) manager_.emplace(view_);
}

// ---------------------------------------------------------------------------
// Sending

bool Engine::window_has_room(std::size_t bytes) const {
  if (in_flight() >= window_) return false;
  // One message larger than the byte window may go alone, or it could never go.
  return own_bytes_in_flight_ == 0 || own_bytes_in_flight_ + bytes <= cfg_.window_bytes;
}

BroadcastResult Engine::broadcast(MessageBuffer message, TimeNs now, Outbox& out) {
  if (removed_) return {BroadcastError::not_member, 0};
  if (message->size() > cfg_.max_small_message) return {BroadcastError::too_large, 0};
  if (!window_has_room(message->size())) return {BroadcastError::window_full, 0};
  Stream& s = stream(self_);
  const Seq seq = next_seq_++;
  own_bytes_in_flight_ += message->size();
  for (auto& dgram : fragment(header(), self_, seq, s.known_stable, *message, cfg_.mtu))
    send_datagram(std::move(dgram), out);
  s.last_announced = s.known_stable;
  s.last_data_ns = now;
  accept_message(s, seq, std::move(message), now, out);
  flush_acks(now, out);
  return {BroadcastError::none, seq};
}

large::LargeResult Engine::broadcast_large(std::uint64_t size, TimeNs now, Outbox& out,
                                                 std::uint64_t block_size) {
  if (removed_) return {large::LargeError::not_member, 0};
  auto r = pipeline_.broadcast(size, out, block_size);
  pipeline_activity_ = now;
  arm_stall(now);
  return r;
}

void Engine::buffer_ready(MemberId sender, Seq seq, Outbox& out) {
  if (!removed_) pipeline_.buffer_ready(sender, seq, out);
}

void Engine::send_p2p(MemberId to, const wire::Body& body, Outbox& out) {
  send_p2p(to, header(), body, out);
}

void Engine::send_p2p(MemberId to, const wire::Header& h, const wire::Body& body, Outbox& out) {
  ++stats_.p2p_sent;
  out.emplace_back(action::SendP2P{to, wire::encode(h, body)});
}

void Engine::send_datagram(std::vector<std::byte> bytes, Outbox& out) {
  ++stats_.datagrams_sent;
  out.emplace_back(action::SendDatagram{std::move(bytes)});
}

// ---------------------------------------------------------------------------
// Input filtering: everything that is not for us, or not from a member of our
// current view, is counted and dropped before any state is touched.

void Engine::on_datagram(std::span<const std::byte> bytes, TimeNs now, Outbox& out) {
  if (removed_) return;
  auto res = wire::decode(bytes);
  if (!res.ok()) {
    ++stats_.decode_errors;
    return;
  }
  const auto& h = res.packet.header;
  if (h.src == self_) return;  // our own multicast looped back: not an error
  if (!wire::is_datagram_type(h.type)) {
    ++stats_.invalid_dropped;  // control traffic never travels by datagram
    return;
  }
  if (!admit(h, h.src)) return;
  handle(res.packet, h.src, now, out);
  flush_acks(now, out);
}

bool Engine::may_place_segment(MemberId from, const wire::Header& h, const wire::Block& b) const {
  return !removed_ && h.group == group_ && h.view == view_.id && h.src == from && view_.contains(from) &&
         pipeline_.may_place_segment(from, b);
}

void Engine::on_p2p(MemberId from, std::span<const std::byte> bytes, TimeNs now, Outbox& out) {
  if (removed_) return;
  auto res = wire::decode(bytes);
  if (!res.ok()) {
    ++stats_.decode_errors;
    return;
  }
  const auto& h = res.packet.header;
  if (h.src != from || wire::is_datagram_type(h.type)) {
    ++stats_.invalid_dropped;
    return;
  }
  if (h.group == group_ && h.view > view_.id) {
    if (h.type == wire::Type::new_view) {
      if (external_membership_ || from != manager()) {
        ++stats_.non_member_dropped;
        return;
      }
      const auto& nv = std::get<wire::NewView>(res.packet.body);
      install_view(View{h.view, nv.members}, now, out);
      flush_acks(now, out);
      return;
    }
    // Sent by a member that installed the next view before us: keep it until we do.
    // Only members' frames are kept, so strangers cannot fill the queue.
    if (!view_.contains(from)) {
      ++stats_.non_member_dropped;
      return;
    }
    if (future_.size() >= cfg_.future_packet_limit) {
      ++stats_.future_view_dropped;
      return;
    }
    future_.emplace_back(from, std::vector<std::byte>(bytes.begin(), bytes.end()));
    return;
  }
  if (!admit(h, from)) return;
  handle(res.packet, from, now, out);
  flush_acks(now, out);
}

bool Engine::admit(const wire::Header& h, MemberId from) {
  if (h.group != group_) {
    ++stats_.wrong_group_dropped;
    return false;
  }
  if (h.view < view_.id) {
    ++stats_.stale_view_dropped;
    return false;
  }
  if (h.view > view_.id) {
    ++stats_.future_view_dropped;  // datagrams of a later view are not kept: repairs cover them
    return false;
  }
  if (!view_.contains(from)) {
    ++stats_.non_member_dropped;
    return false;
  }
  return true;
}

void Engine::arm_stall(TimeNs now) {
  if (stall_armed_ || pipeline_.active_transfers() == 0) return;
  stall_armed_ = true;
  timers_.arm(now + pipeline_stall_ns_, ++timer_serial_, TimerKey{TimerKind::pipeline_stall, 0, 0});
}

void Engine::handle(const wire::Packet& p, MemberId from, TimeNs now, Outbox& out) {
  if (p.header.type >= wire::Type::announce && p.header.type <= wire::Type::large_ack) pipeline_activity_ = now;
  std::visit(
      [&](const auto& body) {
        using T = std::decay_t<decltype(body)>;
        if constexpr (std::is_same_v<T, wire::Data>) {
          if (body.sender != from) {
            ++stats_.invalid_dropped;  // only a sender multicasts its own messages
            return;
          }
          on_data(body, now, out);
        } else if constexpr (std::is_same_v<T, wire::Repair>) {
          on_repair(from, body, now, out);
        } else if constexpr (std::is_same_v<T, wire::Ack>) {
          on_ack(from, body, now, out);
        } else if constexpr (std::is_same_v<T, wire::Pull>) {
          on_pull(from, body, out);
        } else if constexpr (std::is_same_v<T, wire::Stable>) {
          on_stable(from, body, now, out);
        } else if constexpr (std::is_same_v<T, wire::Suspect>) {
          if (manager_) {
            if (auto next = manager_->on_suspect(from, body.suspect)) publish_view(*next, now, out);
          } else {
            ++stats_.invalid_dropped;  // only the manager takes suspicions
          }
        } else if constexpr (std::is_same_v<T, wire::AckQuery>) {
          Stream* s = stream_for(body.sender);
          if (s != nullptr && s->parent && *s->parent == from) {
            s->ack_due = true;
            acks_pending_.insert(s->sender);
          } else {
            ++stats_.invalid_dropped;
          }
        } else if constexpr (std::is_same_v<T, wire::Ping>) {
          // Nothing to do: that it arrived is the answer.
        } else if constexpr (std::is_same_v<T, wire::McastProbe>) {
          send_p2p(from, wire::McastConfirm{body.nonce}, out);  // its multicast reached us
        } else if constexpr (std::is_same_v<T, wire::McastConfirm>) {
          if (probe_enabled_) apply_probe(probe_.on_confirm(from, now), out);
        } else if constexpr (std::is_same_v<T, wire::Announce>) {
          pipeline_.on_announce(from, body, out);
        } else if constexpr (std::is_same_v<T, wire::Ready>) {
          pipeline_.on_ready(from, body, out);
        } else if constexpr (std::is_same_v<T, wire::Block>) {
          pipeline_.on_block(from, body, out);
        } else if constexpr (std::is_same_v<T, wire::LargeAck>) {
          pipeline_.on_ack(from, body, out);
        } else if constexpr (std::is_same_v<T, wire::NewView>) {
          ++stats_.stale_view_dropped;  // same view id as ours: nothing new
        }
      },
      p.body);
  arm_stall(now);
}

// ---------------------------------------------------------------------------
// Streams and tree positions

MemberId Engine::root_of(MemberId sender) const {
  // A departed sender's stream is finished by a proxy root: the view's first member.
  return view_.contains(sender) ? sender : view_.members.front();
}

Engine::Stream& Engine::stream(MemberId sender) {
  auto it = streams_.find(sender);
  if (it != streams_.end()) return it->second;
  Stream& s = streams_[sender];
  s.sender = sender;
  s.delivered = s.known_stable = floor_of(sender);  // a joiner starts where the flush left the stream
  place_in_tree(s, view_start_);
  return s;
}

Seq Engine::floor_of(MemberId sender) const {
  auto it = floors_.find(sender);
  return it == floors_.end() ? 0 : it->second;
}

void Engine::set_stream_floors(const std::map<MemberId, Seq>& floors) {
  for (const auto& [sender, floor] : floors) floors_[sender] = std::max(floors_[sender], floor);
}

void Engine::place_in_tree(Stream& s, TimeNs now) {
  const MemberId root = root_of(s.sender);
  const auto root_rank = *view_.rank_of(root);
  const auto my_rank = *view_.rank_of(self_);
  const ack_tree::Tree tree(view_.size(), root_rank, cfg_.radix);
  s.is_root = (root == self_);
  const auto parent_rank = tree.parent(my_rank);
  s.parent = parent_rank ? std::optional<MemberId>(view_.members[*parent_rank]) : std::nullopt;
  std::vector<ChildLink> next;
  for (auto c : tree.children(my_rank)) {
    ChildLink link;
    link.id = view_.members[c];
    link.subtree_size = tree.subtree_size(c);
    for (auto r : tree.subtree(c)) link.subtree.push_back(view_.members[r]);
    std::sort(link.subtree.begin(), link.subtree.end());
    // What a child told us stays true in a new view: holdings only grow. Its own
    // (`have`) always; its subtree's (`stable`) only if the new subtree is within the
    // old one: a subtree of the same size can hold other members, further behind.
    auto old = std::find_if(s.children.begin(), s.children.end(),
                            [&](const ChildLink& l) { return l.id == link.id; });
    if (old != s.children.end()) {
      link.have = old->have;
      if (std::includes(old->subtree.begin(), old->subtree.end(), link.subtree.begin(), link.subtree.end()))
        link.stable = old->stable;
    }
    // Up to the floor every member holds the messages or (a joiner) never needs them.
    if (const Seq floor = floor_of(s.sender); floor > link.have) {
      link.have = floor;
      link.mask = 0;  // its bits counted from the old `have`
    }
    link.stable = std::max(link.stable, floor_of(s.sender));
    link.timeout = ack_tree::AckTimeout(cfg_.initial_hop_rtt_ns, tree.subtree_height(c), cfg_.min_timeout_ns,
                                        cfg_.max_timeout_ns, cfg_.ack_interval_ns);
    if (old != s.children.end()) link.timeout = old->timeout;
    link.timer_gen = (old != s.children.end() ? old->timer_gen : 0) + 1;
    link.subtree_height = tree.subtree_height(c);
    next.push_back(link);
  }
  s.children = std::move(next);
  for (std::uint32_t i = 0; i < s.children.size(); ++i) rearm_child(s, i, now);
}

Seq Engine::subtree_stable(const Stream& s) const {
  Seq st = s.delivered;
  for (const auto& c : s.children) st = std::min(st, c.stable);
  return st;
}

Engine::Stream* Engine::stream_for(MemberId sender) {
  auto it = streams_.find(sender);
  if (it != streams_.end()) return &it->second;
  // New streams only for members: a forged sender id must not allocate state.
  if (!view_.contains(sender)) return nullptr;
  return &stream(sender);
}

std::size_t Engine::held_messages() const {
  std::size_t n = 0;
  for (const auto& [id, s] : streams_) n += s.held.size() + s.partial.size();
  return n;
}

// ---------------------------------------------------------------------------
// Receiving messages

void Engine::on_data(const wire::Data& d, TimeNs now, Outbox& out) {
  Stream& s = stream(d.sender);
  if (d.stable > s.known_stable) collect_garbage(s, d.stable);
  if (d.seq <= s.delivered || s.held.count(d.seq) != 0) {
    ++stats_.duplicates_dropped;
    return;
  }
  if (d.seq > s.delivered + cfg_.window_messages) {
    ++stats_.out_of_window_dropped;  // the sender's window makes this impossible unless misbehaving
    return;
  }
  if (d.msg_len > cfg_.max_small_message) {
    ++stats_.invalid_dropped;
    return;
  }
  if (d.frag_count == 1) {
    accept_message(s, d.seq, std::make_shared<const std::vector<std::byte>>(d.payload.begin(), d.payload.end()),
                   now, out);
    return;
  }
  auto it = s.partial.find(d.seq);
  if (it == s.partial.end()) it = s.partial.emplace(d.seq, Reassembly(d)).first;
  switch (it->second.add(d)) {
    case Reassembly::Result::complete: {
      MessageBuffer msg = it->second.take();
      s.partial.erase(it);
      accept_message(s, d.seq, std::move(msg), now, out);
      break;
    }
    case Reassembly::Result::duplicate: ++stats_.duplicates_dropped; break;
    case Reassembly::Result::mismatch: ++stats_.invalid_dropped; break;
    case Reassembly::Result::added: break;
  }
}

void Engine::on_repair(MemberId from, const wire::Repair& r, TimeNs now, Outbox& out) {
  Stream* s = stream_for(r.sender);
  // Nobody repairs our own messages to us: only we can have made them.
  if (s == nullptr || r.sender == self_ || r.payload.size() > cfg_.max_small_message) {
    ++stats_.invalid_dropped;
    return;
  }
  if (r.seq <= s->delivered || s->held.count(r.seq) != 0) {
    ++stats_.duplicates_dropped;
  } else if (r.seq > s->delivered + cfg_.window_messages) {
    ++stats_.out_of_window_dropped;
  } else {
    accept_message(*s, r.seq,
                   std::make_shared<const std::vector<std::byte>>(r.payload.begin(), r.payload.end()), now, out);
  }
  // The parent is waiting on us: answer even if nothing advanced, so it stops repairing.
  if (s->parent && *s->parent == from) {
    s->ack_due = true;
    acks_pending_.insert(s->sender);
  }
}

void Engine::accept_message(Stream& s, Seq seq, MessageBuffer msg, TimeNs now, Outbox& out) {
  s.held.emplace(seq, Held{std::move(msg), now});
  s.partial.erase(seq);
  for (auto it = s.held.find(s.delivered + 1); it != s.held.end(); it = s.held.find(s.delivered + 1)) {
    ++s.delivered;
    ++stats_.delivered;
    out.emplace_back(action::Deliver{s.sender, s.delivered, it->second.msg});
  }
  advance(s, now, out);
}

// ---------------------------------------------------------------------------
// Cumulative ACKs

void Engine::advance(Stream& s, TimeNs now, Outbox& out) {
  const Seq st = subtree_stable(s);
  if (s.is_root) {
    if (s.sender == self_) {
      while (own_completed_ < st) {
        ++own_completed_;
        auto it = s.held.find(own_completed_);
        if (it != s.held.end()) own_bytes_in_flight_ -= it->second.msg->size();
        ++stats_.completed;
        window_ = std::min(window_ + 1, cfg_.window_messages);
        out.emplace_back(action::Completed{own_completed_});
      }
    }
    if (st > s.known_stable) {
      collect_garbage(s, st);
      arm_announce(s, now);
    }
  } else if (st > s.reported_stable || s.delivered > s.reported_have) {
    // Our own holdings go up at once (the parent times its repairs on them, one hop),
    // the subtree's when it catches up; coalescing merges both into few packets.
    s.ack_due = true;
    acks_pending_.insert(s.sender);
  } else if (s.gap_reported_at != s.delivered + 1 && s.held.upper_bound(s.delivered + 1) != s.held.end()) {
    // We hold messages past a hole: say so once, so the parent can repair just the hole.
    s.gap_reported_at = s.delivered + 1;
    s.ack_due = true;
    acks_pending_.insert(s.sender);
  }
  for (std::uint32_t i = 0; i < s.children.size(); ++i) rearm_child(s, i, now);
}

void Engine::collect_garbage(Stream& s, Seq stable) {
  const Seq upto = std::min(stable, s.delivered);
  if (upto <= s.known_stable) return;
  s.known_stable = upto;
  s.held.erase(s.held.begin(), s.held.upper_bound(upto));
}

void Engine::on_ack(MemberId from, const wire::Ack& a, TimeNs now, Outbox& out) {
  for (const auto& e : a.entries) {
    Stream* s = stream_for(e.sender);
    if (s == nullptr) {
      ++stats_.invalid_dropped;
      continue;
    }
    auto child = std::find_if(s->children.begin(), s->children.end(),
                              [&](const ChildLink& l) { return l.id == from; });
    if (child == s->children.end()) {
      ++stats_.invalid_dropped;  // not our child in this stream's tree
      continue;
    }
    const auto idx = static_cast<std::uint32_t>(child - s->children.begin());
    ChildLink& c = *child;
    if (e.stable > c.stable) {
      c.stable = e.stable;
      c.stable_progress = now;
      c.deadline = kNever;
      ++c.timer_gen;
    }
    c.last_heard = now;
    if (e.have > c.have) {
      // Karn: only waits that no repair disturbed say how long the child takes.
      auto held = s->held.find(e.have);
      if (c.repaired_upto <= c.have && held != s->held.end() && held->second.arrival >= view_start_)
        c.timeout.sample(now - held->second.arrival);
      c.have = e.have;
      c.mask = e.mask;
      c.last_progress = now;
      c.deadline = kNever;  // the wait restarts from the next message it lacks
      ++c.timer_gen;
    } else if (e.have == c.have && (e.mask | c.mask) != c.mask) {
      c.mask |= e.mask;  // holdings only grow
      c.deadline = kNever;
      ++c.timer_gen;
    }
    c.attempts = 0;
    rearm_child(*s, idx, now);
    if (c.have > s->delivered) maybe_pull(*s, now, out);
    advance(*s, now, out);
  }
}

void Engine::flush_acks(TimeNs now, Outbox& out) {
  if (acks_pending_.empty()) return;
  std::map<MemberId, std::vector<wire::AckEntry>> by_parent;
  for (auto it = acks_pending_.begin(); it != acks_pending_.end();) {
    Stream& s = streams_.at(*it);
    if (!s.ack_due || !s.parent) {
      s.ack_due = false;
      it = acks_pending_.erase(it);
      continue;
    }
    const MemberId p = *s.parent;
    auto last = last_ack_to_.find(p);
    if (last != last_ack_to_.end() && now < last->second + cfg_.ack_interval_ns) {
      // Merge with whatever else becomes due for this parent in the interval.
      if (ack_flush_armed_.insert(p).second)
        timers_.arm(last->second + cfg_.ack_interval_ns, ack_flush_gen_[p] = ++timer_serial_,
                    TimerKey{TimerKind::ack_flush, p, 0});
      ++it;
      continue;
    }
    const Seq st = subtree_stable(s);
    by_parent[p].push_back(wire::AckEntry{s.sender, st, s.delivered, held_mask(s)});
    s.reported_stable = st;
    s.reported_have = s.delivered;
    s.ack_due = false;
    it = acks_pending_.erase(it);
  }
  for (auto& [parent, entries] : by_parent) {
    ++stats_.acks_sent;
    last_ack_to_[parent] = now;
    send_p2p(parent, wire::Ack{std::move(entries)}, out);
  }
}

// ---------------------------------------------------------------------------
// Repairs

bool Engine::child_holds(const ChildLink& c, Seq seq) {
  if (seq <= c.have) return true;
  const Seq bit = seq - c.have - 1;
  return bit < 64 && ((c.mask >> bit) & 1U) != 0;
}

std::uint64_t Engine::held_mask(const Stream& s) {
  std::uint64_t mask = 0;
  for (auto it = s.held.upper_bound(s.delivered + 1); it != s.held.end() && it->first <= s.delivered + 64; ++it)
    mask |= std::uint64_t{1} << (it->first - s.delivered - 1);
  return mask;
}

Seq Engine::first_missing(const Stream& s, const ChildLink& c) const {
  for (Seq q = std::max(c.have, s.known_stable) + 1; q <= s.delivered; ++q)
    if (!child_holds(c, q)) return q;
  return 0;
}

void Engine::rearm_child(Stream& s, std::uint32_t idx, TimeNs now) {
  ChildLink& c = s.children[idx];
  if (c.deadline != kNever || c.suspected) return;  // a wait is already running
  const Seq next = first_missing(s, c);
  TimeNs since = 0;
  TimeNs wait = 0;
  if (next != 0) {
    // Wait from when the child could first have ACKed it: after we got it, and after
    // the child's last progress (a child that keeps ACKing a backlog is not stuck).
    auto held = s.held.find(next);
    since = std::max({held != s.held.end() ? held->second.arrival : now, view_start_, c.last_progress});
    wait = c.timeout.timeout(c.attempts);
  } else if (c.stable < std::min(c.have, s.delivered)) {
    // It holds everything, its subtree does not yet: that is the child's job, but
    // if the child itself died we would wait forever. Probe it after a wait scaled
    // by its subtree's height (its own repairs below take that long).
    since = std::max({c.stable_progress, c.last_heard, view_start_});
    wait = c.timeout.timeout(c.attempts) * (c.subtree_height + 2);
  } else {
    c.attempts = 0;  // nothing to wait for
    return;
  }
  c.deadline = since + wait;
  c.timer_gen = ++timer_serial_;
  timers_.arm(c.deadline, c.timer_gen, TimerKey{TimerKind::child_repair, s.sender, idx});
}

void Engine::fire_child(Stream& s, std::uint32_t idx, TimeNs now, Outbox& out) {
  ChildLink& c = s.children[idx];
  c.deadline = kNever;
  const Seq from = first_missing(s, c);
  const bool lagging = from == 0 && c.stable < std::min(c.have, s.delivered);
  if (c.suspected || (from == 0 && !lagging)) return;
  if (c.attempts >= cfg_.repair_budget) {
    c.suspected = true;
    suspect(c.id, now, out);
    return;
  }
  ++c.attempts;
  if (lagging) {
    ++stats_.ack_queries_sent;
    send_p2p(c.id, wire::AckQuery{s.sender}, out);
    c.deadline = now + c.timeout.timeout(c.attempts);
    c.timer_gen = ++timer_serial_;
    timers_.arm(c.deadline, c.timer_gen, TimerKey{TimerKind::child_repair, s.sender, idx});
    return;
  }
  bool remulticasted = false;
  if (s.is_root && s.sender == self_ && view_.size() > 2 &&
      (s.last_remulticast < 0 || now - s.last_remulticast >= c.timeout.timeout(0))) {
    // Children that lack it themselves probably lost it for their whole subtree
    // (a dropped multicast is dropped for everything behind the drop); if that is
    // most of the group, one multicast is cheaper than a repair per child.
    std::uint64_t lacking = 0;
    for (const auto& other : s.children)
      if (!child_holds(other, from)) lacking += other.subtree_size;
    if (lacking * 2 > view_.size() - 1) {
      remulticast(s, from, out);
      s.last_remulticast = now;
      remulticasted = true;
    }
  }
  if (!remulticasted) {
    // Repair the first hole, and every other hole the child told us about that is
    // overdue too. Beyond what its last ACK covered we know nothing: its answer
    // to this repair will tell.
    const Seq known_top = c.mask == 0 ? c.have : c.have + 64 - static_cast<Seq>(std::countl_zero(c.mask));
    const TimeNs overdue = now - c.timeout.timeout(0);
    std::uint32_t sent = 0;
    for (auto it = s.held.lower_bound(from); it != s.held.end() && sent < cfg_.repair_batch; ++it) {
      const Seq q = it->first;
      if (q > s.delivered || (q != from && (q > known_top || it->second.arrival > overdue))) break;
      if (child_holds(c, q)) continue;
      ++stats_.repairs_sent;
      ++sent;
      c.repaired_upto = std::max(c.repaired_upto, q);
      send_p2p(c.id, wire::Repair{s.sender, q, *it->second.msg}, out);
    }
  }
  c.deadline = now + c.timeout.timeout(c.attempts);
  c.timer_gen = ++timer_serial_;
  timers_.arm(c.deadline, c.timer_gen, TimerKey{TimerKind::child_repair, s.sender, idx});
}

void Engine::send_repairs(Stream& s, MemberId to, Seq from, Seq to_seq, Outbox& out) {
  for (auto it = s.held.lower_bound(from); it != s.held.end() && it->first <= to_seq; ++it) {
    ++stats_.repairs_sent;
    send_p2p(to, wire::Repair{s.sender, it->first, *it->second.msg}, out);
  }
}

void Engine::remulticast(Stream& s, Seq seq, Outbox& out) {
  auto it = s.held.find(seq);
  if (it == s.held.end()) return;
  ++stats_.remulticasts;
  for (auto& dgram : fragment(header(), s.sender, seq, s.known_stable, *it->second.msg, cfg_.mtu))
    send_datagram(std::move(dgram), out);
}

void Engine::maybe_pull(Stream& s, TimeNs now, Outbox& out) {
  if (s.pull_deadline != kNever && now < s.pull_deadline) return;
  const ChildLink* best = nullptr;
  for (const auto& c : s.children)
    if (!c.suspected && (best == nullptr || c.have > best->have)) best = &c;
  if (best == nullptr || best->have <= s.delivered) {
    s.pull_deadline = kNever;
    return;
  }
  if (s.pull_deadline == kNever) {
    // The datagram is probably just queued at our NIC: give it one timeout first.
    s.pull_deadline = now + best->timeout.timeout(0);
    s.pull_gen = ++timer_serial_;
    timers_.arm(s.pull_deadline, s.pull_gen, TimerKey{TimerKind::pull, s.sender, 0});
    return;
  }
  // A child ACKed messages we never got (Mansoor & Meehan 3.3.4): fetch them from it.
  // Only a proven hole: we hold something after it, so it was lost, not merely still
  // queued at our NIC (pulling what is queued would double the load on a receiver
  // that is already behind). A tail we lack is our own parent's to repair.
  auto next_held = s.held.upper_bound(s.delivered);
  if (next_held == s.held.end()) {
    s.pull_deadline = kNever;
    return;
  }
  const Seq from = s.delivered + 1;
  const Seq to = std::min<Seq>({best->have, next_held->first - 1, s.delivered + cfg_.window_messages});
  ++stats_.pulls_sent;
  send_p2p(best->id, wire::Pull{s.sender, from, to}, out);
  s.pull_deadline = now + best->timeout.timeout(0);
  s.pull_gen = ++timer_serial_;
  timers_.arm(s.pull_deadline, s.pull_gen, TimerKey{TimerKind::pull, s.sender, 0});
}

void Engine::on_pull(MemberId from, const wire::Pull& p, Outbox& out) {
  Stream* s = stream_for(p.sender);
  if (s == nullptr) {
    ++stats_.invalid_dropped;
    return;
  }
  const Seq to = std::min<Seq>(p.to, p.from + cfg_.window_messages - 1);
  send_repairs(*s, from, p.from, to, out);
}

// ---------------------------------------------------------------------------
// Stability announcements (garbage collection at receivers)

void Engine::arm_announce(Stream& s, TimeNs now) {
  if (s.announce_armed) return;
  s.announce_armed = true;
  timers_.arm(now + cfg_.stable_announce_ns, ++timer_serial_, TimerKey{TimerKind::announce, s.sender, 0});
}

void Engine::on_stable(MemberId from, const wire::Stable& st, TimeNs now, Outbox& out) {
  (void)now;
  (void)out;
  Stream* s = stream_for(st.sender);
  if (s == nullptr || from != root_of(st.sender)) {
    ++stats_.invalid_dropped;  // only the stream's root knows what is stable
    return;
  }
  collect_garbage(*s, st.stable);
}

// ---------------------------------------------------------------------------
// Timers

void Engine::start_multicast_probe(TimeNs now, Outbox& out) {
  if (probe_enabled_ || removed_) return;
  probe_enabled_ = true;
  apply_probe(probe_.on_view(view_, self_, now), out);
}

void Engine::apply_probe(const MulticastProbe::Step& step, Outbox& out) {
  if (step.send_probe) send_datagram(wire::encode(header(), wire::McastProbe{probe_.nonce()}), out);
  if (step.silent) out.emplace_back(action::MulticastUnusable{view_.id, *step.silent});
}

TimeNs Engine::next_wakeup() const {
  return probe_enabled_ ? std::min(timers_.next(), probe_.next_wakeup()) : timers_.next();
}

void Engine::on_timer(TimeNs now, Outbox& out) {
  if (removed_) return;
  if (probe_enabled_ && now >= probe_.next_wakeup()) apply_probe(probe_.on_timer(now), out);
  timers_.pop_due(now, [&](const TimerQueue<TimerKey>::Entry& e) {
    const TimerKey& k = e.key;
    if (k.kind == TimerKind::ack_flush) {
      if (ack_flush_gen_[k.sender] == e.generation) ack_flush_armed_.erase(k.sender);
      return;  // the flush below sends it
    }
    if (k.kind == TimerKind::pipeline_stall) {
      stall_armed_ = false;
      if (pipeline_.active_transfers() == 0) return;
      if (now - pipeline_activity_ >= pipeline_stall_ns_)
        for (MemberId peer : pipeline_.waiting_on()) send_p2p(peer, wire::Ping{}, out);
      pipeline_activity_ = std::max(pipeline_activity_, now - pipeline_stall_ns_ / 2);
      arm_stall(now);
      return;
    }
    auto it = streams_.find(k.sender);
    if (it == streams_.end()) return;
    Stream& s = it->second;
    switch (k.kind) {
      case TimerKind::child_repair:
        if (k.child < s.children.size() && s.children[k.child].timer_gen == e.generation)
          fire_child(s, k.child, now, out);
        break;
      case TimerKind::pull:
        if (s.pull_gen == e.generation) maybe_pull(s, now, out);
        break;
      case TimerKind::announce:
        s.announce_armed = false;
        if (s.sender == self_ && now < s.last_data_ns + cfg_.stable_announce_ns) {
          // Still sending: the next Data carries the stable prefix to everyone, so an
          // announcement now would only add a datagram per member; wait for a pause.
          if (s.known_stable > s.last_announced) arm_announce(s, s.last_data_ns);
        } else if (s.is_root && s.known_stable > s.last_announced) {
          const Seq highest = s.sender == self_ ? next_seq_ - 1 : s.delivered;
          send_datagram(wire::encode(header(), wire::Stable{s.sender, s.known_stable, highest}), out);
          s.last_announced = s.known_stable;
        }
        break;
      case TimerKind::ack_flush:
      case TimerKind::pipeline_stall: break;
    }
  });
  flush_acks(now, out);
}

// ---------------------------------------------------------------------------
// Membership

void Engine::on_link_failed(MemberId peer, TimeNs now, Outbox& out) {
  if (removed_) return;
  suspect(peer, now, out);
  flush_acks(now, out);
}

void Engine::use_external_membership() {
  external_membership_ = true;
  manager_.reset();
}

void Engine::apply_view(View next, TimeNs now, Outbox& out) {
  if (next.id <= view_.id) return;
  install_view(std::move(next), now, out);
  flush_acks(now, out);
}

void Engine::suspect(MemberId member, TimeNs now, Outbox& out) {
  if (member == self_ || !view_.contains(member) || !suspected_.insert(member).second) return;
  ++stats_.suspicions;
  if (external_membership_) {
    out.emplace_back(action::ReportSuspect{member});
  } else if (manager_) {
    if (auto next = manager_->on_suspect(self_, member)) publish_view(*next, now, out);
  } else {
    send_p2p(manager(), wire::Suspect{member}, out);
  }
}

void Engine::publish_view(const View& next, TimeNs now, Outbox& out) {
  wire::Header h = header();
  h.view = next.id;
  for (MemberId m : view_.members)
    if (m != self_) send_p2p(m, h, wire::NewView{next.members}, out);
  install_view(next, now, out);
}

void Engine::install_view(View next, TimeNs now, Outbox& out) {
  if (next.id <= view_.id) return;
  std::vector<MemberId> left;
  std::set_difference(view_.members.begin(), view_.members.end(), next.members.begin(), next.members.end(),
                      std::back_inserter(left));
  view_ = std::move(next);
  view_start_ = now;
  suspected_.clear();
  last_ack_to_.clear();
  ++stats_.views_installed;
  pipeline_.on_view(view_, out);
  if (!view_.contains(self_)) {
    removed_ = true;
    out.emplace_back(action::Removed{view_.id});
    return;
  }
  if (manager() == self_ && !external_membership_) {
    if (manager_) manager_->reset(view_);
    else manager_.emplace(view_);
  } else {
    manager_.reset();
  }
  out.emplace_back(action::ViewInstalled{view_, left});
  if (probe_enabled_) apply_probe(probe_.on_view(view_, self_, now), out);
  for (auto& [sender, s] : streams_) {
    place_in_tree(s, now);
    s.reported_stable = 0;
    s.reported_have = 0;
    s.pull_deadline = kNever;
    // Tell the new parent where we stand at once: it may be waiting on us already.
    if (s.parent && s.delivered > 0) {
      s.ack_due = true;
      acks_pending_.insert(sender);
    }
  }
  for (auto& [sender, s] : streams_) advance(s, now, out);  // in-flight messages complete against survivors
  auto pending = std::move(future_);
  future_.clear();
  for (auto& [from, bytes] : pending) on_p2p(from, bytes, now, out);
}

}  // namespace hmcast::small
