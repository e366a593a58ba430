// The public API: a Node joins Groups and broadcasts in them.
//
//   hmcast::Config cfg;  cfg.group_size = 4;
//   hmcast::Node node{cfg};                       // chooses and owns the transport
//   hmcast::Group g = node.join("weights");        // returns once this node is in a view
//   g.on_deliver([](const hmcast::Delivery& d) { /* d.sender, d.seq, d.bytes */ });
//   g.on_view_change([](const hmcast::View& v, std::span<const hmcast::MemberId> left) {});
//   auto done = g.broadcast(bytes);                // completes when every member of the view has it
//   done.get();
//
// Promises:
// - Every member delivers each message exactly once, in its sender's order, intact;
//   a member also delivers its own messages. Messages up to
//   ProtocolConfig::small_route_max (0: max_small_message) take the small path (datagram multicast);
//   larger ones the large path (blocks over reliable links). Order holds within each
//   path; a small and a large message of one sender may be delivered either way round.
// - A large message cut by a view change is started again by its sender over the new
//   view, with the same seq: it completes against the survivors, like a small one, and
//   members that delivered it before the change do not deliver it again. If its sender
//   is the one that left, members that already delivered it keep it and the others
//   never get it (the large path has no proxy sender yet).
// - A Completion succeeds only when every member of the current view holds the
//   message (all-ACKed up the tree to the sender). If members leave meanwhile it
//   completes against the survivors; the view-change callback names who left.
// - Threads: each Node runs one progress thread. Every callback of every Group of
//   the Node runs on it, one at a time, or (Config::borrow_progress, socket and shm)
//   on an application thread that waits on a small message's Completion and makes
//   the progress meanwhile (one at a time all the same); callbacks may call broadcast() with
//   SendMode::fail, but must not block on a Completion (that would stall progress).
//   broadcast() may be called from any thread. Callbacks may run until
//   Group::leave() returns or the Node is destroyed, so what they capture must
//   live that long: call leave() before destroying it. With Config::progress =
//   Progress::caller there is no such thread: the group makes progress, and the
//   callbacks run one at a time, inside the application's calls to Group::poll(),
//   Completion::get() / wait_for() and a broadcast() waiting for room.
// - Memory: broadcast() copies the bytes; the caller may reuse its buffer at once.
//   prepare() gives a buffer to write a message into, sent without a copy;
//   broadcast_from() sends a large message from the caller's memory and returns once
//   the group has let go of it; broadcast_lent() starts the same and returns, and
//   take_back() later says when the memory is the caller's again.
//   Delivery::bytes is valid during the callback; keep Delivery::buffer to hold on
//   to the message without a copy (for a small message, the datagram it came in,
//   shared with the messages batched with it). Deliveries that arrive before
//   on_deliver() is set, and view changes after join() but before on_view_change()
//   (the latest 64 at most), are held and handed over when it is set.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <functional>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hmcast/config.hpp"
#include "hmcast/error.hpp"
#include "hmcast/types.hpp"

namespace hmcast {

struct Delivery {
  MemberId sender = 0;
  Seq seq = 0;     // per sender and path: small and large messages are numbered apart
  bool large = false;
  std::span<const std::byte> bytes;
  /// Owns `bytes`, which stay valid while any copy of it lives. A small message that
  /// arrived whole in one datagram is a slice of that datagram, shared with the
  /// messages batched with it: holding `buffer` keeps the whole datagram (up to the
  /// transport's MTU). Copy `bytes` to keep a few small messages for long. Null for
  /// a sender's own message sent by Group::broadcast_from(): its bytes are the
  /// caller's, valid during the callback.
  std::shared_ptr<const std::vector<std::byte>> buffer;
};

/// A message written in place before it is broadcast (Group::prepare): its buffer
/// comes from the transport (from 128 KiB up, its pool of buffers kept between
/// messages, which the verbs transport keeps registered), so Group::broadcast()
/// sends it without copying. Move-only; broadcast() takes it over, and it is empty
/// afterwards.
class OutgoingMessage {
 public:
  OutgoingMessage() = default;
  OutgoingMessage(OutgoingMessage&&) noexcept = default;
  OutgoingMessage& operator=(OutgoingMessage&&) noexcept = default;
  OutgoingMessage(const OutgoingMessage&) = delete;
  OutgoingMessage& operator=(const OutgoingMessage&) = delete;
  [[nodiscard]] std::span<std::byte> bytes() { return buf_ ? std::span<std::byte>(*buf_) : std::span<std::byte>{}; }
  [[nodiscard]] std::size_t size() const { return buf_ ? buf_->size() : 0; }
  [[nodiscard]] bool empty() const { return !buf_; }

