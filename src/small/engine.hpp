// The small-message protocol of one member of one group, sans-I/O.
//
// Datagrams go out once by multicast; every member ACKs up a k-nomial tree rooted
// at the sender, and an ACK means "I and my whole subtree hold [1, stable]"
// (cumulative, so one ACK covers a run of messages). A parent that misses a
// child's ACK for longer than a measured, level-scaled timeout repairs that child
// point-to-point; the child then repairs its own children. A parent that sees a
// child holding messages it lacks pulls them from the child. The sender, when
// most of the group lacks a message, multicasts it again instead. A member that
// ignores a whole repair budget is suspected; the manager removes it by a new
// view, and messages in flight complete against the survivors.
//
// Inputs: broadcast(), on_datagram(), on_p2p(), on_timer(), with the time passed
// in. Outputs: actions appended to an Outbox. No clocks, sockets or threads here.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <vector>

#include "ack_tree/ack_timeout.hpp"
#include "core/actions.hpp"
#include "core/timer_queue.hpp"
#include "core/wire.hpp"
#include "hmcast/config.hpp"
#include "hmcast/types.hpp"
#include "membership/view_manager.hpp"
#include "large/pipeline.hpp"
#include "small/multicast_probe.hpp"
#include "small/reassembly.hpp"

namespace hmcast::small {

/// Counters of one engine; "dropped" counters count bad or useless input.
struct EngineStats {
  std::uint64_t datagrams_sent = 0;
  std::uint64_t p2p_sent = 0;
  std::uint64_t acks_sent = 0;
  std::uint64_t repairs_sent = 0;
  std::uint64_t remulticasts = 0;
  std::uint64_t pulls_sent = 0;
  std::uint64_t ack_queries_sent = 0;  // AckQuery frames to children whose subtree is late
  std::uint64_t suspicions = 0;
  std::uint64_t views_installed = 0;
  std::uint64_t delivered = 0;
  std::uint64_t completed = 0;
  std::uint64_t duplicates_dropped = 0;
  std::uint64_t out_of_window_dropped = 0;
  std::uint64_t decode_errors = 0;
  std::uint64_t wrong_group_dropped = 0;
  std::uint64_t stale_view_dropped = 0;
  std::uint64_t future_view_dropped = 0;
  std::uint64_t non_member_dropped = 0;
  std::uint64_t invalid_dropped = 0;  // decodes, but makes no sense here (e.g. fragment mismatch)

  [[nodiscard]] std::uint64_t bad_packets() const {
    return decode_errors + wrong_group_dropped + stale_view_dropped + future_view_dropped + non_member_dropped +
           invalid_dropped;
  }
};

enum class BroadcastError : std::uint8_t { none, window_full, too_large, not_member };

struct BroadcastResult {
  BroadcastError error = BroadcastError::none;
  Seq seq = 0;
};

class Engine {
 public:
  Engine(GroupId group, MemberId self, View initial, ProtocolConfig config, TimeNs now);

  /// Send a large message of `size` bytes (large path, large/pipeline.hpp). The
  /// runtime supplies the bytes when SendBlock actions name them.
  large::LargeResult broadcast_large(std::uint64_t size, TimeNs now, Outbox& out, std::uint64_t block_size = 0);
  /// The application provided the buffer a NeedBuffer action asked for.
  void buffer_ready(MemberId sender, Seq seq, Outbox& out);
  [[nodiscard]] const large::Pipeline& pipeline() const { return pipeline_; }
  /// Whether a transport may place this Block frame's payload in its final buffer
  /// before on_p2p() sees the frame (Pipeline::may_place_segment, in this view).
  [[nodiscard]] bool may_place_segment(MemberId from, const wire::Header& h, const wire::Block& b) const;

