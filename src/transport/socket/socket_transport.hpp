// A socket transport for Linux with the shape of the in-process one
// (transport/inproc): an Endpoint per node, drained by the node's progress thread
// through wait(), with datagram multicast and reliable point-to-point links.
//
// - Datagrams: one UDP socket per endpoint, bound to an IPv4 multicast group and
//   port shared (SO_REUSEADDR + SO_REUSEPORT) by every endpoint of the host, with
//   loopback on, so every endpoint also hears its own datagrams: those whose wire
//   header names this endpoint as `src` (bytes 20..23) are dropped on receive.
//   Unreliable like the network below; a Node's fault layer (api/faulty_link.hpp)
//   adds seeded faults above the endpoint, the same as on every transport.
// - Direct datagrams (unicast_datagram): frames that may be lost (cumulative ACKs)
//   go as UDP datagrams to the peer's port number (a second UDP socket per endpoint,
//   bound to the same number as the listening socket), read with the group's.
//   On loopback a TCP hop costs about as much again as a UDP one (the receiver's
//   TCP ACK, the stream's bookkeeping), and an all-acked message at two processes is
//   one datagram out and one ACK back.
// - Reliable links: TCP, one connection per direction: an endpoint sends to a peer
//   only over the connection it opened itself (lazily, on the first unicast) and
//   reads from the connections peers opened to it. Frames are a u32 little-endian
//   length and the bytes (framing.hpp); the first frame is a hello naming the
//   connecting member. A malformed stream (length over the limit, no valid hello)
//   is disconnected. A link whose connection fails (refused, EOF, reset, broken
//   pipe, output over its bound) is broken: unicast() to that peer returns false
//   from then on, until add_peer() names the peer again.
// - Everything is non-blocking and driven by one epoll set per endpoint, from
//   wait() (the caller's progress thread); wake() signals an eventfd when wait()
//   may be asleep in epoll, and otherwise only sets a flag wait() looks at.
//
// Thread-safety: multicast(), unicast(), add_peer(), wake(), close() and stats()
// may be called from any thread, also while another thread is in wait(); wait()
// from one thread at a time. The destructor must not run concurrently with any call.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "hmcast/config.hpp"
#include "hmcast/types.hpp"
#include "transport/cpu_share.hpp"
#include "transport/poll_pacer.hpp"
#include "transport/transport.hpp"
#include "transport/socket/framing.hpp"
#include "transport/socket/net_util.hpp"

