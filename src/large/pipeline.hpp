// The large-message path of one member of one group, sans-I/O (RDMC's binomial
// pipeline, or the simpler schedules, over reliable point-to-point links).
//
// Per large message (sender, seq), every member follows the same schedule
// computed locally (schedule.hpp), so senders and receivers agree without
// talking about blocks:
//   1. The sender announces the message (size, block size, algorithm) to the
//      members it sends blocks to; each forwards the announcement the same way, so
//      it runs ahead of the data.
//   2. A member that learns of a message asks the application for a buffer of the
//      whole size (NeedBuffer). Once it has one (buffer_ready) it grants credits
//      (Ready) for its receives in schedule order, `receive_window` at a time, and
//      one more just in time (below). No block is ever sent without a credit, and a
//      receiver never has more than the window (plus the one just in time) of blocks
//      coming at once, so members that run ahead of the schedule cannot crowd a
//      receiver (RDMC's ready-for-block). The credit for a member's first receive is
//      given on the announcement, so its source may take it as given and send that
//      block right behind the announcement (ProtocolConfig::large_unasked_first_block),
//      saving a round trip per message.
//   3. Each member sends its scheduled blocks in schedule order. A block moves as
//      segments (Block frames covering part of it, `segment_size` bytes each) and a
//      member forwards a segment as soon as it holds it and has the receiver's
//      credit for the block: cut-through. Store-and-forward of whole blocks would
//      add a block's latency to every step of the schedule; with segments a relay
//      is one segment behind its source, not one block. All segments of one
//      scheduled send go out before the next send starts. A block is held once all
//      its bytes are. Segments land at their final offset.
//      A segment of a block comes from the block's one scheduled source over a FIFO
//      link, so its segments arrive in order: a receiver keeps, per block, how many
//      leading bytes it holds. A segment it already holds is a duplicate (counted,
//      dropped); one that starts anywhere else than where the held bytes end is
//      refused, like any frame that breaks the schedule. Sender and receiver need
//      not agree on the segment size.
//   Just-in-time credits: if the credit for receive k+1 went out only when block k
//      had fully arrived, its sender would learn of it one latency later and its
//      first bytes would come one more latency after that: the receiver's link
//      would idle two latencies per step. So the credit goes out while receive k
//      still has `credit_lead_bytes` or fewer to come, sized so that their time on
//      the link covers those two latencies. Granting it much earlier (say at the
//      first segment of k) would let a sender that runs ahead start block k+1 while
//      k is still arriving, and the two would share the receiver's link, delaying k
//      and everything downstream of it.
//   4. When a member holds every block and its ACK-tree children (a k-nomial tree
//      rooted at the sender) have ACKed, it ACKs to its parent; the sender
//      completes when its children have: every member has every byte.
//   5. Then the sender commits it (LargeCommit to every member), and members deliver
//      on the commit, not on the last byte: a commit exists only once every member
//      holds the message, so whether the sender lives or dies, the survivors deliver
//      it all or none of them do. A member that holds a message when the view
//      changes keeps it, awaiting the commit: a surviving sender sends its last
//      commit again in the new view (the old view's copy is dropped as stale), and
//      when the sender left, every survivor that delivered its last message relays
//      that commit to the others (for two views; a message still uncommitted after
//      two view changes is discarded: no survivor had its commit).
// A sender runs one large message at a time and queues the next (bounded), so a
// sender's large messages are delivered in its order. Several senders run at once.
// When the view changes, a schedule laid out over the old view cannot finish, so
// transfers in flight stop; receivers free partial buffers (DiscardLarge). A
// surviving sender starts its unfinished message again, same seq, over the new
// view, ahead of its queue: it completes against the survivors, as small messages
// do, and the application sees no failure. Members that already delivered it take
// part again (they may be relays in the new schedule) but do not deliver it twice:
// each member remembers, per sender, the last large seq it delivered. A message
// whose sender left is delivered by the survivors if it was committed (step 5),
// and by none of them otherwise.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <vector>

#include "core/actions.hpp"
#include "core/emitter.hpp"
#include "core/wire.hpp"
#include "hmcast/config.hpp"
#include "hmcast/types.hpp"
#include "large/schedule.hpp"

