#include "transport/verbs/verbs_transport.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/assert.hpp"
#include "core/wire.hpp"
#include "hmcast/error.hpp"
#include "transport/verbs/async_events.hpp"
#include "transport/verbs/async_hub.hpp"
#include "transport/verbs/region_wire.hpp"
#include "transport/verbs/ud_layout.hpp"

namespace hmcast::verbs {

namespace {

// Work request ids: the link's key (0: the UD QP), what the request is, and its slot.
// Keys are never reused, so a completion of a destroyed link cannot hit a new one.
constexpr std::uint32_t kUdRecv = 1, kUdSend = 2, kLinkData = 3, kCredit = 4;
constexpr std::uint64_t make_wr_id(std::uint32_t key, std::uint32_t kind, std::uint32_t slot) {
  return (std::uint64_t{key} << 32) | (std::uint64_t{kind} << 28) | slot;
}

// Credit messages: the acceptor returns credits once a quarter of its receives were
// reposted, so at most four credit messages can be unread at the sender; it posts
// eight receives for them, and the acceptor keeps at most four in flight.
constexpr std::uint32_t kCreditRecvs = 8;
// A link's work requests go to its queue pair in chains of at most this many (one
// ibv_post_send, one doorbell: on Soft-RoCE each post is a system call), and only a
// chain's last asks for a completion: completions come in order on a queue pair, so
// that one frees every slot of the chain.
constexpr std::size_t kChainMax = 32;
constexpr std::uint32_t kCreditSendsInFlight = 4;
constexpr std::size_t kCreditSlot = 64;
// Connect and accept carry the magic, then two values: our member id and our key for
// the link (connect; the key names the connection in region descriptors), or the
// receive depth (accept).
constexpr std::uint32_t kPrivateMagic = 0x32564d48;  // "HMV2"
constexpr std::uint32_t kLinkReserveSlack = kCreditRecvs;
constexpr std::uint32_t kCqLinks = 64;  // links the completion queue is sized for (more are refused)
// While wait() busy-polls it reads no fd; asynchronous events are rare and never
// urgent to the microsecond, so it looks for them this often (a syscall each time).
constexpr auto kAsyncCheckEvery = std::chrono::milliseconds(1);

std::string errno_text(int e) { return std::string(std::strerror(e)) + " (errno " + std::to_string(e) + ")"; }

[[noreturn]] void fail(const std::string& call, const std::string& hint) {
  throw TransportError("verbs transport: " + call + " failed: " + errno_text(errno) + (hint.empty() ? "" : "; " + hint));
}

void set_nonblocking(int fd, const std::string& what) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) fail("fcntl(O_NONBLOCK) on " + what, "");
}

sockaddr_in ipv4(const std::string& text, std::uint16_t port, const std::string& what) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (::inet_pton(AF_INET, text.c_str(), &a.sin_addr) != 1)
    throw Error(ErrorCode::invalid_config, "verbs transport: " + what + " '" + text + "' is not an IPv4 address");
  return a;
}

sockaddr* as_sockaddr(sockaddr_in* a) { return reinterpret_cast<sockaddr*>(a); }

struct PrivateValues {
  std::uint32_t first = 0;
  std::uint32_t second = 0;
};

std::array<std::byte, 12> private_data(PrivateValues v) {
  std::array<std::byte, 12> p{};
  for (int i = 0; i < 4; ++i) {
    p[static_cast<std::size_t>(i)] = static_cast<std::byte>(kPrivateMagic >> (8 * i));
    p[static_cast<std::size_t>(4 + i)] = static_cast<std::byte>(v.first >> (8 * i));
    p[static_cast<std::size_t>(8 + i)] = static_cast<std::byte>(v.second >> (8 * i));
  }
  return p;
}

/// The values of our private data, if `data` is ours (and of this version).
std::optional<PrivateValues> parse_private(const void* data, std::uint8_t len) {
  if (data == nullptr || len < 12) return std::nullopt;
  std::array<std::uint8_t, 12> b{};
  std::memcpy(b.data(), data, b.size());
  std::uint32_t magic = 0;
  PrivateValues v;
  for (int i = 3; i >= 0; --i) {
    magic = (magic << 8) | b[static_cast<std::size_t>(i)];
    v.first = (v.first << 8) | b[static_cast<std::size_t>(4 + i)];
    v.second = (v.second << 8) | b[static_cast<std::size_t>(8 + i)];
  }
  if (magic != kPrivateMagic) return std::nullopt;
  return v;
}

}  // namespace

/// Registered memory cut into equal slots; registered once and reused for the life
/// of its queue pair, so no registration happens on the data path.
struct Endpoint::Region {
  std::byte* mem = nullptr;
  std::size_t slot = 0;
  std::uint32_t count = 0;
  ibv_mr* mr = nullptr;

  Region(ibv_pd* pd, std::size_t slot_bytes, std::uint32_t slots, const std::string& what)
      : slot(slot_bytes), count(slots) {
    const std::size_t bytes = (slot * count + 4095) / 4096 * 4096;
    mem = static_cast<std::byte*>(std::aligned_alloc(4096, bytes));
    if (mem == nullptr) throw TransportError("verbs transport: out of memory for " + what);
    // The parentheses call the function, not verbs.h's macro of the same name (its
    // expansion mixes two enums, which clang's -Wdeprecated-enum-enum-conversion rejects).
    mr = (ibv_reg_mr)(pd, mem, bytes, IBV_ACCESS_LOCAL_WRITE);
    if (mr == nullptr) {
      const int e = errno;
      std::free(mem);
      errno = e;
      fail("ibv_reg_mr (" + std::to_string(bytes) + " bytes for " + what + ")",
           "registered memory is pinned: raise the locked-memory limit (ulimit -l unlimited, or memlock in "
           "/etc/security/limits.conf)");
    }
  }
  ~Region() {
    if (mr != nullptr) ::ibv_dereg_mr(mr);
    std::free(mem);
  }
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  [[nodiscard]] std::byte* at(std::uint32_t i) const { return mem + std::size_t{i} * slot; }
  [[nodiscard]] std::uint64_t addr(std::uint32_t i) const { return reinterpret_cast<std::uintptr_t>(at(i)); }
  /// The first `length` bytes of slot `i`, as a scatter/gather entry of this region.
  [[nodiscard]] ibv_sge sge(std::uint32_t i, std::size_t length) const {
    ibv_sge e{};
    e.addr = addr(i);
    e.length = static_cast<std::uint32_t>(length);
    e.lkey = mr->lkey;
    return e;
  }
  /// Posts a receive of all of slot `i` on `qp`; false if the queue pair refused it.
  bool post_receive(ibv_qp* qp, std::uint32_t i, std::uint64_t wr_id) const {
    ibv_sge e = sge(i, slot);
    ibv_recv_wr wr{};
    ibv_recv_wr* bad = nullptr;
    wr.wr_id = wr_id;
    wr.sg_list = &e;
    wr.num_sge = 1;
    return ::ibv_post_recv(qp, &wr, &bad) == 0;
  }
};