namespace hmcast::socket {

using transport::Inbound;

struct SocketConfig {
  /// IPv4 multicast group (224.0.0.0/4) and UDP port every member of the fabric uses.
  std::string group_address = "239.255.77.77";
  std::uint16_t group_port = 17777;
  /// Address of the interface datagrams leave and are received on (IP_MULTICAST_IF,
  /// and imr_interface of IP_ADD_MEMBERSHIP).
  std::string interface_address = "127.0.0.1";
  /// IP_MULTICAST_TTL: 1 keeps datagrams on the local network.
  std::uint8_t ttl = 1;
  /// IP_MULTICAST_LOOP: must stay on when several endpoints share a host.
  bool multicast_loop = true;
  /// Largest datagram (the hmcast packet, header included) multicast() sends and
  /// wait() accepts; ProtocolConfig::mtu must not exceed it.
  std::size_t mtu = 8192;
  /// SO_RCVBUF asked for the datagram socket (the kernel caps it at net.core.rmem_max).
  int udp_receive_buffer = 4 << 20;
  /// SO_SNDBUF and SO_RCVBUF of every reliable link (0: the kernel's autotuning).
  /// Autotuning sizes buffers by the measured round trip; on a rate-limited link with
  /// a near-zero round trip that leaves a few KB, and the link then idles whenever the
  /// process is not scheduled to refill it. The kernel caps it at net.core.wmem_max
  /// and net.core.rmem_max.
  int tcp_buffer = 0;
  /// Address and port the reliable links listen on (0 = an ephemeral port; see tcp_port()).
  std::string listen_address = "127.0.0.1";
  std::uint16_t listen_port = 0;
  /// Largest frame body a link carries; a longer length prefix drops the connection.
  std::size_t max_frame = kDefaultMaxFrame;
  /// Bytes queued for one peer and not yet taken by the kernel; a unicast() that
  /// would exceed this breaks the link (the peer stopped reading).
  std::size_t max_output_bytes = std::size_t{256} << 20;
  /// Connections accepted at once; more are closed as they arrive.
  std::size_t max_connections = 1024;
  /// How wait() waits: hybrid polls (yielding the CPU between polls) for
  /// `busy_poll` after the last arrival, then sleeps in epoll; poll never sleeps;
  /// interrupt always sleeps.
  CompletionMode completion = CompletionMode::hybrid;
  std::chrono::nanoseconds busy_poll{std::chrono::microseconds{200}};
  std::chrono::nanoseconds busy_poll_max{std::chrono::microseconds{5000}};  // see PollPacer
  /// Threads of this member that poll while traffic is steady (ShmConfig's twin):
  /// polling keeps a CPU only in a process bound to CPUs of its own (cpu_share.hpp).
  std::uint32_t polling_threads = 2;
  /// Send unicast_datagram()'s frames as datagrams (false: over the reliable link).
  /// Either way the endpoint receives them on its direct socket.
  bool direct_datagrams = true;
};

/// Counters for tests and diagnostics (a snapshot).
struct Stats {
  std::uint64_t datagrams_sent = 0;
  std::uint64_t datagrams_send_dropped = 0;   // the kernel had no room (EAGAIN/ENOBUFS): lost like on the wire
  std::uint64_t datagrams_received = 0;       // queued for wait()
  std::uint64_t datagrams_own = 0;            // our own, looped back, dropped
  std::uint64_t datagrams_oversized = 0;      // over the MTU, dropped
  std::uint64_t frames_sent = 0;      // accepted by unicast() (the hello not counted)
  std::uint64_t frames_received = 0;  // queued for wait() (the hello not counted)
  std::uint64_t connections_accepted = 0;
  std::uint64_t connections_over_limit = 0;  // closed at once: max_connections reached
  std::uint64_t connections_malformed = 0;   // dropped for a bad length, a bad hello, or data where none belongs
  std::uint64_t links_broken = 0;            // peers marked unreachable
  std::uint64_t bytes_placed = 0;            // block payload that went into its final buffer...
  std::uint64_t bytes_placed_copied = 0;     // ...of it, read into the link buffer first and copied
  std::uint64_t direct_sent = 0;             // unicast_datagram()s sent as datagrams
  std::uint64_t direct_send_dropped = 0;     // the kernel had no room, or the peer's host is unreachable
  std::uint64_t direct_received = 0;         // datagrams on the direct socket, queued for wait()
  std::uint64_t lent_tails_copied = 0;       // tails sent without a keeper that had to wait, copied
};

using transport::BlockPlacer;

class Endpoint {
 public:
  /// Opens the datagram socket (joined to the group) and the listening socket.
  /// Throws hmcast::Error(invalid_config) for a bad config, TransportError when
  /// the system refuses.
  Endpoint(MemberId id, const SocketConfig& config);
  ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;
  Endpoint(Endpoint&&) = delete;
  Endpoint& operator=(Endpoint&&) = delete;

  [[nodiscard]] MemberId id() const { return id_; }
  /// The port the reliable links listen on (what peers pass to add_peer()); the
  /// direct datagram socket has the same number.
  [[nodiscard]] std::uint16_t tcp_port() const { return tcp_port_; }
  /// The epoll set wait() drains: it polls readable while wait() has work. A caller
  /// that polls it itself is woken by wake() too (the eventfd is written every time).
  [[nodiscard]] int epoll_fd() const {
    watched_.store(true);
    return epoll_fd_;
  }
  [[nodiscard]] std::size_t mtu() const { return cfg_.mtu; }

  /// Where to reach member `id` over a reliable link. Naming a peer again replaces
  /// its address and clears a broken link (an open connection to it is closed if
  /// the address changed). `host` is an IPv4 address or a name that resolves to one.
  void add_peer(MemberId id, const std::string& host, std::uint16_t port);

  /// Waits until a datagram or frame arrives, wake() is called, or `deadline`
  /// passes; meanwhile sends queued output, accepts connections, notices broken
  /// links. Returns nothing when woken, at the deadline, or once closed.
  std::optional<Inbound> wait(std::chrono::steady_clock::time_point deadline);
  void wake();

  /// Send one datagram to the group: `bytes` then `more` (a fragment's header and its
  /// payload from the message where it lies), in one vectored call. Throws
  /// hmcast::Error(message_too_large) if it is over mtu() (a configuration error:
  /// ProtocolConfig::mtu > SocketConfig::mtu). A datagram the kernel has no room for
  /// is dropped (counted), as the network may drop it. No-op once closed.
  void multicast(std::span<const std::byte> bytes, std::span<const std::byte> more = {});

