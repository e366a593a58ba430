// Frames under the group key (issue 21): a Link that wraps a transport's own and
// seals everything the protocol sends (auth/frame_auth.hpp: a counter and a tag
// under the key of the frame's view), and passes on only what it received sealed
// by a member holding the key, once. The fault layer sits outside it, so the
// faults it injects model the protocol's network, not a forger.
//
// What arrives is judged on the frame's own header: its view selects the key, its
// source is the sender the tag must name, and (links) that source must be the
// link's peer. A frame whose tag fails, or too short to carry one, counts as an
// auth failure; a counter seen before on that sender's channel, or a view older
// than the last kViewsKept seen, counts as a replay. Neither reaches the protocol.
//
// Block payloads are never placed straight into a final buffer here (the tag must
// be checked before anything is used), so a large message costs a copy more; the
// placer the Node sets is kept from the transport.
//
// Thread-safety as Link: wait() from one thread at a time; the rest, stats()
// included, from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "auth/frame_auth.hpp"
#include "transport/forwarding_link.hpp"

namespace hmcast::transport {

struct SealStats {
  std::uint64_t auth_failures = 0;    // tag missing or wrong, or a link frame naming another sender
  std::uint64_t replays_refused = 0;  // a counter seen before, or a view too old to judge
  std::uint64_t sealed = 0;           // frames and datagrams sent with a tag
  std::uint64_t opened = 0;           // passed on to the protocol
  std::uint64_t stale_unsent = 0;     // our frames of a view whose counters are forgotten, dropped
};

class SealedLink final : public ForwardingLink {
 public:
  /// Views whose counters are remembered (the newest one seen and those just
  /// before it); a frame of an older view is refused, since its replays could no
  /// longer be told apart.
  static constexpr ViewId kViewsKept = 3;

  SealedLink(std::unique_ptr<Link> inner, const auth::GroupKey& key, GroupId group);
  ~SealedLink() override = default;
  SealedLink(const SealedLink&) = delete;
  SealedLink& operator=(const SealedLink&) = delete;

  void multicast(std::span<const std::byte> bytes) override;
  /// Sealed in place: the frame's spare capacity takes the trailer (wire::kTailRoom).
  void multicast_owned(std::vector<std::byte>&& frame) override;
  bool unicast(MemberId to, std::vector<std::byte> bytes) override;
  /// Sealed on the direct channel to `to` (auth::kDirectChannel), counted apart from
  /// its link, if the transport sends it as a datagram; otherwise as unicast().
  bool unicast_datagram(MemberId to, std::vector<std::byte> bytes) override;
  [[nodiscard]] std::size_t direct_datagram_limit(MemberId to) const override;
  /// Head and payload travel as one sealed frame (the payload copied behind the head).
  bool send_block(MemberId to, std::vector<std::byte> head, std::span<const std::byte> payload, std::uint64_t length,
                  std::shared_ptr<const void> keep) override;
  /// The next item whose tag checks and which is no replay.
  std::optional<Inbound> wait(std::chrono::steady_clock::time_point deadline) override;
  /// Kept from the transport: see the top of this file.
  void set_block_placer(BlockPlacer /*placer*/) override {}
  [[nodiscard]] bool places_datagrams() const override { return false; }

  [[nodiscard]] SealStats stats() const;

 private:
  /// A channel of ours (the multicast, auth::kMulticastChannel, the link to a
  /// member, or the direct datagrams to one): its key and the last counter sealed under it.
  struct SendChannel {
    auth::ChannelKey key;
    std::uint64_t last_counter = 0;
  };
  using SendView = std::map<std::uint64_t, SendChannel>;  // per channel
  struct ReceiveView {
    std::optional<auth::ChannelKey> multicast;  // set up at the first frame on each
    std::optional<auth::ChannelKey> link;       // our own channel: link frames to us
    std::optional<auth::ChannelKey> direct;     // and direct datagrams to us
    std::map<std::pair<MemberId, std::uint64_t>, auth::ReplayWindow> windows;  // per (sender, channel)
  };

  /// The channel or replay window a recent frame used, found again without walking
  /// two maps per frame (a member sends and hears on a few channels, over and over).
  /// Map nodes stay put until their view is forgotten; forgetting one clears these.
  static constexpr std::size_t kHints = 8;  // indexed by channel or sender, modulo
  struct SendHint {
    ViewId view = 0;
    std::uint64_t channel = 0;
    SendChannel* ch = nullptr;
  };
  struct WindowHint {
    ViewId view = 0;
    MemberId src = 0;
    std::uint64_t channel = 0;
    auth::ReplayWindow* window = nullptr;
  };

  /// Appends counter and tag to one of our frames (its header names our id and the
  /// view); false: the frame is of a view too old to seal (see seal_stats).
  bool seal(std::uint64_t channel, std::vector<std::byte>& frame);
  /// Our channel `channel` of `view`, set up at its first frame; nullptr: a view
  /// whose counters are forgotten. Under send_mu_.
  SendChannel* send_channel(ViewId view, std::uint64_t channel);
  /// Whether `in` is genuine and new; strips its trailer if so.
  bool admit(Inbound& in);
  /// ReceiveView of `view` if a frame of it may still be judged (nullptr: too old).
  ReceiveView* receive_view(ViewId view);
  /// The replay window of (src, channel) in `rv`, the ReceiveView of `view`.
  auth::ReplayWindow& window(ReceiveView& rv, ViewId view, MemberId src, std::uint64_t channel);
  /// Drops receive view `view` (and every hint into receive_views_).
  void forget_receive_view(std::map<ViewId, ReceiveView>::iterator it);

  const auth::GroupKey key_;
  const GroupId group_;

  std::mutex send_mu_;
  std::map<ViewId, SendView> send_views_;  // the newest kViewsKept views we sent in
  std::array<SendHint, kHints> send_hints_{};

  // Only wait() touches these (one thread at a time).
  std::map<ViewId, ReceiveView> receive_views_;  // the newest kViewsKept views seen genuine
  ViewId newest_view_ = 0;
  ViewId hot_view_ = 0;              // the view of the last frame admitted...
  ReceiveView* hot_rv_ = nullptr;    // ...and its ReceiveView (nullptr: none)
  std::array<WindowHint, kHints> window_hints_{};

  // Each has one writer at a time (seal() under send_mu_, admit() in wait()), so
  // they are bumped with a plain load and store, not a locked add; atomic for stats().
  std::atomic<std::uint64_t> auth_failures_{0};
  std::atomic<std::uint64_t> replays_refused_{0};
  std::atomic<std::uint64_t> sealed_{0};
  std::atomic<std::uint64_t> opened_{0};
  std::atomic<std::uint64_t> stale_unsent_{0};
};

/// `inner` wrapped in the sealing layer.
std::unique_ptr<Link> with_seal(std::unique_ptr<Link> inner, const auth::GroupKey& key, GroupId group);

/// What the sealing layer under `link` (and its fault layer) did; zeros if none.
SealStats seal_stats(const Link& link);

/// The transport's own link under the fault and sealing layers.
const Link& bare_link(const Link& link);

}  // namespace hmcast::transport