/// One RC connection, used in one direction: we send frames on the ones we open
/// (outgoing) and receive frames on the ones peers opened (accepted). Credits flow
/// the other way on the same queue pair.
struct Endpoint::Link {
  enum class State : std::uint8_t { resolving, connecting, up, dead };
  std::uint32_t key = 0;
  rdma_cm_id* id = nullptr;
  MemberId peer = 0;
  bool outgoing = false;
  State state = State::resolving;
  bool has_qp = false;
  std::uint32_t cq_reserved = 0;
  std::unique_ptr<Region> data;    // outgoing: send slots; accepted: receive slots
  std::unique_ptr<Region> credit;  // outgoing: receives for credit messages
  std::vector<std::uint32_t> free_send;
  // outgoing: the slots posted and not yet completed, in posting order; only a
  // chain's last slot gets a completion, which frees it and every slot before it.
  std::deque<std::uint32_t> in_flight;
  std::deque<std::uint32_t> chain_ends;  // outgoing: each chain's last slot, oldest first
  std::uint32_t credits = 0;  // outgoing: receives the acceptor has posted for us
  struct Outgoing {
    std::vector<std::byte> bytes;
    bool control = false;  // a transport control frame (region_wire.hpp)
  };
  std::deque<Outgoing> queue;
  std::size_t queued_bytes = 0;
  std::size_t front_offset = 0;  // bytes of queue.front() already posted
  // The front frame's payload goes by RDMA WRITE to this place (decided when its
  // first byte is posted, so a revoke handled meanwhile only affects later frames).
  bool front_started = false;
  std::optional<WriteTarget> front_write;
  std::uint32_t writer_key = 0;    // accepted: the peer's key for this link (named in region descriptors)
  std::vector<std::byte> partial;  // accepted: the frame being reassembled
  std::uint32_t unreturned = 0;    // accepted: receives reposted, credits not yet sent back
  std::uint32_t credit_sends = 0;  // accepted: credit messages in flight
};

Endpoint::Endpoint(MemberId id, const EndpointConfig& config) : id_(id), cfg_(config) {
  try {
    open();
  } catch (...) {
    release();
    throw;
  }
}

Endpoint::~Endpoint() {
  {
    std::lock_guard lock(mu_);
    close_locked();
  }
  release();
}

void Endpoint::open() {
  const auto& o = cfg_.options;
  device_ = choose_device(o);
  if (o.mtu > device_.active_mtu)
    throw Error(ErrorCode::invalid_config,
                "VerbsOptions::mtu (" + std::to_string(o.mtu) + ") is over the active MTU of " + device_.device +
                    " port " + std::to_string(device_.port) + " (" + std::to_string(device_.active_mtu) +
                    "): lower it, or raise the MTU (RoCE: the netdev's MTU; 9000 gives 4096, 1500 gives 1024)");
  mtu_ = o.mtu;
  stats_.ud_mtu = o.mtu;
  stats_.max_mcast_qp_attach = device_.max_mcast_qp_attach;
  if (o.mtu < wire::kHeaderSize) throw Error(ErrorCode::invalid_config, "VerbsOptions::mtu is below the hmcast header");

  channel_ = ::rdma_create_event_channel();
  if (channel_ == nullptr) fail("rdma_create_event_channel", "is the rdma_ucm module loaded (modprobe rdma_ucm)?");
  set_nonblocking(channel_->fd, "the rdma_cm event channel");

  // Reliable links listen on the interface address; this also finds the device.
  if (::rdma_create_id(channel_, &listen_id_, nullptr, RDMA_PS_TCP) != 0) fail("rdma_create_id (listen)", "");
  auto local = ipv4(device_.interface_address, 0, "interface address");
  if (::rdma_bind_addr(listen_id_, as_sockaddr(&local)) != 0)
    fail("rdma_bind_addr(" + device_.interface_address + ")",
         "the address must belong to a netdev with an RDMA device (check `rdma link show`)");
  if (listen_id_->verbs == nullptr)
    throw Error(ErrorCode::transport_failed,
                no_device_message("the address " + device_.interface_address + " is on no RDMA device"));
  const std::string bound = ::ibv_get_device_name(listen_id_->verbs->device);
  if (bound != device_.device)
    throw Error(ErrorCode::invalid_config, "verbs transport: the address " + device_.interface_address +
                                               " belongs to device " + bound + ", not " + device_.device +
                                               ": name that device, or give an address of " + device_.device);
  if (::rdma_listen(listen_id_, 64) != 0) fail("rdma_listen", "");
  port_ = ntohs(::rdma_get_src_port(listen_id_));
  ibv_context* ctx = listen_id_->verbs;

  ibv_device_attr dev{};
  if (::ibv_query_device(ctx, &dev) != 0) fail("ibv_query_device", "");
  pd_ = ::ibv_alloc_pd(ctx);
  if (pd_ == nullptr) fail("ibv_alloc_pd", "");
  pool_ = std::make_shared<transport::BufferPool>(
      [pd = pd_](std::byte* data, std::size_t bytes) -> void* {
        return (ibv_reg_mr)(pd, data, bytes,
                            static_cast<int>(IBV_ACCESS_LOCAL_WRITE) | static_cast<int>(IBV_ACCESS_REMOTE_WRITE));
      },
      [](void* mr) { return ::ibv_dereg_mr(static_cast<ibv_mr*>(mr)) == 0; }, cfg_.options.zero_copy_pool_bytes);
  comp_ = ::ibv_create_comp_channel(ctx);
  if (comp_ == nullptr) fail("ibv_create_comp_channel", "");
  set_nonblocking(comp_->fd, "the completion channel");
  const std::uint32_t per_link = 2 * (o.link_receive_depth + kLinkReserveSlack);
  const std::uint64_t want = std::uint64_t{o.receive_ring} + o.send_depth + std::uint64_t{kCqLinks} * per_link;
  cq_size_ = static_cast<std::uint32_t>(std::min<std::uint64_t>(want, static_cast<std::uint64_t>(dev.max_cqe)));
  if (cq_size_ < o.receive_ring + o.send_depth + per_link)
    throw Error(ErrorCode::invalid_config, "verbs transport: " + device_.device + " allows " +
                                               std::to_string(dev.max_cqe) +
                                               " completions per queue: lower receive_ring, send_depth or "
                                               "link_receive_depth");
  cq_budget_ = cq_size_ - o.receive_ring - o.send_depth;
  cq_ = ::ibv_create_cq(ctx, static_cast<int>(cq_size_), nullptr, comp_, 0);
  if (cq_ == nullptr) fail("ibv_create_cq", "");

  // The datagram path: a UD QP joined to the group's multicast address.
  const auto deadline = std::chrono::steady_clock::now() + o.resolve_timeout;
  const int timeout_ms = static_cast<int>(o.resolve_timeout.count());
  if (::rdma_create_id(channel_, &mcast_id_, nullptr, RDMA_PS_UDP) != 0) fail("rdma_create_id (multicast)", "");
  group_ = ipv4(cfg_.group_address, 0, "multicast group address");
  auto src = ipv4(device_.interface_address, 0, "interface address");
  if (::rdma_resolve_addr(mcast_id_, as_sockaddr(&src), as_sockaddr(&group_), timeout_ms) != 0)
    fail("rdma_resolve_addr(" + cfg_.group_address + ")", "");
  await_mcast_event(RDMA_CM_EVENT_ADDR_RESOLVED, deadline, "resolving the multicast address " + cfg_.group_address);
  if (mcast_id_->verbs != ctx)
    throw Error(ErrorCode::invalid_config, "verbs transport: the multicast group " + cfg_.group_address +
                                               " routes to another device than " + device_.device +
                                               ": add a route for 224.0.0.0/4 to its netdev");
  ibv_qp_init_attr qa{};
  qa.send_cq = cq_;
  qa.recv_cq = cq_;
  qa.qp_type = IBV_QPT_UD;
  qa.sq_sig_all = 1;
  qa.cap.max_send_wr = o.send_depth;
  qa.cap.max_recv_wr = o.receive_ring;
  qa.cap.max_send_sge = 1;
  qa.cap.max_recv_sge = 1;
  if (::rdma_create_qp(mcast_id_, pd_, &qa) != 0) fail("rdma_create_qp (UD)", "");
  ud_recv_ = std::make_unique<Region>(pd_, ud_receive_bytes(mtu_), o.receive_ring, "the datagram receive ring");
  ud_send_ = std::make_unique<Region>(pd_, mtu_, o.send_depth, "datagram send slots");
  for (std::uint32_t i = 0; i < o.receive_ring; ++i) post_ud_receive(i);
  for (std::uint32_t i = o.send_depth; i > 0; --i) ud_free_send_.push_back(i - 1);
  if (::rdma_join_multicast(mcast_id_, as_sockaddr(&group_), nullptr) != 0) {
    const int e = errno;
    throw TransportError(multicast_join_message(device_.device, device_.max_mcast_qp_attach, cfg_.group_address,
                                                "rdma_join_multicast: " + errno_text(e), attach_refused_by_limit(e)));
  }
  await_mcast_event(RDMA_CM_EVENT_MULTICAST_JOIN, deadline, "joining the multicast group " + cfg_.group_address);

  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) fail("eventfd", "");
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) fail("epoll_create1", "");
  async_ = AsyncHub::of(ctx);
  async_sub_ = async_->subscribe(wake_fd_);
  for (const int fd : {wake_fd_, channel_->fd, comp_->fd, async_->fd()}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) fail("epoll_ctl", "");
  }
  last_completion_ = std::chrono::steady_clock::now();
}

