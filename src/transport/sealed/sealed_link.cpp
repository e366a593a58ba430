#include "transport/sealed/sealed_link.hpp"

#include "core/assert.hpp"
#include "hmcast/config.hpp"
#include "core/wire.hpp"
#include "transport/faulty/faulty_link.hpp"

namespace hmcast::transport {

static_assert(kKeyTrailerBytes == auth::kTrailerBytes, "Config's figure for the tag's room");
static_assert(wire::kTailRoom >= auth::kTrailerBytes, "encoded frames are sealed in place");
static_assert(std::tuple_size_v<decltype(Config::key)::value_type> == auth::kKeyBytes);

namespace {

/// One more on a counter that has one writer at a time (see sealed_link.hpp).
void bump(std::atomic<std::uint64_t>& counter) {
  counter.store(counter.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

}  // namespace

SealedLink::SealedLink(std::unique_ptr<Link> inner, const auth::GroupKey& key, GroupId group)
    : ForwardingLink(std::move(inner)), key_(key), group_(group) {
  HMCAST_ASSERT(inner_ != nullptr);
  auth::require_cipher(key_.cipher);  // fail at set-up, not at the first frame
}

bool SealedLink::seal(std::uint64_t channel, std::vector<std::byte>& frame) {
  // The protocol stamps every frame with its own id and its view: the receiver
  // checks the tag against exactly those, so anything else is our bug.
  HMCAST_ASSERT(frame.size() >= wire::kHeaderSize);
  HMCAST_ASSERT(wire::peek_src(frame) == id());
  HMCAST_ASSERT(wire::peek_group(frame) == group_);
  const ViewId view = wire::peek_view(frame);
  std::lock_guard lock(send_mu_);
  SendHint& hint = send_hints_[channel % kHints];
  SendChannel* sc = hint.ch;
  if (sc == nullptr || hint.view != view || hint.channel != channel) {
    sc = send_channel(view, channel);
    if (sc == nullptr) {
      bump(stale_unsent_);
      return false;
    }
    hint = SendHint{view, channel, sc};  // after send_channel(), which may have cleared them all
  }
  ++sc->last_counter;
  auth::seal(sc->key, id(), sc->last_counter, frame);
  bump(sealed_);
  return true;
}

SealedLink::SendChannel* SealedLink::send_channel(ViewId view, std::uint64_t channel) {
  auto it = send_views_.find(view);
  if (it == send_views_.end()) {
    // A view whose counters we forgot would start them again at 1 under the same
    // key (a nonce used twice). Views only grow and every view forgotten is older
    // than those kept, so a frame stamped with a view older than the oldest kept
    // (which its receivers refuse as too old anyway) is dropped, as if lost.
    if (!send_views_.empty() && view < send_views_.begin()->first) return nullptr;
    it = send_views_.emplace(view, SendView{}).first;
    if (send_views_.size() > kViewsKept) send_hints_ = {};  // they may point into a view erased here
    while (send_views_.size() > kViewsKept) send_views_.erase(send_views_.begin());
  }
  auto ch = it->second.find(channel);
  if (ch == it->second.end())
    ch = it->second.emplace(channel, SendChannel{auth::ChannelKey(key_, group_, view, channel), 0}).first;
  return &ch->second;
}

void SealedLink::multicast(std::span<const std::byte> bytes) {
  std::vector<std::byte> frame;
  frame.reserve(bytes.size() + auth::kTrailerBytes);
  frame.assign(bytes.begin(), bytes.end());
  multicast_owned(std::move(frame));
}

void SealedLink::multicast_owned(std::vector<std::byte>&& frame) {
  frame.reserve(frame.size() + auth::kTrailerBytes);  // no-op for what wire::encode() made
  if (seal(auth::kMulticastChannel, frame)) inner_->multicast_owned(std::move(frame));
}

bool SealedLink::unicast(MemberId to, std::vector<std::byte> bytes) {
  // Channel 0 is the multicast's, and no member has id 0.
  HMCAST_ASSERT(to != auth::kMulticastChannel);
  bytes.reserve(bytes.size() + auth::kTrailerBytes);
  if (!seal(to, bytes)) return true;  // dropped as a lost frame, not a broken link
  return inner_->unicast(to, std::move(bytes));
}

std::size_t SealedLink::direct_datagram_limit(MemberId to) const {
  const std::size_t inner = inner_->direct_datagram_limit(to);
  return inner > auth::kTrailerBytes ? inner - auth::kTrailerBytes : 0;
}

bool SealedLink::unicast_datagram(MemberId to, std::vector<std::byte> bytes) {
  HMCAST_ASSERT(to != auth::kMulticastChannel);
  // Sealed for the way it will travel: a receiver tells the channels apart by it.
  if (bytes.size() > direct_datagram_limit(to)) return unicast(to, std::move(bytes));
  bytes.reserve(bytes.size() + auth::kTrailerBytes);
  if (!seal(auth::kDirectChannel + to, bytes)) return true;  // dropped as a lost frame, not a broken link
  return inner_->unicast_datagram(to, std::move(bytes));
}

bool SealedLink::send_block(MemberId to, std::vector<std::byte> head, std::span<const std::byte> payload,
                            std::uint64_t length, std::shared_ptr<const void> keep) {
  (void)length;
  (void)keep;  // the payload is copied below, before this returns
  head.reserve(head.size() + payload.size() + auth::kTrailerBytes);
  head.insert(head.end(), payload.begin(), payload.end());
  return unicast(to, std::move(head));
}

SealedLink::ReceiveView* SealedLink::receive_view(ViewId view) {
  if (newest_view_ >= kViewsKept && view <= newest_view_ - kViewsKept) return nullptr;
  if (hot_rv_ == nullptr || hot_view_ != view) {
    hot_rv_ = &receive_views_[view];
    hot_view_ = view;
  }
  return hot_rv_;
}

auth::ReplayWindow& SealedLink::window(ReceiveView& rv, ViewId view, MemberId src, std::uint64_t channel) {
  WindowHint& hint = window_hints_[src % kHints];
  if (hint.window == nullptr || hint.view != view || hint.src != src || hint.channel != channel)
    hint = WindowHint{view, src, channel, &rv.windows[{src, channel}]};
  return *hint.window;
}

void SealedLink::forget_receive_view(std::map<ViewId, ReceiveView>::iterator it) {
  hot_rv_ = nullptr;
  window_hints_ = {};
  receive_views_.erase(it);
}

bool SealedLink::admit(Inbound& in) {
  if (in.bytes.size() < wire::kHeaderSize + auth::kTrailerBytes) {
    bump(auth_failures_);
    return false;
  }
  const MemberId src = wire::peek_src(in.bytes);
  const ViewId view = wire::peek_view(in.bytes);
  // A link's frames are its peer's own (the tag names the sender the header names,
  // and the link hello names the peer: the two must agree).
  if (!in.datagram && src != in.from) {
    bump(auth_failures_);
    return false;
  }
  // A direct datagram comes on its own channel: one to us under our id, apart from our link's.
  const std::uint64_t channel = in.direct     ? auth::kDirectChannel + id()
                                : in.datagram ? std::uint64_t{auth::kMulticastChannel}
                                              : std::uint64_t{id()};
  ReceiveView* rv = receive_view(view);
  if (rv == nullptr) {
    bump(replays_refused_);
    return false;
  }
  std::optional<auth::ChannelKey>& key = in.direct ? rv->direct : in.datagram ? rv->multicast : rv->link;
  if (!key) key.emplace(key_, group_, view, channel);
  const auto opened = auth::open(*key, src, in.bytes);
  if (!opened) {
    // A view nobody genuine has spoken in yet is not remembered: forgeries naming
    // ever new views must not fill the table.
    if (rv->windows.empty()) forget_receive_view(receive_views_.find(view));
    bump(auth_failures_);
    return false;
  }
  if (!window(*rv, view, src, channel).accept(opened->counter)) {
    bump(replays_refused_);
    return false;
  }
  if (view > newest_view_) {
    newest_view_ = view;
    while (!receive_views_.empty() && newest_view_ >= kViewsKept &&
           receive_views_.begin()->first <= newest_view_ - kViewsKept)
      forget_receive_view(receive_views_.begin());
  }
  in.bytes.resize(opened->frame_size);
  bump(opened_);
  return true;
}

std::optional<Inbound> SealedLink::wait(std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    auto in = inner_->wait(deadline);
    if (!in) return std::nullopt;
    if (admit(*in)) return in;
  }
}

SealStats SealedLink::stats() const {
  SealStats s;
  s.auth_failures = auth_failures_.load(std::memory_order_relaxed);
  s.replays_refused = replays_refused_.load(std::memory_order_relaxed);
  s.sealed = sealed_.load(std::memory_order_relaxed);
  s.opened = opened_.load(std::memory_order_relaxed);
  s.stale_unsent = stale_unsent_.load(std::memory_order_relaxed);
  return s;
}

std::unique_ptr<Link> with_seal(std::unique_ptr<Link> inner, const auth::GroupKey& key, GroupId group) {
  return std::make_unique<SealedLink>(std::move(inner), key, group);
}

SealStats seal_stats(const Link& link) {
  if (const auto* s = dynamic_cast<const SealedLink*>(&without_faults(link))) return s->stats();
  return {};
}

const Link& bare_link(const Link& link) {
  const Link& under = without_faults(link);
  if (const auto* s = dynamic_cast<const SealedLink*>(&under)) return s->inner();
  return under;
}

}  // namespace hmcast::transport
