// The verbs transport (rdma-core): an Endpoint per node with the shape of the socket
// one (transport/socket), drained by the node's progress thread through wait().
//
// - Datagrams: one UD QP per endpoint, joined with rdma_cm (RDMA_PS_UDP) to the
//   group's IPv4 multicast address; the address handle, remote QPN and Q_Key come
//   from the join event. A ring of receive_ring receives (each 40 bytes of GRH room
//   plus the MTU, ud_layout.hpp) stays posted and is refilled as completions come.
//   Every member of the group, the sender included, receives a multicast (the flag
//   that blocks self-loopback is unreliable on many NICs), so datagrams whose wire
//   header names this endpoint as `src` are dropped. Sends use send_depth registered
//   slots: a multicast() that finds none free reaps completions for a bounded time,
//   then drops the datagram (counted) rather than overrun the send queue.
// - Reliable links: RC QPs made with rdma_cm (RDMA_PS_TCP): an endpoint listens on
//   the interface address (port(): what peers pass to add_peer()), sends to a peer
//   over the connection it opened itself (lazily, on the first unicast()) and
//   receives over the connections peers opened to it, as the socket transport does.
//   Frames move as SEND-with-immediate messages of up to link_chunk bytes (the
//   immediate marks a frame's last chunk) into receives the acceptor posted before
//   accepting; the sender holds one credit per posted receive and the acceptor
//   returns credits (a zero-length SEND with the count as immediate) as it reposts,
//   so no message ever finds no receive (no RNR retries). Frames wait in a bounded
//   per-peer queue while credits are out.
// - Zero-copy receive of large blocks: the node takes each large message's final
//   buffer from allocate_large() (a pool of buffers kept registered between
//   messages, transport/buffer_pool.hpp) and offers it (offer_region). Before the first
//   Ready frame for that message goes to a peer, the peer is sent a region
//   descriptor on the same link, naming the connection the peer writes to us on
//   (region_wire.hpp). A peer whose current connection is the one named RDMA WRITEs
//   a Block frame's payload straight into the buffer, then SENDs the frame's head
//   alone flagged as placed; RC ordering puts the bytes in place before the head's
//   receive completes, and the head goes up as an Inbound with `placed`. When the
//   node retires the buffer, each holding connection is sent a revoke and answers on
//   itself, behind every WRITE it carried; the buffer stays held until every holder
//   answered or died at our end (region_ledger.hpp says why), then returns to the pool.
// - One completion queue and one rdma_cm event channel per endpoint. wait() polls
//   the CQ and handles rdma_cm events; how it sleeps is CompletionMode (hybrid:
//   busy-poll for busy_poll after the last completion, then arm the completion
//   channel and sleep in epoll with the event channel and a wake eventfd).
// - A failed work completion (flushed or in error), an asynchronous event that puts
//   the link's QP in error (QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR, PATH_MIG_ERR) or a
//   connection event saying the link is gone (rejected, unreachable, disconnected)
//   breaks the link: unicast() to that peer returns false from then on, until
//   add_peer() names it again; the protocol then suspects the peer (a failure event
//   for membership). Failures of the datagram path (UD QP error, multicast error,
//   device removal) and asynchronous events that end the endpoint (our port down,
//   the device fatal, our CQ overrun) make wait() throw TransportError. Other
//   asynchronous events are counted and ignored (async_events.hpp has the mapping).
//   They are read from the device context's async fd, which rdma_cm shares between
//   all endpoints of the process (async_hub.hpp), watched by wait() next to the
//   completion channel and looked at every millisecond while it busy-polls.
// - The group holds at most the device's max_mcast_qp_attach UD QPs (Soft-RoCE: 56),
//   one per member process on the device: a join the device refuses, or one on a
//   device with no multicast at all, fails naming the limit and the fixes.
//
// Thread-safety: multicast(), unicast(), add_peer(), wake(), close() and stats() may
// be called from any thread, also while another thread is in wait(); wait() from
// one thread at a time. The destructor must not run concurrently with any call.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <tuple>
#include <string>
#include <unordered_map>
#include <vector>

#include <netinet/in.h>

#include "hmcast/config.hpp"
#include "hmcast/types.hpp"
#include "transport/transport.hpp"
#include "transport/verbs/device.hpp"
#include "transport/verbs/region_ledger.hpp"
#include "transport/buffer_pool.hpp"