void Endpoint::await_mcast_event(int expected, std::chrono::steady_clock::time_point deadline,
                                 const std::string& what) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      throw TransportError("verbs transport: timed out " + what +
                           " (VerbsOptions::resolve_timeout); on InfiniBand check that a subnet manager runs");
    pollfd p{channel_->fd, POLLIN, 0};
    (void)::poll(&p, 1, static_cast<int>(left.count()));
    rdma_cm_event* ev = nullptr;
    errno = 0;
    if (::rdma_get_cm_event(channel_, &ev) != 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      fail("rdma_get_cm_event", "");
    }
    // librdmacm attaches the QP to the group while it reads the join event; if the
    // device refuses, the event turns into MULTICAST_ERROR with status -1 and errno
    // says why (ENOMEM when the group already holds max_mcast_qp_attach QPs).
    const int got_errno = errno;
    if (ev->id != mcast_id_) {  // nothing else can be under way yet: no peer knows our port
      if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) ::rdma_reject(ev->id, nullptr, 0);
      ::rdma_ack_cm_event(ev);
      continue;
    }
    const auto type = ev->event;
    const int status = ev->status;
    if (type == expected && status == 0) {
      if (type == RDMA_CM_EVENT_MULTICAST_JOIN) {
        remote_qpn_ = ev->param.ud.qp_num;
        remote_qkey_ = ev->param.ud.qkey;
        ah_ = ::ibv_create_ah(pd_, &ev->param.ud.ah_attr);
      }
      ::rdma_ack_cm_event(ev);
      if (type == RDMA_CM_EVENT_MULTICAST_JOIN && ah_ == nullptr) fail("ibv_create_ah (multicast group)", "");
      return;
    }
    ::rdma_ack_cm_event(ev);
    if (expected == RDMA_CM_EVENT_MULTICAST_JOIN) {
      const int e = status == -1 && got_errno != 0 ? got_errno : -status;
      std::string detail = std::string(::rdma_event_str(type)) + " (status " + std::to_string(status);
      if (e > 0) detail += ", " + errno_text(e);
      throw TransportError(multicast_join_message(device_.device, device_.max_mcast_qp_attach, cfg_.group_address,
                                                  detail + ")", attach_refused_by_limit(e)));
    }
    throw TransportError("verbs transport: " + what + " failed: " + ::rdma_event_str(type) + " (status " +
                         std::to_string(status) +
                         "); RoCE needs an explicit IPv4 group address and a route for 224.0.0.0/4 on the netdev; "
                         "InfiniBand needs a subnet manager that serves multicast (docs/real-clusters.md)");
  }
}

void Endpoint::release() {
  if (async_) async_->unsubscribe(async_sub_);  // before wake_fd_ closes: the hub writes to it
  async_.reset();
  for (auto& [key, l] : links_) destroy_link(*l);
  links_.clear();
  link_of_id_.clear();
  // With every RC queue pair gone no peer can write into our buffers any more, so
  // their registrations go now, before the protection domain (buffers the
  // application still holds stay valid memory, just no longer registered).
  local_regions_.clear();
  if (pool_) pool_->close();
  region_of_.clear();
  remote_regions_.clear();
  if (mcast_id_ != nullptr) {
    if (mcast_id_->qp != nullptr) ::rdma_destroy_qp(mcast_id_);
    if (ah_ != nullptr) ::ibv_destroy_ah(ah_);
    ah_ = nullptr;
    ud_recv_.reset();
    ud_send_.reset();
    ::rdma_destroy_id(mcast_id_);
    mcast_id_ = nullptr;
  }
  if (listen_id_ != nullptr) ::rdma_destroy_id(listen_id_);
  listen_id_ = nullptr;
  if (cq_ != nullptr) ::ibv_destroy_cq(cq_);
  cq_ = nullptr;
  if (comp_ != nullptr) ::ibv_destroy_comp_channel(comp_);
  comp_ = nullptr;
  if (pd_ != nullptr) ::ibv_dealloc_pd(pd_);
  pd_ = nullptr;
  if (channel_ != nullptr) ::rdma_destroy_event_channel(channel_);
  channel_ = nullptr;
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
  epoll_fd_ = wake_fd_ = -1;
}

void Endpoint::post_ud_receive(std::uint32_t slot) {
  if (!ud_recv_->post_receive(mcast_id_->qp, slot, make_wr_id(0, kUdRecv, slot))) fail("ibv_post_recv (UD)", "");
}

void Endpoint::post_link_receive(Link& l, std::uint32_t slot) {
  const Region& r = l.outgoing ? *l.credit : *l.data;
  if (!r.post_receive(l.id->qp, slot, make_wr_id(l.key, l.outgoing ? kCredit : kLinkData, slot)))
    break_link(l, l.outgoing);
}

void Endpoint::add_peer(MemberId id, const std::string& host, std::uint16_t port) {
  const auto addr = ipv4(host, port, "peer address");
  std::lock_guard lock(mu_);
  auto& p = peers_[id];
  const bool changed = p.addr.sin_addr.s_addr != addr.sin_addr.s_addr || p.addr.sin_port != addr.sin_port;
  p.addr = addr;
  p.broken = false;
  if (changed)
    if (auto it = outgoing_.find(id); it != outgoing_.end()) break_link(*links_.at(it->second), false);
}

void Endpoint::wake() {
  std::lock_guard lock(mu_);
  woken_ = true;
  if (wake_fd_ >= 0) {
    const std::uint64_t one = 1;
    (void)::write(wake_fd_, &one, sizeof one);
  }
}

