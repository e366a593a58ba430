#include "small/small_path.hpp"

#include <algorithm>
#include <bit>

#include "ack_tree/host_tree.hpp"
#include "core/assert.hpp"
#include "small/fragment_bits.hpp"
#include "small/fragmenter.hpp"

namespace hmcast::small {

SmallPath::SmallPath(MemberId self, const View& view, const ProtocolConfig& config, Emitter& emit,
                     TimerQueue& timers, TimeNs now)
    : self_(self), view_(view), cfg_(config), emit_(emit), timers_(timers), view_start_(now),
      window_(std::clamp<std::uint32_t>(cfg_.initial_window_messages, 1, std::max(cfg_.window_messages, 1U))) {
  HMCAST_ASSERT(view_.contains(self_));
}

// ---------------------------------------------------------------------------
// Sending

bool SmallPath::window_has_room(std::size_t bytes) const {
  if (in_flight() >= window_) return false;
  // One message larger than the byte window may go alone, or it could never go.
  return own_bytes_in_flight_ == 0 || own_bytes_in_flight_ + bytes <= cfg_.window_bytes;
}

BroadcastResult SmallPath::broadcast(MessageBuffer message, TimeNs now, Outbox& out) {
  if (message->size() > cfg_.max_small_message) return {BroadcastError::too_large, 0};
  if (!window_has_room(message->size())) return {BroadcastError::window_full, 0};
  Stream& s = stream(self_);
  // While earlier messages are in flight the sender is streaming: a one-datagram
  // message may wait (batch_delay_ns at most) to share a datagram with the next.
  const bool may_hold = cfg_.batch_delay_ns > 0 && in_flight() > 0;
  const Seq seq = next_seq_++;
  own_bytes_in_flight_ += message->size();
  const std::uint32_t count = fragment_count(message->size(), cut());
  for (std::uint32_t i = 0; i < count; ++i)
    emit_.fragment(fragment_of(self_, seq, s.known_stable, *message, cut(), i), message, out, may_hold && count == 1);
  s.last_announced = s.known_stable;
  s.last_data_ns = now;
  arm_announce(s, now);  // announces `highest` once we pause, for a lost tail
  accept_message(s, seq, std::move(message), now, out);
  HMCAST_ASSERT(in_flight() <= cfg_.window_messages);
  return {BroadcastError::none, seq};
}

void SmallPath::note_loss(TimeNs now) {
  // Where datagrams are lost, so are ACKs sent as datagrams, and each lost one the
  // parent notices only by its timer: a wait of a few round trips, where a frame on
  // the link costs a little CPU more. A clean network (loopback, a quiet fabric)
  // takes the datagram; a lossy one the link, until it has been quiet a while.
  acks_by_link_until_ = std::max(acks_by_link_until_, now + kAcksByLinkAfterLoss);
}

void SmallPath::note_missed_ack(TimeNs now) {
  // On a busy host a late ACK is common (a parent's question comes a few round trips
  // after the message, and a member may wait longer than that for a CPU), and taken
  // for loss each would send every ACK of the next second over the link. A network
  // that loses ACK datagrams loses a share of them: counted per second against the
  // datagram ACKs sent in it. (One that loses any datagrams loses data too, which
  // note_gaps() sees at once.)
  if (missed_acks_.since == kNever || now - missed_acks_.since >= kAcksByLinkAfterLoss)
    missed_acks_ = MissedAcks{now, 0, stats_.acks_as_datagrams};
  ++missed_acks_.missed;
  const std::uint64_t sent = stats_.acks_as_datagrams - missed_acks_.acks_before;
  if (missed_acks_.missed >= kMissedAcksForLoss && missed_acks_.missed * kMissedAckShare >= sent) note_loss(now);
}

void SmallPath::want_ack(Stream& s, bool reliable) {
  s.ack_due = true;
  s.ack_reliable = s.ack_reliable || reliable;
  const auto at = std::lower_bound(acks_pending_.begin(), acks_pending_.end(), s.sender);
  if (at == acks_pending_.end() || *at != s.sender) acks_pending_.insert(at, s.sender);
}

void SmallPath::on_ack_query(MemberId from, const wire::AckQuery& q, TimeNs now, Outbox& out) {
  Stream* s = stream_for(q.sender);
  if (s == nullptr || !s->parent || *s->parent != from) {
    ++stats_.invalid_dropped;  // only our parent in that stream's tree asks
    return;
  }
  want_ack(*s, /*reliable=*/true);
  // A question about what we have not yet ACKed says we were late, not that
  // anything was lost; one about what our last ACK datagram reported may
  // (note_missed_ack). One about what a link ACK reported crossed it: that ACK arrives.
  // (The seq 0 question is about our subtree's stability: reported if our last ACK
  // said all we hold is stable.)
  const bool reported = q.seq != 0 ? s->reported_have >= q.seq
                                   : s->reported_have > 0 && s->reported_stable >= s->reported_have;
  if (reported && !s->reported_by_link) note_missed_ack(now);
  // The parent holds message q.seq and misses our ACK of it. What lies below the
  // highest datagram we saw of the sender is lost (its datagrams reach us in order,
  // give or take the nack delay) and is asked for now, asked before or not. What lies
  // beyond it may still be queued on its way to us behind other senders' traffic, as
  // long as datagrams keep arriving; once none has come for the nack delay, our queue
  // is empty and the tail was lost too. A late ACK thus costs an AckQuery, never a
  // message sent twice. The root's Stable announcements also name a lost tail
  // (on_stable), under traffic that never pauses.
  if (q.seq <= s->delivered || q.seq > s->delivered + cfg_.window_messages || s->held.count(q.seq) != 0) return;
  const bool again = now - last_datagram_ns_ >= cfg_.nack_delay_ns;
  wire::Nack n{s->sender, q.seq, 0, {}};
  bool any = false;
  if (auto p = s->partial.find(q.seq); p != s->partial.end()) {
    const Reassembly& r = p->second;
    const std::uint32_t limit = again || known_sent(*s, q.seq) ? r.frag_count() : r.highest();
    n.frag_count = r.frag_count();
    n.missing = r.missing(limit);
    any = any_bit(n.missing);
  } else {
    any = again || known_sent(*s, q.seq);  // the whole message
  }
  if (!any) return;
  note_loss(now);  // we lack the message, or part of it: its datagrams were lost
  s->highest_seen = std::max(s->highest_seen, q.seq);
  s->asked[q.seq] = n.missing;
  ++stats_.nacks_sent;
  emit_.frame(from, n, out);
}

// ---------------------------------------------------------------------------
// Views

void SmallPath::on_view(const View& view, TimeNs now, Outbox& out) {
  HMCAST_ASSERT(view.id > view_.id && view.contains(self_));
  view_ = view;
  view_start_ = now;
  last_ack_to_.clear();
  for (auto& [sender, s] : streams_) {
    place_in_tree(s, now);
    s.reported_stable = 0;
    s.reported_have = 0;
    s.reported_by_link = false;
    s.pull_deadline = kNever;
    // The new parent owes us nothing: ask it afresh for whatever we still lack.
    s.asked.clear();
    if (s.parent && std::max(s.highest_seen, s.sent_known) > s.delivered) {
      s.nack_deadline = now + cfg_.nack_delay_ns;
      s.nack_gen = timers_.arm(s.nack_deadline, TimerKey{TimerKind::nack, s.sender, 0});
    }
    // Tell the new parent where we stand at once: it may be waiting on us already.
    if (s.parent && s.delivered > 0) want_ack(s);
  }
  for (auto& [sender, s] : streams_) advance(s, now, out);  // in-flight messages complete against survivors
}

// ---------------------------------------------------------------------------
// Timers

void SmallPath::on_timer(const TimerQueue::Entry& e, TimeNs now, Outbox& out) {
  const TimerKey& k = e.key;
  if (k.kind == TimerKind::ack_flush) {
    if (ack_flush_gen_[k.member] == e.generation) ack_flush_armed_.erase(k.member);
    return;  // the group engine's flush_acks() after this sends it
  }
  auto it = streams_.find(k.member);
  if (it == streams_.end()) return;
  Stream& s = it->second;
  switch (k.kind) {
    case TimerKind::child_repair:
      if (k.index < s.children.size() && s.children[k.index].timer_gen == e.generation)
        on_child_timer(s, k.index, now, out);
      break;
    case TimerKind::pull:
      if (s.pull_gen == e.generation) maybe_pull(s, now, out);
      break;
    case TimerKind::nack:
      if (s.nack_gen == e.generation) send_nacks(s, now, out);
      break;
    case TimerKind::announce:
      s.announce_armed = false;
      if (s.sender == self_ && now < s.last_data_ns + cfg_.stable_announce_ns) {
        // Still sending: the next Data carries the stable prefix to everyone, so an
        // announcement now would only add a datagram per member; wait for a pause.
        if (s.known_stable > s.last_announced || s.known_stable < next_seq_ - 1) arm_announce(s, s.last_data_ns);
      } else if (s.is_root) {
        // Our own stream also announces while some of it is not yet stable: the
        // announcement names the highest message sent, so a member whose copy of the
        // last ones was lost learns of it (no later message will show the gap) and
        // nacks. Repeated at doubling waits, in case the announcement is lost too.
        const bool unstable = s.sender == self_ && s.known_stable < next_seq_ - 1;
        if (s.known_stable <= s.last_announced && !unstable) break;
        const Seq highest = s.sender == self_ ? next_seq_ - 1 : s.delivered;
        s.heartbeat_wait = s.known_stable > s.last_announced
                               ? cfg_.stable_announce_ns
                               : std::clamp<TimeNs>(2 * s.heartbeat_wait, cfg_.stable_announce_ns, cfg_.max_timeout_ns);
        emit_.datagram(wire::Stable{s.sender, s.known_stable, highest}, out);
        s.last_announced = s.known_stable;
        if (unstable) {
          s.announce_armed = true;
          timers_.arm(now + s.heartbeat_wait, TimerKey{TimerKind::announce, s.sender, 0});
        }
      }
      break;
    case TimerKind::ack_flush:
    case TimerKind::large_stall:
    case TimerKind::multicast_probe:
    case TimerKind::batch_flush:
      HMCAST_ASSERT(false && "the group engine routes only the small path's timers here");
  }
}

// ---------------------------------------------------------------------------
// Streams and tree positions

MemberId SmallPath::root_of(MemberId sender) const {
  // A departed sender's stream is finished by a proxy root: the view's first member.
  return view_.contains(sender) ? sender : view_.members.front();
}

SmallPath::Stream& SmallPath::stream(MemberId sender) {
  auto it = streams_.find(sender);
  if (it != streams_.end()) return it->second;
  Stream& s = streams_[sender];
  s.sender = sender;
  s.delivered = s.known_stable = floor_of(sender);  // a joiner starts where the flush left the stream
  place_in_tree(s, view_start_);
  return s;
}

Seq SmallPath::floor_of(MemberId sender) const {
  auto it = floors_.find(sender);
  return it == floors_.end() ? 0 : it->second;
}

void SmallPath::set_stream_floors(const std::map<MemberId, Seq>& floors) {
  for (const auto& [sender, floor] : floors) floors_[sender] = std::max(floors_[sender], floor);
}

void SmallPath::place_in_tree(Stream& s, TimeNs now) {
  const MemberId root = root_of(s.sender);
  const auto root_rank = *view_.rank_of(root);
  const auto my_rank = *view_.rank_of(self_);
  const ack_tree::HostTree tree(view_.size(), root_rank, cfg_.radix, tree_hosts());
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

Seq SmallPath::subtree_stable(const Stream& s) {
  Seq st = s.delivered;
  for (const auto& c : s.children) st = std::min(st, c.stable);
  return st;
}

SmallPath::Stream* SmallPath::stream_for(MemberId sender) {
  auto it = streams_.find(sender);
  if (it != streams_.end()) return &it->second;
  // New streams only for members: a forged sender id must not allocate state.
  if (!view_.contains(sender)) return nullptr;
  return &stream(sender);
}

// ---------------------------------------------------------------------------
// Receiving messages

void SmallPath::on_data(MemberId from, const wire::Data& d, TimeNs now, Outbox& out, const SharedBytes& arrived_in) {
  if (d.sender != from) {
    ++stats_.invalid_dropped;  // only a sender multicasts its own messages
    return;
  }
  on_fragment(stream(d.sender), d, now, out, arrived_in);
}

void SmallPath::on_fragment_repair(MemberId, const wire::Data& d, TimeNs now, Outbox& out) {
  Stream* s = stream_for(d.sender);
  // Nobody repairs our own messages to us: only we can have made them.
  if (s == nullptr || d.sender == self_) {
    ++stats_.invalid_dropped;
    return;
  }
  on_fragment(*s, d, now, out, {});
}

SmallPath::Refusal SmallPath::refusal(const Stream& s, const wire::Data& d) const {
  if (d.seq <= s.delivered || s.held.count(d.seq) != 0) return Refusal::duplicate;
  // The sender's window makes this impossible unless it misbehaves.
  if (d.seq > s.delivered + cfg_.window_messages) return Refusal::out_of_window;
  if (d.msg_len > cfg_.max_small_message) return Refusal::invalid;
  return Refusal::none;
}

bool SmallPath::fragment_wanted(Stream& s, const wire::Data& d, TimeNs now) {
  last_datagram_ns_ = now;
  if (d.stable > s.known_stable) collect_garbage(s, d.stable);
  switch (refusal(s, d)) {
    case Refusal::none: return true;
    case Refusal::duplicate: ++stats_.duplicates_dropped; return false;
    case Refusal::out_of_window: ++stats_.out_of_window_dropped; return false;
    case Refusal::invalid: ++stats_.invalid_dropped; return false;
  }
  HMCAST_ASSERT(false);
  return false;
}

std::map<Seq, Reassembly>::iterator SmallPath::partial_for(Stream& s, const wire::Data& d) {
  auto it = s.partial.find(d.seq);
  if (it != s.partial.end()) return it;
  ++held_count_;
  if (!buffers_) return s.partial.emplace(d.seq, Reassembly(d)).first;
  auto buffer = buffers_(d.msg_len);
  HMCAST_ASSERT(buffer != nullptr && buffer->size() == d.msg_len);
  return s.partial.emplace(d.seq, Reassembly(d, std::move(buffer))).first;
}

void SmallPath::on_reassembled(Stream& s, std::map<Seq, Reassembly>::iterator it, Reassembly::Result r,
                               const wire::Data& d, TimeNs now, Outbox& out) {
  switch (r) {
    case Reassembly::Result::complete: {
      MessageBuffer msg = it->second.take();
      s.partial.erase(it);
      --held_count_;
      accept_message(s, d.seq, std::move(msg), now, out);
      note_gaps(s, d, now);
      break;
    }
    case Reassembly::Result::duplicate: ++stats_.duplicates_dropped; break;
    case Reassembly::Result::mismatch: ++stats_.invalid_dropped; break;
    case Reassembly::Result::added: note_gaps(s, d, now); break;
  }
}

void SmallPath::on_fragment(Stream& s, const wire::Data& d, TimeNs now, Outbox& out, const SharedBytes& arrived_in) {
  if (!fragment_wanted(s, d, now)) return;
  if (d.frag_count == 1) {
    // A whole message stays in the datagram it came in (batched messages share it);
    // without one (a frame, a test) it is copied.
    MessageBuffer msg = arrived_in ? MessageBuffer(arrived_in, d.payload)
                                   : MessageBuffer(std::make_shared<const std::vector<std::byte>>(d.payload.begin(),
                                                                                                  d.payload.end()));
    accept_message(s, d.seq, std::move(msg), now, out);
    note_gaps(s, d, now);  // a later message shows the earlier ones we lack were lost
    return;
  }
  auto it = partial_for(s, d);
  on_reassembled(s, it, it->second.add(d), d, now, out);
}

std::optional<FragmentPlace> SmallPath::place_fragment(MemberId from, const wire::Data& d, std::size_t size) {
  // Only what on_fragment() would take into a reassembly: checked without counting
  // (the fragment is counted once it arrives, by on_placed_fragment()).
  if (!buffers_ || d.sender != from || d.sender == self_ || d.frag_count == 1) return std::nullopt;
  Stream* s = stream_for(d.sender);
  if (s == nullptr || refusal(*s, d) != Refusal::none) return std::nullopt;
  auto it = partial_for(*s, d);
  auto dest = it->second.place(d, size);
  if (!dest) return std::nullopt;
  return FragmentPlace{*dest, it->second.buffer()};
}

void SmallPath::on_placed_fragment(MemberId from, const wire::Data& d, std::size_t size, const std::byte* at, TimeNs now,
                                   Outbox& out) {
  if (d.sender != from || d.frag_count == 1) {
    ++stats_.invalid_dropped;  // only a sender multicasts its own; a whole message is never placed
    return;
  }
  Stream& s = stream(d.sender);
  if (!fragment_wanted(s, d, now)) return;
  auto it = s.partial.find(d.seq);
  if (it == s.partial.end() || !it->second.slot_at(d, at)) {
    // Its bytes went into a buffer this message no longer has (dropped with a view,
    // say), or not where this head says its slot is: as if lost, which a NACK repairs.
    ++stats_.placed_fragments_lost;
    note_gaps(s, d, now);
    return;
  }
  ++stats_.fragments_placed;
  on_reassembled(s, it, it->second.add_placed(d, size), d, now, out);
}

// ---------------------------------------------------------------------------
// Fragment-granular repair: a member that lacks fragments asks its parent for just
// those (a nack), as soon as a later fragment or message shows they were lost. The
// parent answers from the whole message or from the fragments it holds of one it is
// still assembling; what it lacks too, its own nack fetches, and the child asks again
// one wait later. Losing one datagram of a large message thus costs one datagram and
// one round trip, not the whole message after a repair timeout.

void SmallPath::note_gaps(Stream& s, const wire::Data& d, TimeNs now) {
  s.highest_seen = std::max(s.highest_seen, d.seq);
  if (!s.parent || s.nack_deadline <= now + cfg_.nack_delay_ns) return;  // a round is due soon anyway
  bool gap = false;
  auto partial = s.partial.find(d.seq);
  if (partial != s.partial.end() && partial->second.received() <= partial->second.highest()) gap = true;
  // delivered + 1 is never held (delivery would have passed it): any later seq is a gap.
  if (d.seq > s.delivered + 1) gap = true;
  if (!gap) return;
  note_loss(now);  // or reordering, which a lossy network also does
  s.nack_deadline = now + cfg_.nack_delay_ns;
  s.nack_gen = timers_.arm(s.nack_deadline, TimerKey{TimerKind::nack, s.sender, 0});
}

void SmallPath::send_nacks(Stream& s, TimeNs now, Outbox& out) {
  s.nack_deadline = kNever;
  if (!s.parent) return;
  // Each fragment is asked for once per view: the parent answers from what it holds
  // and owes the rest until it holds the message, and repairs travel over reliable
  // links, so asking again would only put duplicates in the parent's queue (under
  // load, a storm). A new view (a new parent) starts the asking afresh; a parent
  // that still misses our ACK repairs us on its own timer (fire_child).
  bool lacking = false;
  const Seq top = std::min<Seq>(std::max(s.highest_seen, s.sent_known), s.delivered + cfg_.window_messages);
  for (Seq q = s.delivered + 1; q <= top; ++q) {
    if (s.held.count(q) != 0) continue;
    auto p = s.partial.find(q);
    auto asked = s.asked.find(q);
    wire::Nack n{s.sender, q, 0, {}};
    if (p != s.partial.end()) {
      // Of the last message seen only what lies below its highest fragment is known
      // lost; the rest may still be on its way.
      const Reassembly& r = p->second;
      std::vector<std::uint8_t> lack = r.missing(known_sent(s, q) ? r.frag_count() : r.highest());
      if (!any_bit(lack)) continue;
      lacking = true;
      const bool whole_asked = asked != s.asked.end() && asked->second.empty();
      if (whole_asked) continue;
      if (asked != s.asked.end()) drop_bits(lack, asked->second);  // only what we have not asked for yet
      if (!any_bit(lack)) continue;
      n.frag_count = r.frag_count();
      n.missing = std::move(lack);
      if (asked == s.asked.end()) {
        s.asked[q] = n.missing;
      } else {
        merge_bits(asked->second, n.missing);
      }
    } else {
      if (!known_sent(s, q)) continue;  // not yet begun
      lacking = true;
      if (asked != s.asked.end()) continue;
      s.asked[q].clear();  // the whole message
    }
    ++stats_.nacks_sent;
    emit_.frame(*s.parent, n, out);
  }
  if (lacking) note_loss(now);
  if (!lacking) s.asked.clear();
}

void SmallPath::on_nack(MemberId from, const wire::Nack& n, TimeNs now, Outbox& out) {
  Stream* s = stream_for(n.sender);
  if (s == nullptr) {
    ++stats_.invalid_dropped;
    return;
  }
  auto child = std::find_if(s->children.begin(), s->children.end(), [&](const ChildLink& l) { return l.id == from; });
  if (child == s->children.end()) {
    // Besides our children, only our parent asks (a pull: we ACKed what it lacks),
    // and only for what we hold.
    if (!s->parent || *s->parent != from) {
      ++stats_.invalid_dropped;
      return;
    }
    if (n.seq <= s->known_stable) return;
    if (auto held = s->held.find(n.seq); held != s->held.end()) {
      if (n.frag_count == 0 || n.frag_count == fragment_count(held->second.msg->size(), cut()))
        send_fragments(*s, from, n.seq, n.missing, now, out);
      else
        ++stats_.invalid_dropped;
    }
    return;
  }
  // The child is alive and drives its own repair: our repair timer for it restarts.
  child->last_heard = now;
  child->last_progress = now;
  child->attempts = 0;
  child->deadline = kNever;  // its pending entry, if any, finds no wait and goes
  rearm_child(*s, static_cast<std::uint32_t>(child - s->children.begin()), now);
  // Late (everyone holds it), or beyond what the sender's window allows: what we owe
  // stays within two windows of the stable prefix.
  if (n.seq <= s->known_stable || n.seq > s->known_stable + 2ULL * cfg_.window_messages) return;
  if (auto held = s->held.find(n.seq); held != s->held.end()) {
    if (n.frag_count != 0 && n.frag_count != fragment_count(held->second.msg->size(), cut())) {
      ++stats_.invalid_dropped;
      return;
    }
    send_fragments(*s, from, n.seq, n.missing, now, out);
    return;
  }
  // We lack (part of) it too: send what we hold now, and owe the rest until we hold
  // the whole message (our own nack is fetching it).
  auto p = s->partial.find(n.seq);
  std::vector<std::uint8_t> rest = n.missing;
  if (p != s->partial.end() && n.frag_count != 0) {
    if (n.frag_count != p->second.frag_count()) {
      ++stats_.invalid_dropped;
      return;
    }
    for (std::uint32_t i = 0; i < n.frag_count; ++i)
      if (has_bit(n.missing, i) && p->second.has(i)) {
        ++stats_.fragment_repairs_sent;
        ++stats_.repair_datagrams;
        clear_bit(rest, i);
        emit_.frame(from, wire::FragmentRepair{p->second.fragment_data(i, s->sender, n.seq, s->known_stable)}, out);
      }
    if (!any_bit(rest)) return;
  }
  auto& owed = child->owed[n.seq];
  if (owed.empty() || rest.empty()) {
    owed = rest;  // the first ask, or now the whole message
  } else if (owed.size() == rest.size()) {
    merge_bits(owed, rest);
  }
}

void SmallPath::send_fragments(Stream& s, MemberId to, Seq seq, const std::vector<std::uint8_t>& missing,
                               TimeNs now, Outbox& out) {
  const auto& m = *s.held.at(seq).msg;
  // A child we just repaired gets a full wait for its answer from now (the repair
  // may queue behind our own traffic), and its answer gives no sample (Karn).
  auto child = std::find_if(s.children.begin(), s.children.end(), [&](const ChildLink& l) { return l.id == to; });
  if (child != s.children.end()) {
    child->last_progress = now;
    child->repaired_upto = std::max(child->repaired_upto, seq);
    child->deadline = kNever;
    rearm_child(s, static_cast<std::uint32_t>(child - s.children.begin()), now);
  }
  if (missing.empty()) {
    ++stats_.repairs_sent;
    stats_.repair_datagrams += fragment_count(m.size(), cut());
    emit_.frame(to, wire::Repair{s.sender, seq, s.known_stable, m}, out);
    return;
  }
  const std::uint32_t count = fragment_count(m.size(), cut());
  for (std::uint32_t i = 0; i < count; ++i)
    if (has_bit(missing, i)) {
      ++stats_.fragment_repairs_sent;
      ++stats_.repair_datagrams;
      emit_.frame(to, wire::FragmentRepair{fragment_of(s.sender, seq, s.known_stable, m, cut(), i)}, out);
    }
}

void SmallPath::on_repair(MemberId from, const wire::Repair& r, TimeNs now, Outbox& out) {
  Stream* s = stream_for(r.sender);
  // Nobody repairs our own messages to us: only we can have made them.
  if (s == nullptr || r.sender == self_ || r.payload.size() > cfg_.max_small_message) {
    ++stats_.invalid_dropped;
    return;
  }
  if (r.stable > s->known_stable) collect_garbage(*s, r.stable);
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
    want_ack(*s, /*reliable=*/true);
    note_loss(now);
  }
}

void SmallPath::accept_message(Stream& s, Seq seq, MessageBuffer msg, TimeNs now, Outbox& out) {
  // Callers drop duplicates and what lies beyond the receive window first.
  HMCAST_ASSERT(seq > s.delivered && seq <= s.delivered + cfg_.window_messages && s.held.count(seq) == 0);
  s.held.emplace(seq, Held{std::move(msg), now});
  ++held_count_;
  // Both maps are empty in a stream without loss: looked at only when not (a lookup
  // in an empty std::map is still a call per message).
  if (!s.partial.empty()) held_count_ -= s.partial.erase(seq);  // a repair can finish a message whose fragments were held
  if (!s.asked.empty()) s.asked.erase(seq);
  for (auto& c : s.children)
    if (auto owed = c.owed.find(seq); owed != c.owed.end()) {
      send_fragments(s, c.id, seq, owed->second, now, out);
      c.owed.erase(owed);
    }
  for (auto it = s.held.find(s.delivered + 1); it != s.held.end(); it = s.held.find(s.delivered + 1)) {
    ++s.delivered;
    ++stats_.delivered;
    out.emplace_back(action::Deliver{s.sender, s.delivered, it->second.msg});
  }
  advance(s, now, out);
}

// ---------------------------------------------------------------------------
// Cumulative ACKs

void SmallPath::advance(Stream& s, TimeNs now, Outbox& out) {
  const Seq st = subtree_stable(s);
  if (s.is_root) {
    if (s.sender == self_) {
      HMCAST_ASSERT(st < next_seq_);  // nothing is stable that was never sent
      while (own_completed_ < st) {
        ++own_completed_;
        auto it = s.held.find(own_completed_);
        HMCAST_ASSERT(it != s.held.end());  // an own message is held until it is stable
        HMCAST_ASSERT(own_bytes_in_flight_ >= it->second.msg->size());
        own_bytes_in_flight_ -= it->second.msg->size();
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
    want_ack(s);
  } else if (s.gap_reported_at != s.delivered + 1 && s.held.upper_bound(s.delivered + 1) != s.held.end()) {
    // We hold messages past a hole: say so once, so the parent can repair just the hole.
    s.gap_reported_at = s.delivered + 1;
    want_ack(s);
  }
  for (std::uint32_t i = 0; i < s.children.size(); ++i) rearm_child(s, i, now);
}

void SmallPath::collect_garbage(Stream& s, Seq stable) {
  const Seq upto = std::min(stable, s.delivered);
  if (upto <= s.known_stable) return;
  s.known_stable = upto;
  const std::size_t before = s.held.size();
  s.held.erase_through(upto);
  HMCAST_ASSERT(held_count_ >= before - s.held.size());
  held_count_ -= before - s.held.size();
  for (auto& c : s.children) c.owed.erase(c.owed.begin(), c.owed.upper_bound(upto));
}

void SmallPath::on_ack(MemberId from, const wire::Ack& a, TimeNs now, Outbox& out) {
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
    } else if (e.have == c.have && (e.mask | c.mask) != c.mask) {
      c.mask |= e.mask;  // holdings only grow
      c.deadline = kNever;
    }
    c.attempts = 0;
    c.owed.erase(c.owed.begin(), c.owed.upper_bound(c.have));
    rearm_child(*s, idx, now);
    if (c.have > s->delivered) maybe_pull(*s, now, out);
    advance(*s, now, out);
  }
}

void SmallPath::flush_acks(TimeNs now, Outbox& out, bool drained) {
  if (acks_pending_.empty()) return;
  acks_to_used_ = 0;
  auto to_parent = [&](MemberId p) -> AcksTo& {
    for (std::size_t i = 0; i < acks_to_used_; ++i)
      if (acks_to_[i].parent == p) return acks_to_[i];
    if (acks_to_used_ == acks_to_.size()) acks_to_.emplace_back();
    AcksTo& to = acks_to_[acks_to_used_++];
    to.parent = p;
    to.entries.clear();
    to.streams.clear();
    to.reliable = false;
    return to;
  };
  std::size_t kept = 0;  // streams still waiting (their parent's interval) move to the front
  for (const MemberId sender : acks_pending_) {
    Stream& s = streams_.at(sender);
    if (!s.ack_due || !s.parent) {
      s.ack_due = false;
      s.ack_reliable = false;
      continue;
    }
    const MemberId p = *s.parent;
    auto last = last_ack_to_.find(p);
    if (!drained && last != last_ack_to_.end() && now < last->second + cfg_.ack_interval_ns) {
      // Merge with whatever else becomes due for this parent in the interval.
      if (ack_flush_armed_.insert(p).second)
        ack_flush_gen_[p] = timers_.arm(last->second + cfg_.ack_interval_ns, TimerKey{TimerKind::ack_flush, p, 0});
      acks_pending_[kept++] = sender;
      continue;
    }
    const Seq st = subtree_stable(s);
    AcksTo& to = to_parent(p);
    to.entries.push_back(wire::AckEntry{s.sender, st, s.delivered, held_mask(s)});
    to.streams.push_back(&s);
    to.reliable = to.reliable || s.ack_reliable || now < acks_by_link_until_;
    s.reported_stable = st;
    s.reported_have = s.delivered;
    s.ack_due = false;
    s.ack_reliable = false;
  }
  acks_pending_.resize(kept);
  // By parent, as a map would order them (a member has one parent per stream's tree).
  std::sort(acks_to_.begin(), acks_to_.begin() + static_cast<std::ptrdiff_t>(acks_to_used_),
            [](const AcksTo& a, const AcksTo& b) { return a.parent < b.parent; });
  // Routine ACKs go as datagrams where the transport can (cumulative: a lost one is
  // covered by the next, or by the parent's query one wait later); answers to the
  // parent's questions go over the link.
  for (std::size_t i = 0; i < acks_to_used_; ++i) {
    AcksTo& to = acks_to_[i];
    ++stats_.acks_sent;
    last_ack_to_[to.parent] = now;
    for (Stream* s : to.streams) s->reported_by_link = to.reliable;
    if (to.reliable) {
      emit_.frame(to.parent, wire::Ack{to.entries}, out);
    } else {
      ++stats_.acks_as_datagrams;
      emit_.frame_datagram(to.parent, wire::Ack{to.entries}, out);
    }
  }
}

// ---------------------------------------------------------------------------
// Repairs

bool SmallPath::child_holds(const ChildLink& c, Seq seq) {
  if (seq <= c.have) return true;
  const Seq bit = seq - c.have - 1;
  return bit < 64 && ((c.mask >> bit) & 1U) != 0;
}

std::uint64_t SmallPath::held_mask(const Stream& s) {
  std::uint64_t mask = 0;
  for (auto it = s.held.upper_bound(s.delivered + 1); it != s.held.end() && it->first <= s.delivered + 64; ++it)
    mask |= std::uint64_t{1} << (it->first - s.delivered - 1);
  return mask;
}

Seq SmallPath::first_missing(const Stream& s, const ChildLink& c) {
  for (Seq q = std::max(c.have, s.known_stable) + 1; q <= s.delivered; ++q)
    if (!child_holds(c, q)) return q;
  return 0;
}

void SmallPath::rearm_child(Stream& s, std::uint32_t idx, TimeNs now) {
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
    // A child that lost fragments of a multi-datagram message sees it and asks
    // (nack); for those this wait is only the backstop (a lost tail, a dead child), so
    // it starts a step later and does not race the nack's answer with the whole message.
    const bool child_sees_losses = held != s.held.end() && fragment_count(held->second.msg->size(), cut()) > 1;
    wait = c.timeout.timeout(c.attempts + (child_sees_losses ? 1U : 0U));
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
  set_child_deadline(s, idx, since + wait);
}

void SmallPath::set_child_deadline(Stream& s, std::uint32_t idx, TimeNs at) {
  ChildLink& c = s.children[idx];
  HMCAST_ASSERT(at != kNever);
  c.deadline = at;
  if (c.armed_at <= at) return;  // that entry comes first and arms again
  c.armed_at = at;
  c.timer_gen = timers_.arm(at, TimerKey{TimerKind::child_repair, s.sender, idx});
}

void SmallPath::on_child_timer(Stream& s, std::uint32_t idx, TimeNs now, Outbox& out) {
  ChildLink& c = s.children[idx];
  c.armed_at = kNever;
  if (c.deadline == kNever) return;  // the wait ended (an ACK) and none runs now
  if (now < c.deadline) {
    set_child_deadline(s, idx, c.deadline);  // it moved later since this entry was armed
    return;
  }
  fire_child(s, idx, now, out);
}

void SmallPath::fire_child(Stream& s, std::uint32_t idx, TimeNs now, Outbox& out) {
  ChildLink& c = s.children[idx];
  c.deadline = kNever;
  const Seq from = first_missing(s, c);
  const bool lagging = from == 0 && c.stable < std::min(c.have, s.delivered);
  if (c.suspected || (from == 0 && !lagging)) return;
  // The wait doubles per round, so a child is suspected only after a long silence:
  // our own questions may queue behind our repairs and multicast. A child that
  // answered our last round is alive, only slow: we keep asking, for twice the
  // budget (a member that answers but never catches up would stall every sender).
  const bool silent = c.last_heard <= c.last_asked;
  if (c.attempts >= 2 * cfg_.repair_budget || (c.attempts >= cfg_.repair_budget && silent)) {
    c.suspected = true;
    emit_.suspect(c.id, out);
    return;
  }
  ++c.attempts;
  c.last_asked = now;  // every round asks for an answer: an ACK, or a repair's ACK
  // A message of several datagrams is never pushed whole: we ask, and the child
  // answers with its ACK and a nack of every fragment it lacks (all of the message if
  // it saw none), which we answer from the message. A late ACK then costs a small
  // frame and a lost tail one round trip; pushing whole messages at every timeout
  // would only queue more behind what is already late.
  const auto held = s.held.find(from);
  const bool several = held != s.held.end() && fragment_count(held->second.msg->size(), cut()) > 1;
  // A message of one datagram is also asked about first: its ACK may only be late.
  if (lagging || several || c.attempts == 1) {
    ++stats_.ack_queries_sent;
    emit_.frame(c.id, wire::AckQuery{s.sender, lagging ? 0 : from}, out);
    set_child_deadline(s, idx, now + c.timeout.timeout(c.attempts));
    return;
  }
  bool remulticasted = false;
  // Only a message of one datagram is multicast again: of a longer one each member
  // lacks other fragments, and nacks fetch just those.
  if (s.is_root && s.sender == self_ && view_.size() > 2 && !several &&
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
    // At most repair_batch datagrams' worth per round (at least one message).
    std::uint64_t sent = 0;
    const std::uint64_t budget = std::uint64_t{cfg_.repair_batch} * fragment_payload(cut().cut);
    for (auto it = s.held.lower_bound(from); it != s.held.end() && (sent == 0 || sent < budget); ++it) {
      const Seq q = it->first;
      if (q > s.delivered || (q != from && (q > known_top || it->second.arrival > overdue))) break;
      if (child_holds(c, q)) continue;
      ++stats_.repairs_sent;
      stats_.repair_datagrams += fragment_count(it->second.msg->size(), cut());
      sent += std::max<std::size_t>(it->second.msg->size(), 1);
      c.repaired_upto = std::max(c.repaired_upto, q);
      emit_.frame(c.id, wire::Repair{s.sender, q, s.known_stable, *it->second.msg}, out);
    }
  }
  set_child_deadline(s, idx, now + c.timeout.timeout(c.attempts));
}

void SmallPath::remulticast(Stream& s, Seq seq, Outbox& out) {
  auto it = s.held.find(seq);
  if (it == s.held.end()) return;
  ++stats_.remulticasts;
  stats_.repair_datagrams += fragment_count(it->second.msg->size(), cut());
  for (auto& dgram : fragment(emit_.header(), s.sender, seq, s.known_stable, *it->second.msg, cut()))
    emit_.datagram_bytes(std::move(dgram), out);
}

void SmallPath::maybe_pull(Stream& s, TimeNs now, Outbox& out) {
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
    s.pull_gen = timers_.arm(s.pull_deadline, TimerKey{TimerKind::pull, s.sender, 0});
    return;
  }
  // A child ACKed messages we never got (Mansoor & Meehan 3.3.4): fetch them from it.
  // Only a proven hole: we hold something after it, so it was lost, not merely still
  // queued at our NIC (pulling what is queued would double the load on a receiver
  // that is already behind). A tail we lack is our own parent's to repair, unless
  // the sender left: then nobody above us can have more than our children, and the
  // tail only some survivors hold must flow up to the proxy root and from it to all.
  const bool sender_gone = !view_.contains(s.sender);
  auto next_held = s.held.upper_bound(s.delivered);
  if (next_held == s.held.end() && !sender_gone) {
    s.pull_deadline = kNever;
    return;
  }
  const Seq hole_end = next_held == s.held.end() ? best->have : next_held->first - 1;
  const Seq to = std::min<Seq>({best->have, hole_end, s.delivered + cfg_.window_messages});
  ++stats_.pulls_sent;
  note_loss(now);
  for (Seq q = s.delivered + 1; q <= to; ++q) {
    // Only the fragments we lack, as a nack to the child (which answers what it holds).
    wire::Nack n{s.sender, q, 0, {}};
    if (auto p = s.partial.find(q); p != s.partial.end()) {
      n.frag_count = p->second.frag_count();
      n.missing = p->second.missing(n.frag_count);
    }
    ++stats_.nacks_sent;
    emit_.frame(best->id, n, out);
  }
  s.pull_deadline = now + best->timeout.timeout(0);
  s.pull_gen = timers_.arm(s.pull_deadline, TimerKey{TimerKind::pull, s.sender, 0});
}