  /// Queue a frame for `to` and send what the kernel takes now; wait() sends the
  /// rest. False if `to` is unknown, its link is broken, or this endpoint is
  /// closed: the frame is not sent. True does not mean delivered: a link that
  /// breaks later loses what was queued (a later unicast() returns false).
  /// Throws hmcast::Error(message_too_large) for a frame over max_frame.
  bool unicast(MemberId to, std::vector<std::byte> bytes);
  /// A frame that may be lost, as one datagram to `to`'s direct socket (a frame over
  /// mtu(), or with SocketConfig::direct_datagrams off, goes by unicast()). A peer
  /// not known, a full socket buffer or an unreachable host drop it, counted. False
  /// only as unicast() says it, for a frame that went by the link.
  bool unicast_datagram(MemberId to, std::vector<std::byte> bytes);
  /// The largest frame unicast_datagram() sends as a datagram (0: none).
  [[nodiscard]] std::size_t direct_datagram_limit() const { return cfg_.direct_datagrams ? cfg_.mtu : 0; }
  /// The same for a frame of `head` followed by `tail`, which is sent from where it
  /// lies (no copy into the frame); `keep` holds its memory until it is written. A
  /// null `keep` lends `tail` for this call only: what cannot be written at once is
  /// copied (a sender's lent message, Group::broadcast_from).
  bool unicast(MemberId to, std::vector<std::byte> head, std::span<const std::byte> tail,
               std::shared_ptr<const void> keep);

  /// From now on, Block frames of reliable links with a payload of at least
  /// `min_payload` bytes are offered to `placer` once their head has arrived; a
  /// payload it places is read from the socket straight into the destination, and
  /// the frame is handed on without it (Inbound::placed). The placer runs on the
  /// thread in wait(), with this endpoint's lock held: it must not call the endpoint,
  /// nor block on a lock that a caller of unicast() may hold.
  void set_block_placer(BlockPlacer placer, std::size_t min_payload = 4096);
  /// Link::set_sole_poller: while set, wait() counts one polling thread of this
  /// member instead of SocketConfig::polling_threads.
  void set_sole_poller(bool sole) { sole_poller_.store(sole, std::memory_order_relaxed); }
  /// The polling threads wait() counts now (cpu_share.hpp's `own`).
  [[nodiscard]] std::uint32_t polling_threads_now() const {
    return sole_poller_.load(std::memory_order_relaxed) ? 1U : cfg_.polling_threads;
  }

  /// Closes every socket (best effort to hand queued output to the kernel first)
  /// and wakes wait(); afterwards wait() returns nothing at once and sends fail.
  void close();

  [[nodiscard]] Stats stats() const;
  /// Whether the kernel drops our own looped-back datagrams (a socket filter) before
  /// they are queued; if not, reading drops them (Stats::datagrams_own).
  [[nodiscard]] bool drops_own_in_kernel() const { return own_filtered_in_kernel_; }
  /// Takes back an Inbound's bytes for a datagram slot (Link::recycle): kept if it
  /// holds a slot and not much more, up to a few (bounded memory), else freed.
  void recycle(std::vector<std::byte>&& bytes);

 private:
  struct OutFrame {
    std::array<std::byte, kLengthPrefix> prefix{};
    std::vector<std::byte> body;
    std::span<const std::byte> tail;  // sent after body from where it lies (a block's payload)
    std::shared_ptr<const void> keep;  // holds `tail` until written
    [[nodiscard]] std::size_t size() const { return kLengthPrefix + body.size() + tail.size(); }
  };
  static constexpr std::uint32_t kNeverPlaced = 0xffffffffU;
  struct Connection {
    int fd = -1;
    std::uint64_t key = 0;  // epoll tag; never reused, so a stale event cannot hit a new connection
    bool outgoing = false;
    bool connecting = false;
    std::optional<MemberId> peer;  // outgoing: whom we called; accepted: from the hello
    FrameReader reader{kDefaultMaxFrame};
    std::deque<OutFrame> out;
    std::size_t out_offset = 0;  // bytes of out.front() (prefix, then body) already written
    std::size_t out_bytes = 0;   // queued and not yet written
    bool watching_out = false;   // EPOLLOUT registered
    bool placing = false;        // its reader offers Block payloads to placer_
    // Frames since its last placed one (kNeverPlaced: none yet): blocks come between
    // the credits and other frames the same peer sends, so a block is likely next.
    std::uint32_t since_placed = kNeverPlaced;
    // Its last frame handed on, counted as popped_ counts (not handled while above it).
    std::uint64_t last_handed = 0;
  };
  struct Peer {
    sockaddr_in addr{};
    bool broken = false;
  };
  enum class Flush : std::uint8_t { done, pending, failed };