struct ibv_ah;
struct ibv_comp_channel;
struct ibv_cq;
struct ibv_mr;
struct ibv_pd;
struct ibv_qp;
struct ibv_wc;
struct rdma_cm_event;
struct rdma_cm_id;
struct rdma_event_channel;

namespace hmcast::verbs {

class AsyncHub;
struct AsyncEvent;
using transport::Inbound;

/// A verbs or rdma_cm call failed; the message names it and what to do.
class TransportError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct EndpointConfig {
  VerbsOptions options;
  /// The group's IPv4 multicast address (dotted) that the UD QP joins.
  std::string group_address = "239.255.77.77";
  /// Largest frame a reliable link carries; a longer one breaks the connection.
  std::size_t max_frame = std::size_t{64} << 20;
  /// Bytes queued for one peer and not yet sent; a unicast() beyond this breaks the link.
  std::size_t max_output_bytes = std::size_t{256} << 20;
  /// Incoming reliable links accepted at once; more are rejected.
  std::uint32_t max_links = 256;
};

struct Stats {
  std::uint64_t ud_multicast_datagrams = 0;  // datagrams posted on the UD QP to the group
  std::uint64_t ud_send_dropped = 0;         // no send slot came free in time: dropped like on the wire
  std::uint64_t ud_received = 0;             // datagrams queued for wait()
  std::uint64_t ud_own = 0;                  // our own, looped back, dropped
  std::uint64_t ud_malformed = 0;            // a completion that cannot be a datagram, dropped
  std::uint64_t rc_messages_sent = 0;        // link messages (chunks) posted
  std::uint64_t rc_chains_posted = 0;        // ibv_post_send calls that posted them (chained)
  std::uint64_t rc_bytes = 0;                // frame bytes posted on RC links
  std::uint64_t rc_frames_received = 0;
  std::uint64_t credits_returned = 0;        // credit messages sent to peers
  std::uint64_t links_accepted = 0;
  std::uint64_t links_rejected = 0;          // over max_links or a bad connect request
  std::uint64_t links_malformed = 0;         // a frame over max_frame: disconnected
  std::uint64_t links_broken = 0;            // peers marked unreachable
  std::uint64_t completion_errors = 0;       // failed or flushed work completions
  std::uint64_t cq_sleeps = 0;               // times wait() armed the completion channel and slept
  std::uint64_t async_events = 0;            // asynchronous events of the device seen (ours or not)
  std::uint64_t async_link_failures = 0;     // links broken by an asynchronous event on their QP
  std::uint64_t async_events_lost = 0;       // events that did not fit the queue between two wait() calls
  // Zero-copy blocks (offer_region):
  std::uint64_t bytes_placed = 0;            // receiver: Block payload bytes peers RDMA WROTE into final buffers
  std::uint64_t blocks_placed = 0;           // receiver: placed Block heads handed up
  std::uint64_t bytes_written = 0;           // sender: Block payload bytes posted as RDMA WRITE
  std::uint64_t regions_registered = 0;      // receiver: buffers registered for remote writes (the pool's)
  std::uint64_t region_cache_hits = 0;       // receiver: a buffer lent again, already registered
  std::uint64_t region_register_failed = 0;  // receiver: ibv_reg_mr refused (blocks then come by the copy path)
  std::uint64_t regions_unregistered = 0;    // receiver: an offered buffer with no registration: the copy path
  std::uint64_t pool_idle_bytes = 0;         // receiver: registered bytes kept for the next large messages
  std::uint64_t regions_advertised = 0;      // receiver: descriptors sent to peers
  std::uint64_t regions_freed = 0;           // receiver: registrations released after every revoke was answered
  std::uint64_t regions_held = 0;            // receiver: offered buffers still held (registered) now
  std::uint64_t regions_leaked = 0;          // receiver: ibv_dereg_mr failed, memory kept so no write can hit reused memory
  std::uint64_t placed_malformed = 0;        // receiver: a placed head naming no region the peer holds, dropped
  std::uint64_t placed_stale = 0;            // receiver: a placed head for a buffer the node no longer uses, dropped
  std::uint64_t control_malformed = 0;       // a transport control frame that did not decode, dropped
  std::uint64_t regions_stale = 0;           // sender: a descriptor for a connection already gone, ignored
  std::uint32_t ud_mtu = 0;                  // the datagram MTU in use
  std::uint32_t max_mcast_qp_attach = 0;     // the device's limit of QPs per multicast group
};

class Endpoint {
 public:
  /// Picks the device (choose_device), joins the multicast group, listens for links.
  /// Throws hmcast::Error (invalid_config, or transport_failed naming the fixes when
  /// there is no device) and TransportError when a verbs call fails.
  Endpoint(MemberId id, const EndpointConfig& config);
  ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;
  Endpoint(Endpoint&&) = delete;
  Endpoint& operator=(Endpoint&&) = delete;

