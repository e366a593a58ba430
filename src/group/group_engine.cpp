#include "group/group_engine.hpp"

#include <algorithm>
#include <iterator>

#include "core/assert.hpp"
#include "core/overloaded.hpp"
#include "policy/defaults.hpp"

namespace hmcast::group {

namespace {
// A batch holds at most a quarter of the sender's window: a full window then goes as
// four datagrams or more, and the ACKs of the first make room while the last fills.
// One batch of a whole window (64-byte messages in 64 KiB datagrams) left the
// sender waiting for it to go before anything was ACKed (docs/benchmarks.md).
std::size_t batch_items(const ProtocolConfig& c) {
  return std::clamp<std::size_t>(c.window_messages / 4, 2, wire::kMaxBatchItems);
}
}  // namespace

GroupEngine::GroupEngine(GroupId group, MemberId self, const ViewChange& first, const ProtocolConfig& config,
                         TimeNs now)
    : self_(self), view_(first.view), cfg_(config), emit_(group, self, first.view, config.mtu, batch_items(config)),
      small_(self, first.view, cfg_, emit_, timers_, now), pipeline_(self, first.view, cfg_, emit_),
      probe_(ProbeConfig{cfg_.multicast_probe_resend_ns, cfg_.multicast_probe_deadline_ns}) {
  HMCAST_ASSERT(!policy::check(cfg_));
  HMCAST_ASSERT(view_.contains(self_));
  small_.set_hosts(first.hosts);
  pipeline_.set_hosts(first.hosts);
  small_.set_stream_floors(first.small_floors);  // joining a running group: start where the flush left it
  if (first.multicast_emulated) emit_.emulate_multicast();
  emit_.keep_buffers_of(small::cut_of(cfg_).cut);  // a long message's datagrams are cut this large
}

// ---------------------------------------------------------------------------
// Sending

bool GroupEngine::can_broadcast(std::size_t bytes) const {
  return !removed_ && !paused_ && bytes <= cfg_.max_small_message && small_.window_has_room(bytes);
}

bool GroupEngine::can_broadcast_large() const {
  return !removed_ && !paused_ && pipeline_.queued() < cfg_.large_queue_limit;
}

small::BroadcastResult GroupEngine::broadcast(MessageBuffer message, TimeNs now, Outbox& out) {
  if (removed_) return {small::BroadcastError::not_member, 0};
  if (paused_) return {small::BroadcastError::paused, 0};
  const auto r = small_.broadcast(std::move(message), now, out);
  // Refused: nothing changed, so nothing goes out either (an ACK that came due since
  // the last step waits for its own timer, as it would without this call).
  if (r.error != small::BroadcastError::none) return r;
  if (emit_.batch_held() && !batch_armed_) {
    batch_armed_ = true;
    batch_gen_ = timers_.arm(now + cfg_.batch_delay_ns, TimerKey{TimerKind::batch_flush, 0, 0});
  }
  settle(now, out);
  return r;
}

large::LargeResult GroupEngine::broadcast_large(std::uint64_t size, std::uint64_t block_size, TimeNs now,
                                                Outbox& out) {
  if (removed_) return {large::LargeError::not_member, 0};
  if (paused_) return {large::LargeError::queue_full, 0};
  auto r = pipeline_.broadcast(size, out, block_size);
  if (r.error != large::LargeError::none) return r;  // refused: as broadcast()'s, nothing goes out
  large_activity_ = now;
  settle(now, out);
  return r;
}

void GroupEngine::buffer_ready(MemberId sender, Seq seq, Outbox& out) {
  if (!removed_) pipeline_.buffer_ready(sender, seq, out);
}

bool GroupEngine::may_place_segment(MemberId from, const wire::Header& h, const wire::Block& b) const {
  return !removed_ && h.group == emit_.group() && h.view == view_.id && h.src == from && view_.contains(from) &&
         pipeline_.may_place_segment(from, b);
}

// ---------------------------------------------------------------------------
// Admission: everything that is not for us, or not from a member of our current
// view, is counted and dropped before any state is touched.

std::optional<wire::Packet> GroupEngine::decoded(std::span<const std::byte> bytes) {
  if (removed_) return std::nullopt;
  auto res = wire::decode(bytes);
  if (!res.ok()) {
    ++admission_.decode_errors;
    return std::nullopt;
  }
  return std::move(res.packet);
}

void GroupEngine::on_datagram(std::span<const std::byte> bytes, TimeNs now, Outbox& out, const SharedBytes& owner) {
  if (removed_) return;
  // Most datagrams are Data: the same admission as below, without the Body variant.
  wire::Header dh;
  wire::Data data;
  if (const auto err = wire::decode_data_only(bytes, dh, data)) {
    if (*err != wire::DecodeError::none) {
      ++admission_.decode_errors;
      return;
    }
    if (dh.src == self_ || !admit(dh, dh.src)) return;  // our own, looped back; or not for us
    small_.on_data(dh.src, data, now, out, owner);
    settle(now, out);
    return;
  }
  const auto packet = decoded(bytes);
  if (!packet) return;
  const auto& h = packet->header;
  if (h.src == self_) return;  // our own multicast looped back: not an error
  if (!wire::is_datagram_type(h.type) && !wire::is_direct_datagram_type(h.type)) {
    ++admission_.misrouted_dropped;  // other link traffic never travels by datagram
    return;
  }
  if (!admit(h, h.src)) return;
  dispatch(*packet, h.src, now, out, owner);
  settle(now, out);
}

std::optional<small::FragmentPlace> GroupEngine::place_datagram(std::span<const std::byte> head, std::size_t size) {
  if (removed_) return std::nullopt;
  wire::Header dh;
  wire::Data data;
  const auto err = wire::decode_data_head(head, size, dh, data);
  // admit()'s checks, uncounted: the datagram is counted when it arrives.
  if (!err || *err != wire::DecodeError::none || dh.src == self_ || refused_by(dh, dh.src) != nullptr)
    return std::nullopt;
  return small_.place_fragment(dh.src, data, size);
}

void GroupEngine::on_placed_datagram(std::span<const std::byte> head, std::size_t size, const std::byte* at, TimeNs now,
                                     Outbox& out) {
  if (removed_) return;
  wire::Header dh;
  wire::Data data;
  const auto err = wire::decode_data_head(head, size, dh, data);
  if (!err || *err != wire::DecodeError::none) {
    ++admission_.decode_errors;
    return;
  }
  if (dh.src == self_ || !admit(dh, dh.src)) return;
  small_.on_placed_fragment(dh.src, data, size, at, now, out);
  settle(now, out);
}

void GroupEngine::on_frame(MemberId from, std::span<const std::byte> bytes, TimeNs now, Outbox& out) {
  const auto packet = decoded(bytes);
  if (!packet) return;
  const auto& h = packet->header;
  // A frame's source is its link's peer (never this member: no link leads to
  // itself); a datagram type over a link is emulated multicast, which the peer may
  // send only as itself.
  if (h.src != from || from == self_) {
    ++admission_.misrouted_dropped;
    return;
  }
  if (h.group == emit_.group() && h.view > view_.id && !wire::is_datagram_type(h.type)) {
    // Sent by a member that installed the next view before us: keep it until we do.
    // Only members' frames are kept, so strangers cannot fill the queue.
    if (!view_.contains(from)) {
      ++admission_.non_member_dropped;
      return;
    }
    if (future_.size() >= cfg_.future_packet_limit) {
      ++admission_.future_view_dropped;
      return;
    }
    future_.emplace_back(from, std::vector<std::byte>(bytes.begin(), bytes.end()));
    return;
  }
  if (!admit(h, from)) return;
  dispatch(*packet, from, now, out);
  settle(now, out);
}

std::uint64_t AdmissionStats::*GroupEngine::refused_by(const wire::Header& h, MemberId from) const {
  if (h.group != emit_.group()) return &AdmissionStats::wrong_group_dropped;
  if (h.view < view_.id) return &AdmissionStats::stale_view_dropped;
  // Datagrams of a later view are not kept: repairs cover them.
  if (h.view > view_.id) return &AdmissionStats::future_view_dropped;
  if (!view_.contains(from)) return &AdmissionStats::non_member_dropped;
  return nullptr;
}

bool GroupEngine::admit(const wire::Header& h, MemberId from) {
  const auto refused = refused_by(h, from);
  if (refused != nullptr) ++(admission_.*refused);
  return refused == nullptr;
}

void GroupEngine::dispatch(const wire::Packet& p, MemberId from, TimeNs now, Outbox& out, const SharedBytes& owner) {
  // Any frame of the large path is activity: the stall timer pings only when none came.
  auto large = [&](auto&& handle) {
    large_activity_ = now;
    handle();
  };
  std::visit(Overloaded{
                 [&](const wire::Data& d) { small_.on_data(from, d, now, out, owner); },
                 [&](const wire::Repair& r) { small_.on_repair(from, r, now, out); },
                 [&](const wire::Nack& n) { small_.on_nack(from, n, now, out); },
                 [&](const wire::FragmentRepair& f) { small_.on_fragment_repair(from, f.fragment, now, out); },
                 [&](const wire::Ack& a) { small_.on_ack(from, a, now, out); },
                 [&](const wire::Stable& s) { small_.on_stable(from, s, now); },
                 [&](const wire::AckQuery& q) { small_.on_ack_query(from, q, now, out); },
                 [&](const wire::Announce& a) { large([&] { pipeline_.on_announce(from, a, out); }); },
                 [&](const wire::Ready& r) { large([&] { pipeline_.on_ready(from, r, out); }); },
                 [&](const wire::Block& b) { large([&] { pipeline_.on_block(from, b, out); }); },
                 [&](const wire::LargeAck& a) { large([&] { pipeline_.on_ack(from, a, out); }); },
                 [&](const wire::LargeCommit& c) { large([&] { pipeline_.on_commit(from, c, out); }); },
                 [&](const wire::Ping&) {},  // nothing to do: that it arrived is the answer
                 [&](const wire::McastProbe& pr) { emit_.frame(from, wire::McastConfirm{pr.nonce}, out); },
                 [&](const wire::Batch& b) { dispatch_batch(p.header, b, from, now, out, owner); },
                 [&](const wire::McastConfirm&) {
                   if (probe_enabled_) apply_probe(probe_.on_confirm(from, now), out);
                 },
             },
             p.body);
}

void GroupEngine::on_drained(TimeNs now, Outbox& out) {
  if (removed_) return;
  small_.flush_acks(now, out, /*drained=*/true);
  settle(now, out);
}

void GroupEngine::dispatch_batch(const wire::Header& outer, const wire::Batch& b, MemberId from, TimeNs now,
                                 Outbox& out, const SharedBytes& owner) {
  // Each item is a datagram its sender could have sent alone: the same admission,
  // and it must name the batch's group, view and sender (a batch speaks for one member).
  for (const auto item : b.items) {
    // A stream's items are Data: decoded without the Body variant (one per message).
    wire::Header dh;
    wire::Data data;
    if (const auto err = wire::decode_data_only(item, dh, data)) {
      if (*err != wire::DecodeError::none) {
        ++admission_.decode_errors;
      } else if (dh.group != outer.group || dh.view != outer.view || dh.src != outer.src) {
        ++admission_.misrouted_dropped;
      } else {
        small_.on_data(from, data, now, out, owner);
        if (removed_) return;
      }
      continue;
    }
    auto res = wire::decode(item);
    if (!res.ok()) {
      ++admission_.decode_errors;
      continue;
    }
    const wire::Header& h = res.packet.header;
    HMCAST_ASSERT(wire::is_batchable_type(h.type));  // wire::decode admits no other item type
    if (h.group != outer.group || h.view != outer.view || h.src != outer.src) {
      ++admission_.misrouted_dropped;
      continue;
    }
    dispatch(res.packet, from, now, out, owner);
    if (removed_) return;
  }
}

void GroupEngine::settle(TimeNs now, Outbox& out) {
  if (removed_) return;
  small_.flush_acks(now, out);
  if (flush_view_ && small_.in_flight() == 0 && !pipeline_.sending()) {
    out.emplace_back(action::Flushed{*flush_view_, small_.next_seq(), pipeline_.next_seq()});
    flush_view_.reset();  // answered; `paused_` stays until the view that ends the flush
  }
  arm_stall(now);
  if (probe_enabled_ && probe_.next_wakeup() != probe_armed_at_) {
    probe_armed_at_ = probe_.next_wakeup();
    if (probe_armed_at_ != kNever)
      probe_gen_ = timers_.arm(probe_armed_at_, TimerKey{TimerKind::multicast_probe, 0, 0});
  }
}

// ---------------------------------------------------------------------------
// Timers

void GroupEngine::on_timer(TimeNs now, Outbox& out) {
  if (removed_) return;
  timers_.pop_due(now, [&](const TimerQueue::Entry& e) {
    switch (e.key.kind) {
      case TimerKind::child_repair:
      case TimerKind::ack_flush:
      case TimerKind::announce:
      case TimerKind::pull:
      case TimerKind::nack: small_.on_timer(e, now, out); break;
      case TimerKind::large_stall: on_stall(now, out); break;
      case TimerKind::batch_flush:
        if (e.generation == batch_gen_) {
          batch_armed_ = false;
          emit_.flush_batch(out);
        }
        break;
      case TimerKind::multicast_probe:
        if (e.generation == probe_gen_) {
          probe_armed_at_ = kNever;
          apply_probe(probe_.on_timer(now), out);
        }
        break;
    }
  });
  settle(now, out);
}

void GroupEngine::arm_stall(TimeNs now) {
  if (stall_armed_ || pipeline_.active_transfers() == 0) return;
  stall_armed_ = true;
  timers_.arm(now + cfg_.large_stall_ns, TimerKey{TimerKind::large_stall, 0, 0});
}

void GroupEngine::on_stall(TimeNs now, Outbox& out) {
  stall_armed_ = false;
  if (pipeline_.active_transfers() == 0) return;
  // Nothing of the large path moved for a while: ping whom we wait on, so a dead
  // member shows as a broken link (and is suspected) instead of stalling us.
  if (now - large_activity_ >= cfg_.large_stall_ns)
    for (MemberId peer : pipeline_.waiting_on()) emit_.frame(peer, wire::Ping{}, out);
  large_activity_ = std::max(large_activity_, now - cfg_.large_stall_ns / 2);
  arm_stall(now);
}

void GroupEngine::start_multicast_probe(TimeNs now, Outbox& out) {
  if (probe_enabled_ || removed_) return;
  probe_enabled_ = true;
  apply_probe(probe_.on_view(view_, self_, now), out);
  settle(now, out);
}

void GroupEngine::apply_probe(const MulticastProbe::Step& step, Outbox& out) {
  if (step.send_probe) emit_.datagram(wire::McastProbe{probe_.nonce()}, out);
  if (step.silent) out.emplace_back(action::MulticastUnusable{view_.id, *step.silent});
}

// ---------------------------------------------------------------------------
// Membership

void GroupEngine::on_link_failed(MemberId peer, TimeNs now, Outbox& out) {
  if (removed_) return;
  emit_.suspect(peer, out);
  settle(now, out);
}

void GroupEngine::on_flush_request(ViewId view, Outbox& out) {
  if (removed_) return;
  paused_ = true;
  flush_view_ = view;
  // The flush waits for every member of the view. One that crashed unseen by the
  // view authority is found only by a link to it failing, and an idle group sends
  // nothing: each member pings the next one in the view, so every member's link is
  // tried once per flush.
  if (const auto rank = view_.rank_of(self_); rank && view_.members.size() > 1)
    emit_.frame(view_.members[(*rank + 1) % view_.members.size()], wire::Ping{}, out);
  if (small_.in_flight() == 0 && !pipeline_.sending()) {
    out.emplace_back(action::Flushed{view, small_.next_seq(), pipeline_.next_seq()});
    flush_view_.reset();
  }
}

void GroupEngine::on_view(const ViewChange& next, TimeNs now, Outbox& out) {
  if (removed_ || next.view.id <= view_.id) return;
  std::vector<MemberId> left;
  std::set_difference(view_.members.begin(), view_.members.end(), next.view.members.begin(),
                      next.view.members.end(), std::back_inserter(left));
  emit_.flush_batch(out);  // held datagrams name the old view: they go as they are, before it ends
  view_ = next.view;
  ++admission_.views_installed;
  emit_.set_view(view_);
  if (next.multicast_emulated) emit_.emulate_multicast();
  if (!view_.contains(self_)) {
    removed_ = true;
    pipeline_.on_view(view_, out);  // own queued large messages fail
    out.emplace_back(action::Removed{view_.id});
    return;
  }
  small_.set_hosts(next.hosts);
  pipeline_.set_hosts(next.hosts);
  pipeline_.on_view(view_, out);
  if (next.ends_flush) {
    paused_ = false;
    flush_view_.reset();
  }
  out.emplace_back(action::ViewInstalled{view_, left});
  if (probe_enabled_) apply_probe(probe_.on_view(view_, self_, now), out);
  small_.set_stream_floors(next.small_floors);
  small_.on_view(view_, now, out);
  auto pending = std::move(future_);
  future_.clear();
  for (auto& [from, bytes] : pending) on_frame(from, bytes, now, out);
  settle(now, out);
}

}  // namespace hmcast::group
