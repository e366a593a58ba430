// One member of one group, sans-I/O: the view, admission of what arrives, dispatch
// by type, the timer table and suspicions, composing the small path
// (small/small_path.hpp), the large path (large/pipeline.hpp) and the multicast
// probe (multicast_probe.hpp) as peers.
//
// Admission: a datagram or frame reaches a path only if it decodes, names this
// group and this view, and comes from a member of the view (a frame's sender is
// vouched for by its link; a datagram-typed frame, emulated multicast, must name
// its link's peer as source). Frames of a later view from members are kept until
// that view is installed (bounded); everything else is counted and dropped before
// any state is touched.
//
// Views come from one authority, the coordinator (membership/coordinator.hpp), as
// ViewChange inputs; suspicions go to it as ReportSuspect actions, and so do the
// multicast probe's verdict (MulticastUnusable) and the answer to a flush request
// (Flushed). No clocks, sockets or threads here: time is passed in, actions out.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "core/actions.hpp"
#include "core/emitter.hpp"
#include "core/timer_queue.hpp"
#include "core/wire.hpp"
#include "group/multicast_probe.hpp"
#include "hmcast/config.hpp"
#include "hmcast/types.hpp"
#include "large/pipeline.hpp"
#include "small/small_path.hpp"

namespace hmcast::group {

/// A view from the coordinator, as the engine needs it (a ViewPush without addresses).
struct ViewChange {
  View view;
  /// Set on the view that ends a flush: each sender's small stream starts after
  /// its floor (a joiner is excused from what came before).
  std::map<MemberId, Seq> small_floors;
  bool ends_flush = false;
  /// The group emulates multicast over reliable links (a probe failed somewhere).
  bool multicast_emulated = false;
  /// Per member of `view` (same order): the host it runs on, which shapes the ACK
  /// trees (ack_tree/host_tree.hpp). Empty: not known, the flat tree.
  std::vector<std::uint64_t> hosts;
};

/// Input the engine refused before any path saw it, and views installed.
struct AdmissionStats {
  std::uint64_t decode_errors = 0;
  std::uint64_t wrong_group_dropped = 0;
  std::uint64_t stale_view_dropped = 0;
  std::uint64_t future_view_dropped = 0;
  std::uint64_t non_member_dropped = 0;
  std::uint64_t misrouted_dropped = 0;  // a datagram type over a link from another source, or the reverse
  std::uint64_t views_installed = 0;    // after the first
  [[nodiscard]] std::uint64_t bad_packets() const {
    return decode_errors + wrong_group_dropped + stale_view_dropped + future_view_dropped + non_member_dropped +
           misrouted_dropped;
  }
};

class GroupEngine {
 public:
  /// `first` must contain `self`; `config` must pass policy::check.
  GroupEngine(GroupId group, MemberId self, const ViewChange& first, const ProtocolConfig& config, TimeNs now);
  GroupEngine(const GroupEngine&) = delete;
  GroupEngine& operator=(const GroupEngine&) = delete;

  // Sending.
  /// A small message; refused (no side effects) while paused, removed, over
  /// max_small_message, or with the window full.
  small::BroadcastResult broadcast(MessageBuffer message, TimeNs now, Outbox& out);
  /// A large message of `size` bytes in blocks of `block_size` (the policy's); the
  /// runtime supplies the bytes when SendBlock actions name them.
  large::LargeResult broadcast_large(std::uint64_t size, std::uint64_t block_size, TimeNs now, Outbox& out);
  /// A small message of `bytes` would be taken now.
  [[nodiscard]] bool can_broadcast(std::size_t bytes) const;
  /// A large message would be queued now.
  [[nodiscard]] bool can_broadcast_large() const;
  /// The application provided the buffer a NeedBuffer action asked for.
  void buffer_ready(MemberId sender, Seq seq, Outbox& out);
  /// Whether a transport may place this Block frame's payload in its final buffer
  /// before on_frame() sees the frame (Pipeline::may_place_segment, in this view).
  [[nodiscard]] bool may_place_segment(MemberId from, const wire::Header& h, const wire::Block& b) const;

  // Input.
  /// A datagram arrived from the multicast group (may be garbage). `owner`, when
  /// given, holds `bytes`: messages that arrived whole are kept in it, not copied.
  void on_datagram(std::span<const std::byte> bytes, TimeNs now, Outbox& out, const SharedBytes& owner = {});
  /// Where the `size` payload bytes of a Data datagram whose head (wire::kDataOverhead
  /// bytes) is `head` go, for a transport that reads the head first and copies the
  /// payload there itself (SmallPath::place_fragment); nothing: it comes whole. Not
  /// input: nothing is counted, and what is wrong with it shows when it arrives.
  [[nodiscard]] std::optional<small::FragmentPlace> place_datagram(std::span<const std::byte> head, std::size_t size);
  /// A Data datagram of `head` and `size` payload bytes that the transport wrote at
  /// `at`, where place_datagram() said (may be garbage, as any datagram).
  void on_placed_datagram(std::span<const std::byte> head, std::size_t size, const std::byte* at, TimeNs now,
                          Outbox& out);
  /// Reassembly buffers for messages of several datagrams (SmallPath::set_reassembly_buffers).
  void set_reassembly_buffers(small::ReassemblyBuffers buffers) { small_.set_reassembly_buffers(std::move(buffers)); }
  /// A frame arrived on the reliable link from `from` (the transport vouches for `from`).
  void on_frame(MemberId from, std::span<const std::byte> bytes, TimeNs now, Outbox& out);
  /// Fires every timer due at `now`.
  void on_timer(TimeNs now, Outbox& out);
  /// The transport lost its reliable link to `peer`: suspect it.
  void on_link_failed(MemberId peer, TimeNs now, Outbox& out);
  /// The transport has no more input queued: ACKs held back to merge with later
  /// input go now (under load input comes in batches, so ACKs still merge; an idle
  /// member answers at once instead of after the ACK interval).
  void on_drained(TimeNs now, Outbox& out);