  [[nodiscard]] MemberId id() const { return id_; }
  /// The rdma_cm port (RDMA_PS_TCP) reliable links listen on.
  [[nodiscard]] std::uint16_t port() const { return port_; }
  [[nodiscard]] const std::string& interface_address() const { return device_.interface_address; }
  [[nodiscard]] const DeviceChoice& device() const { return device_; }
  [[nodiscard]] std::size_t mtu() const { return mtu_; }

  void add_peer(MemberId id, const std::string& host, std::uint16_t port);
  std::optional<Inbound> wait(std::chrono::steady_clock::time_point deadline);
  void wake();
  /// One datagram to the group. Throws hmcast::Error(message_too_large) over mtu().
  void multicast(std::span<const std::byte> bytes);
  /// Queue a frame for `to` (sent as credits allow). False if `to` is unknown, its
  /// link is broken, or this endpoint is closed.
  bool unicast(MemberId to, std::vector<std::byte> bytes);
  /// A final buffer for a large message of `size` bytes: with zero_copy, lent by the
  /// registration cache (registered for peers' writes, given back when the last
  /// reference drops); otherwise plain memory. Thread-safe; may be dropped anywhere.
  std::shared_ptr<std::vector<std::byte>> allocate_large(std::size_t size);
  /// Zero-copy receive: `buffer` (from allocate_large) is the final buffer of large
  /// message (sender, seq); advertise it to each peer we send a Ready for it, on the
  /// connection that peer writes on. Other buffers get their blocks by the copy path.
  void offer_region(MemberId sender, Seq seq, std::shared_ptr<std::vector<std::byte>> buffer);
  /// The node no longer needs the buffer of (sender, seq): revoke it at the peers that
  /// hold it; it is deregistered and dropped once they all answered or lost their link.
  void retire_region(MemberId sender, Seq seq);
  /// Disconnects every link and leaves the group; wait() returns nothing from then on.
  void close();
  [[nodiscard]] Stats stats() const;

 private:
  struct Region;  // registered memory
  struct Link;    // one RC connection
  struct Peer {
    sockaddr_in addr{};
    bool broken = false;
  };
  // Zero-copy: a buffer of ours that peers may write into, and its registration.
  struct LocalRegion {
    MemberId sender = 0;
    Seq seq = 0;
    std::shared_ptr<std::vector<std::byte>> buffer;  // held here until the ledger frees it
    ibv_mr* mr = nullptr;                            // the pool's registration of it
  };
  // A peer's buffer we may write into.
  struct RemoteRegion {
    std::uint64_t id = 0;
    std::uint64_t addr = 0;
    std::uint32_t rkey = 0;
    std::uint64_t length = 0;
    std::uint32_t connection = 0;  // our key of the link we may write into it on
  };
  struct WriteTarget {
    std::uint64_t addr = 0;  // where the segment's first byte goes
    std::uint32_t rkey = 0;
    std::uint64_t region = 0;  // the receiver's id of the region (named in the head)
  };