void Endpoint::multicast(std::span<const std::byte> bytes) {
  if (bytes.size() > mtu_)
    throw Error(ErrorCode::message_too_large, "verbs transport: a datagram of " + std::to_string(bytes.size()) +
                                                  " bytes is over the MTU (" + std::to_string(mtu_) +
                                                  "): ProtocolConfig::mtu must not exceed VerbsOptions::mtu");
  std::lock_guard lock(mu_);
  if (closed_ || !failure_.empty()) return;
  if (ud_free_send_.empty()) {
    // Never post over the send queue's depth: reap completions for a bounded time.
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(2);
    while (ud_free_send_.empty() && std::chrono::steady_clock::now() < until) poll_cq_locked();
    if (ud_free_send_.empty()) {
      ++stats_.ud_send_dropped;
      return;
    }
  }
  const std::uint32_t slot = ud_free_send_.back();
  ud_free_send_.pop_back();
  std::memcpy(ud_send_->at(slot), bytes.data(), bytes.size());
  ibv_sge sge = ud_send_->sge(slot, bytes.size());
  ibv_send_wr wr{};
  ibv_send_wr* bad = nullptr;
  wr.wr_id = make_wr_id(0, kUdSend, slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.ud.ah = ah_;
  wr.wr.ud.remote_qpn = remote_qpn_;
  wr.wr.ud.remote_qkey = remote_qkey_;
  if (::ibv_post_send(mcast_id_->qp, &wr, &bad) != 0) {
    ud_free_send_.push_back(slot);
    failure_ = "verbs transport: ibv_post_send on the UD QP failed: " + errno_text(errno);
    return;
  }
  ++stats_.ud_multicast_datagrams;
}

bool Endpoint::unicast(MemberId to, std::vector<std::byte> bytes) {
  if (bytes.size() > cfg_.max_frame)
    throw Error(ErrorCode::message_too_large, "verbs transport: a frame of " + std::to_string(bytes.size()) +
                                                  " bytes is over the link limit (" +
                                                  std::to_string(cfg_.max_frame) + ")");
  std::lock_guard lock(mu_);
  if (bytes.size() > wire::kHeaderSize && wire::peek_type(bytes) == wire::Type::ready && !closed_)
    advertise_before_ready_locked(to, bytes);
  return enqueue_locked(to, std::move(bytes), false);
}

void Endpoint::advertise_before_ready_locked(MemberId to, const std::vector<std::byte>& ready) {
  // A Ready frame grants `to` credit to send us blocks of (sender, seq): if that
  // message's buffer is registered, `to` must know the region before it can send a
  // credited block, so the descriptor goes first on the same (ordered) link.
  const auto res = wire::decode(ready);
  if (!res.ok()) return;
  const auto& r = std::get<wire::Ready>(res.packet.body);
  // The descriptor is good for the connection `to` writes to us on now; until it has
  // one, blocks come by the copy path (a later Ready advertises).
  const Link* writer = writer_link(to);
  auto it = region_of_.find({r.sender, r.seq});
  if (writer == nullptr || it == region_of_.end() || !ledger_.advertise(it->second, writer->key)) return;
  const LocalRegion& lr = local_regions_.at(it->second);
  RegionAdvertise a;
  a.id = it->second;
  a.addr = reinterpret_cast<std::uintptr_t>(lr.buffer->data());
  a.rkey = lr.mr->rkey;
  a.length = lr.buffer->size();
  a.sender = r.sender;
  a.seq = r.seq;
  a.connection = writer->writer_key;
  const std::uint32_t key = writer->key;
  if (enqueue_locked(to, encode_region_message(a), true)) ++stats_.regions_advertised;
  else (void)ledger_.revoked(a.id, key);  // never queued: nobody can hold it
}

bool Endpoint::enqueue_locked(MemberId to, std::vector<std::byte> bytes, bool control) {
  if (closed_) return false;
  auto p = peers_.find(to);
  if (p == peers_.end() || p->second.broken) return false;
  Link* l = nullptr;
  if (auto it = outgoing_.find(to); it != outgoing_.end()) {
    l = links_.at(it->second).get();
  } else {
    l = connect_to(to, p->second);
    if (l == nullptr) return false;
  }
  if (l->queued_bytes + bytes.size() > cfg_.max_output_bytes) {
    break_link(*l, true);  // the peer stopped taking what we send
    return false;
  }
  l->queued_bytes += bytes.size();
  l->queue.push_back(Link::Outgoing{std::move(bytes), control});
  flush(*l);
  return true;
}

/// Where the payload of Block frame `frame` for `to` may be RDMA WRITTEN: `to`
/// advertised a region for its message that covers the segment. Small segments go by
/// the copy path (a WRITE and a SEND cost more than one SEND there).
std::optional<Endpoint::WriteTarget> Endpoint::write_target(MemberId to, std::uint32_t link_key,
                                                           const std::vector<std::byte>& frame) const {
  constexpr std::size_t kMinWrite = 4096;
  if (remote_regions_.empty() || frame.size() < wire::kBlockHeadSize + kMinWrite ||
      wire::peek_type(frame) != wire::Type::block)
    return std::nullopt;
  const auto res = wire::decode(frame);
  if (!res.ok()) return std::nullopt;
  const auto& b = std::get<wire::Block>(res.packet.body);
  if (b.payload.size() != b.length || frame.size() != wire::kBlockHeadSize + b.length) return std::nullopt;
  auto it = remote_regions_.find({to, b.sender, b.seq});
  if (it == remote_regions_.end() || it->second.connection != link_key ||
      !region_covers(it->second.length, b.offset, b.length))
    return std::nullopt;
  return WriteTarget{it->second.addr + b.offset, it->second.rkey, it->second.id};
}

const Endpoint::Link* Endpoint::writer_link(MemberId peer) const {
  // At most one is live: accepting a new one from a peer breaks its older ones.
  for (const auto& [key, l] : links_)
    if (!l->outgoing && l->peer == peer && l->state != Link::State::dead) return l.get();
  return nullptr;
}

Endpoint::Link* Endpoint::connect_to(MemberId to, Peer& peer) {
  rdma_cm_id* cm = nullptr;
  if (::rdma_create_id(channel_, &cm, nullptr, RDMA_PS_TCP) != 0) {
    mark_broken(to);
    return nullptr;
  }
  auto src = ipv4(device_.interface_address, 0, "interface address");
  if (::rdma_resolve_addr(cm, as_sockaddr(&src), as_sockaddr(&peer.addr),
                          static_cast<int>(cfg_.options.resolve_timeout.count())) != 0) {
    ::rdma_destroy_id(cm);
    mark_broken(to);
    return nullptr;
  }
  auto l = std::make_unique<Link>();
  l->key = next_key_++;
  l->id = cm;
  l->peer = to;
  l->outgoing = true;
  Link* raw = l.get();
  link_of_id_[cm] = l->key;
  outgoing_[to] = l->key;
  links_[l->key] = std::move(l);
  return raw;
}

void Endpoint::setup_link_qp(Link& l) {
  const auto& o = cfg_.options;
  const std::uint32_t reserve = 2 * (o.link_receive_depth + kLinkReserveSlack);
  if (reserve > cq_budget_ || l.id->verbs != listen_id_->verbs) {
    ++stats_.links_rejected;
    break_link(l, l.outgoing);
    return;
  }
  ibv_qp_init_attr qa{};
  qa.send_cq = cq_;
  qa.recv_cq = cq_;
  qa.qp_type = IBV_QPT_RC;
  qa.sq_sig_all = 0;  // a chain's last work request asks for the completion (flush())
  qa.cap.max_send_wr = o.link_receive_depth + kLinkReserveSlack;
  qa.cap.max_recv_wr = o.link_receive_depth + kLinkReserveSlack;
  qa.cap.max_send_sge = 1;
  qa.cap.max_recv_sge = 1;
  if (::rdma_create_qp(l.id, pd_, &qa) != 0) {
    break_link(l, l.outgoing);
    return;
  }
  l.has_qp = true;
  cq_budget_ -= reserve;
  l.cq_reserved = reserve;
  try {
    l.data = std::make_unique<Region>(pd_, o.link_chunk, o.link_receive_depth, "a reliable link");
    if (l.outgoing) l.credit = std::make_unique<Region>(pd_, kCreditSlot, kCreditRecvs, "credit receives");
  } catch (const TransportError&) {
    break_link(l, l.outgoing);
    return;
  }
  if (l.outgoing) {
    for (std::uint32_t i = o.link_receive_depth; i > 0; --i) l.free_send.push_back(i - 1);
    for (std::uint32_t i = 0; i < kCreditRecvs; ++i) post_link_receive(l, i);
  } else {
    for (std::uint32_t i = 0; i < o.link_receive_depth; ++i) post_link_receive(l, i);
  }
}

/// Work requests built for one link, posted together (kChainMax).
struct Endpoint::Chain {
  std::array<ibv_send_wr, kChainMax> wrs{};
  std::array<ibv_sge, kChainMax> sges{};
  std::array<std::uint32_t, kChainMax> slots{};
  std::size_t size = 0;
  [[nodiscard]] bool full() const { return size == kChainMax; }
  /// The next work request, on `slot`, carrying `sge` (none when its length is 0).
  ibv_send_wr& add(std::uint32_t slot, std::uint64_t wr_id, const ibv_sge& sge) {
    const std::size_t i = size++;
    HMCAST_ASSERT(i < kChainMax);
    slots[i] = slot;
    wrs[i] = ibv_send_wr{};
    sges[i] = sge;
    wrs[i].wr_id = wr_id;
    wrs[i].sg_list = sge.length > 0 ? &sges[i] : nullptr;
    wrs[i].num_sge = sge.length > 0 ? 1 : 0;
    return wrs[i];
  }
};

bool Endpoint::post_chain(Link& l, Chain& c) {
  if (c.size == 0) return true;
  const std::size_t n = c.size;
  for (std::size_t i = 0; i + 1 < n; ++i) c.wrs[i].next = &c.wrs[i + 1];
  c.wrs[n - 1].next = nullptr;
  c.wrs[n - 1].send_flags |= IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  if (::ibv_post_send(l.id->qp, c.wrs.data(), &bad) != 0) {
    break_link(l, true);
    return false;
  }
  ++stats_.rc_chains_posted;
  l.in_flight.insert(l.in_flight.end(), c.slots.begin(), c.slots.begin() + static_cast<std::ptrdiff_t>(n));
  l.chain_ends.push_back(c.slots[n - 1]);
  c.size = 0;
  return true;
}

void Endpoint::flush(Link& l) {
  if (!l.outgoing) return;
  const std::size_t chunk = cfg_.options.link_chunk;
  Chain chain;
  while (l.state == Link::State::up && !l.queue.empty() && !l.free_send.empty()) {
    if (chain.full() && !post_chain(l, chain)) return;
    const auto& item = l.queue.front();
    const auto& frame = item.bytes;
    if (!l.front_started) {
      l.front_started = true;
      l.front_write = item.control ? std::nullopt : write_target(l.peer, l.key, frame);
      if (l.front_write) l.front_offset = wire::kBlockHeadSize;  // the payload first, the head last
    }
    const std::uint32_t slot = l.free_send.back();
    const std::uint64_t wr_id = make_wr_id(l.key, kLinkData, slot);
    if (l.front_write && l.front_offset < frame.size()) {
      // A piece of the payload, straight into the peer's final buffer. It takes a send
      // slot (the send-side copy stays) but no receive credit: nothing is consumed there.
      const std::size_t n = std::min(chunk, frame.size() - l.front_offset);
      std::memcpy(l.data->at(slot), frame.data() + l.front_offset, n);
      ibv_send_wr& wr = chain.add(slot, wr_id, l.data->sge(slot, n));
      wr.opcode = IBV_WR_RDMA_WRITE;
      wr.wr.rdma.remote_addr = l.front_write->addr + (l.front_offset - wire::kBlockHeadSize);
      wr.wr.rdma.rkey = l.front_write->rkey;
      l.free_send.pop_back();
      ++stats_.rc_messages_sent;
      stats_.rc_bytes += n;
      stats_.bytes_written += n;
      l.front_offset += n;
      continue;
    }
    if (l.credits == 0) break;
    std::size_t n = 0;
    bool last = false;
    std::uint32_t imm = 0;
    if (l.front_write) {
      // The head alone, after the WRITEs on the same queue pair: when the peer sees it,
      // the payload is in place. It names the region written, which the peer needs:
      // it may hold an older one for the same message, waiting for our revoke answer.
      std::memcpy(l.data->at(slot), frame.data(), wire::kBlockHeadSize);
      const auto trailer = encode_placed_trailer(l.front_write->region);
      std::memcpy(l.data->at(slot) + wire::kBlockHeadSize, trailer.data(), trailer.size());
      n = wire::kBlockHeadSize + trailer.size();
      last = true;
      imm = kLastChunk | kPlacedChunk;
    } else {
      n = std::min(chunk, frame.size() - l.front_offset);
      last = l.front_offset + n == frame.size();
      if (n > 0) std::memcpy(l.data->at(slot), frame.data() + l.front_offset, n);
      imm = last ? (kLastChunk | (item.control ? kControlChunk : 0U)) : 0U;
    }
    ibv_send_wr& wr = chain.add(slot, wr_id, l.data->sge(slot, n));
    wr.opcode = IBV_WR_SEND_WITH_IMM;
    wr.imm_data = htonl(imm);
    l.free_send.pop_back();
    --l.credits;
    ++stats_.rc_messages_sent;
    stats_.rc_bytes += n;
    l.front_offset += n;
    if (last) {
      l.queued_bytes -= frame.size();
      l.queue.pop_front();
      l.front_offset = 0;
      l.front_started = false;
      l.front_write.reset();
    }
  }
  (void)post_chain(l, chain);
}

void Endpoint::return_credits(Link& l, bool force) {
  const std::uint32_t threshold = std::max<std::uint32_t>(1, cfg_.options.link_receive_depth / 4);
  if (l.outgoing || l.state != Link::State::up || l.unreturned == 0) return;
  if (!force && l.unreturned < threshold) return;
  if (l.credit_sends >= kCreditSendsInFlight) return;  // a completion brings us back here
  ibv_send_wr wr{};
  ibv_send_wr* bad = nullptr;
  wr.wr_id = make_wr_id(l.key, kCredit, 0);
  wr.num_sge = 0;
  wr.opcode = IBV_WR_SEND_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = htonl(l.unreturned);
  if (::ibv_post_send(l.id->qp, &wr, &bad) != 0) {
    break_link(l, false);
    return;
  }
  l.unreturned = 0;
  ++l.credit_sends;
  ++stats_.credits_returned;
}

int Endpoint::poll_cq_locked() {
  if (cq_ == nullptr) return 0;
  std::array<ibv_wc, 32> wcs{};
  int total = 0;
  for (;;) {
    const int n = ::ibv_poll_cq(cq_, static_cast<int>(wcs.size()), wcs.data());
    if (n < 0) {
      failure_ = "verbs transport: ibv_poll_cq failed";
      return total;
    }
    for (int i = 0; i < n; ++i) on_completion(wcs[static_cast<std::size_t>(i)]);
    total += n;
    if (n < static_cast<int>(wcs.size())) break;
  }
  if (total > 0) last_completion_ = std::chrono::steady_clock::now();
  return total;
}

void Endpoint::on_completion(const ibv_wc& wc) {
  const auto key = static_cast<std::uint32_t>(wc.wr_id >> 32);
  const auto kind = static_cast<std::uint32_t>((wc.wr_id >> 28) & 0xF);
  const auto slot = static_cast<std::uint32_t>(wc.wr_id & 0x0FFF'FFFF);
  if (key == 0) {
    on_ud_completion(wc, kind, slot);
    return;
  }
  auto it = links_.find(key);
  if (it == links_.end()) return;  // a link already destroyed: its completions mean nothing
  on_link_completion(*it->second, wc, kind, slot);
}

void Endpoint::on_ud_completion(const ibv_wc& wc, std::uint32_t kind, std::uint32_t slot) {
  if (kind == kUdSend) ud_free_send_.push_back(slot);
  if (wc.status != IBV_WC_SUCCESS) {
    if (closed_) return;  // flushed while leaving
    ++stats_.completion_errors;
    failure_ = std::string("verbs transport: the datagram queue pair failed (") + ::ibv_wc_status_str(wc.status) +
               "): the multicast path is gone; recreate the Node";
    return;
  }
  if (kind != kUdRecv) return;
  const auto payload = ud_payload_bytes(wc.byte_len, mtu_);
  const std::byte* start = ud_recv_->at(slot) + kGrhBytes;
  if (!payload) {
    ++stats_.ud_malformed;
  } else if (*payload >= wire::kHeaderSize && wire::peek_src({start, *payload}) == id_) {
    ++stats_.ud_own;  // every member hears the group, the sender too
  } else {
    const MemberId from = *payload >= wire::kHeaderSize ? wire::peek_src({start, *payload}) : 0;
    ++stats_.ud_received;
    inbox_.push_back(Inbound{true, from, std::vector<std::byte>(start, start + *payload), false});
  }
  if (!closed_) post_ud_receive(slot);
}

void Endpoint::on_link_completion(Link& l, const ibv_wc& wc, std::uint32_t kind, std::uint32_t slot) {
  if (l.state == Link::State::dead) return;
  if (wc.status != IBV_WC_SUCCESS) {
    ++stats_.completion_errors;
    break_link(l, l.outgoing);  // the peer is gone or broke the link: membership hears of it
    return;
  }
  const bool received = (wc.opcode & IBV_WC_RECV) != 0;
  const bool has_imm = (wc.wc_flags & IBV_WC_WITH_IMM) != 0;
  const std::uint32_t imm = has_imm ? ntohl(wc.imm_data) : 0;
  if (kind == kLinkData && received) {  // a chunk of a frame, at the acceptor
    if (!has_imm || l.partial.size() + wc.byte_len > cfg_.max_frame) {
      ++stats_.links_malformed;
      break_link(l, false);
      return;
    }
    const std::byte* p = l.data->at(slot);
    l.partial.insert(l.partial.end(), p, p + wc.byte_len);
    post_link_receive(l, slot);
    ++l.unreturned;
    if ((imm & kLastChunk) != 0) {
      if ((imm & kControlChunk) != 0) {
        on_control_frame(l, l.partial);
      } else if ((imm & kPlacedChunk) != 0) {
        if (on_placed_head(l, l.partial)) {
          ++stats_.rc_frames_received;
          inbox_.push_back(Inbound{false, l.peer, std::move(l.partial), true});
        }
      } else {
        ++stats_.rc_frames_received;
        inbox_.push_back(Inbound{false, l.peer, std::move(l.partial), false});
      }
      l.partial = {};
    }
    return_credits(l, false);
  } else if (kind == kLinkData) {  // our chain's last work request completed, so all of it did
    // Completions come in posting order: `slot` ends the oldest chain still in flight.
    HMCAST_ASSERT(!l.chain_ends.empty() && l.chain_ends.front() == slot);
    l.chain_ends.pop_front();
    for (;;) {
      HMCAST_ASSERT(!l.in_flight.empty());  // the completed slot was posted
      const std::uint32_t s = l.in_flight.front();
      l.in_flight.pop_front();
      l.free_send.push_back(s);
      if (s == slot) break;
    }
    flush(l);
  } else if (kind == kCredit && received) {  // credits, at the sender
    l.credits += imm;
    post_link_receive(l, slot);
    flush(l);
  } else if (kind == kCredit) {  // our credit message went out
    if (l.credit_sends > 0) --l.credit_sends;
    return_credits(l, false);
  }
}

void Endpoint::handle_cm_events_locked() {
  rdma_cm_event* ev = nullptr;
  while (channel_ != nullptr && ::rdma_get_cm_event(channel_, &ev) == 0) {
    on_cm_event(*ev);
    ::rdma_ack_cm_event(ev);
  }
}

void Endpoint::on_cm_event(rdma_cm_event& ev) {
  if (ev.event == RDMA_CM_EVENT_CONNECT_REQUEST) {
    on_connect_request(ev);
    return;
  }
  if (ev.event == RDMA_CM_EVENT_DEVICE_REMOVAL) {
    failure_ = "verbs transport: the RDMA device " + device_.device + " was removed";
    return;
  }
  if (ev.id == mcast_id_) {
    if (ev.event == RDMA_CM_EVENT_MULTICAST_ERROR && !closed_)
      failure_ = "verbs transport: the multicast group " + cfg_.group_address +
                 " reported an error (the subnet manager or switch dropped it): the datagram path is gone";
    return;
  }
  auto idit = link_of_id_.find(ev.id);
  if (idit == link_of_id_.end()) return;
  Link& l = *links_.at(idit->second);
  if (l.state == Link::State::dead) return;
  switch (ev.event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
      if (::rdma_resolve_route(l.id, static_cast<int>(cfg_.options.resolve_timeout.count())) != 0)
        break_link(l, true);
      break;
    case RDMA_CM_EVENT_ROUTE_RESOLVED: {
      setup_link_qp(l);
      if (l.state == Link::State::dead) break;
      const auto pd = private_data({id_, l.key});
      rdma_conn_param param{};
      param.private_data = pd.data();
      param.private_data_len = static_cast<std::uint8_t>(pd.size());
      param.retry_count = 7;
      param.rnr_retry_count = 7;  // credits keep receives posted; this only covers a slow repost
      if (::rdma_connect(l.id, &param) != 0) {
        break_link(l, true);
        break;
      }
      l.state = Link::State::connecting;
      break;
    }
    case RDMA_CM_EVENT_ESTABLISHED:
      if (l.outgoing) {
        const auto accept = parse_private(ev.param.conn.private_data, ev.param.conn.private_data_len);
        if (!accept || accept->first == 0) {
          ++stats_.links_rejected;
          break_link(l, true);
          break;
        }
        l.credits = accept->first;
        l.state = Link::State::up;
        flush(l);
      } else {
        // The sender may have used its credits before this event reached us:
        // chunks that arrived meanwhile owe it credits now.
        l.state = Link::State::up;
        return_credits(l, false);
      }
      break;
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
    case RDMA_CM_EVENT_CONNECT_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_REJECTED:
    case RDMA_CM_EVENT_DISCONNECTED:
      break_link(l, l.outgoing);
      break;
    default:
      break;
  }
}

void Endpoint::on_connect_request(rdma_cm_event& ev) {
  auto l = std::make_unique<Link>();
  l->key = next_key_++;
  l->id = ev.id;
  l->state = Link::State::connecting;
  Link& link = *l;
  link_of_id_[ev.id] = l->key;
  links_[l->key] = std::move(l);
  const auto peer = parse_private(ev.param.conn.private_data, ev.param.conn.private_data_len);
  const auto accepted = std::count_if(links_.begin(), links_.end(), [](const auto& kv) {
    return !kv.second->outgoing && kv.second->state != Link::State::dead;
  });
  if (closed_ || !peer || static_cast<std::uint64_t>(accepted) > cfg_.max_links) {
    ++stats_.links_rejected;
    ::rdma_reject(ev.id, nullptr, 0);
    break_link(link, false);
    return;
  }
  link.peer = peer->first;
  link.writer_key = peer->second;
  setup_link_qp(link);
  if (link.state == Link::State::dead) {
    ::rdma_reject(ev.id, nullptr, 0);
    return;
  }
  const auto pd = private_data({cfg_.options.link_receive_depth, 0});
  rdma_conn_param param{};
  param.private_data = pd.data();
  param.private_data_len = static_cast<std::uint8_t>(pd.size());
  param.retry_count = 7;
  param.rnr_retry_count = 7;
  if (::rdma_accept(ev.id, &param) != 0) {
    break_link(link, false);
    return;
  }
  ++stats_.links_accepted;
  // A peer opens a new link to us only once it gave up its old one: break those here,
  // so none can still execute a WRITE into our memory and the regions they held
  // (region_ledger.hpp) are counted out now, not when the peer's disconnect arrives.
  for (auto& [key, other] : links_)
    if (other.get() != &link && !other->outgoing && other->peer == link.peer && other->state != Link::State::dead)
      break_link(*other, false);
}

void Endpoint::break_link(Link& l, bool peer_lost) {
  if (l.state == Link::State::dead) return;
  l.state = Link::State::dead;
  if (l.outgoing) {
    if (auto it = outgoing_.find(l.peer); it != outgoing_.end() && it->second == l.key) outgoing_.erase(it);
    if (peer_lost) mark_broken(l.peer);
    // Descriptors the peer gave us name this connection: no later one may use them.
    std::erase_if(remote_regions_, [&](const auto& kv) { return std::get<0>(kv.first) == l.peer; });
    // Revokes queued here are lost, so the peer's connections that owe us an answer
    // would hold our memory for as long as they live: end them (no WRITE can land
    // through a dead queue pair), which frees what they held.
    std::vector<Link*> owing;
    for (auto& [key, other] : links_)
      if (!other->outgoing && other->peer == l.peer && other->state != Link::State::dead &&
          ledger_.owes_answer(other->key))
        owing.push_back(other.get());
    for (Link* o : owing) break_link(*o, false);
  } else {
    // The peer's WRITEs on this connection can no longer reach our memory.
    free_regions(ledger_.connection_lost(l.key));
  }
  ::rdma_disconnect(l.id);  // errors ignored: it may never have connected
  dead_.push_back(l.key);
}

void Endpoint::mark_broken(MemberId id) {
  auto it = peers_.find(id);
  if (it == peers_.end() || it->second.broken) return;
  it->second.broken = true;
  ++stats_.links_broken;
}

void Endpoint::destroy_link(Link& l) {
  if (l.has_qp) ::rdma_destroy_qp(l.id);
  l.has_qp = false;
  l.data.reset();
  l.credit.reset();
  cq_budget_ += l.cq_reserved;
  l.cq_reserved = 0;
  if (l.id != nullptr) ::rdma_destroy_id(l.id);
  l.id = nullptr;
}

void Endpoint::reap_dead_links() {
  // Only called with no rdma_cm event held: destroying an id waits for its events' acks.
  for (const auto key : dead_) {
    auto it = links_.find(key);
    if (it == links_.end()) continue;
    link_of_id_.erase(it->second->id);
    destroy_link(*it->second);
    links_.erase(it);
  }
  dead_.clear();
}

std::optional<Inbound> Endpoint::wait(std::chrono::steady_clock::time_point deadline) {
  const auto mode = cfg_.options.completion;
  bool slept = false;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      if (!failure_.empty()) throw TransportError(failure_);
      if (closed_) return std::nullopt;
      const auto pop = [&] {
        auto in = std::move(inbox_.front());
        inbox_.pop_front();
        return in;
      };
      if (!inbox_.empty()) return pop();
      if (woken_) {
        woken_ = false;
        return std::nullopt;
      }
      poll_cq_locked();
      handle_cm_events_locked();
      const auto now = std::chrono::steady_clock::now();
      if (slept || now >= next_async_check_) handle_async_events_locked();
      slept = false;
      reap_dead_links();
      if (!failure_.empty()) throw TransportError(failure_);
      if (!inbox_.empty()) return pop();
      if (now >= deadline) return std::nullopt;
      if (mode == CompletionMode::poll) continue;
      if (mode == CompletionMode::hybrid && now - last_completion_ < cfg_.options.busy_poll) continue;
      // Arm, then look once more: a completion that came before the arm raises no event.
      if (::ibv_req_notify_cq(cq_, 0) != 0) throw TransportError("verbs transport: ibv_req_notify_cq failed");
      if (poll_cq_locked() > 0 || !inbox_.empty()) continue;
      ++stats_.cq_sleeps;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    std::array<epoll_event, 4> evs{};
    const int n = ::epoll_wait(epoll_fd_, evs.data(), static_cast<int>(evs.size()),
                               static_cast<int>(std::clamp<std::int64_t>(left.count() + 1, 0, 1000)));
    for (int i = 0; i < n; ++i) {
      const int fd = evs[static_cast<std::size_t>(i)].data.fd;
      if (fd == wake_fd_) {
        std::uint64_t v = 0;
        (void)::read(wake_fd_, &v, sizeof v);
      } else if (comp_ != nullptr && fd == comp_->fd) {
        ibv_cq* cq = nullptr;
        void* ctx = nullptr;
        while (::ibv_get_cq_event(comp_, &cq, &ctx) == 0) ::ibv_ack_cq_events(cq, 1);
      }
    }
    // Whatever woke us (the async fd, or another endpoint's hub read queuing events
    // for us through wake_fd_), the next round looks at the events at once.
    slept = true;
  }
}

void Endpoint::handle_async_events_locked() {
  if (!async_) return;
  next_async_check_ = std::chrono::steady_clock::now() + kAsyncCheckEvery;
  std::vector<AsyncEvent> events;
  try {
    events = async_->collect(async_sub_, stats_.async_events_lost);
  } catch (const TransportError& e) {
    if (failure_.empty()) failure_ = e.what();
    return;
  }
  for (const auto& e : events) on_async_event(e);
}

void Endpoint::on_async_event(const AsyncEvent& e) {
  ++stats_.async_events;
  // The hub hands every event of the device to every endpoint on it: find whether
  // this one is about something of ours. QPs are known by number (the event was
  // acknowledged, so its QP may be gone by now), CQs by address (ours lives as long
  // as we do).
  AsyncSubject subject = AsyncSubject::unrelated;
  Link* link = nullptr;
  switch (async_element(e.type)) {
    case AsyncElement::qp:
      if (mcast_id_ != nullptr && mcast_id_->qp != nullptr && mcast_id_->qp->qp_num == e.qp_num) {
        subject = AsyncSubject::datagram_qp;
        break;
      }
      for (auto& [key, l] : links_)
        if (l->has_qp && l->state != Link::State::dead && l->id->qp->qp_num == e.qp_num) {
          link = l.get();
          subject = AsyncSubject::link_qp;
          break;
        }
      break;
    case AsyncElement::cq:
      if (e.object == cq_) subject = AsyncSubject::our_cq;
      break;
    case AsyncElement::port:
      if (e.port == device_.port) subject = AsyncSubject::our_port;
      break;
    case AsyncElement::device:
      subject = AsyncSubject::device;
      break;
    case AsyncElement::srq:
    case AsyncElement::wq:
      break;  // we make none
  }
  switch (async_action(e.type, subject)) {
    case AsyncAction::count:
      return;
    case AsyncAction::break_link:
      ++stats_.async_link_failures;
      break_link(*link, link->outgoing);  // as a failed completion: membership hears of the peer
      return;
    case AsyncAction::fail:
      if (!closed_ && failure_.empty())
        failure_ = async_failure_message(e.type, subject, device_.device, device_.port, cfg_.group_address);
      return;
  }
}

std::shared_ptr<std::vector<std::byte>> Endpoint::allocate_large(std::size_t size) {
  if (!cfg_.options.zero_copy || !pool_ || size == 0) return std::make_shared<std::vector<std::byte>>(size);
  return pool_->acquire(size);
}

void Endpoint::offer_region(MemberId sender, Seq seq, std::shared_ptr<std::vector<std::byte>> buffer) {
  if (!buffer || buffer->empty() || !pool_) return;
  // Only the pool's buffers are registered (allocate_large): they are what peers
  // may write into. Any other buffer, or one the device refused to register, gets
  // its blocks by the copy path.
  auto* mr = static_cast<ibv_mr*>(pool_->handle_of(buffer->data()));
  std::lock_guard lock(mu_);
  if (closed_ || !cfg_.options.zero_copy) return;
  retire_locked(sender, seq);  // a message started again with a new buffer
  if (mr == nullptr) {
    ++stats_.regions_unregistered;
    return;
  }
  const std::uint64_t id = next_region_id_++;
  local_regions_[id] = LocalRegion{sender, seq, std::move(buffer), mr};
  region_of_[{sender, seq}] = id;
  ledger_.add(id);
}

void Endpoint::retire_region(MemberId sender, Seq seq) {
  std::lock_guard lock(mu_);
  retire_locked(sender, seq);
}

void Endpoint::retire_locked(MemberId sender, Seq seq) {
  auto it = region_of_.find({sender, seq});
  if (it == region_of_.end()) return;
  const std::uint64_t id = it->second;
  region_of_.erase(it);
  for (const auto conn : ledger_.retire(id)) {
    auto l = links_.find(conn);
    if (l == links_.end() || l->second->state == Link::State::dead) continue;  // counted out when it died
    // A peer we cannot send the revoke to cannot answer: end the connection it
    // writes on instead (no WRITE lands through a dead queue pair), which lets go.
    if (!enqueue_locked(l->second->peer, encode_region_message(RegionRevoke{id}), true)) break_link(*l->second, false);
  }
  if (ledger_.freeable(id)) free_region(id);
}

void Endpoint::free_regions(const std::vector<std::uint64_t>& ids) {
  for (const auto id : ids) free_region(id);
}

void Endpoint::free_region(std::uint64_t id) {
  ledger_.erase(id);
  // Dropping our reference gives the buffer back to the pool, still registered, once
  // the node and the application dropped theirs: no peer may write into it now.
  if (local_regions_.erase(id) > 0) ++stats_.regions_freed;
}

void Endpoint::on_control_frame(Link& l, std::span<const std::byte> bytes) {
  const auto msg = decode_region_message(bytes);
  if (!msg) {
    ++stats_.control_malformed;
    return;
  }
  if (const auto* a = std::get_if<RegionAdvertise>(&*msg)) {
    // Good only on the connection it names, and only if that is still the one we send
    // on: one sent before that connection died was counted out by the peer already.
    auto out = outgoing_.find(l.peer);
    if (out == outgoing_.end() || out->second != a->connection) {
      ++stats_.regions_stale;
      return;
    }
    remote_regions_[{l.peer, a->sender, a->seq}] = RemoteRegion{a->id, a->addr, a->rkey, a->length, a->connection};
  } else if (const auto* r = std::get_if<RegionRevoke>(&*msg)) {
    std::erase_if(remote_regions_,
                  [&](const auto& kv) { return std::get<0>(kv.first) == l.peer && kv.second.id == r->id; });
    // The answer goes on the queue pair our WRITEs use, behind every one posted so far
    // (flush() decides a frame's WRITE when it starts it, so none can follow).
    (void)enqueue_locked(l.peer, encode_region_message(RegionRevoked{r->id}), true);
  } else {
    const auto id = std::get<RegionRevoked>(*msg).id;
    if (ledger_.revoked(id, l.key)) free_region(id);
  }
}

bool Endpoint::on_placed_head(Link& l, std::vector<std::byte>& head) {
  // The peer says it wrote the payload into region `id` of ours: the region must be
  // one this connection holds, for the Block's message, and the segment must lie
  // inside it; otherwise the frame names bytes we never got.
  if (head.size() != wire::kBlockHeadSize + kPlacedTrailerSize) {
    ++stats_.placed_malformed;
    return false;
  }
  const std::uint64_t id = decode_placed_trailer(std::span(head).subspan(wire::kBlockHeadSize));
  head.resize(wire::kBlockHeadSize);
  const auto res = wire::decode(head);
  const auto* b = res.ok() ? std::get_if<wire::Block>(&res.packet.body) : nullptr;
  const auto r = local_regions_.find(id);
  if (b == nullptr || !b->payload.empty() || r == local_regions_.end() || r->second.sender != b->sender ||
      r->second.seq != b->seq || !ledger_.holds(id, l.key) || !region_covers(r->second.buffer->size(), b->offset, b->length)) {
    ++stats_.placed_malformed;
    return false;
  }
  // Written into a buffer the node no longer uses (the message was released, or
  // started again with a new buffer): those bytes are not the message's now.
  if (auto cur = region_of_.find({b->sender, b->seq}); cur == region_of_.end() || cur->second != id) {
    ++stats_.placed_stale;
    return false;
  }
  stats_.bytes_placed += b->length;
  ++stats_.blocks_placed;
  return true;
}

void Endpoint::close_locked() {
  if (closed_) return;
  closed_ = true;
  for (auto& [key, l] : links_)
    if (l->state != Link::State::dead && l->id != nullptr) ::rdma_disconnect(l->id);
  if (mcast_id_ != nullptr && ah_ != nullptr) (void)::rdma_leave_multicast(mcast_id_, as_sockaddr(&group_));
  if (wake_fd_ >= 0) {
    const std::uint64_t one = 1;
    (void)::write(wake_fd_, &one, sizeof one);
  }
}

void Endpoint::close() {
  std::lock_guard lock(mu_);
  close_locked();
}

Stats Endpoint::stats() const {
  std::lock_guard lock(mu_);
  Stats st = stats_;
  st.regions_held = local_regions_.size();
  if (pool_) {
    const auto ps = pool_->stats();
    st.regions_registered = ps.registrations;
    st.region_cache_hits = ps.reuses;
    st.region_register_failed = ps.register_failed;
    st.regions_leaked = ps.deregister_failed;
    st.pool_idle_bytes = ps.idle_bytes;
  }
  return st;
}

}  // namespace hmcast::verbs