 private:
  friend class Group;
  explicit OutgoingMessage(std::shared_ptr<std::vector<std::byte>> b) : buf_(std::move(b)) {}
  std::shared_ptr<std::vector<std::byte>> buf_;
};

/// What the seeded fault layer (Config::faults) did to what this member's Node
/// received, over all its groups; all zero when no fault is configured.
struct FaultStats {
  std::uint64_t dropped = 0;         // datagrams lost
  std::uint64_t duplicated = 0;      // datagrams delivered twice
  std::uint64_t reordered = 0;       // datagrams held back until later ones overtook them
  std::uint64_t delayed = 0;         // datagrams delayed (by a non-zero time)
  std::uint64_t link_delayed = 0;    // reliable-link frames delayed (by a non-zero time)
  std::uint64_t released_early = 0;  // held items released before their time: FaultConfig::max_held was reached
  std::uint64_t held = 0;            // items held right now
};

/// Counters of one member of one group (a snapshot).
struct GroupStats {
  std::uint64_t delivered = 0;           // small-path messages delivered here
  std::uint64_t completed = 0;           // own small messages all-acked
  std::uint64_t large_delivered = 0;
  std::uint64_t large_completed = 0;
  /// Own large messages started again over a new view (a view change cut them).
  std::uint64_t large_restarted = 0;
  /// Restarted large messages received again here but not delivered again (had them).
  std::uint64_t large_redeliveries_suppressed = 0;
  /// A large message is delivered on its sender's commit (every member holds it), so
  /// survivors of a sender's death deliver it all or none. Commits of departed senders
  /// this member passed on at view changes; messages delivered on such a relayed
  /// commit; messages held whole but discarded because no survivor had their commit.
  std::uint64_t large_commits_relayed = 0;
  std::uint64_t large_delivered_on_relay = 0;
  std::uint64_t large_uncommitted_discarded = 0;
  std::uint64_t repairs_sent = 0;        // point-to-point retransmissions by this member
  std::uint64_t views_installed = 0;     // after the first
  std::uint64_t duplicates_dropped = 0;  // copies received again and dropped (never delivered)
  /// Input dropped as bad: undecodable, oversized, wrong group, stale or future view,
  /// from a non-member, or breaking the protocol; malformed reliable-link streams.
  std::uint64_t bad_packets_dropped = 0;
  /// With a group key (Config::key): datagrams and frames dropped because their tag
  /// was missing or wrong (a forgery, another key, or damage), and genuine ones
  /// dropped because they came before (a replay) or name a view too old to judge.
  /// Neither ever reaches the protocol.
  std::uint64_t auth_failures = 0;
  std::uint64_t replays_refused = 0;
  /// Large-message bytes the transport read straight into their final buffer, with
  /// no copy on the way (socket: read from the stream; verbs: RDMA WRITTEN by peers;
  /// the Node's transport as a whole).
  std::uint64_t large_bytes_placed = 0;
  /// Verbs: final buffers registered for peers' writes and not yet freed (a buffer
  /// stays until every peer that may write into it confirmed it stopped).
  std::uint64_t large_regions_held = 0;
  /// Datagrams this Node's transport multicast, and bytes it sent on reliable links
  /// (verbs: through the UD QP, and over RC QPs; other transports report 0).
  std::uint64_t multicast_datagrams_sent = 0;
  std::uint64_t link_bytes_sent = 0;
  /// shm: a peer that died while writing into this member's inbox. Locks taken
  /// over from a dead holder (the record it was writing was never published, so
  /// nothing of it is read), and frames dropped unfinished because their writer
  /// left the view before their last fragment (never delivered torn).
  std::uint64_t shm_locks_recovered = 0;
  std::uint64_t shm_partial_frames_dropped = 0;
  /// shm: datagrams that met a multicast log full of a reader's unread data and
  /// waited for it to move on, those dropped because a log's worth already waited
  /// (the protocol repairs them), and datagrams also copied into the inbox of a
  /// member that had not yet attached to the log (one that installed the view after
  /// this member started sending).
  std::uint64_t shm_datagrams_waited = 0;
  std::uint64_t shm_multicast_overruns = 0;
  std::uint64_t shm_datagrams_copied = 0;
  /// Hosts in the current view (members say theirs when they join:
  /// Config::host_identity), the members on this member's host (itself included),
  /// and whether it leads its host (its smallest member id, so every member agrees
  /// and the next one takes over in the view that removes a leader). The ground of
  /// the two-level group (issue 18): nothing is routed by them yet.
  std::uint32_t hosts = 0;
  std::uint32_t host_members = 0;
  bool host_leader = false;
  /// Does multicast work here? After each view that brings members in, each member
  /// multicasts a probe that every other member confirms over its reliable link
  /// (socket and verbs transports). `multicast_probe`: "idle" (nothing to probe),
  /// "probing", "confirmed", or "failed" (`multicast_probe_silent` never confirmed).
  /// One failed probe anywhere switches the whole group, for good, to multicast
  /// emulated over reliable links: `multicast_emulated` is then true on every member,
  /// and `emulated_datagrams_sent` counts the datagrams sent that way.
  std::string multicast_probe;
  std::uint64_t multicast_probes_sent = 0;
  std::int64_t multicast_probe_round_ns = 0;  // how long the last confirmed round took
  std::vector<MemberId> multicast_probe_silent;
  bool multicast_emulated = false;
  std::uint64_t emulated_datagrams_sent = 0;
  /// Streams of small messages (ProtocolConfig::batch_delay_ns): Batch datagrams this
  /// member sent, and the datagrams that went inside them.
  std::uint64_t batches_sent = 0;
  std::uint64_t datagrams_batched = 0;
  /// Fragments of messages of several datagrams that the transport copied straight
  /// into their message as it read them (shm), not through a buffer of their own.
  std::uint64_t small_fragments_placed = 0;
  FaultStats faults;
  /// What the policy chose for this group (src/policy): its ACK-tree radix, the
  /// size above which messages take the large path, the large path's schedule and
  /// the block size of the last large message this member sent (0: none yet).
  std::uint32_t ack_radix = 0;
  std::uint64_t max_small_message = 0;
  std::string large_algorithm;
  std::uint64_t last_block_size = 0;
};

enum class SendMode : std::uint8_t {
  wait,  // a full window blocks broadcast() until a message completes
  fail,  // a full window makes broadcast() throw Error{window_full}
};

namespace detail {
struct GroupState;
struct NodeState;
class CompletionBoard;
struct Lending;
}  // namespace detail

/// Memory lent to a group to receive one large message into (Group::lend_receive).
class LentReceive {
 public:
  /// Whether the group took the memory (else the message comes in a buffer of its own).
  [[nodiscard]] bool lent() const { return released_ != nullptr; }