// ---------------------------------------------------------------------------
// Stability announcements (garbage collection at receivers)

void SmallPath::arm_announce(Stream& s, TimeNs now) {
  if (s.announce_armed) return;
  s.announce_armed = true;
  timers_.arm(now + cfg_.stable_announce_ns, TimerKey{TimerKind::announce, s.sender, 0});
}

void SmallPath::on_stable(MemberId from, const wire::Stable& st, TimeNs now) {
  Stream* s = stream_for(st.sender);
  if (s == nullptr || from != root_of(st.sender)) {
    ++stats_.invalid_dropped;  // only the stream's root knows what is stable
    return;
  }
  collect_garbage(*s, st.stable);
  // The root's announcement follows its data on the same path: whatever it sent up to
  // `highest` that we still lack was lost (a lost tail no later message would show).
  if (st.highest > s->sent_known) {
    s->sent_known = st.highest;
    if (s->parent && st.highest > s->delivered && s->nack_deadline == kNever) {
      s->nack_deadline = now + cfg_.nack_delay_ns;
      s->nack_gen = timers_.arm(s->nack_deadline, TimerKey{TimerKind::nack, s->sender, 0});
    }
  }
}

bool SmallPath::known_sent(const Stream& s, Seq seq) { return seq < s.highest_seen || seq <= s.sent_known; }

}  // namespace hmcast::small
