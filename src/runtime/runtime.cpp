#include "runtime/runtime.hpp"

#include <algorithm>
#include <optional>

#include "core/assert.hpp"
#include "core/overloaded.hpp"
#include "core/wire.hpp"
#include "policy/policy.hpp"

namespace hmcast::runtime {

namespace {
/// Fragments with this much payload or more go gathered where the transport gathers.
constexpr std::size_t kGatherFrom = 4096;
}  // namespace

group::ViewChange view_change_of(const membership::ViewPush& push) {
  group::ViewChange c;
  c.view = membership::view_of(push);
  // Every member names its host (0: an old member that did not, a host of its own).
  for (const auto& m : push.members) c.hosts.push_back(m.host_id != 0 ? m.host_id : ~std::uint64_t{0} - m.id);
  c.ends_flush = push.ends_flush;
  c.multicast_emulated = push.multicast_emulated;
  if (push.ends_flush)
    for (const auto& st : push.starts) c.small_floors[st.member] = st.next_small - 1;
  return c;
}

Runtime::Runtime(transport::Transport& transport, membership::ControlSink& control, GroupId group, MemberId self,
                 const membership::ViewPush& first, const ProtocolConfig& config, TimeNs now)
    : transport_(transport),
      control_(control),
      engine_(group, self, view_change_of(first), config, now),
      hosts_(membership::host_layout(first, self)) {
  transport_.set_local_peers(hosts_.local);
  // A transport that writes a datagram from its parts (shm: into its log) takes a
  // fragment's payload from the message itself: the sender copies those bytes once,
  // not into an encoded datagram first. Below a few KiB the copy costs less than the
  // header's own buffer.
  if (transport_.gathers_multicast()) engine_.gather_fragments_from(kGatherFrom);
  // A transport that copies a fragment's payload straight into its message needs
  // the message's buffer whole from its first fragment on: from its pool, which
  // keeps buffers mapped between messages.
  if (transport_.places_datagrams())
    engine_.set_reassembly_buffers([this](std::size_t size) { return transport_.allocate_large(size); });
  for (const auto& m : first.members)
    if (m.id != self) transport_.add_peer(m.id, m.host, m.port);
}

template <class Feed>
void Runtime::step(TimeNs now, AppEvents& app, Feed&& feed) {
  HMCAST_ASSERT(!stepping_);
  stepping_ = true;
  struct Done {
    Runtime& r;
    ~Done() {
      r.scratch_.clear();  // also when a transport throws: what was left is dropped, as before
      r.stepping_ = false;
    }
  } done{*this};
  feed(scratch_);
  execute(scratch_, now, app);
}

void Runtime::on_datagram(std::span<const std::byte> bytes, TimeNs now, AppEvents& app, const SharedBytes& owner) {
  step(now, app, [&](Outbox& out) { engine_.on_datagram(bytes, now, out, owner); });
}

void Runtime::on_placed_datagram(std::span<const std::byte> head, std::size_t size, const std::byte* at, TimeNs now,
                                 AppEvents& app) {
  step(now, app, [&](Outbox& out) { engine_.on_placed_datagram(head, size, at, now, out); });
}

void Runtime::on_frame(MemberId from, std::span<const std::byte> bytes, bool placed, TimeNs now, AppEvents& app) {
  inbound_payload_ = {};
  if (bytes.size() > wire::kHeaderSize && wire::peek_type(bytes) == wire::Type::block) {
    auto res = wire::decode(bytes);
    if (res.ok()) {
      const auto& b = std::get<wire::Block>(res.packet.body);
      // A payload left out of the frame is only fine if the transport placed it.
      if (b.payload.empty() && b.length != 0 && !placed) {
        ++stats_.empty_blocks_dropped;
        return;
      }
      inbound_payload_ = b.payload;
    }
  }
  step(now, app, [&](Outbox& out) { engine_.on_frame(from, bytes, now, out); });
  inbound_payload_ = {};
}

void Runtime::on_timer(TimeNs now, AppEvents& app) {
  step(now, app, [&](Outbox& out) { engine_.on_timer(now, out); });
}

void Runtime::on_drained(TimeNs now, AppEvents& app) {
  step(now, app, [&](Outbox& out) { engine_.on_drained(now, out); });
}

void Runtime::on_link_failed(MemberId peer, TimeNs now, AppEvents& app) {
  step(now, app, [&](Outbox& out) { engine_.on_link_failed(peer, now, out); });
}

void Runtime::on_control(const membership::ControlMessage& m, TimeNs now, AppEvents& app) {
  Outbox out;
  std::visit(Overloaded{
                 [&](const membership::ViewPush& v) {
                   const bool in_it = std::any_of(v.members.begin(), v.members.end(),
                                                  [&](const auto& a) { return a.id == engine_.self(); });
                   // Who shares our host, known before any peer is added (the link routes by it).
                   std::optional<membership::HostLayout> layout;
                   if (in_it) {
                     layout = membership::host_layout(v, engine_.self());
                     transport_.set_local_peers(layout->local);
                   }
                   for (const auto& a : v.members)
                     if (a.id != engine_.self()) transport_.add_peer(a.id, a.host, a.port);
                   const View before = engine_.view();
                   engine_.on_view(view_change_of(v), now, out);
                   // Who left (a view the engine ignored as stale changes nothing): the
                   // transport can let go of what it holds for them.
                   for (MemberId id : before.members)
                     if (id != engine_.self() && !engine_.view().contains(id)) transport_.remove_peer(id);
                   if (engine_.view().id == v.view && layout) hosts_ = std::move(*layout);
                 },
                 [&](const membership::FlushRequest& f) { engine_.on_flush_request(f.view, out); },
                 [&](const membership::MulticastFallback&) { engine_.on_multicast_fallback(); },
                 // Handled before a runtime exists (the join), or never sent to members.
                 [&](const membership::Welcome&) { ++stats_.control_unexpected; },
                 [&](const membership::Refused&) { ++stats_.control_unexpected; },
                 [&](const membership::Join&) { ++stats_.control_unexpected; },
                 [&](const membership::Listening&) { ++stats_.control_unexpected; },
                 [&](const membership::SuspectReport&) { ++stats_.control_unexpected; },
                 [&](const membership::Leave&) { ++stats_.control_unexpected; },
                 [&](const membership::Flushed&) { ++stats_.control_unexpected; },
                 [&](const membership::MulticastFailed&) { ++stats_.control_unexpected; },
                 [&](const membership::Rejoin&) { ++stats_.control_unexpected; },
             },
             m);
  execute(out, now, app);
}

void Runtime::start_multicast_probe(TimeNs now, AppEvents& app) {
  step(now, app, [&](Outbox& out) { engine_.start_multicast_probe(now, out); });
}

small::BroadcastResult Runtime::broadcast(MessageBuffer message, TimeNs now, AppEvents& app) {
  small::BroadcastResult r;
  step(now, app, [&](Outbox& out) { r = engine_.broadcast(std::move(message), now, out); });
  return r;
}

large::LargeResult Runtime::broadcast_large(transport::LargeBuffer bytes, std::uint64_t size, TimeNs now,
                                            AppEvents& app) {
  HMCAST_ASSERT(!bytes || bytes->size() == size);
  return start_large(HeldLarge{std::move(bytes), {}, {}, nullptr}, size, now, app);
}

large::LargeResult Runtime::broadcast_lent(std::span<const std::byte> bytes, std::shared_ptr<const void> lender,
                                           TimeNs now, AppEvents& app) {
  HMCAST_ASSERT(lender != nullptr);
  return start_large(HeldLarge{nullptr, bytes, {}, std::move(lender)}, bytes.size(), now, app);
}

large::LargeResult Runtime::start_large(HeldLarge held, std::uint64_t size, TimeNs now, AppEvents& app) {
  if (!engine_.can_broadcast_large()) return {large::LargeError::queue_full, 0};
  // The bytes are in place before the engine can name them in a SendBlock.
  const Seq seq = engine_.large_path().next_seq();
  large_[{engine_.self(), seq}] = std::move(held);
  const std::uint64_t block = policy::block_size_for(engine_.config(), size, engine_.view().size() - 1);
  Outbox out;
  const auto r = engine_.broadcast_large(size, block, now, out);
  HMCAST_ASSERT(r.error != large::LargeError::none || r.seq == seq);
  if (r.error == large::LargeError::none) stats_.last_block_size = block;
  else large_.erase({engine_.self(), seq});
  execute(out, now, app);
  return r;
}

void Runtime::own_lent(Seq seq, AppEvents& app) {
  // A delivery of it still queued for the application keeps the lender: it gets the copy too.
  std::shared_ptr<std::vector<std::byte>> copy;
  auto held = large_.find({engine_.self(), seq});
  if (held != large_.end() && held->second.lender) {
    copy = transport_.allocate_large(held->second.lent.size());
    HMCAST_ASSERT(copy && copy->size() == held->second.lent.size());
    std::copy(held->second.lent.begin(), held->second.lent.end(), copy->begin());
    held->second = HeldLarge{copy, {}, {}, nullptr};
  }
  for (auto& e : app) {
    auto* dl = std::get_if<action::DeliverLarge>(&e);
    if (dl == nullptr || dl->sender != engine_.self() || dl->seq != seq || !dl->message.lent()) continue;
    dl->message = copy ? MessageBuffer(copy) : dl->message.copied();
  }
}

bool Runtime::lend_receive(MemberId sender, Seq seq, std::span<std::byte> into, std::shared_ptr<const void> lender) {
  HMCAST_ASSERT(lender != nullptr && !into.empty());
  const std::pair key{sender, seq};
  if (sender == engine_.self() || large_.count(key) != 0 || lent_into_.count(key) != 0 ||
      lent_into_.size() >= kMaxLentReceives || seq <= engine_.large_path().delivered_from(sender))
    return false;
  lent_into_[key] = LentInto{into, std::move(lender)};
  return true;
}

void Runtime::unlend_receive(MemberId sender, Seq seq) { lent_into_.erase({sender, seq}); }

std::optional<transport::Placement> Runtime::placement(MemberId from, std::span<const std::byte> head,
                                                       std::size_t frame_size) {
  if (head.size() == wire::kDataOverhead && wire::peek_type(head) == wire::Type::data) {
    // A multicast datagram's fragment (Transport::places_datagrams).
    if (frame_size <= head.size()) return std::nullopt;
    auto place = engine_.place_datagram(head, frame_size - head.size());
    if (!place) return std::nullopt;
    return transport::Placement{place->dest, std::move(place->keep)};
  }
  auto res = wire::decode(head);  // the head alone decodes as a Block without payload
  if (!res.ok()) return std::nullopt;
  const auto* b = std::get_if<wire::Block>(&res.packet.body);
  if (b == nullptr || b->length != frame_size - head.size()) return std::nullopt;
  if (!engine_.may_place_segment(from, res.packet.header, *b)) return std::nullopt;
  auto buf = large_.find({b->sender, b->seq});
  if (buf == large_.end()) return std::nullopt;
  const auto into = buf->second.into();  // empty for our own (lent or not: never written)
  if (into.empty() || b->offset + b->length > into.size()) return std::nullopt;
  return transport::Placement{into.subspan(b->offset, b->length), buf->second.keeper()};
}

void Runtime::execute(Outbox& actions, TimeNs now, AppEvents& app) {
  std::vector<MemberId> broken;
  for (auto& a : actions) {
    std::visit(
        Overloaded{
            [&](action::SendDatagram& d) {
              if (!d.tail.empty()) {
                transport_.multicast_gathered(d.bytes, d.tail);
                engine_.recycle_datagram(std::move(d.bytes));
                return;
              }
              transport_.multicast_owned(std::move(d.bytes));
              // Kept by the transport (moved from: nothing to recycle), or copied and done with.
              engine_.recycle_datagram(std::move(d.bytes));  // NOLINT(bugprone-use-after-move)
            },
            [&](action::SendP2P& p) {
              const bool sent = p.datagram ? transport_.unicast_datagram(p.to, std::move(p.bytes))
                                           : transport_.unicast(p.to, std::move(p.bytes));
              if (!sent) broken.push_back(p.to);
            },
            [&](action::SendBlock& b) {
              // The segment's bytes come from our buffer at their own offset: a relay
              // forwards bytes it placed there when it accepted them.
              auto buf = large_.find({b.sender, b.seq});
              HMCAST_ASSERT(buf != large_.end());  // the engine names ranges of buffers it holds
              const HeldLarge& held = buf->second;
              std::span<const std::byte> payload;
              if (held.buffer || held.lender) {
                HMCAST_ASSERT(b.offset + b.length <= held.bytes().size());
                payload = held.bytes().subspan(b.offset, b.length);
              }
              // Lent memory goes without a keeper: the transport copies what it queues.
              if (!transport_.send_block(b.to, std::move(b.frame), payload, b.length, held.buffer))
                broken.push_back(b.to);
            },
            [&](action::NeedBuffer& nb) {
              HMCAST_ASSERT(nb.size <= engine_.config().max_large_message);  // the engine checked the announcement
              const std::pair key{nb.sender, nb.seq};
              if (auto lent = lent_into_.find(key); lent != lent_into_.end() && lent->second.into.size() == nb.size) {
                // Straight into the application's memory (Group::lend_receive).
                large_[key] = HeldLarge{nullptr, lent->second.into, lent->second.into, std::move(lent->second.lender)};
                lent_into_.erase(lent);
              } else {
                auto buf = transport_.allocate_large(nb.size);
                large_[key] = HeldLarge{buf, {}, {}, nullptr};
                // Before buffer_ready(): its Ready frames are what makes the transport
                // advertise the buffer to the peers that will write into it.
                transport_.offer_region(nb.sender, nb.seq, std::move(buf));
              }
              Outbox more;
              engine_.buffer_ready(nb.sender, nb.seq, more);
              execute(more, now, app);
            },
            [&](action::BlockAccepted& acc) {
              // The one copy on the receiving side: the segment's bytes, straight to their final offset.
              auto buf = large_.find({acc.sender, acc.seq});
              const auto into = buf == large_.end() ? std::span<std::byte>{} : buf->second.into();
              if (!into.empty() && inbound_payload_.size() == acc.length && acc.offset + acc.length <= into.size())
                std::copy(inbound_payload_.begin(), inbound_payload_.end(),
                          into.begin() + static_cast<std::ptrdiff_t>(acc.offset));
            },
            [&](action::DeliverLarge& dl) {
              auto buf = large_.find({dl.sender, dl.seq});
              if (buf != large_.end()) {
                const HeldLarge& held = buf->second;
                // Our own lent message: the delivery holds the lender until it has run.
                dl.message = held.lender ? MessageBuffer::lent(held.lender, held.lent) : MessageBuffer(held.buffer);
              }
              app.emplace_back(std::move(dl));
            },
            [&](action::ReleaseLarge& r) {
              large_.erase({r.sender, r.seq});
              transport_.retire_region(r.sender, r.seq);
            },
            [&](action::DiscardLarge& d) {
              large_.erase({d.sender, d.seq});
              transport_.retire_region(d.sender, d.seq);
            },
            [&](action::ReportSuspect& s) {
              control_.send(membership::SuspectReport{engine_.view().id, s.member});
            },
            [&](action::MulticastUnusable& m) {
              probe_silent_ = m.silent;
              control_.send(membership::MulticastFailed{m.view, m.silent});
            },
            [&](action::Flushed& f) { control_.send(membership::Flushed{f.view, f.next_small, f.next_large}); },
            [&](action::Deliver& d) { app.emplace_back(std::move(d)); },
            [&](action::Completed& c) { app.emplace_back(c); },
            [&](action::CompletedLarge& c) { app.emplace_back(c); },
            [&](action::FailedLarge& f) { app.emplace_back(std::move(f)); },
            [&](action::ViewInstalled& v) { app.emplace_back(std::move(v)); },
            [&](action::Removed& r) { app.emplace_back(r); },
        },
        a);
  }
  actions.clear();
  // A peer whose endpoint is gone will never answer: tell the protocol now.
  for (MemberId peer : broken) {
    Outbox more;
    engine_.on_link_failed(peer, now, more);
    execute(more, now, app);
  }
}

}  // namespace hmcast::runtime