 private:
  friend class Group;
  MemberId sender_ = 0;
  Seq seq_ = 0;
  std::shared_ptr<detail::Lending> released_;
};

/// The outcome of one broadcast.
class Completion {
 public:
  Completion() = default;
  /// `spin`: how long get() and wait_for() keep checking, yielding the CPU, before
  /// they sleep (the Node's busy_poll in hybrid mode): a completion that comes soon
  /// is then seen without a thread wake-up. `driver`: the Node whose group get() and
  /// wait_for() make progress while they wait (Progress::caller), or none.
  Completion(Seq seq, std::shared_future<void> f, std::chrono::nanoseconds spin = {},
             std::weak_ptr<detail::NodeState> driver = {})
      : seq_(seq), done_(std::move(f)), spin_(spin), driver_(std::move(driver)) {}
  /// A small message's: `board` tells when its group's small messages up to `seq` are done.
  Completion(Seq seq, std::shared_ptr<const detail::CompletionBoard> board, std::chrono::nanoseconds spin,
             std::weak_ptr<detail::NodeState> driver)
      : seq_(seq), board_(std::move(board)), spin_(spin), driver_(std::move(driver)) {}
  [[nodiscard]] Seq seq() const { return seq_; }
  /// Blocks until every member of the view has the message; throws hmcast::Error if it
  /// never will (this member was removed, or the group was closed). With
  /// Progress::caller the group makes progress meanwhile, on this thread; then it must
  /// not be called from a callback (hmcast::Error invalid_config).
  void get() const;
  /// Waits at most `d` for the outcome; true if there is one (get() then returns or throws at once).
  template <class Rep, class Period>
  [[nodiscard]] bool wait_for(std::chrono::duration<Rep, Period> d) const {
    // Saturated: a wait of years (duration::max()) is a wait for ever.
    const std::chrono::duration<double> secs = d;
    return wait_ns(secs.count() >= 1e9 ? std::chrono::nanoseconds::max()
                                       : std::chrono::duration_cast<std::chrono::nanoseconds>(secs));
  }