namespace hmcast::large {


struct PipelineStats {
  std::uint64_t blocks_sent = 0;      // scheduled sends whose every segment went out
  std::uint64_t blocks_received = 0;  // blocks whose every byte arrived
  std::uint64_t segments_sent = 0;
  std::uint64_t segments_received = 0;
  std::uint64_t bytes_sent = 0;
  std::uint64_t duplicate_segments = 0;
  std::uint64_t invalid_dropped = 0;  // frames that break the schedule or the protocol
  /// Announcements over this member's limits (max_large_message, wire::kMaxBlocks,
  /// kMaxScheduleSteps, kMaxTransfersPerSender), dropped before anything was
  /// allocated for them.
  std::uint64_t over_limit_dropped = 0;
  std::uint64_t delivered = 0;
  std::uint64_t completed = 0;
  std::uint64_t failed = 0;
  std::uint64_t restarted = 0;               // own messages started again after a view change
  std::uint64_t redeliveries_suppressed = 0;  // restarted messages received again, not delivered again
  std::uint64_t commits_relayed = 0;          // a departed sender's commits passed on to the survivors
  std::uint64_t delivered_on_relay = 0;       // messages delivered on a survivor's relayed commit
  std::uint64_t uncommitted_discarded = 0;    // held whole, never committed (the sender left before)
};

/// Most schedule steps a member walks for one message (each step is looked at once
/// when the message starts): bounds the work a peer's announcement can cause.
inline constexpr std::uint64_t kMaxScheduleSteps = 1ULL << 22;
/// Most large messages of one sender a member takes part in at once. A sender runs
/// one at a time; a relay may still forward the last one when the next is announced.
inline constexpr std::size_t kMaxTransfersPerSender = 4;

enum class LargeError : std::uint8_t {
  none,
  queue_full,
  not_member,
  over_limit,  // more blocks (or schedule steps) than any receiver accepts: raise the block size
};

struct LargeResult {
  LargeError error = LargeError::none;
  Seq seq = 0;
};

class Pipeline {
 public:
  /// `config` is the group's one ProtocolConfig (its large_* fields, block_size,
  /// segment_size, radix), already checked (policy::check).
  /// `emit` (the group engine's) carries the frames; it must outlive the pipeline.
  Pipeline(MemberId self, View view, const ProtocolConfig& config, Emitter& emit);

  /// Queues an own message of `size` bytes, cut into blocks of `block_size` (0: the
  /// configured block size; the policy picks one per message). Throws nothing:
  /// a block size over wire::kMaxBlock is clamped to the configured one, and a
  /// message receivers would refuse (fits_limits) is refused here.
  LargeResult broadcast(std::uint64_t size, Outbox& out, std::uint64_t block_size = 0);
  void buffer_ready(MemberId sender, Seq seq, Outbox& out);
  void on_announce(MemberId from, const wire::Announce& a, Outbox& out);
  void on_ready(MemberId from, const wire::Ready& r, Outbox& out);
  void on_block(MemberId from, const wire::Block& b, Outbox& out);
  /// Whether a transport may write this segment's bytes into their final place before
  /// on_block() sees its frame: it comes from the block's scheduled source, lies in
  /// the block, and starts at or after the bytes held (segments before it may still
  /// be on their way behind it in the transport's queue). Held bytes, which a relay
  /// may be forwarding, are never written; if on_block() then refuses the frame,
  /// the bytes sit where nothing is held and a correct segment overwrites them.
  [[nodiscard]] bool may_place_segment(MemberId from, const wire::Block& b) const;
  void on_ack(MemberId from, const wire::LargeAck& a, Outbox& out);
  /// The sender's commit (or a survivor's relay of a departed sender's): deliver.
  void on_commit(MemberId from, const wire::LargeCommit& c, Outbox& out);
  /// Messages held whole from an earlier view, awaiting their commit.
  [[nodiscard]] std::size_t awaiting_commit() const { return awaiting_.size(); }
  /// The view changed: abandon what is in flight, start the next queued message.
  void on_view(const View& view, Outbox& out);
  /// Each member's host, in the order of the view about to be installed (empty: not
  /// known): the ACK trees of messages created from then on follow hosts.
  void set_hosts(std::vector<std::uint64_t> hosts) { hosts_ = std::move(hosts); }

  [[nodiscard]] const PipelineStats& stats() const { return stats_; }
  /// Whether a message of `size` bytes in blocks of `block_size` is within what a
  /// member of this view accepts (max_large_message, wire::kMaxBlocks, kMaxScheduleSteps).
  [[nodiscard]] bool fits_limits(std::uint64_t size, std::uint64_t block_size, LargeAlgorithm algorithm) const;
  [[nodiscard]] std::size_t active_transfers() const { return transfers_.size(); }
  /// Members whose credit, block or ACK an active transfer is waiting for.
  [[nodiscard]] std::set<MemberId> waiting_on() const;
  [[nodiscard]] std::size_t queued() const { return queue_.size(); }
  [[nodiscard]] const ProtocolConfig& config() const { return cfg_; }
  /// The seq the next broadcast() will get.
  [[nodiscard]] Seq next_seq() const { return next_seq_; }
  /// The newest of `sender`'s messages delivered here (0: none, or `sender` left).
  [[nodiscard]] Seq delivered_from(MemberId sender) const {
    const auto it = delivered_.find(sender);
    return it == delivered_.end() ? 0 : it->second;
  }
  /// Own large messages in flight or queued.
  [[nodiscard]] bool sending() const { return own_active_.has_value() || !queue_.empty(); }