  // All with mu_ held.
  Connection* connect_to(MemberId to, Peer& peer);
  /// Registers `fd` with the epoll set under a fresh key (closes it and throws on failure).
  Connection& add_connection(int fd, std::uint32_t events);
  /// The frame just queued on `c`, if its tail came without a keeper: copied now.
  void own_lent_tail(Connection& c);
  Flush flush(Connection& c);
  void watch_output(Connection& c, bool on);
  void drop(std::uint64_t key, bool peer_lost);
  void mark_broken(MemberId id);
  void on_connection_event(std::uint64_t key, std::uint32_t events);
  bool read_connection(Connection& c);  // false: the connection was dropped
  void read_datagrams(int fd, bool direct);
  /// Opens listen_fd_ and direct_fd_ on one port number (`port`, or an ephemeral
  /// one free for both); throws TransportError when the system refuses.
  void open_listeners(const sockaddr_in& listen_on);
  void drop_own_datagrams_in_kernel();
  std::vector<std::byte> take_spare(std::size_t slot);  // mu_ held
  void accept_connections();
  void close_locked();

  MemberId id_;
  SocketConfig cfg_;
  sockaddr_in group_{};
  std::uint16_t tcp_port_ = 0;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  int udp_fd_ = -1;
  bool own_filtered_in_kernel_ = false;  // a socket filter drops our own looped datagrams
  int listen_fd_ = -1;
  int direct_fd_ = -1;
  bool pwait2_ = true;
  transport::PollPacer pacer_;  // when wait() polls rather than sleeps; only wait() touches it
  transport::Relax relax_;  // between polls (wait)
  std::atomic<bool> sole_poller_{false};  // set_sole_poller()
  /// When the last epoll that found input returned, whether the last look right
  /// after one found more, and how many such looks were skipped since one was made
  /// (wait() only; see kRepollAfter).
  std::chrono::steady_clock::time_point last_epoll_{};
  bool relook_found_ = true;
  std::uint32_t relooks_skipped_ = 0;

  mutable std::mutex mu_;
  bool closed_ = false;
  // wake() sets woken_, and writes the eventfd only when wait() may be blocked in
  // epoll (blocking_): a thread that polls sees the flag on its next turn, so a
  // sender that wakes a polling progress thread spends no system call on it, nor
  // does that thread (seq_cst on both: one of them sees the other's store).
  std::atomic<bool> woken_{false};
  std::atomic<bool> blocking_{false};
  mutable std::atomic<bool> watched_{false};  // epoll_fd() was handed out
  std::deque<Inbound> inbox_;
  std::uint64_t popped_ = 0;  // frames and datagrams taken from inbox_ (or dropped with it), ever
  std::map<MemberId, Peer> peers_;
  std::unordered_map<std::uint64_t, Connection> conns_;
  std::map<MemberId, std::uint64_t> outgoing_;  // peer -> key of the connection we send on
  std::uint64_t next_key_ = kFirstConnectionKey;
  std::size_t accepted_ = 0;
  std::vector<std::byte> scratch_;  // receive buffer of the links
  // Datagrams arrive kDatagramBatch to a recvmmsg() call, each in its own slot of
  // mtu + 1 bytes (a longer one shows as truncated). A large one leaves in its slot's
  // buffer (no copy) and the slot takes a spare (recycle()) or a new one; a small one
  // is copied out.
  std::vector<std::vector<std::byte>> datagram_slots_;
  std::vector<std::vector<std::byte>> spare_;  // under mu_
  std::vector<mmsghdr> datagram_msgs_;
  std::vector<iovec> datagram_iov_;
  BlockPlacer placer_;
  std::size_t min_placed_ = 4096;
  Stats stats_;

  static constexpr std::uint64_t kWakeKey = 1;
  static constexpr std::uint64_t kUdpKey = 2;
  static constexpr std::uint64_t kListenKey = 3;
  static constexpr std::uint64_t kDirectKey = 4;
  static constexpr std::uint64_t kFirstConnectionKey = 16;
};

}  // namespace hmcast::socket