 private:
  /// wait_for() in nanoseconds (max(): for ever).
  [[nodiscard]] bool wait_ns(std::chrono::nanoseconds d) const;
  /// Whether there is an outcome (false for a default-constructed Completion).
  [[nodiscard]] bool settled() const;

  Seq seq_ = 0;
  std::shared_ptr<const detail::CompletionBoard> board_;  // small messages; else done_
  std::shared_future<void> done_;
  std::chrono::nanoseconds spin_{0};
  std::weak_ptr<detail::NodeState> driver_;
};

/// A broadcast sent from the caller's memory without waiting (Group::broadcast_lent).
/// Dropping it gives nothing back: the memory stays the group's until take_back()
/// says true, or the Node is destroyed.
class LentSend {
 public:
  /// Whether the group reads the caller's memory (else it sent a copy: a small message).
  [[nodiscard]] bool lent() const { return released_ != nullptr; }
  /// The message's outcome, as broadcast() gives it.
  [[nodiscard]] const Completion& completion() const { return completion_; }

 private:
  friend class Group;
  Completion completion_;
  Seq seq_ = 0;
  std::shared_ptr<detail::Lending> released_;
};

class Group {
 public:
  using DeliverFn = std::function<void(const Delivery&)>;
  using ViewFn = std::function<void(const View&, std::span<const MemberId> left)>;
  using StoppedFn = std::function<void(const Error&)>;

  Group() = default;
  void on_deliver(DeliverFn fn);
  void on_view_change(ViewFn fn);
  /// Called once (on the progress thread, like every callback) when the group stops
  /// for this member by no choice of its own: the others removed it
  /// (ErrorCode::removed), the membership manager is gone (manager_lost), or the
  /// transport failed. Nothing is delivered after it; a thread waiting for a
  /// delivery should wake up here. Set before it happens, or it is called when set.
  /// Not called for leave() or the Node's destruction.
  void on_stopped(StoppedFn fn);
  /// Broadcast a copy of `bytes` to the group. Throws hmcast::Error on a full window
  /// (or large-message queue) in SendMode::fail, a message over max_large_message,
  /// or a removed member.
  Completion broadcast(std::span<const std::byte> bytes, SendMode mode = SendMode::wait);
  /// A buffer of `size` bytes to write a message into and hand to broadcast(message):
  /// the same as broadcast(bytes) without the copy (which for large messages costs
  /// about as much as moving them between two processes on one host). Its contents
  /// start unspecified. Throws like broadcast() for a size over max_large_message.
  [[nodiscard]] OutgoingMessage prepare(std::size_t size);
  /// Broadcasts a prepared message (taking it over: `message` is empty afterwards).
  Completion broadcast(OutgoingMessage&& message, SendMode mode = SendMode::wait);
  /// Broadcasts `bytes` and waits, as broadcast(bytes).get() does, but a large message
  /// (over the small route) is read from the caller's memory as it goes out instead
  /// of being copied first (prepare() still needs the caller to write the message into
  /// it; this sends it from where it already lies). Returns once every member of the
  /// view has it and the group no longer reads `bytes`, so the caller may reuse them
  /// at once; they must stay unchanged until then. Throws like get(): then, too, the
  /// group no longer reads `bytes` (what it still needed, it copied). Waits for room
  /// as SendMode::wait does; never from a callback (it waits for this member's own
  /// delivery, which runs on the progress thread; held for a later on_deliver(), that
  /// delivery gets a copy).
  void broadcast_from(std::span<const std::byte> bytes);
  /// broadcast_from() in two steps: starts broadcasting `bytes` from where they lie
  /// and returns (waiting for room as `mode` says); the bytes must stay unchanged
  /// and alive until take_back() says true. A message the small route carries is
  /// copied, as broadcast() copies it (lent() false). From a callback too, but
  /// take_back() there only with no wait (it waits for this member's own delivery).
  LentSend broadcast_lent(std::span<const std::byte> bytes, SendMode mode = SendMode::wait);
  /// Takes back memory lent by broadcast_lent(): waits at most `max_wait` for the
  /// group to let go of the bytes (normally as the message completes; if it fails,
  /// the group first copies what it still needs). True: they are the caller's again
  /// (also if never lent); the outcome is sent.completion()'s, which may come just
  /// after. False: not yet.
  bool take_back(LentSend& sent, std::chrono::nanoseconds max_wait);
  /// Lends `into` to receive `sender`'s large message `seq` (Delivery::seq numbers
  /// them) without the copy out of the group's own buffer: if the message is
  /// announced here after this, and is exactly `into.size()` bytes, it is written
  /// straight into `into` and delivered from there (Delivery::bytes is `into`,
  /// Delivery::buffer null). Not lent (lent() false) where the message has begun to
  /// arrive or was delivered, for a size the small path carries, on verbs (peers
  /// write only into registered memory), or with many lent already. The memory is
  /// the group's until take_back() says otherwise: do not read or write it meanwhile,
  /// except in the delivery's callback.
  LentReceive lend_receive(MemberId sender, Seq seq, std::span<std::byte> into);
  /// Takes back memory lent by lend_receive(), waiting at most `max_wait` until the
  /// group no longer reads or writes it (after its message's delivery that is soon:
  /// a member still forwarding blocks from it holds it until its peers have them).
  /// True: it is the caller's again (also if it was never lent). False: still in use,
  /// e.g. the message is held whole across a view change for its commit, or the group
  /// stopped with the message half received; it stays in use until then or until the
  /// Node is destroyed, so keep it alive that long. Once the Node and its Groups are
  /// gone, take_back() on an empty Group says true.
  bool take_back(LentReceive& lent, std::chrono::nanoseconds max_wait);
  [[nodiscard]] View view() const;
  [[nodiscard]] MemberId self() const;
  [[nodiscard]] GroupStats stats() const;
  /// Leaves the group: no callback of this group runs after leave() returns (it
  /// waits for the one running, unless called from inside a callback, which then
  /// is the last), pending Completions fail with ErrorCode::closed, later
  /// broadcasts throw it, and the others see this member go in a new view. Safe
  /// to call more than once.
  void leave();
  /// Progress::caller: waits up to `max_wait` for traffic and handles what is there
  /// (ACKs, repairs, timers), running the callbacks of what it delivers on this
  /// thread; returns once something was handled or `max_wait` passed. Call it often.
  /// Not from a callback (hmcast::Error invalid_config). Progress::thread: returns at once.
  void poll(std::chrono::nanoseconds max_wait = {});

