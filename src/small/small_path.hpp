// The small-message path of one member of one group, sans-I/O.
//
// Datagrams go out once by multicast; every member ACKs up a k-nomial tree rooted
// at the sender, and an ACK means "I and my whole subtree hold [1, stable]"
// (cumulative, so one ACK covers a run of messages). Repair is driven by the one
// who lacks: a member that sees a later datagram of a sender than one it lacks
// (a sender's datagrams arrive in order, give or take the nack delay), or hears
// from the sender's announcement that more was sent, asks its parent for just
// the fragments it lacks (a nack); the parent answers from what it holds and owes
// the rest. A parent that misses a child's ACK for longer than a measured,
// level-scaled timeout asks the child (AckQuery), which answers with its ACK and
// a nack; only a one-datagram message is pushed whole, or multicast again by the
// sender when most of the group lacks it. A parent that sees a child holding
// messages it lacks nacks the child for them. A member silent through a whole
// repair budget is suspected (the coordinator removes it by a new view, and
// messages in flight complete against the survivors). A departed
// sender's stream is finished by a proxy root, the view's first member.
//
// The group engine (group/group_engine.hpp) admits frames (group, view, member)
// before they reach this path, owns the timer table this path arms, and lends it
// the Emitter that frames and suspicions go out through.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <vector>

#include "ack_tree/ack_timeout.hpp"
#include "core/actions.hpp"
#include "small/fragmenter.hpp"
#include "core/emitter.hpp"
#include "core/timer_queue.hpp"
#include "core/wire.hpp"
#include "hmcast/config.hpp"
#include "hmcast/types.hpp"
#include "small/reassembly.hpp"
#include "small/seq_window.hpp"

namespace hmcast::small {

/// Counters of one member's small path; "dropped" counters count bad or useless input.
struct SmallStats {
  std::uint64_t acks_sent = 0;
  std::uint64_t acks_as_datagrams = 0;       // of those, sent as datagrams that may be lost
  std::uint64_t repairs_sent = 0;
  std::uint64_t remulticasts = 0;
  std::uint64_t pulls_sent = 0;
  std::uint64_t nacks_sent = 0;              // one per message we lacked fragments of, per round
  std::uint64_t fragment_repairs_sent = 0;   // fragments sent point-to-point in answer to nacks
  /// Datagrams' worth of repair sent: a fragment repair is one, a whole-message repair
  /// or re-multicast as many as the message has fragments (to set against what was lost).
  std::uint64_t repair_datagrams = 0;
  std::uint64_t ack_queries_sent = 0;  // AckQuery frames to children whose subtree is late
  std::uint64_t delivered = 0;
  std::uint64_t completed = 0;
  std::uint64_t duplicates_dropped = 0;
  std::uint64_t out_of_window_dropped = 0;
  std::uint64_t invalid_dropped = 0;  // admitted, but makes no sense here (e.g. fragment mismatch)
  std::uint64_t fragments_placed = 0;         // fragments the transport wrote into their place
  std::uint64_t placed_fragments_lost = 0;    // ... not into their slot of their message's buffer: as if lost
};

/// Where a fragment's payload goes when the transport writes it there itself, and
/// what keeps that memory alive meanwhile (and names the buffer when it is back).
struct FragmentPlace {
  std::span<std::byte> dest;
  std::shared_ptr<const void> keep;
};
/// A buffer of exactly the given size for a message being reassembled.
using ReassemblyBuffers = std::function<std::shared_ptr<std::vector<std::byte>>(std::size_t)>;

enum class BroadcastError : std::uint8_t { none, window_full, too_large, not_member, paused };

struct BroadcastResult {
  BroadcastError error = BroadcastError::none;
  Seq seq = 0;
};

class SmallPath {
 public:
  /// `config` (checked, policy::check), `emit` and `timers` belong to the group
  /// engine and outlive the path.
  SmallPath(MemberId self, const View& view, const ProtocolConfig& config, Emitter& emit, TimerQueue& timers,
            TimeNs now);

  /// Sends a message. Fails without side effects when the window is full or the
  /// message is over max_small_message.
  BroadcastResult broadcast(MessageBuffer message, TimeNs now, Outbox& out);
  [[nodiscard]] bool window_has_room(std::size_t bytes) const;