  // The view authority.
  /// Installs `next` (ignored unless newer than the current view).
  void on_view(const ViewChange& next, TimeNs now, Outbox& out);
  /// A member wants in: stop starting broadcasts, and answer (Flushed) once every
  /// own message is all-acked. Broadcasts resume with the view that ends the flush.
  void on_flush_request(ViewId view, Outbox& out);
  /// From now on, for good, datagrams go to each member over its link.
  void on_multicast_fallback() { emit_.emulate_multicast(); }
  /// A sent datagram's buffer (action::SendDatagram's, once the transport is done
  /// with it), for the next datagrams this group encodes (Emitter::recycle).
  void recycle_datagram(std::vector<std::byte>&& bytes) { emit_.recycle(std::move(bytes)); }
  /// Fragments of at least `bytes` of payload go gathered (Emitter::gather_from).
  void gather_fragments_from(std::size_t bytes) { emit_.gather_from(bytes); }
  /// Checks that multicast reaches every member, now and on each view that brings
  /// members in (networked transports; call once, after the first view).
  void start_multicast_probe(TimeNs now, Outbox& out);

  /// When on_timer() next has work (kNever if none).
  [[nodiscard]] TimeNs next_wakeup() const { return removed_ ? kNever : timers_.next(); }
  [[nodiscard]] const View& view() const { return view_; }
  [[nodiscard]] MemberId self() const { return self_; }
  [[nodiscard]] GroupId group() const { return emit_.group(); }
  [[nodiscard]] bool removed() const { return removed_; }
  /// A flush is under way: new broadcasts wait for the view that ends it.
  [[nodiscard]] bool paused() const { return paused_; }
  [[nodiscard]] const ProtocolConfig& config() const { return cfg_; }
  [[nodiscard]] const small::SmallPath& small_path() const { return small_; }
  [[nodiscard]] const large::Pipeline& large_path() const { return pipeline_; }
  [[nodiscard]] const MulticastProbe& multicast_probe() const { return probe_; }
  [[nodiscard]] bool multicast_emulated() const { return emit_.multicast_emulated(); }
  [[nodiscard]] const AdmissionStats& admission() const { return admission_; }
  [[nodiscard]] const EmitterStats& sent() const { return emit_.stats(); }

 private:
  /// The packet `bytes` hold, or nothing (counted) if they do not decode or we are out.
  [[nodiscard]] std::optional<wire::Packet> decoded(std::span<const std::byte> bytes);
  [[nodiscard]] bool admit(const wire::Header& h, MemberId from);
  /// The counter admit() drops a datagram of `h` from `from` under, nullptr if it
  /// admits it; counts nothing (place_datagram asks before the datagram is input).
  [[nodiscard]] std::uint64_t AdmissionStats::*refused_by(const wire::Header& h, MemberId from) const;
  /// `owner`: what holds the bytes `p` was decoded from, if anyone may keep them.
  void dispatch(const wire::Packet& p, MemberId from, TimeNs now, Outbox& out, const SharedBytes& owner = {});
  /// The datagrams a Batch carries, each admitted as if it came alone.
  void dispatch_batch(const wire::Header& outer, const wire::Batch& b, MemberId from, TimeNs now, Outbox& out,
                      const SharedBytes& owner);
  /// After every input: merged ACKs, the flush answer, the stall and probe timers.
  void settle(TimeNs now, Outbox& out);
  void apply_probe(const MulticastProbe::Step& step, Outbox& out);
  void arm_stall(TimeNs now);
  void on_stall(TimeNs now, Outbox& out);

  MemberId self_;
  View view_;
  const ProtocolConfig cfg_;
  Emitter emit_;
  TimerQueue timers_;
  small::SmallPath small_;
  large::Pipeline pipeline_;
  MulticastProbe probe_;
  bool probe_enabled_ = false;
  TimeNs probe_armed_at_ = kNever;
  std::uint64_t probe_gen_ = 0;
  bool removed_ = false;
  bool paused_ = false;
  std::optional<ViewId> flush_view_;  // a flush request not yet answered
  TimeNs large_activity_ = 0;         // last frame of the large path
  bool stall_armed_ = false;
  bool batch_armed_ = false;       // a batch_flush timer is pending
  std::uint64_t batch_gen_ = 0;
  std::deque<std::pair<MemberId, std::vector<std::byte>>> future_;  // frames of a later view
  AdmissionStats admission_;
};

}  // namespace hmcast::group