  /// Send a message (small path). Fails without side effects when the window is full.
  BroadcastResult broadcast(MessageBuffer message, TimeNs now, Outbox& out);
  /// A datagram arrived from the multicast group (may be garbage).
  void on_datagram(std::span<const std::byte> bytes, TimeNs now, Outbox& out);
  /// A point-to-point frame arrived from `from` (the transport vouches for `from`).
  void on_p2p(MemberId from, std::span<const std::byte> bytes, TimeNs now, Outbox& out);
  /// Fire every timer due at `now`.
  void on_timer(TimeNs now, Outbox& out);
  /// The transport lost its reliable link to `peer`: suspect it.
  void on_link_failed(MemberId peer, TimeNs now, Outbox& out);
  /// Views come from an outside authority (the networked membership service)
  /// instead of the view's lowest member: suspicions leave as ReportSuspect
  /// actions, NewView frames are dropped, and apply_view() installs views. Call
  /// before any other input.
  void use_external_membership();
  /// External membership: install `next` (ignored unless newer than the current view).
  void apply_view(View next, TimeNs now, Outbox& out);
  /// Joining a running group (the flush, membership/control_wire.hpp): every member
  /// of the next view holds, or as a joiner is excused from, each sender's small
  /// messages up to floors[sender]. Call before apply_view() of that view, or, for
  /// the member that joins with it, before any input.
  void set_stream_floors(const std::map<MemberId, Seq>& floors);
  /// The seq the next broadcast() will get.
  [[nodiscard]] Seq next_seq() const { return next_seq_; }
  /// When on_timer() next has work (kNever if none).
  [[nodiscard]] TimeNs next_wakeup() const;
  /// Check that multicast reaches every member (multicast_probe.hpp): now, and again
  /// on each view that brings members in. A member that stays silent is reported
  /// with action::MulticastUnusable. Networked transports only: call once, after
  /// the first view is installed.
  void start_multicast_probe(TimeNs now, Outbox& out);
  [[nodiscard]] const MulticastProbe& multicast_probe() const { return probe_; }

  [[nodiscard]] const View& view() const { return view_; }
  [[nodiscard]] MemberId self() const { return self_; }
  [[nodiscard]] bool removed() const { return removed_; }
  [[nodiscard]] const EngineStats& stats() const { return stats_; }
  /// Own messages not yet all-acked.
  [[nodiscard]] std::uint64_t in_flight() const { return next_seq_ - 1 - own_completed_; }
  [[nodiscard]] bool window_has_room(std::size_t bytes) const;
  /// Messages held (delivered but not yet known stable, or not yet deliverable) over all senders.
  [[nodiscard]] std::size_t held_messages() const;

 private:
  struct Held {
    MessageBuffer msg;
    TimeNs arrival = 0;
  };
  struct ChildLink {
    MemberId id = 0;
    std::uint32_t subtree_size = 1;
    std::vector<MemberId> subtree;  // sorted: whom `stable` speaks for
    Seq stable = 0;  // the child's whole subtree holds [1, stable]
    Seq have = 0;    // the child itself holds [1, have]
    std::uint64_t mask = 0;  // ...and have+1+i for each set bit i (selective ACK)
    ack_tree::AckTimeout timeout;
    std::uint32_t attempts = 0;  // repair rounds since the child last answered
    std::uint64_t timer_gen = 0;
    TimeNs deadline = kNever;
    TimeNs last_progress = 0;  // when its ACKed `have` last grew
    Seq repaired_upto = 0;     // highest message we repaired to it (Karn: no samples across it)
    TimeNs last_heard = 0;     // its last ACK of any kind
    TimeNs stable_progress = 0;  // when its subtree's `stable` last grew
    std::uint32_t subtree_height = 0;
    bool suspected = false;
  };
  struct Stream {
    MemberId sender = 0;
    Seq delivered = 0;     // contiguous prefix delivered here
    Seq known_stable = 0;  // every member holds [1, known_stable]: no repair will need it
    std::map<Seq, Held> held;
    std::map<Seq, Reassembly> partial;
    // Position in this stream's tree under the current view.
    bool is_root = false;
    std::optional<MemberId> parent;
    std::vector<ChildLink> children;
    Seq reported_stable = 0;
    Seq reported_have = 0;
    Seq gap_reported_at = 0;  // `delivered` when we last told the parent about a hole
    bool ack_due = false;
    TimeNs pull_deadline = kNever;
    std::uint64_t pull_gen = 0;
    Seq last_announced = 0;
    bool announce_armed = false;
    TimeNs last_data_ns = 0;  // own stream: when a Data last carried our stable prefix
    TimeNs last_remulticast = -1;
  };
  enum class TimerKind : std::uint8_t { child_repair, ack_flush, announce, pull, pipeline_stall };
  struct TimerKey {
    TimerKind kind;
    MemberId sender;  // stream (or parent, for ack_flush)
    std::uint32_t child;
  };