  // Admitted input (group, view and member already checked by the group engine).
  /// `arrived_in`, when given, owns the bytes `d` was decoded from (the datagram): a
  /// whole message in it is kept there instead of being copied out.
  void on_data(MemberId from, const wire::Data& d, TimeNs now, Outbox& out, const SharedBytes& arrived_in = {});
  void on_repair(MemberId from, const wire::Repair& r, TimeNs now, Outbox& out);
  /// A child lacks fragments of a message: send those we hold.
  void on_nack(MemberId from, const wire::Nack& n, TimeNs now, Outbox& out);
  void on_fragment_repair(MemberId from, const wire::Data& fragment, TimeNs now, Outbox& out);
  /// Messages of several datagrams are reassembled into buffers from `buffers`, of
  /// their size from the first fragment (a transport's pool, whose buffers stay
  /// mapped); then place_fragment() can say where a fragment goes. Unset: each
  /// reassembly grows a buffer of its own as fragments come.
  void set_reassembly_buffers(ReassemblyBuffers buffers) { buffers_ = std::move(buffers); }
  /// Where fragment `d` of a message of several datagrams (admitted; its `size`
  /// payload bytes not read yet) goes, for a transport that copies it there itself;
  /// nothing: it comes whole through on_data(). Starts the message's reassembly if
  /// needed. The fragment counts only once on_placed_fragment() says it was written.
  [[nodiscard]] std::optional<FragmentPlace> place_fragment(MemberId from, const wire::Data& d, std::size_t size);
  /// Fragment `d` (admitted), whose `size` payload bytes the transport wrote at `at`,
  /// where place_fragment() said (FragmentPlace::dest; its keeper still held, so
  /// the buffer behind `at` is not another message's since).
  void on_placed_fragment(MemberId from, const wire::Data& d, std::size_t size, const std::byte* at, TimeNs now,
                          Outbox& out);
  void on_ack(MemberId from, const wire::Ack& a, TimeNs now, Outbox& out);
  void on_stable(MemberId from, const wire::Stable& s, TimeNs now);
  void on_ack_query(MemberId from, const wire::AckQuery& q, TimeNs now, Outbox& out);
  /// A timer of this path fired (kinds child_repair, ack_flush, announce, pull, nack).
  void on_timer(const TimerQueue::Entry& e, TimeNs now, Outbox& out);
  /// Sends the ACKs that became due; the group engine calls it after every input.
  /// `drained`: no more input is queued, so ACKs held back by the ACK interval to
  /// merge with later input go now.
  void flush_acks(TimeNs now, Outbox& out, bool drained = false);

  /// A new view (this member is in it): every stream's tree is laid out again,
  /// and messages in flight complete against the survivors.
  void on_view(const View& view, TimeNs now, Outbox& out);
  /// Each member's host, in the order of the view about to be installed (empty: not
  /// known): the ACK trees placed from then on follow hosts (ack_tree/host_tree.hpp).
  void set_hosts(std::vector<std::uint64_t> hosts) { hosts_ = std::move(hosts); }
  /// Joining a running group (the flush, membership/control_wire.hpp): every member
  /// of the next view holds, or as a joiner is excused from, each sender's
  /// messages up to floors[sender]. Call before on_view() of that view, or, for the
  /// member that joins with it, before any input.
  void set_stream_floors(const std::map<MemberId, Seq>& floors);