 private:
  friend class Node;
  explicit Group(std::shared_ptr<detail::GroupState> s) : state_(std::move(s)) {}
  Completion broadcast_large(std::span<const std::byte> bytes, SendMode mode);
  Completion send_large(std::shared_ptr<std::vector<std::byte>> buf, SendMode mode);
  Completion send_small(std::shared_ptr<const std::vector<std::byte>> msg, SendMode mode);
  std::shared_ptr<detail::GroupState> state_;
};

/// The ProtocolConfig a Node with this config uses when Config::protocol is empty:
/// the transport's timers and limits, tuned by the policy (src/policy) from the
/// transport's profile (built in, or Config::profile_file) for Config::group_size,
/// its MTU leaving room for tags when the group has a key (Config::key, key_file or
/// HMCAST_KEY_FILE). Start from it to override single fields. Throws Error{invalid_config} if the
/// profile file cannot be read or parsed.
[[nodiscard]] ProtocolConfig default_protocol(const Config& config);

class Node {
 public:
  /// Attaches to the configured transport. Throws hmcast::Error{invalid_config}.
  explicit Node(Config config);
  /// Stops the progress thread; pending Completions fail with ErrorCode::closed.
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  /// Joins (or creates) the group `name` and returns once this node is in a view of
  /// Config::group_size members. Throws Error{join_timeout}.
  ///
  /// Socket transport, a group already running: the manager flushes the group (its
  /// members' new broadcasts wait, SendMode::fail ones throw window_full, until
  /// everything already sent is held by every member) and installs a view with this
  /// node in it. From then on this node delivers every message sent in that view or
  /// later, and none sent before: bringing it up to date (state transfer) is the
  /// application's business, e.g. a snapshot broadcast by one member after the
  /// view-change callback reports the newcomer.
  Group join(const std::string& name);
  [[nodiscard]] MemberId id() const;

 private:
  std::shared_ptr<detail::NodeState> state_;
};

}  // namespace hmcast
