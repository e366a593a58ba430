#include "large/pipeline.hpp"

#include <algorithm>
#include <string>

#include "ack_tree/host_tree.hpp"
#include "large/host_schedule.hpp"
#include "core/assert.hpp"

namespace hmcast::large {

namespace {
constexpr std::size_t kEarlyLimit = 4096;

/// The rank `rank` receives its first block from, in the two-level plan (hosts not
/// empty) or in `flat`.
std::optional<std::uint32_t> first_source(const Schedule* flat, LargeAlgorithm algorithm, std::uint32_t root,
                                          std::uint32_t blocks, std::span<const std::uint64_t> hosts,
                                          std::uint32_t rank) {
  if (flat == nullptr) {
    const RankPlan plan = host_plan(algorithm, root, blocks, hosts, rank);
    if (plan.receives.empty()) return std::nullopt;
    return plan.receives.front().from;
  }
  for (std::uint32_t step = 0; step < flat->steps(); ++step) {
    const auto r = flat->receives(rank, step);
    if (!r.empty()) return r.front().from;
  }
  return std::nullopt;
}
}  // namespace

Pipeline::Pipeline(MemberId self, View view, const ProtocolConfig& config, Emitter& emit)
    : self_(self), view_(std::move(view)), cfg_(config), emit_(emit) {
  HMCAST_ASSERT(cfg_.block_size > 0 && cfg_.block_size <= wire::kMaxBlock);
}

wire::Announce Pipeline::announce_of(const Message& t) const {
  return wire::Announce{t.sender, t.seq, t.size, t.block_size, static_cast<std::uint8_t>(t.algorithm)};
}

bool Pipeline::fits_limits(std::uint64_t size, std::uint64_t block_size, LargeAlgorithm algorithm) const {
  HMCAST_ASSERT(block_size > 0);
  const std::uint64_t blocks = std::max<std::uint64_t>(1, size / block_size + (size % block_size != 0));
  if (size > cfg_.max_large_message || blocks > wire::kMaxBlocks) return false;
  const auto steps = schedule_steps(algorithm, view_.size(), static_cast<std::uint32_t>(blocks));
  return steps && *steps <= kMaxScheduleSteps;
}

LargeResult Pipeline::broadcast(std::uint64_t size, Outbox& out, std::uint64_t block_size) {
  if (!view_.contains(self_)) return {LargeError::not_member, 0};
  if (queue_.size() >= cfg_.large_queue_limit) return {LargeError::queue_full, 0};
  if (block_size == 0 || block_size > wire::kMaxBlock) block_size = cfg_.block_size;
  if (!fits_limits(size, block_size, cfg_.large_algorithm)) return {LargeError::over_limit, 0};
  const Seq seq = next_seq_++;
  queue_.push_back(Queued{seq, size, block_size});
  if (!own_active_) start_next(out);
  return {LargeError::none, seq};
}

void Pipeline::start_next(Outbox& out) {
  if (own_active_ || queue_.empty()) return;
  const auto [seq, size, block_size] = queue_.front();
  queue_.pop_front();
  own_active_ = seq;
  Message& t = create(self_, seq, size, block_size, cfg_.large_algorithm);
  t.buffer = true;
  t.have.assign(t.blocks, true);
  t.have_count = t.blocks;
  t.complete = true;
  t.delivered_before = seq <= delivered_[self_];  // a restart after a view change
  deliver(t, out);  // the sender delivers its own, as on the small path
  for (MemberId p : t.send_peers) emit_.frame(p, announce_of(t), out);
  pump(t, out);
  check_ack(t, out);
}

Pipeline::Message& Pipeline::create(MemberId sender, Seq seq, std::uint64_t size, std::uint64_t block_size,
                                     LargeAlgorithm algorithm) {
  Message& t = transfers_[{sender, seq}];
  t.sender = sender;
  t.seq = seq;
  t.size = size;
  t.block_size = block_size;
  t.algorithm = algorithm;
  t.segment_size = std::clamp<std::uint64_t>(cfg_.segment_size, 1, block_size);
  // Announcements were checked (fits_limits), own messages refused beyond them.
  HMCAST_ASSERT(fits_limits(size, block_size, algorithm));
  t.blocks = static_cast<std::uint32_t>(std::max<std::uint64_t>(1, size / block_size + (size % block_size != 0)));
  t.have.assign(t.blocks, false);
  t.source.assign(t.blocks, 0);
  const std::uint32_t n = view_.size();
  // With one receiver nobody forwards a segment: cutting blocks into segments gains
  // no cut-through, and each transfer's fixed cost on the link is all it adds.
  if (n == 2) t.segment_size = block_size;
  const std::uint32_t root = *view_.rank_of(sender);
  const std::uint32_t me = *view_.rank_of(self_);
  const std::span<const std::uint64_t> hosts =
      hosts_.size() == n ? std::span<const std::uint64_t>(hosts_) : std::span<const std::uint64_t>();
  const auto add_send = [&](const Hop& tr) {
    t.sends.push_back(tr);
    t.send_peers.insert(view_.members[tr.to]);
  };
  const auto add_receive = [&](const Hop& tr) {
    t.source[tr.block] = tr.from;
    t.recv_peers.insert(view_.members[tr.from]);
    t.receive_order.push_back(view_.members[tr.from]);
  };
  std::unique_ptr<Schedule> schedule;  // the flat schedule; none for the two-level plan
  if (by_host(hosts)) {
    // Each block crosses to a host once, then moves inside it (host_schedule.hpp).
    const RankPlan plan = host_plan(algorithm, root, t.blocks, hosts, me);
    for (const auto& tr : plan.sends) add_send(tr);
    for (const auto& tr : plan.receives) add_receive(tr);
  } else {
    schedule = make_schedule(algorithm, n, root, t.blocks);
    for (std::uint32_t step = 0; step < schedule->steps(); ++step) {
      for (const auto& tr : schedule->sends(me, step)) add_send(tr);
      for (const auto& tr : schedule->receives(me, step)) add_receive(tr);
    }
  }
  if (cfg_.large_unasked_first_block) {
    // A receiver credits its first receive as soon as it takes the announcement,
    // which we send ahead of any block on the same FIFO link: where that receive is
    // from us, the credit is as good as here (ProtocolConfig::large_unasked_first_block).
    // Only for members heard from in this view: one still in an older view would keep
    // the block among its future frames, or lose it, and never credit it again.
    for (MemberId p : t.send_peers) {
      if (heard_.count(p) == 0) continue;
      const auto from = first_source(schedule.get(), algorithm, root, t.blocks, hosts, *view_.rank_of(p));
      if (from == me) t.credit_from[p] = std::max<std::uint32_t>(t.credit_from[p], 1);
    }
  }
  const ack_tree::HostTree tree(n, root, cfg_.radix, hosts);
  if (auto p = tree.parent(me)) t.ack_parent = view_.members[*p];
  for (auto c : tree.children(me)) t.ack_children.insert(view_.members[c]);
  auto early = early_.find({sender, seq});
  if (early != early_.end()) {
    for (MemberId c : early->second.acks)
      if (t.ack_children.count(c) != 0) t.acked.insert(c);
    for (const auto& [p, credit] : early->second.credit)
      if (t.send_peers.count(p) != 0) t.credit_from[p] = std::max(t.credit_from[p], credit);
    early_.erase(early);
  }
  return t;
}

void Pipeline::on_announce(MemberId from, const wire::Announce& a, Outbox& out) {
  heard_.insert(from);
  const Key key{a.sender, a.seq};
  if (a.sender == self_ || !view_.contains(a.sender) || transfers_.count(key) != 0) return;  // ours, or seen
  if (a.seq <= finished_[a.sender]) return;  // a late copy of something over
  if (auto held = awaiting_.find(key); held != awaiting_.end()) {
    // The sender never committed it (it restarts it): the copy from the old view goes,
    // before NeedBuffer asks for the new one.
    awaiting_.erase(held);
    out.emplace_back(action::DiscardLarge{a.sender, a.seq});
  }
  if (a.block_size == 0 || a.block_size > wire::kMaxBlock) {
    ++stats_.invalid_dropped;
    return;
  }
  // A peer's counts against our own limits, before anything is allocated or walked.
  const auto of_sender = std::count_if(transfers_.begin(), transfers_.end(),
                                       [&](const auto& kv) { return kv.first.first == a.sender; });
  if (!fits_limits(a.size, a.block_size, static_cast<LargeAlgorithm>(a.algorithm)) ||
      static_cast<std::size_t>(of_sender) >= kMaxTransfersPerSender) {
    ++stats_.over_limit_dropped;
    return;
  }
  Message& t = create(a.sender, a.seq, a.size, a.block_size, static_cast<LargeAlgorithm>(a.algorithm));
  t.delivered_before = a.seq <= delivered_[a.sender];  // the sender restarted it in this view
  if (t.recv_peers.count(from) == 0 && t.blocks > 0 && !t.recv_peers.empty()) {
    // Whoever announces must be one of the members that send us blocks.
    ++stats_.invalid_dropped;
    transfers_.erase(key);
    return;
  }
  out.emplace_back(action::NeedBuffer{a.sender, a.seq, a.size});
  for (MemberId p : t.send_peers) emit_.frame(p, announce_of(t), out);  // the announcement runs ahead of the data
}

void Pipeline::buffer_ready(MemberId sender, Seq seq, Outbox& out) {
  auto it = transfers_.find({sender, seq});
  if (it == transfers_.end() || it->second.buffer) return;
  it->second.buffer = true;
  grant(it->second, out);
}

void Pipeline::grant(Message& t, Outbox& out) {
  // Credit the next receives in schedule order, up to the window ahead of what we hold,
  // and one more once a receive in progress is nearly done (just in time, see the header).
  bool nearly_done = false;
  for (const auto& [block, held] : t.filled)
    nearly_done = nearly_done || block_length(t, block) - held <= cfg_.large_credit_lead_bytes;
  const std::uint64_t limit = std::min<std::uint64_t>(
      t.receive_order.size(), std::uint64_t{t.have_count} + cfg_.large_receive_window + (nearly_done ? 1 : 0));
  std::set<MemberId> changed;
  HMCAST_ASSERT(t.credits_granted <= t.receive_order.size());
  while (t.credits_granted < limit) {
    const MemberId p = t.receive_order[t.credits_granted++];
    ++t.credit_to[p];
    changed.insert(p);
  }
  for (MemberId p : changed) emit_.frame(p, wire::Ready{t.sender, t.seq, t.credit_to[p]}, out);
}

void Pipeline::on_ready(MemberId from, const wire::Ready& r, Outbox& out) {
  heard_.insert(from);
  auto it = transfers_.find({r.sender, r.seq});
  if (it == transfers_.end()) {
    // A member that heard of the message by another route may be ready before we hear of it.
    if (r.seq > finished_[r.sender] && view_.contains(r.sender) && early_.size() < kEarlyLimit) {
      auto& c = early_[{r.sender, r.seq}].credit[from];
      c = std::max(c, r.credit);
    }
    return;
  }
  if (it->second.send_peers.count(from) == 0) {
    ++stats_.invalid_dropped;
    return;
  }
  const Key key = it->first;
  auto& credit = it->second.credit_from[from];
  credit = std::max(credit, r.credit);
  pump(it->second, out);
  maybe_finish(key, out);
}

std::uint64_t Pipeline::block_length(const Message& t, std::uint32_t block) {
  const std::uint64_t offset = std::uint64_t{block} * t.block_size;
  return std::min(t.block_size, t.size - std::min(t.size, offset));
}

void Pipeline::pump(Message& t, Outbox& out) {
  while (t.next_send < t.sends.size()) {
    const auto& tr = t.sends[t.next_send];
    const MemberId to = view_.members[tr.to];
    // A credit stands for a whole block: it is needed before the first segment only.
    if (t.send_progress == 0 && t.sent_to[to] >= t.credit_from[to]) break;  // schedule order: wait for it
    const std::uint64_t start = std::uint64_t{tr.block} * t.block_size;
    const std::uint64_t length = block_length(t, tr.block);
    const auto filled = t.filled.find(tr.block);
    const std::uint64_t held = t.have[tr.block] ? length : filled == t.filled.end() ? 0 : filled->second;
    // Every segment we hold goes now (cut-through); the last one of a block may be short,
    // and an empty block is one empty segment, sent once the block is "held".
    do {
      const std::uint64_t end = std::min(length, t.send_progress + t.segment_size);
      if (!t.have[tr.block] && (end > held || end == t.send_progress)) return;  // wait for its bytes
      const std::uint64_t offset = start + t.send_progress;
      const auto len = static_cast<std::uint32_t>(end - t.send_progress);
      wire::Block b{t.sender, t.seq, tr.block, offset, len, {}};
      out.emplace_back(action::SendBlock{to, t.sender, t.seq, offset, len,
                                         wire::encode(emit_.header(), b)});
      if (t.send_progress == 0) ++t.sent_to[to];
      ++stats_.segments_sent;
      stats_.bytes_sent += len;
      t.send_progress = end;
    } while (t.send_progress < length);
    ++stats_.blocks_sent;
    ++t.next_send;
    t.send_progress = 0;
  }
}

Pipeline::SegmentCheck Pipeline::check_segment(MemberId from, const wire::Block& b) const {
  auto it = transfers_.find({b.sender, b.seq});
  if (it == transfers_.end()) return SegmentCheck::invalid;
  const Message& t = it->second;
  if (b.index >= t.blocks || !t.buffer || view_.members[t.source[b.index]] != from || t.sender == self_)
    return SegmentCheck::invalid;  // not what the schedule says this member sends us
  // The segment must lie inside its block (which the message's end may cut short), and
  // only an empty block is sent as an empty segment.
  const std::uint64_t start = std::uint64_t{b.index} * t.block_size;
  const std::uint64_t length = block_length(t, b.index);
  if (b.offset < start || b.offset - start > length || b.length > length - (b.offset - start) ||
      (b.length == 0 && length != 0))
    return SegmentCheck::invalid;
  const std::uint64_t at = b.offset - start;
  const std::uint64_t held = held_bytes(t, b.index);
  if (t.have[b.index] || (b.length != 0 && at + b.length <= held))
    return SegmentCheck::duplicate;  // every byte of it is here already
  // Segments of a block come in order over one FIFO link: a gap or an overlap means
  // the sender does not follow the protocol.
  return at == held ? SegmentCheck::accept : at > held ? SegmentCheck::ahead : SegmentCheck::invalid;
}

std::uint64_t Pipeline::held_bytes(const Message& t, std::uint32_t block) {
  if (t.have[block]) return block_length(t, block);
  const auto filled = t.filled.find(block);
  return filled == t.filled.end() ? 0 : filled->second;
}

bool Pipeline::may_place_segment(MemberId from, const wire::Block& b) const {
  const auto c = check_segment(from, b);
  return c == SegmentCheck::accept || c == SegmentCheck::ahead;
}

void Pipeline::on_block(MemberId from, const wire::Block& b, Outbox& out) {
  heard_.insert(from);
  switch (check_segment(from, b)) {
    case SegmentCheck::invalid:
    case SegmentCheck::ahead:
      ++stats_.invalid_dropped;
      return;
    case SegmentCheck::duplicate:
      ++stats_.duplicate_segments;
      return;
    case SegmentCheck::accept:
      break;
  }
  auto it = transfers_.find({b.sender, b.seq});
  Message& t = it->second;
  const Key key = it->first;
  const std::uint64_t length = block_length(t, b.index);
  const std::uint64_t held = held_bytes(t, b.index);
  HMCAST_ASSERT(held + b.length <= length && !t.have[b.index]);  // check_segment said accept
  const auto filled = t.filled.find(b.index);
  out.emplace_back(action::BlockAccepted{t.sender, t.seq, b.offset, b.length});
  ++stats_.segments_received;
  if (held + b.length == length) {
    if (filled != t.filled.end()) t.filled.erase(filled);
    t.have[b.index] = true;
    ++t.have_count;
    ++stats_.blocks_received;
  } else {
    t.filled[b.index] = held + b.length;
  }
  grant(t, out);
  pump(t, out);
  if (t.have_count == t.blocks) t.complete = true;  // delivered on the commit (step 5)
  check_ack(t, out);
  maybe_finish(key, out);
}

void Pipeline::deliver(Message& t, Outbox& out) {
  HMCAST_ASSERT(!t.delivered && t.complete && t.have_count == t.blocks);  // once, and only with every block
  t.delivered = true;
  hand_over(t.sender, t.seq, t.size, t.delivered_before, out);
}

void Pipeline::hand_over(MemberId sender, Seq seq, std::uint64_t size, bool delivered_before, Outbox& out) {
  if (delivered_before) {
    ++stats_.redeliveries_suppressed;
    return;
  }
  delivered_[sender] = std::max(delivered_[sender], seq);
  ++stats_.delivered;
  out.emplace_back(action::DeliverLarge{sender, seq, size, {}});
}

void Pipeline::on_ack(MemberId from, const wire::LargeAck& a, Outbox& out) {
  heard_.insert(from);
  auto it = transfers_.find({a.sender, a.seq});
  if (it == transfers_.end()) {
    if (a.seq > finished_[a.sender] && view_.contains(a.sender) && early_.size() < kEarlyLimit)
      early_[{a.sender, a.seq}].acks.insert(from);  // a child finished before we heard of the message
    return;
  }
  Message& t = it->second;
  const Key key = it->first;
  if (t.ack_children.count(from) == 0) {
    ++stats_.invalid_dropped;
    return;
  }
  t.acked.insert(from);
  check_ack(t, out);
  maybe_finish(key, out);
}

void Pipeline::check_ack(Message& t, Outbox& out) {
  if (!t.complete || t.acked_up || t.acked.size() != t.ack_children.size()) return;
  t.acked_up = true;
  if (t.ack_parent) {
    emit_.frame(*t.ack_parent, wire::LargeAck{t.sender, t.seq}, out);
    return;
  }
  // The root: every member has every byte. Commit it: each member delivers on this.
  HMCAST_ASSERT(t.sender == self_ && own_active_ == t.seq);
  last_commit_ = t.seq;
  send_to_all(wire::LargeCommit{self_, t.seq}, out);
  ++stats_.completed;
  out.emplace_back(action::CompletedLarge{t.seq});
  own_active_.reset();
  const Key key{t.sender, t.seq};
  maybe_finish(key, out);  // `t` may be gone after this
  start_next(out);
}

void Pipeline::send_to_all(const wire::LargeCommit& c, Outbox& out) {
  for (MemberId m : view_.members)
    if (m != self_) emit_.frame(m, c, out);
}

void Pipeline::on_commit(MemberId from, const wire::LargeCommit& c, Outbox& out) {
  heard_.insert(from);
  // From the sender itself, or relayed by a survivor once the sender left.
  if (from != c.sender && view_.contains(c.sender)) {
    ++stats_.invalid_dropped;
    return;
  }
  const Key key{c.sender, c.seq};
  if (auto it = transfers_.find(key); it != transfers_.end()) {
    Message& t = it->second;
    if (t.delivered) return;  // a commit sent again after a view change
    if (!t.complete) {
      ++stats_.invalid_dropped;  // a commit exists only once every member holds every byte
      return;
    }
    deliver(t, out);
    maybe_finish(key, out);
    return;
  }
  auto held = awaiting_.find(key);
  if (held == awaiting_.end()) return;  // delivered already, or never ours to deliver
  const std::uint64_t size = held->second.size;
  awaiting_.erase(held);
  if (from != c.sender) ++stats_.delivered_on_relay;
  hand_over(c.sender, c.seq, size, c.seq <= delivered_[c.sender], out);
  out.emplace_back(action::ReleaseLarge{c.sender, c.seq});
}

void Pipeline::maybe_finish(const Key& key, Outbox& out) {
  auto it = transfers_.find(key);
  if (it == transfers_.end()) return;
  const Message& t = it->second;
  if (!t.acked_up || t.next_send < t.sends.size()) return;  // others may still need our blocks
  if (!t.delivered) return;  // its commit is still to come
  finished_[t.sender] = std::max(finished_[t.sender], t.seq);
  out.emplace_back(action::ReleaseLarge{t.sender, t.seq});
  transfers_.erase(it);
}

std::set<MemberId> Pipeline::waiting_on() const {
  std::set<MemberId> peers;
  for (const auto& [key, t] : transfers_) {
    if (t.next_send < t.sends.size() && t.send_progress == 0) {  // a send under way waits for our sources
      const MemberId to = view_.members[t.sends[t.next_send].to];
      if (t.credit_from.count(to) == 0 || t.sent_to.count(to) == 0 || t.sent_to.at(to) >= t.credit_from.at(to))
        peers.insert(to);
    }
    if (!t.complete)
      for (std::uint32_t b = 0; b < t.blocks; ++b)
        if (!t.have[b]) peers.insert(view_.members[t.source[b]]);
    if (t.complete && !t.acked_up)
      for (MemberId c : t.ack_children)
        if (t.acked.count(c) == 0) peers.insert(c);
    if (t.acked_up && !t.delivered) peers.insert(t.sender);  // its commit
  }
  peers.erase(self_);
  return peers;
}

void Pipeline::on_view(const View& view, Outbox& out) {
  // A schedule is laid out over one view; with members gone it cannot finish. Stop
  // what is in flight; our own unfinished message starts again over the new view
  // (same seq, ahead of the queue), so it completes against the survivors.
  std::optional<Queued> restart;
  const bool still_member = view.contains(self_);
  // Held whole from two view changes ago and still uncommitted: no survivor had the
  // commit (a relay comes at the view change after the sender left).
  for (auto it = awaiting_.begin(); it != awaiting_.end();) {
    if (--it->second.views_left > 0 && still_member) {
      ++it;
      continue;
    }
    ++stats_.uncommitted_discarded;
    out.emplace_back(action::DiscardLarge{it->first.first, it->first.second});
    it = awaiting_.erase(it);
  }
  for (auto& [key, t] : transfers_) {
    if (t.sender == self_ && !t.acked_up) {
      restart = Queued{t.seq, t.size, t.block_size};  // its buffer stays: no ReleaseLarge
      continue;
    }
    if (t.sender != self_ && t.complete && !t.delivered && still_member) {
      awaiting_[key] = Awaiting{t.size};  // every byte is here: keep it for its commit
      continue;
    }
    if (!t.delivered) out.emplace_back(action::DiscardLarge{t.sender, t.seq});
    out.emplace_back(action::ReleaseLarge{t.sender, t.seq});
  }
  transfers_.clear();
  early_.clear();
  heard_.clear();  // who installed the new view shows again by its frames
  finished_.clear();  // a surviving sender may restart a seq that was over here
  own_active_.reset();
  // Departed senders restart nothing: forget them, but relay (below) the commit of
  // the last message each delivered here, to survivors that may await it.
  for (auto it = delivered_.begin(); it != delivered_.end();) {
    if (view.contains(it->first)) {
      ++it;
      continue;
    }
    relay_[it->first] = {it->second, 2};
    it = delivered_.erase(it);
  }
  view_ = view;
  if (still_member) {
    // A survivor that may await a commit gets it: ours again, and departed senders'
    // (for two view changes: a relay of this one may name a view that is gone before
    // it arrives).
    if (last_commit_ > 0) send_to_all(wire::LargeCommit{self_, last_commit_}, out);
    for (auto it = relay_.begin(); it != relay_.end();) {
      send_to_all(wire::LargeCommit{it->first, it->second.first}, out);
      ++stats_.commits_relayed;
      it = --it->second.second == 0 ? relay_.erase(it) : std::next(it);
    }
  } else {
    relay_.clear();
  }
  if (restart) {
    if (still_member) ++stats_.restarted;
    queue_.push_front(*restart);  // may exceed queue_limit by this one message: it was admitted before
  }
  if (!still_member) {
    for (const auto& q : queue_) {
      ++stats_.failed;
      out.emplace_back(action::FailedLarge{q.seq, "this member was removed from the group; join again"});
      out.emplace_back(action::ReleaseLarge{self_, q.seq});  // the buffer the application gave us
    }
    queue_.clear();
    return;
  }
  start_next(out);
}

}  // namespace hmcast::large