  /// The seq the next broadcast() will get.
  [[nodiscard]] Seq next_seq() const { return next_seq_; }
  /// Own messages not yet all-acked.
  [[nodiscard]] std::uint64_t in_flight() const { return next_seq_ - 1 - own_completed_; }
  /// Messages held (delivered but not yet known stable, or not yet deliverable) over all senders.
  [[nodiscard]] std::size_t held_messages() const { return held_count_; }
  [[nodiscard]] const SmallStats& stats() const { return stats_; }

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
    /// The repair wait: `deadline` is when it ends (kNever: none runs). At most one
    /// timer entry per child is pending, at `armed_at` (kNever: none) with generation
    /// `timer_gen`, never later than the deadline: a deadline that moves later (each
    /// ACK restarts the wait) is found when that entry fires, which arms again, so
    /// the timer table takes one entry per wait, not one per message.
    std::uint64_t timer_gen = 0;
    TimeNs deadline = kNever;
    TimeNs armed_at = kNever;
    TimeNs last_progress = 0;  // when its ACKed `have` last grew
    Seq repaired_upto = 0;     // highest message we repaired to it (Karn: no samples across it)
    TimeNs last_heard = 0;     // its last ACK of any kind
    TimeNs last_asked = -1;    // when a repair round last asked it to answer
    TimeNs stable_progress = 0;  // when its subtree's `stable` last grew
    std::uint32_t subtree_height = 0;
    bool suspected = false;
    /// Fragments it nacked that we lacked too (bit i of the bitmap: fragment i; an
    /// empty bitmap: the whole message), sent as soon as we hold the message.
    std::map<Seq, std::vector<std::uint8_t>> owed;
  };
  struct Stream {
    MemberId sender = 0;
    Seq delivered = 0;     // contiguous prefix delivered here
    Seq known_stable = 0;  // every member holds [1, known_stable]: no repair will need it
    SeqWindow<Held> held;
    std::map<Seq, Reassembly> partial;
    // Position in this stream's tree under the current view.
    bool is_root = false;
    std::optional<MemberId> parent;
    std::vector<ChildLink> children;
    Seq reported_stable = 0;
    Seq reported_have = 0;
    bool reported_by_link = false;  // the ACK that reported them went over the link: it arrives
    Seq gap_reported_at = 0;  // `delivered` when we last told the parent about a hole
    bool ack_due = false;
    /// The parent asked (a query, a repair): the next ACK goes over the link, not as a
    /// datagram that may be lost again, so a lost ACK costs one wait, never a suspicion.
    bool ack_reliable = false;
    TimeNs pull_deadline = kNever;
    std::uint64_t pull_gen = 0;
    Seq last_announced = 0;
    bool announce_armed = false;
    TimeNs heartbeat_wait = 0;  // own stream: wait before announcing again while unstable
    TimeNs last_data_ns = 0;  // own stream: when a Data last carried our stable prefix
    // Fragment-granular repair from the parent (nacks).
    Seq highest_seen = 0;          // highest seq of which a fragment reached us
    Seq sent_known = 0;            // highest seq the root announced it had sent
    TimeNs nack_deadline = kNever;
    std::uint64_t nack_gen = 0;
    /// What we asked the parent for, per message: a fragment bitmap, or empty for
    /// the whole message. Within the receive window, cleared as messages complete.
    std::map<Seq, std::vector<std::uint8_t>> asked;
    TimeNs last_remulticast = -1;
  };