  // All with mu_ held.
  int poll_cq_locked();  // completions handled
  void on_completion(const ibv_wc& wc);
  void on_ud_completion(const ibv_wc& wc, std::uint32_t kind, std::uint32_t slot);
  void on_link_completion(Link& l, const ibv_wc& wc, std::uint32_t kind, std::uint32_t slot);
  void handle_cm_events_locked();
  void handle_async_events_locked();
  void on_async_event(const AsyncEvent& e);
  void on_cm_event(rdma_cm_event& ev);
  void on_connect_request(rdma_cm_event& ev);
  Link* connect_to(MemberId to, Peer& peer);
  void setup_link_qp(Link& l);
  void flush(Link& l);
  struct Chain;
  /// Posts `c` (its last work request signaled) and notes its slots; false if the
  /// queue pair refused it (the link is then broken).
  bool post_chain(Link& l, Chain& c);
  /// Queue a frame for `to` on our outgoing link (connecting if need be); `control`
  /// marks a transport control frame (region_wire.hpp). False if the link is broken.
  bool enqueue_locked(MemberId to, std::vector<std::byte> bytes, bool control);
  /// `ready` (a Ready frame for `to`) is about to be queued: send `to` the descriptor
  /// of that message's registered buffer first, if it does not hold it yet.
  void advertise_before_ready_locked(MemberId to, const std::vector<std::byte>& ready);
  std::optional<WriteTarget> write_target(MemberId to, std::uint32_t link_key, const std::vector<std::byte>& frame) const;
  /// The live link `peer` sends to us on (the one its WRITEs come through), if any.
  const Link* writer_link(MemberId peer) const;
  void on_control_frame(Link& l, std::span<const std::byte> bytes);
  bool on_placed_head(Link& l, std::vector<std::byte>& head);
  void retire_locked(MemberId sender, Seq seq);
  void free_region(std::uint64_t id);
  void free_regions(const std::vector<std::uint64_t>& ids);
  void post_ud_receive(std::uint32_t slot);
  void post_link_receive(Link& l, std::uint32_t slot);
  void return_credits(Link& l, bool force);
  void break_link(Link& l, bool peer_lost);
  void destroy_link(Link& l);
  void reap_dead_links();
  void mark_broken(MemberId id);
  void close_locked();
  void open();     // the constructor's work
  void release();  // frees every verbs resource (destructor, failed constructor)
  /// Start-up only: waits for rdma_cm event `expected` on the multicast id; a join
  /// event's address handle is taken before the event is released.
  void await_mcast_event(int expected, std::chrono::steady_clock::time_point deadline, const std::string& what);

  MemberId id_;
  EndpointConfig cfg_;
  DeviceChoice device_;
  std::size_t mtu_ = 0;
  std::uint16_t port_ = 0;

  rdma_event_channel* channel_ = nullptr;
  rdma_cm_id* listen_id_ = nullptr;
  rdma_cm_id* mcast_id_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_comp_channel* comp_ = nullptr;
  ibv_cq* cq_ = nullptr;
  std::uint32_t cq_size_ = 0;
  std::uint32_t cq_budget_ = 0;  // completions the CQ can still be asked to hold (links reserve theirs)
  ibv_ah* ah_ = nullptr;
  std::uint32_t remote_qpn_ = 0;
  std::uint32_t remote_qkey_ = 0;
  sockaddr_in group_{};
  std::unique_ptr<Region> ud_recv_;
  std::unique_ptr<Region> ud_send_;
  std::vector<std::uint32_t> ud_free_send_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::shared_ptr<AsyncHub> async_;
  std::uint64_t async_sub_ = 0;

  mutable std::mutex mu_;
  bool closed_ = false;
  bool woken_ = false;
  std::string failure_;  // the datagram path failed: wait() throws this
  std::deque<Inbound> inbox_;
  std::map<MemberId, Peer> peers_;
  std::unordered_map<std::uint32_t, std::unique_ptr<Link>> links_;  // by key (never reused)
  std::map<rdma_cm_id*, std::uint32_t> link_of_id_;
  std::map<MemberId, std::uint32_t> outgoing_;  // peer -> key of the link we send on
  std::vector<std::uint32_t> dead_;             // links to destroy once no event is held
  std::uint32_t next_key_ = 1;
  // Zero-copy (offer_region): ours, by id; the current one per message; and the
  // regions peers advertised to us, by (receiver, sender, seq).
  std::map<std::uint64_t, LocalRegion> local_regions_;
  std::map<std::pair<MemberId, Seq>, std::uint64_t> region_of_;
  RegionLedger ledger_;
  std::shared_ptr<transport::BufferPool> pool_;  // set in open(), closed in release()
  std::map<std::tuple<MemberId, MemberId, Seq>, RemoteRegion> remote_regions_;
  std::uint64_t next_region_id_ = 1;
  std::chrono::steady_clock::time_point last_completion_{};
  std::chrono::steady_clock::time_point next_async_check_{};  // busy-polling looks at async events this often
  Stats stats_;
};

}  // namespace hmcast::verbs
