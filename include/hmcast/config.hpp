// Tuning knobs of the protocol. Defaults suit a LAN or RDMA fabric; every bound
// here is what keeps memory finite, so none of them can be "unlimited".
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace hmcast {

/// How a large message's blocks travel (RDMC's schedules; every member of a group
/// must use the same one). binomial_pipeline is optimal; the others are baselines.
enum class LargeAlgorithm : std::uint8_t { sequential, chain, binomial_tree, binomial_pipeline };

/// Config::protocol empty: a Node takes its transport's profile (src/policy: built
/// in, or Config::profile_file) and tunes it for Config::group_size (see
/// hmcast::default_protocol). Set: exactly these values are used. To change a few
/// knobs, start from hmcast::default_protocol(config), not from ProtocolConfig{}: the
/// struct's own timers are the simulator's (microseconds), and on real threads and
/// processes they remove a member that is descheduled for a few milliseconds.
struct ProtocolConfig {
  /// ACK-tree radix (2 = binomial). Higher radix: shallower tree, more ACKs per parent.
  std::uint32_t radix = 2;
  /// Largest datagram the transport carries, header included (the UD path MTU).
  std::uint32_t mtu = 4096;
  /// A small message that fits one datagram of `mtu` goes whole; a larger one is cut
  /// into datagrams of at most this many bytes (0: `mtu`). Every member must use the
  /// same, as `mtu`. Shared memory: a 64 KiB message goes in one datagram, while
  /// messages of several keep the records its log was measured with.
  std::uint32_t fragment_mtu = 0;
  /// Sender window: at most this many of a sender's messages are not yet all-acked.
  std::uint32_t window_messages = 64;
  /// The window opens at this many messages and grows by one per completion (slow
  /// start), so a group's first burst does not flood receivers before any delay
  /// has been measured.
  std::uint32_t initial_window_messages = 8;
  /// Sender window in bytes of payload not yet all-acked.
  std::uint64_t window_bytes = 16U << 20;
  /// Largest message the small (datagram) path carries; larger ones take the large
  /// path (blocks over reliable links, RDMC's binomial pipeline).
  std::uint32_t max_small_message = 1U << 20;
  /// Messages up to this size take the small path, larger ones the large path
  /// (0: max_small_message). The policy sets it from the transport's profile and the
  /// group size; at most max_small_message, which stays what members accept.
  std::uint32_t small_route_max = 0;
  /// Largest message a member accepts on the large path (it allocates this much).
  std::uint64_t max_large_message = 16ULL << 30;
  /// Block size of the large path; with target_blocks, the largest block.
  std::uint64_t block_size = 1U << 20;
  /// Per message, cut a large message into about this many blocks, of a size in
  /// [min_block_size, block_size] (0: every message uses block_size). The best
  /// block grows with the message (RDMC): small blocks fill the pipeline sooner,
  /// large ones cost fewer transfers.
  std::uint32_t target_blocks = 0;
  std::uint64_t min_block_size = 64U << 10;
  /// Blocks a receiver lets come at once on the large path, and how many bytes
  /// before a block is complete it asks for the next one. Together they must cover
  /// the credit's round trip times the link rate, queues included, or the link
  /// idles between blocks (a rate-limited host whose own sending fills its queue
  /// delays its credits by that queue).
  std::uint32_t large_receive_window = 1;
  std::uint64_t large_credit_lead_bytes = 256U << 10;
  /// A member sends its first block to a peer without waiting for that peer's
  /// credit, right behind the announcement on the same link, where the block is the
  /// peer's first receive and the peer has sent this member a frame of the large
  /// path in this view (so it has installed the view and takes the announcement
  /// first): a receiver gives that credit on the announcement anyway, and this
  /// saves its round trip on every message. Off: every block waits for its credit
  /// (verbs, whose blocks land by RDMA WRITE into the region a credit advertises).
  bool large_unasked_first_block = true;
  /// Schedule of the large path's blocks.
  LargeAlgorithm large_algorithm = LargeAlgorithm::binomial_pipeline;
  /// Own large messages waiting behind the one in flight; beyond it broadcast()
  /// waits (SendMode::wait) or throws window_full (SendMode::fail).
  std::uint32_t large_queue_limit = 16;
  /// With large messages in flight and no frame of the large path for this long,
  /// ping the members waited on: a dead one then shows as a broken link.
  std::int64_t large_stall_ns = 10'000'000;
  /// A block moves in segments of this many bytes (at most block_size), and a member
  /// forwards each segment as soon as it holds it, instead of waiting for the whole
  /// block. Smaller segments cut the delay each relay adds; each one is a separate
  /// transfer, so it should take longer on the wire than posting it costs.
  std::uint64_t segment_size = 64U << 10;
  /// First ACK after a quiet period goes at once; later ones are merged for this long,
  /// or until the transport has no more input queued.
  std::int64_t ack_interval_ns = 1'000;
  /// A small message sent while earlier ones of this member are not yet all-acked
  /// waits up to this long to share one datagram with the next ones (up to the MTU),
  /// so a stream of small messages costs a send and a receive per batch, not per
  /// message. A message sent when none is in flight goes at once. 0: never wait.
  std::int64_t batch_delay_ns = 0;
  /// A member that sees a later fragment or message than one it lacks waits this
  /// long (datagrams may pass each other) before asking its parent for the fragments
  /// it lacks.
  std::int64_t nack_delay_ns = 10'000;
  /// Round trip of one hop assumed until measured (scaled by tree level for timeouts).
  std::int64_t initial_hop_rtt_ns = 10'000;
  /// Repair timeouts are clamped to [min_timeout_ns, max_timeout_ns].
  std::int64_t min_timeout_ns = 2'000;
  std::int64_t max_timeout_ns = 200'000'000;
  /// Unanswered repair attempts to a member before it is suspected and removed.
  std::uint32_t repair_budget = 8;
  /// At most this many messages go in one round of repairs to one member.
  std::uint32_t repair_batch = 64;
  /// Packets of a view not yet installed are held (not dropped) up to this many.
  std::uint32_t future_packet_limit = 4096;
  /// A sender announces its all-acked prefix this long after the last advance
  /// when no data packet carried it (lets receivers free retained messages).
  std::int64_t stable_announce_ns = 20'000;
  /// Socket and verbs transports: after a view brings members in, each member
  /// multicasts a probe that every other member confirms over its reliable link,
  /// resent this often. A member still silent at the deadline makes the whole group
  /// switch to multicast emulated over reliable links (GroupStats::multicast_emulated):
  /// slower, never unsafe; a false alarm costs only speed.
  std::int64_t multicast_probe_resend_ns = 100'000'000;
  std::int64_t multicast_probe_deadline_ns = 3'000'000'000;  // 0: no probe
};

/// The AEAD whose tags frames carry under a group key (Config::key_cipher).
enum class KeyCipher : std::uint8_t { aes256gcm = 1, chacha20poly1305 = 2 };

/// Which fabric a Node uses. More come with later transports (verbs).
enum class TransportKind : std::uint8_t {
  /// Nodes in one process that name the same `fabric`; real threads and real time.
  /// For tests, examples and applications that want the API without a network.
  inproc,
  /// Processes on any Linux hosts: UDP IP multicast for datagrams, TCP for reliable
  /// links, and a membership manager reached over TCP (SocketOptions).
  socket,
  /// RDMA (rdma-core: libibverbs + librdmacm; InfiniBand, RoCE, Soft-RoCE): a UD queue
  /// pair joined to the group's multicast address for datagrams, RC queue pairs for
  /// reliable links (VerbsOptions). Membership is the socket transport's: the TCP
  /// manager named by SocketOptions::manager (or embedded, SocketOptions::embed_manager).
  verbs,
  /// Processes on one host: shared memory files in /dev/shm (ShmOptions), a
  /// multicast log per member that every other member reads, and an inbox per
  /// member for reliable frames. Membership, waiting and the large-buffer pool are
  /// the socket transport's (SocketOptions).
  shm,
};

/// How the verbs transport waits for completions.
enum class CompletionMode : std::uint8_t {
  /// Busy-poll the completion queue for VerbsOptions::busy_poll after the last
  /// completion, then arm the completion channel and sleep: low latency under load,
  /// no CPU burnt when idle.
  hybrid,
  /// Always busy-poll (a core per Node; the lowest latency).
  poll,
  /// Always sleep on the completion channel (the least CPU; adds a wake-up per event).
  interrupt,
};

/// The verbs transport (TransportKind::verbs). See docs/real-clusters.md for
/// InfiniBand (subnet manager, partitions) and RoCE (IGMP, GID index) set-up.
struct VerbsOptions {
  /// RDMA device name (e.g. "mlx5_0", "rxe0"); empty: the first device with an active port.
  std::string device;
  /// Port number on the device (1-based); 0: its first active port.
  std::uint8_t port = 0;
  /// GID index whose IPv4-mapped address becomes interface_address when that is empty;
  /// -1: the port's first IPv4-mapped GID. (rdma_cm picks the GID for the bound address.)
  int gid_index = -1;
  /// Local IPv4 address that rdma_cm binds to (the device of that netdev is used; it
  /// must be `device` if one is named). Peers are told to connect to it.
  std::string interface_address;
  /// Largest datagram (hmcast header included); at most the group's path MTU
  /// (RoCE: the netdev MTU rounded down to 1024/2048/4096; InfiniBand: the port's MTU).
  std::uint32_t mtu = 4096;
  /// UD receives kept posted (refilled as they complete): a burst longer than this
  /// between two polls is lost like on the wire, and repaired by the protocol.
  std::uint32_t receive_ring = 512;
  /// UD sends in flight at once; a multicast that finds them all in use waits for
  /// completions (bounded), then drops the datagram (counted) rather than overrun the queue.
  std::uint32_t send_depth = 128;
  /// Receive buffers posted per incoming reliable link: the credits its sender holds,
  /// so a sender never finds no receive posted (no RNR retries).
  std::uint32_t link_receive_depth = 16;
  /// Bytes per reliable-link message; longer frames move in several.
  std::uint32_t link_chunk = 68U << 10;
  CompletionMode completion = CompletionMode::hybrid;
  /// hybrid: how long to busy-poll after the last completion before sleeping.
  std::chrono::microseconds busy_poll{50};
  /// Address/route resolution and the multicast join must finish within this.
  std::chrono::milliseconds resolve_timeout{5'000};
  /// Large messages: peers RDMA WRITE block payloads straight into this node's final
  /// buffer (registered per message, held until every writer confirmed it stopped).
  /// false: they are SENT into link buffers and copied, and nothing is registered
  /// on the data path (for memory-lock limits, or to compare).
  bool zero_copy = true;
  /// zero_copy: registered final buffers kept for the next large messages once
  /// released (the registration cache), in bytes; beyond it they are deregistered
  /// and freed. Registered memory is pinned: it counts against `ulimit -l`.
  std::size_t zero_copy_pool_bytes = std::size_t{256} << 20;
};

/// The socket transport. Members find each other through a membership manager: a
/// standalone `hmcast manager --listen HOST:PORT`, or one member with embed_manager.
/// The manager gives each group its own multicast address and port.
struct SocketOptions {
  /// HOST:PORT of the membership manager.
  std::string manager = "127.0.0.1:17700";
  /// Run the manager inside this Node, listening on `manager`. If this Node's
  /// process dies, the group's members fail with ErrorCode::manager_lost. With
  /// `zookeeper` set: this Node stands for the coordinator's seat instead (listening
  /// on interface_address, any free port), so any such member can take over.
  bool embed_manager = false;
  /// A ZooKeeper ensemble ("host:port,host:port,..."): the manager is whichever
  /// `hmcast manager --zookeeper` holds the coordinator's seat there (and `manager`
  /// is not used). When it dies, a standing manager takes over the groups it
  /// recorded and members rejoin it within `failover_timeout`, without failing
  /// anything. Empty: the one manager at `manager`.
  std::string zookeeper;
  /// Where in ZooKeeper the seat and the group records are (one tree per set of managers).
  std::string zookeeper_root = "/hmcast";
  std::chrono::milliseconds failover_timeout{15000};
  /// Local IPv4 address: the interface datagrams use, where reliable links listen,
  /// and what peers are told to connect to.
  std::string interface_address = "127.0.0.1";
  /// IP_MULTICAST_TTL: 1 keeps datagrams on the local network.
  std::uint8_t ttl = 1;
  /// Largest datagram sent (hmcast header included). Above the network's MTU the
  /// kernel fragments, and losing one fragment loses the datagram. Every member of a
  /// group must use the same. 0: datagram_size() chooses.
  std::uint32_t mtu = 0;
  /// The datagram size in use: `mtu` if set; else 65,000 bytes on a loopback address
  /// (127.0.0.0/8: members on one host, whose loopback carries 64 KiB packets whole,
  /// so a 64 KiB message costs one send and one receive instead of eight), 8,192
  /// elsewhere (a few Ethernet frames; jumbo-frame networks may raise it).
  [[nodiscard]] std::uint32_t datagram_size() const {
    if (mtu != 0) return mtu;
    return interface_address.rfind("127.", 0) == 0 ? 65'000 : 8'192;
  }
  /// Socket buffers of each reliable link (SO_SNDBUF/SO_RCVBUF; 0: the kernel's
  /// autotuning, which on a link with a tiny round trip leaves a few KB, so that a
  /// large message moves only while this process is running; docs/benchmarks.md,
  /// "Figures behind the defaults"). The kernel caps it at net.core.wmem_max /
  /// rmem_max; memory is used only as data is queued.
  std::uint32_t link_buffer_bytes = 4U << 20;
  /// ACKs go as UDP datagrams to a member's own port (the number its links listen on),
  /// where a TCP frame would cost about as much again as the datagram it answers;
  /// after a sign of loss they go over the links for a while. Off: always the links
  /// (for networks that pass the multicast port and TCP but drop other UDP). Every
  /// member receives them either way.
  bool direct_datagrams = true;
  /// How the progress thread waits for datagrams and frames. hybrid (the default)
  /// keeps polling, yielding the CPU between polls, for `busy_poll` after the last
  /// arrival and then sleeps: a message that follows soon after another finds the
  /// thread awake instead of paying a wake-up. (Where every polling thread on the
  /// host has a CPU of its own, it keeps the CPU between polls instead of yielding:
  /// shm counts the host's members; sockets trust a process bound to some CPUs.) interrupt always sleeps (the least
  /// CPU); poll never does (a core per Node). A sleeping thread takes tens of
  /// microseconds to wake (docs/benchmarks.md), so the window is a few wake-ups.
  CompletionMode completion = CompletionMode::hybrid;
  std::chrono::microseconds busy_poll{200};
  /// hybrid: while arrivals keep coming after idle gaps shorter than half of this (a
  /// sender waiting for each message's ACKs), polling stretches to twice the typical
  /// gap, so the next arrival finds the thread awake; traffic that stops or comes
  /// more seldom gets `busy_poll` only. busy_poll or less: no stretching.
  std::chrono::microseconds busy_poll_max{5000};
  /// Large-message buffers kept for the next messages once released, in bytes
  /// (a fresh buffer costs a page fault per page and zeroing). Also used by the
  /// in-process transport. 0: every buffer is freed when its message is over.
  std::size_t large_pool_bytes = std::size_t{256} << 20;
  /// The two-level group: members that name the same host (Config::host_identity)
  /// reach each other through shared memory (the shm transport, sized by
  /// Config::shm), and the network carries only what crosses hosts; the ACK trees
  /// follow hosts either way. Every member of a group must set the same.
  bool share_memory = false;
};

/// The shared-memory transport (TransportKind::shm). Each member's file holds
/// both areas below, touched as they fill (the log 128 KiB ahead of its writer).
struct ShmOptions {
  /// Largest datagram (hmcast header included; at most 128 KiB, as no network
  /// fragments it here). Fewer, larger datagrams cost fewer records and fewer ACKs
  /// per byte, and above 65536 a 64 KiB message is one datagram, copied once less.
  /// Messages of several datagrams are cut at 65,000 bytes all the same
  /// (ProtocolConfig::fragment_mtu): at this size they were slower (docs/benchmarks.md,
  /// "One 64 KiB message in one shm datagram").
  std::uint32_t mtu = 67'584;
  /// The member's multicast log. A datagram is dropped (and repaired by the
  /// protocol) only when some attached reader is this far behind.
  std::size_t multicast_bytes = std::size_t{8} << 20;
  /// The member's inbox for reliable frames from all peers.
  std::size_t inbox_bytes = std::size_t{8} << 20;
  /// Frames to one peer that wait for room in its inbox; past this the link to
  /// that peer is broken (the protocol then suspects it).
  std::size_t max_pending_bytes = std::size_t{256} << 20;
  /// A reader whose position has not moved for this long while the log is full is
  /// let go (it re-attaches when it reads again, the protocol repairs what it missed).
  std::chrono::milliseconds reader_stall{1000};
};

/// Seeded faults injected on what a member receives (tests; all off by default).
/// They are applied by one layer between the transport and the protocol (the same
/// for every transport), so real processes see loss, duplication, reordering and
/// delay even where the kernel offers no netem. Sending is never touched.
///
/// Every decision is drawn from a generator seeded with `seed` mixed with the
/// member's id: given the order in which items arrive, a run's decisions repeat.
///
/// A Node also reads these environment variables; each one that is set overrides
/// its field (a bad value makes the Node constructor throw invalid_config):
///   HMCAST_FAULT_LOSS=P           datagram_loss
///   HMCAST_FAULT_DUP=P            datagram_duplicate
///   HMCAST_FAULT_REORDER=P        datagram_reorder
///   HMCAST_FAULT_DELAY_US=N       datagram_delay_ns_max = N microseconds
///   HMCAST_FAULT_LINK_DELAY_US=N  link_delay_ns_max = N microseconds
///   HMCAST_FAULT_SEED=N           seed
///
/// Node::Node checks the fields: probabilities in [0, 1], delays and the reorder
/// hold in [0, kMaxFaultDelayNs], min <= max, depth and max_held at least 1.
struct FaultConfig {
  /// Longest delay or hold any field may ask for (10 s): faults are for tests, and
  /// a held item costs memory until it is released.
  static constexpr std::int64_t kMaxFaultDelayNs = 10'000'000'000;

  double datagram_loss = 0.0;       // chance each received datagram is dropped
  double datagram_duplicate = 0.0;  // chance each received datagram is delivered twice (copies fault alike)
  /// Chance a received datagram is held back until 1..datagram_reorder_depth later
  /// datagrams (drawn uniformly) have overtaken it, or datagram_reorder_max_ns has
  /// passed, whichever comes first (the time bound releases it when traffic stops).
  double datagram_reorder = 0.0;
  std::uint32_t datagram_reorder_depth = 8;
  std::int64_t datagram_reorder_max_ns = 2'000'000;
  /// Each received datagram is delayed by a time drawn uniformly from
  /// [datagram_delay_ns_min, datagram_delay_ns_max]; datagrams are independent, so
  /// different delays reorder them too. 0/0: no delay.
  std::int64_t datagram_delay_ns_min = 0;
  std::int64_t datagram_delay_ns_max = 0;
  /// Each frame received on a reliable link is delayed by a time drawn uniformly
  /// from [0, link_delay_ns_max], but never overtakes an earlier frame from the same
  /// peer: links stay FIFO, as TCP and RC are. Frames are never dropped.
  std::int64_t link_delay_ns_max = 0;
  /// Most items (datagrams and frames) held at once. At the cap, the held item due
  /// first is released at once (counted in FaultStats::released_early) to make
  /// room: memory stays bounded, nothing is lost that the config did not drop, and
  /// links stay FIFO; only the delay of that one item is cut short.
  std::uint32_t max_held = 65'536;
  std::uint64_t seed = 1;
};

/// Config::borrow_progress. Handing each ACK from the progress thread to the thread
/// waiting for it was most of a small message's time at two processes; a waiter that
/// makes the progress itself reads the ACK on its own thread.
enum class BorrowProgress : std::uint8_t {
  /// Where the waiting thread may keep a CPU while it polls: the process is bound to
  /// CPUs of its own (as launchers bind ranks), or (shm) the members on the host are
  /// no more than its CPUs. On an oversubscribed host the parked progress thread's
  /// looks take CPU time that other members' ACKs need; on shm a message of one
  /// datagram borrows all the same (its ACK comes through a mail slot, and the other
  /// way is a hand-off between two threads of every member).
  automatic,
  /// Every waiter for a small message, whatever the host.
  always,
  /// Callbacks only ever run on the progress thread.
  never,
};

/// Which threads make a Node's group progress: read the transport, ACK, repair,
/// deliver, fire timers and run the callbacks.
enum class Progress : std::uint8_t {
  /// A progress thread the Node starts; every callback runs on it, or on a thread
  /// waiting on a small message's Completion while it makes the progress itself
  /// (Config::borrow_progress).
  thread,
  /// The application's own threads, inside Group::poll(), Completion::get() and
  /// wait_for(), and a broadcast() that waits for room; callbacks run there, on the
  /// calling thread. No thread hands work to another (on a host with a core per
  /// process that hand-off is most of a small message's time, as for MPI ranks,
  /// which make progress inside their calls too), but nothing is delivered or ACKed
  /// between calls: a member must call poll() often (a member silent longer than the
  /// protocol's timeouts is repaired around and, in the end, suspected).
  caller,
};

struct Config {
  TransportKind transport = TransportKind::inproc;
  /// Who makes the group progress (Progress): the Node's thread, or the caller's.
  Progress progress = Progress::thread;
  /// Progress::thread on the socket and shm transports: whether an application
  /// thread that waits on a small message's Completion (get(), wait_for()) makes the
  /// group's progress itself while it polls, callbacks included, with the progress
  /// thread standing aside until it is done (BorrowProgress).
  BorrowProgress borrow_progress = BorrowProgress::automatic;
  /// inproc: nodes naming the same fabric see each other.
  std::string fabric = "default";
  /// Members a group waits for before its first view is installed. Every member of
  /// a group must pass the same number. On the socket transport a member may join
  /// later (with the same number): it comes in mid-stream (see Node::join).
  std::uint32_t group_size = 1;
  /// join() fails with ErrorCode::join_timeout after this long.
  std::chrono::milliseconds join_timeout{10'000};
  /// socket: how to reach the manager and which interface to use. verbs: the manager.
  SocketOptions socket;
  /// verbs: device, port, queue depths, completion mode.
  VerbsOptions verbs;
  /// shm: ring sizes (the rest is in `socket`).
  ShmOptions shm;
  /// Which host this member runs on, as it tells the group when it joins (members
  /// that say the same can share memory; GroupStats::hosts, host_members,
  /// host_leader). Empty: derived from the kernel's boot id, the /dev/shm it sees
  /// and its network namespace, so processes in different network namespaces
  /// (the emulated cluster's hosts) count as different hosts.
  std::string host_identity;
  /// Protocol tuning; empty means the transport's profile tuned by the policy for
  /// group_size (hmcast::default_protocol).
  std::optional<ProtocolConfig> protocol;
  /// A profile written by `hmcast bench --calibrate` (empty: the transport's
  /// built-in profile). Used only when `protocol` is empty. A file that cannot be
  /// read or parsed makes the Node constructor throw invalid_config.
  std::string profile_file;
  FaultConfig faults;
  /// The group key: a secret every member holds (`hmcast keygen --out FILE` makes
  /// one). With a key, every datagram and link frame of the in-process and socket
  /// transports carries a tag under a key of the view, derived from it; frames
  /// without a right tag, and replayed ones, are dropped and counted
  /// (GroupStats::auth_failures, replays_refused). Each tag takes
  /// kKeyTrailerBytes of the transport's MTU. Members of one group must all have
  /// the key or all be without it. The shm and verbs transports tag nothing: their
  /// fabric is trusted (the README says when).
  /// Set at most one of `key` and `key_file`; with neither, the Node reads the file
  /// named by the environment variable HMCAST_KEY_FILE if it is set. A key file must
  /// be readable by its owner only (chmod 600), or the Node constructor throws.
  std::optional<std::array<std::byte, 32>> key;
  /// The AEAD of `key`'s tags; the same on every member. AES-256-GCM needs AES-NI
  /// (the Node constructor throws invalid_config on a CPU without it);
  /// ChaCha20-Poly1305 runs anywhere at about three times the cost per frame. A key
  /// file names its own cipher (`hmcast keygen` picks the one this CPU runs best).
  KeyCipher key_cipher = KeyCipher::aes256gcm;
  std::string key_file;
};

/// Bytes a tag adds to each datagram and frame when Config has a key.
inline constexpr std::uint32_t kKeyTrailerBytes = 24;

}  // namespace hmcast