 private:
  using Key = std::pair<MemberId, Seq>;
  struct Message {
    MemberId sender = 0;
    Seq seq = 0;
    std::uint64_t size = 0;
    std::uint64_t block_size = 0;
    LargeAlgorithm algorithm{};
    std::uint32_t blocks = 0;
    std::uint64_t segment_size = 0;  // ours, for this transfer's block size
    std::vector<bool> have;          // every byte of the block is here
    std::uint32_t have_count = 0;
    std::map<std::uint32_t, std::uint64_t> filled;  // blocks arriving: leading bytes held
    std::vector<std::uint32_t> source;  // rank sending us each block (ours: none)
    std::vector<MemberId> receive_order;  // who sends us our k-th block, in schedule order
    std::uint32_t credits_granted = 0;    // receives of receive_order we gave credit for
    std::map<MemberId, std::uint32_t> credit_to;    // cumulative credit we gave each peer
    std::map<MemberId, std::uint32_t> credit_from;  // cumulative credit each peer gave us
    std::map<MemberId, std::uint32_t> sent_to;      // blocks we started sending each peer
    std::vector<Hop> sends;  // ours, in schedule order
    std::size_t next_send = 0;
    std::uint64_t send_progress = 0;  // bytes of sends[next_send] already sent
    std::set<MemberId> send_peers;
    std::set<MemberId> recv_peers;
    std::optional<MemberId> ack_parent;
    std::set<MemberId> ack_children;
    std::set<MemberId> acked;
    bool buffer = false;
    bool complete = false;   // every block is here (the sender: from the start)
    bool delivered = false;  // committed and handed over (the sender: its own, at the start)
    bool delivered_before = false;  // a restart of a message this member delivered in an earlier view
    bool acked_up = false;
  };

  enum class SegmentCheck : std::uint8_t { accept, duplicate, ahead, invalid };  // ahead: after a gap
  [[nodiscard]] SegmentCheck check_segment(MemberId from, const wire::Block& b) const;
  /// Leading bytes of `block` held.
  [[nodiscard]] static std::uint64_t held_bytes(const Message& t, std::uint32_t block);
  Message& create(MemberId sender, Seq seq, std::uint64_t size, std::uint64_t block_size, LargeAlgorithm algorithm);
  void start_next(Outbox& out);
  void pump(Message& t, Outbox& out);
  [[nodiscard]] static std::uint64_t block_length(const Message& t, std::uint32_t block);
  void grant(Message& t, Outbox& out);
  void check_ack(Message& t, Outbox& out);
  void maybe_finish(const Key& key, Outbox& out);
  /// Marks `t` delivered, and tells the application unless it had it before.
  void deliver(Message& t, Outbox& out);
  /// Tells the application of (sender, seq), unless it had it before (a restart).
  void hand_over(MemberId sender, Seq seq, std::uint64_t size, bool delivered_before, Outbox& out);
  [[nodiscard]] wire::Announce announce_of(const Message& t) const;

  MemberId self_;
  View view_;
  std::vector<std::uint64_t> hosts_;
  ProtocolConfig cfg_;
  Emitter& emit_;
  std::map<Key, Message> transfers_;
  struct Early {
    std::map<MemberId, std::uint32_t> credit;
    std::set<MemberId> acks;
  };
  std::map<Key, Early> early_;  // Ready and ACK frames that beat the announcement (bounded)
  /// Members that sent us a frame of the large path in this view: they installed it,
  /// so an announcement and a block right behind it reach them in this view.
  std::set<MemberId> heard_;
  // Per sender, in this view: every seq up to here is over (later copies are ignored).
  // Cleared by a view change, since a surviving sender restarts what was unfinished.
  std::map<MemberId, Seq> finished_;
  // Per sender, across views: the last seq delivered here (a sender's large messages
  // are delivered in order, one at a time), so a restart is never delivered twice.
  std::map<MemberId, Seq> delivered_;
  /// Held whole when the view changed, not yet committed: size, and view changes left.
  struct Awaiting {
    std::uint64_t size = 0;
    std::uint32_t views_left = 2;
  };
  std::map<Key, Awaiting> awaiting_;
  /// Departed senders' last delivered seq, relayed to the survivors at the next view
  /// changes (views left), in case a survivor awaits its commit.
  std::map<MemberId, std::pair<Seq, std::uint32_t>> relay_;
  /// Our own last committed seq: sent again at a view change (the old view's copy
  /// may have been dropped as stale by a member that installed the new view first).
  Seq last_commit_ = 0;
  void send_to_all(const wire::LargeCommit& c, Outbox& out);
  struct Queued {
    Seq seq;
    std::uint64_t size;
    std::uint64_t block_size;
  };
  std::deque<Queued> queue_;
  std::optional<Seq> own_active_;
  Seq next_seq_ = 1;
  PipelineStats stats_;
};

}  // namespace hmcast::large