  // Packet handling.
  bool admit(const wire::Header& h, MemberId from);
  void handle(const wire::Packet& p, MemberId from, TimeNs now, Outbox& out);
  void on_data(const wire::Data& d, TimeNs now, Outbox& out);
  void on_repair(MemberId from, const wire::Repair& r, TimeNs now, Outbox& out);
  void on_ack(MemberId from, const wire::Ack& a, TimeNs now, Outbox& out);
  void on_pull(MemberId from, const wire::Pull& p, Outbox& out);
  void on_stable(MemberId from, const wire::Stable& s, TimeNs now, Outbox& out);

  // Streams and the tree.
  Stream& stream(MemberId sender);
  /// The stream of `sender`, created if `sender` is a member; nullptr otherwise.
  Stream* stream_for(MemberId sender);
  void place_in_tree(Stream& s, TimeNs now);
  [[nodiscard]] MemberId root_of(MemberId sender) const;
  [[nodiscard]] Seq floor_of(MemberId sender) const;
  [[nodiscard]] Seq subtree_stable(const Stream& s) const;
  void accept_message(Stream& s, Seq seq, MessageBuffer msg, TimeNs now, Outbox& out);
  void advance(Stream& s, TimeNs now, Outbox& out);
  void collect_garbage(Stream& s, Seq stable);
  void rearm_child(Stream& s, std::uint32_t idx, TimeNs now);
  /// The first message we hold that `c` is not known to hold (0 if none).
  [[nodiscard]] Seq first_missing(const Stream& s, const ChildLink& c) const;
  [[nodiscard]] static bool child_holds(const ChildLink& c, Seq seq);
  [[nodiscard]] static std::uint64_t held_mask(const Stream& s);
  void fire_child(Stream& s, std::uint32_t idx, TimeNs now, Outbox& out);
  void send_repairs(Stream& s, MemberId to, Seq from, Seq to_seq, Outbox& out);
  void maybe_pull(Stream& s, TimeNs now, Outbox& out);
  void flush_acks(TimeNs now, Outbox& out);
  void arm_announce(Stream& s, TimeNs now);
  void remulticast(Stream& s, Seq seq, Outbox& out);

  // Membership.
  void suspect(MemberId member, TimeNs now, Outbox& out);
  void install_view(View next, TimeNs now, Outbox& out);
  /// Manager only: send `next` to every member of the current view (the removed
  /// ones too, so a falsely suspected member learns it is out), then install it.
  void publish_view(const View& next, TimeNs now, Outbox& out);
  [[nodiscard]] MemberId manager() const { return view_.members.front(); }

  // Output helpers.
  [[nodiscard]] wire::Header header() const { return wire::Header{{}, group_, view_.id, self_}; }
  void send_p2p(MemberId to, const wire::Body& body, Outbox& out);
  void send_p2p(MemberId to, const wire::Header& h, const wire::Body& body, Outbox& out);
  void send_datagram(std::vector<std::byte> bytes, Outbox& out);
  void apply_probe(const MulticastProbe::Step& step, Outbox& out);

  GroupId group_;
  MemberId self_;
  View view_;
  ProtocolConfig cfg_;
  TimeNs view_start_ = 0;
  std::uint32_t window_;  // current sender window (slow start up to cfg_.window_messages)
  bool removed_ = false;
  bool external_membership_ = false;
  std::map<MemberId, Stream> streams_;
  std::map<MemberId, Seq> floors_;  // set_stream_floors()
  TimerQueue<TimerKey> timers_;
  std::set<MemberId> acks_pending_;             // streams with an ACK to send
  std::map<MemberId, TimeNs> last_ack_to_;      // coalescing per parent
  std::map<MemberId, std::uint64_t> ack_flush_gen_;
  std::set<MemberId> ack_flush_armed_;
  std::uint64_t timer_serial_ = 0;  // every arming gets a fresh generation
  std::set<MemberId> suspected_;                // in the current view
  std::optional<membership::ViewManager> manager_;
  std::deque<std::pair<MemberId, std::vector<std::byte>>> future_;  // p2p frames of a later view
  // Own sending state.
  Seq next_seq_ = 1;
  Seq own_completed_ = 0;
  std::uint64_t own_bytes_in_flight_ = 0;
  EngineStats stats_;
  large::Pipeline pipeline_;
  std::int64_t pipeline_stall_ns_;
  MulticastProbe probe_;
  bool probe_enabled_ = false;
  TimeNs pipeline_activity_ = 0;  // last frame of the large path
  bool stall_armed_ = false;
  void arm_stall(TimeNs now);
};

}  // namespace hmcast::small