  Stream& stream(MemberId sender);
  /// The stream of `sender`, created if `sender` is a member; nullptr otherwise.
  Stream* stream_for(MemberId sender);
  void place_in_tree(Stream& s, TimeNs now);
  [[nodiscard]] MemberId root_of(MemberId sender) const;
  [[nodiscard]] Seq floor_of(MemberId sender) const;
  [[nodiscard]] static Seq subtree_stable(const Stream& s);
  /// hosts_ when they describe view_ (else none: the flat tree).
  [[nodiscard]] std::span<const std::uint64_t> tree_hosts() const {
    return hosts_.size() == view_.size() ? std::span<const std::uint64_t>(hosts_) : std::span<const std::uint64_t>();
  }
  /// Whether all of message `seq` should have reached us (a later one did, or the root said so).
  [[nodiscard]] static bool known_sent(const Stream& s, Seq seq);
  void accept_message(Stream& s, Seq seq, MessageBuffer msg, TimeNs now, Outbox& out);
  /// A fragment from the sender's multicast or a repairer (checked for its stream).
  void on_fragment(Stream& s, const wire::Data& d, TimeNs now, Outbox& out, const SharedBytes& arrived_in);
  /// Why a fragment of `d`'s message would not be taken into `s` (none: it would).
  /// One rule for the fragment that arrives and the one a transport asks where to
  /// place (place_fragment), which must not count or change anything.
  enum class Refusal : std::uint8_t { none, duplicate, out_of_window, invalid };
  [[nodiscard]] Refusal refusal(const Stream& s, const wire::Data& d) const;
  /// What a fragment of `d`'s message must pass before it counts (refusal(), with
  /// the stream's garbage collected first; false: counted and dropped).
  bool fragment_wanted(Stream& s, const wire::Data& d, TimeNs now);
  /// A partial message's reassembly for `d`, started if needed.
  std::map<Seq, Reassembly>::iterator partial_for(Stream& s, const wire::Data& d);
  /// After a fragment of `it` was added with result `r`.
  void on_reassembled(Stream& s, std::map<Seq, Reassembly>::iterator it, Reassembly::Result r, const wire::Data& d,
                      TimeNs now, Outbox& out);
  /// Arms the nack timer if we now know of fragments we lack.
  void note_gaps(Stream& s, const wire::Data& d, TimeNs now);
  void send_nacks(Stream& s, TimeNs now, Outbox& out);
  /// Sends `to` the fragments of held message `seq` that `missing` names (empty: all of it).
  void send_fragments(Stream& s, MemberId to, Seq seq, const std::vector<std::uint8_t>& missing, TimeNs now,
                      Outbox& out);
  void advance(Stream& s, TimeNs now, Outbox& out);
  void collect_garbage(Stream& s, Seq stable);
  void rearm_child(Stream& s, std::uint32_t idx, TimeNs now);
  /// Sets child `idx`'s wait to end at `at`, arming a timer entry only if none is
  /// pending at or before `at` (ChildLink::armed_at).
  void set_child_deadline(Stream& s, std::uint32_t idx, TimeNs at);
  /// A child_repair entry came due: fires the wait if it has ended, arms again if it
  /// moved later, drops the entry if the wait was cancelled.
  void on_child_timer(Stream& s, std::uint32_t idx, TimeNs now, Outbox& out);
  /// The first message we hold that `c` is not known to hold (0 if none).
  [[nodiscard]] static Seq first_missing(const Stream& s, const ChildLink& c);
  [[nodiscard]] static bool child_holds(const ChildLink& c, Seq seq);
  [[nodiscard]] static std::uint64_t held_mask(const Stream& s);
  void fire_child(Stream& s, std::uint32_t idx, TimeNs now, Outbox& out);
  void maybe_pull(Stream& s, TimeNs now, Outbox& out);
  void arm_announce(Stream& s, TimeNs now);
  void remulticast(Stream& s, Seq seq, Outbox& out);
  /// An ACK to the parent is due; `reliable`: over the link (see Stream::ack_reliable).
  void want_ack(Stream& s, bool reliable = false);
  static constexpr TimeNs kAcksByLinkAfterLoss = 1'000'000'000;
  /// This member saw a sign of loss (it asks for a repair, or was repaired): for
  /// kAcksByLinkAfterLoss its ACKs go over links (see flush_acks()).
  void note_loss(TimeNs now);
  /// The parent asked about a message our ACK datagram already reported: lost, or
  /// only late (crossed by the question, or held up by a busy CPU, often several at
  /// a group's start). Loss once, within kAcksByLinkAfterLoss, kMissedAcksForLoss and
  /// 1 in kMissedAckShare of the datagram ACKs sent were.
  void note_missed_ack(TimeNs now);
  static constexpr std::uint64_t kMissedAcksForLoss = 4;
  static constexpr std::uint64_t kMissedAckShare = 64;
  struct MissedAcks {
    TimeNs since = kNever;            // the second they are counted in began (kNever: none yet)
    std::uint64_t missed = 0;
    std::uint64_t acks_before = 0;    // stats_.acks_as_datagrams when it began
  };

  MemberId self_;
  View view_;
  std::vector<std::uint64_t> hosts_;
  const ProtocolConfig& cfg_;
  /// How messages are cut into datagrams (mtu, fragment_mtu).
  [[nodiscard]] Cut cut() const { return cut_of(cfg_); }
  Emitter& emit_;
  ReassemblyBuffers buffers_;  // set: reassembly into buffers of the message's size
  TimerQueue& timers_;
  TimeNs view_start_ = 0;
  std::uint32_t window_;  // current sender window (slow start up to cfg_.window_messages)
  std::map<MemberId, Stream> streams_;
  // Entries of every stream's held and partial maps, kept as they change: the
  // simulator reads it after every event of every member.
  std::size_t held_count_ = 0;
  std::map<MemberId, Seq> floors_;               // set_stream_floors()
  std::vector<MemberId> acks_pending_;          // streams with an ACK to send, sorted (a set without a node per ACK)
  /// flush_acks()'s ACKs by parent, kept between calls for their capacity.
  struct AcksTo {
    MemberId parent = 0;
    std::vector<wire::AckEntry> entries;
    std::vector<Stream*> streams;  // whose entries these are
    bool reliable = false;
  };
  std::vector<AcksTo> acks_to_;
  std::size_t acks_to_used_ = 0;
  std::map<MemberId, TimeNs> last_ack_to_;      // coalescing per parent
  std::map<MemberId, std::uint64_t> ack_flush_gen_;
  std::set<MemberId> ack_flush_armed_;
  TimeNs last_datagram_ns_ = 0;                 // when a fragment of any stream last reached us
  TimeNs acks_by_link_until_ = 0;               // note_loss()
  MissedAcks missed_acks_;                      // note_missed_ack()
  // Own sending state.
  Seq next_seq_ = 1;
  Seq own_completed_ = 0;
  std::uint64_t own_bytes_in_flight_ = 0;
  SmallStats stats_;
};

}  // namespace hmcast::small
