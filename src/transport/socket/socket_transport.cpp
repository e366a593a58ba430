#include "transport/socket/socket_transport.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstring>
#include <system_error>

#include <arpa/inet.h>
#include <features.h>
#include <linux/filter.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/assert.hpp"
#include "hmcast/error.hpp"
#include "transport/cpu_share.hpp"
#include "transport/socket/net_util.hpp"

namespace hmcast::socket {

namespace {

constexpr std::uint32_t kConnEvents = EPOLLIN | EPOLLRDHUP;
constexpr int kMaxIov = 64;
// After a placed block, the frames a link's reads stop at each head for (blocks
// still coming, a few other frames between them).
constexpr std::uint32_t kFramesExpectingBlocks = 16;
constexpr int kReadRounds = 4;         // recv() calls per connection per event: no link starves the others
constexpr int kDatagramsPerEvent = 64;
/// How soon after an epoll that found input a wait() that cannot block skips the next
/// one (wait()): about what the call costs, so what arrives meanwhile waits no longer
/// than a round.
constexpr std::chrono::nanoseconds kRepollAfter{2'000};
/// Of such looks while they find nothing, how many in a row are skipped before one is
/// made again (to notice a stream starting).
constexpr std::uint32_t kRelooksSkipped = 7;
// recvmmsg() slots: one call takes what a burst left (up to this many), and a call that
// returns fewer found the socket empty, so no call is spent to learn that (epoll is
// level-triggered: it reports what comes later).
constexpr unsigned kDatagramBatch = 8;
// Spare slot buffers kept (recycle()): a burst of large datagrams in flight between
// read_datagrams() and the engine, at most this many times the MTU held in reserve.
constexpr std::size_t kSpareSlots = 2 * kDatagramBatch;
constexpr int kAcceptsPerEvent = 64;
constexpr std::size_t kScratch = 256U << 10;

}  // namespace

Endpoint::Endpoint(MemberId id, const SocketConfig& config)
    : id_(id), cfg_(config), pacer_(config.completion, config.busy_poll, config.busy_poll_max) {
  if (cfg_.mtu < wire::kHeaderSize || cfg_.mtu > wire::kMaxUdpDatagram)
    throw Error(ErrorCode::invalid_config, "SocketConfig::mtu is " + std::to_string(cfg_.mtu) + ": choose one in [" +
                                               std::to_string(wire::kHeaderSize) + ", " +
                                               std::to_string(wire::kMaxUdpDatagram) + "]");
  if (cfg_.max_frame < kHelloSize || cfg_.max_frame > UINT32_MAX)
    throw Error(ErrorCode::invalid_config, "SocketConfig::max_frame must be in [" + std::to_string(kHelloSize) +
                                               ", 2^32-1]");
  const in_addr group = resolve_ipv4(cfg_.group_address, "multicast group");
  if ((ntohl(group.s_addr) >> 28) != 0xEU)
    throw Error(ErrorCode::invalid_config, "SocketConfig::group_address " + cfg_.group_address +
                                               " is not an IPv4 multicast address: use one in 224.0.0.0/4 "
                                               "(239.0.0.0/8 is for local use)");
  if (cfg_.group_port == 0)
    throw Error(ErrorCode::invalid_config, "SocketConfig::group_port must not be 0: every member must use the same port");
  const in_addr iface = resolve_ipv4(cfg_.interface_address, "multicast interface");
  const in_addr listen_on = resolve_ipv4(cfg_.listen_address, "listen address");
  group_ = make_addr(group, cfg_.group_port);
  const std::string group_text = cfg_.group_address + ":" + std::to_string(cfg_.group_port);
  scratch_.resize(std::max(kScratch, cfg_.mtu + 1));
  datagram_slots_.resize(kDatagramBatch, std::vector<std::byte>(cfg_.mtu + 1));
  datagram_msgs_.resize(kDatagramBatch);
  datagram_iov_.resize(kDatagramBatch);

  try {
    epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
    if (epoll_fd_ < 0)
      fail_sys(errno, "cannot create an epoll set", "the process may be out of file descriptors: raise ulimit -n");
    wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd_ < 0)
      fail_sys(errno, "cannot create an eventfd", "the process may be out of file descriptors: raise ulimit -n");

    // The datagram socket.
    udp_fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (udp_fd_ < 0)
      fail_sys(errno, "cannot create a UDP socket", "the process may be out of file descriptors: raise ulimit -n");
    const int one = 1;
    const int zero = 0;
    set_option(udp_fd_, SOL_SOCKET, SO_REUSEADDR, one, "cannot set SO_REUSEADDR on the datagram socket",
               "this kernel does not allow several endpoints to share a port");
    set_option(udp_fd_, SOL_SOCKET, SO_REUSEPORT, one, "cannot set SO_REUSEPORT on the datagram socket",
               "this kernel does not allow several endpoints to share a port");
    set_option(udp_fd_, SOL_SOCKET, SO_RCVBUF, cfg_.udp_receive_buffer, "cannot set SO_RCVBUF on the datagram socket",
               "lower SocketConfig::udp_receive_buffer");
    // Bound to the group address (not INADDR_ANY): only datagrams sent to the group arrive.
    if (::bind(udp_fd_, as_sockaddr(&group_), sizeof group_) != 0)
      fail_sys(errno, "cannot bind the datagram socket to " + group_text,
               "another program may hold the port without SO_REUSEPORT, or run as another user: "
               "choose another SocketConfig::group_port");
    // Only the group this socket joined, not every group some socket of the host joined on this port.
    set_option(udp_fd_, IPPROTO_IP, IP_MULTICAST_ALL, zero, "cannot clear IP_MULTICAST_ALL on the datagram socket",
               "this kernel is too old for the socket transport (Linux 2.6.31 or later needed)");
    ip_mreq mreq{};
    mreq.imr_multiaddr = group;
    mreq.imr_interface = iface;
    set_option(udp_fd_, IPPROTO_IP, IP_ADD_MEMBERSHIP, mreq,
               "cannot join multicast group " + cfg_.group_address + " on " + cfg_.interface_address,
               "check that the interface with that address is up and has a multicast route "
               "(for loopback: ip route add 224.0.0.0/4 dev lo), or set SocketConfig::interface_address "
               "to another interface");
    set_option(udp_fd_, IPPROTO_IP, IP_MULTICAST_IF, iface,
               "cannot send multicast through interface " + cfg_.interface_address,
               "give the address of an interface of this host that is up in SocketConfig::interface_address");
    const unsigned char loop = cfg_.multicast_loop ? 1 : 0;
    set_option(udp_fd_, IPPROTO_IP, IP_MULTICAST_LOOP, loop, "cannot set IP_MULTICAST_LOOP",
               "this kernel refuses multicast loopback; endpoints on one host will not hear each other");
    const unsigned char ttl = cfg_.ttl;
    set_option(udp_fd_, IPPROTO_IP, IP_MULTICAST_TTL, ttl, "cannot set IP_MULTICAST_TTL",
               "choose a SocketConfig::ttl in [0, 255]");
    drop_own_datagrams_in_kernel();

    open_listeners(make_addr(listen_on, cfg_.listen_port));

    for (const auto& [fd, key] : {std::pair{wake_fd_, kWakeKey}, std::pair{udp_fd_, kUdpKey},
                                  std::pair{listen_fd_, kListenKey}, std::pair{direct_fd_, kDirectKey}}) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = key;
      if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0)
        fail_sys(errno, "cannot add a socket to the epoll set", "raise fs.epoll.max_user_watches");
    }
  } catch (...) {
    close_fd(direct_fd_);
    close_fd(listen_fd_);
    close_fd(udp_fd_);
    close_fd(wake_fd_);
    close_fd(epoll_fd_);
    throw;
  }
}

void Endpoint::open_listeners(const sockaddr_in& listen_on) {
  const int one = 1;
  // An ephemeral port is picked by the UDP bind and then asked of TCP; another
  // program may hold that number for TCP, so a few numbers are tried.
  constexpr int kTries = 32;
  for (int attempt = 0;; ++attempt) {
    direct_fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (direct_fd_ < 0)
      fail_sys(errno, "cannot create a UDP socket", "the process may be out of file descriptors: raise ulimit -n");
    set_option(direct_fd_, SOL_SOCKET, SO_RCVBUF, cfg_.udp_receive_buffer, "cannot set SO_RCVBUF on the direct socket",
               "lower SocketConfig::udp_receive_buffer");
    sockaddr_in addr = listen_on;
    if (::bind(direct_fd_, as_sockaddr(&addr), sizeof addr) != 0)
      fail_sys(errno, "cannot bind the direct datagram socket to UDP " + to_string(addr),
               "the port may be in use for UDP (set SocketConfig::listen_port to 0 for an ephemeral one) or the "
               "address is not of this host (check SocketConfig::listen_address)");
    socklen_t len = sizeof addr;
    if (::getsockname(direct_fd_, as_sockaddr(&addr), &len) != 0)
      fail_sys(errno, "cannot read the port of the direct socket", "this is a kernel or sandbox restriction");

    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (listen_fd_ < 0)
      fail_sys(errno, "cannot create a TCP socket", "the process may be out of file descriptors: raise ulimit -n");
    set_option(listen_fd_, SOL_SOCKET, SO_REUSEADDR, one, "cannot set SO_REUSEADDR on the listening socket",
               "this kernel refuses a standard socket option");
    if (::bind(listen_fd_, as_sockaddr(&addr), sizeof addr) != 0) {
      const int e = errno;
      if (e == EADDRINUSE && listen_on.sin_port == 0 && attempt + 1 < kTries) {
        close_fd(listen_fd_);
        close_fd(direct_fd_);
        continue;
      }
      fail_sys(e, "cannot bind the listening socket to " + to_string(addr),
               "the port may be in use (set SocketConfig::listen_port to 0 for an ephemeral one) or the address "
               "is not of this host (check SocketConfig::listen_address)");
    }
    if (cfg_.tcp_buffer > 0)  // before listen(): accepted links inherit it, and their window scale follows it
      set_option(listen_fd_, SOL_SOCKET, SO_RCVBUF, cfg_.tcp_buffer, "cannot set SO_RCVBUF on the listening socket",
                 "lower SocketOptions::link_buffer_bytes");
    if (::listen(listen_fd_, SOMAXCONN) != 0)
      fail_sys(errno, "cannot listen on " + to_string(addr), "choose another SocketConfig::listen_port");
    tcp_port_ = ntohs(addr.sin_port);
    return;
  }
}

Endpoint::~Endpoint() {
  close();
  close_fd(wake_fd_);
  close_fd(epoll_fd_);
}

void Endpoint::add_peer(MemberId id, const std::string& host, std::uint16_t port) {
  if (port == 0) throw Error(ErrorCode::invalid_config, "peer " + std::to_string(id) + " has port 0: give its tcp_port()");
  const sockaddr_in addr = make_addr(resolve_ipv4(host, "address of member " + std::to_string(id)), port);
  std::lock_guard lock(mu_);
  Peer& p = peers_[id];
  const bool moved = p.addr.sin_addr.s_addr != addr.sin_addr.s_addr || p.addr.sin_port != addr.sin_port;
  p.addr = addr;
  p.broken = false;
  if (moved) {
    auto o = outgoing_.find(id);
    if (o != outgoing_.end()) drop(o->second, false);
  }
}

void Endpoint::wake() {
  woken_.store(true);
  // wait() polls, or is not running: it sees the flag. (One that watches the epoll set
  // itself, HostLink's watcher, sleeps in poll() and needs the eventfd.)
  if (!blocking_.load() && !watched_.load()) return;
  const std::uint64_t one = 1;
  if (::write(wake_fd_, &one, sizeof one) < 0 && errno != EAGAIN)  // EAGAIN: already pending
    fail_sys(errno, "cannot signal the endpoint's eventfd", "the endpoint was destroyed while in use");
}

void Endpoint::multicast(std::span<const std::byte> bytes, std::span<const std::byte> more) {
  if (bytes.size() + more.size() > cfg_.mtu)
    throw Error(ErrorCode::message_too_large,
                "datagram of " + std::to_string(bytes.size() + more.size()) +
                    " bytes is over the socket transport's MTU of " + std::to_string(cfg_.mtu) +
                    ": set ProtocolConfig::mtu to at most SocketConfig::mtu");
  std::lock_guard lock(mu_);
  if (closed_) return;
  // The kernel joins the two parts as it copies them: no joined copy of our own.
  std::array<iovec, 2> parts{iovec{const_cast<std::byte*>(bytes.data()), bytes.size()},  // NOLINT: read only
                             iovec{const_cast<std::byte*>(more.data()), more.size()}};  // NOLINT: read only
  msghdr msg{};
  msg.msg_name = &group_;
  msg.msg_namelen = sizeof group_;
  msg.msg_iov = parts.data();
  msg.msg_iovlen = more.empty() ? 1 : 2;
  for (;;) {
    const ssize_t n = ::sendmsg(udp_fd_, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n >= 0) {
      ++stats_.datagrams_sent;
      return;
    }
    const int e = errno;
    if (e == EINTR) continue;
    if (e == EAGAIN || e == EWOULDBLOCK || e == ENOBUFS || e == ENOMEM || e == ECONNREFUSED) {
      ++stats_.datagrams_send_dropped;  // the network may drop it too: the protocol repairs
      return;
    }
    fail_sys(e, "cannot send a datagram to " + cfg_.group_address + ":" + std::to_string(cfg_.group_port) + " via " +
                    cfg_.interface_address,
             "check that the interface is up and has a multicast route (for loopback: ip route add 224.0.0.0/4 "
             "dev lo), that no firewall rule drops it, or set SocketConfig::interface_address");
  }
}

bool Endpoint::unicast(MemberId to, std::vector<std::byte> bytes) { return unicast(to, std::move(bytes), {}, nullptr); }

bool Endpoint::unicast_datagram(MemberId to, std::vector<std::byte> bytes) {
  if (bytes.size() > direct_datagram_limit()) return unicast(to, std::move(bytes));
  std::lock_guard lock(mu_);
  if (closed_) return true;
  auto p = peers_.find(to);
  if (p == peers_.end()) {
    ++stats_.direct_send_dropped;
    return true;
  }
  for (;;) {
    const ssize_t n = ::sendto(direct_fd_, bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL,
                               as_sockaddr(&p->second.addr), sizeof p->second.addr);
    if (n >= 0) {
      ++stats_.direct_sent;
      return true;
    }
    if (errno == EINTR) continue;
    // Full buffers, an unreachable host, a port nobody holds (ECONNREFUSED from an
    // earlier datagram's ICMP): lost like on the wire, and the frame's sender repairs.
    // Anything else is this host's fault and shows on the group's socket too.
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS || errno == ENOMEM || errno == ECONNREFUSED ||
        errno == EHOSTUNREACH || errno == ENETUNREACH || errno == EPERM) {
      ++stats_.direct_send_dropped;
      return true;
    }
    fail_sys(errno, "cannot send a datagram to member " + std::to_string(to) + " at " + to_string(p->second.addr),
             "check that the interface " + cfg_.interface_address + " is up");
  }
}

bool Endpoint::unicast(MemberId to, std::vector<std::byte> head, std::span<const std::byte> tail,
                       std::shared_ptr<const void> keep) {
  const std::size_t frame_size = head.size() + tail.size();
  if (frame_size > cfg_.max_frame)
    throw Error(ErrorCode::message_too_large, "frame of " + std::to_string(frame_size) +
                                                  " bytes is over SocketConfig::max_frame (" +
                                                  std::to_string(cfg_.max_frame) + "); peers would refuse it");
  std::lock_guard lock(mu_);
  if (closed_) return false;
  auto p = peers_.find(to);
  if (p == peers_.end() || p->second.broken) return false;
  Connection* c = nullptr;
  if (auto o = outgoing_.find(to); o != outgoing_.end()) {
    c = &conns_.at(o->second);
  } else {
    c = connect_to(to, p->second);
    if (c == nullptr) return false;
  }
  OutFrame f{encode_length(static_cast<std::uint32_t>(frame_size)), std::move(head), tail, std::move(keep)};
  if (c->out_bytes + f.size() > cfg_.max_output_bytes) {
    drop(c->key, true);  // the peer stopped reading: as good as gone, and memory stays bounded
    return false;
  }
  c->out_bytes += f.size();
  c->out.push_back(std::move(f));
  ++stats_.frames_sent;
  if (c->connecting) {  // sent once connected
    own_lent_tail(*c);
    return true;
  }
  switch (flush(*c)) {
    case Flush::failed:
      drop(c->key, true);
      return false;
    case Flush::pending:
      own_lent_tail(*c);
      watch_output(*c, true);
      return true;
    case Flush::done:
      return true;
  }
  return true;
}

void Endpoint::own_lent_tail(Connection& c) {
  if (c.out.empty()) return;
  OutFrame& f = c.out.back();  // the frame unicast() just queued: earlier ones were seen to
  if (f.keep != nullptr || f.tail.empty()) return;
  f.keep = transport::keep_copy(f.tail);
  ++stats_.lent_tails_copied;
}

Endpoint::Connection& Endpoint::add_connection(int fd, std::uint32_t events) {
  const std::uint64_t key = next_key_++;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = key;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    const int e = errno;
    close_fd(fd);
    fail_sys(e, "cannot add a connection to the epoll set", "raise fs.epoll.max_user_watches");
  }
  Connection& c = conns_[key];
  c.fd = fd;
  c.key = key;
  return c;
}

Endpoint::Connection* Endpoint::connect_to(MemberId to, Peer& peer) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    fail_sys(errno, "cannot create a TCP socket for the link to member " + std::to_string(to),
             "the process may be out of file descriptors: raise ulimit -n");
  const int one = 1;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) {
    const int e = errno;
    close_fd(fd);
    fail_sys(e, "cannot set TCP_NODELAY", "this kernel refuses a standard socket option");
  }
  if (cfg_.tcp_buffer > 0 &&
      (::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &cfg_.tcp_buffer, sizeof cfg_.tcp_buffer) != 0 ||
       ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &cfg_.tcp_buffer, sizeof cfg_.tcp_buffer) != 0)) {
    const int e = errno;
    close_fd(fd);
    fail_sys(e, "cannot set the link's socket buffers", "lower SocketOptions::link_buffer_bytes");
  }
  bool connecting = false;
  for (;;) {
    if (::connect(fd, as_sockaddr(&peer.addr), sizeof peer.addr) == 0) break;
    if (errno == EINPROGRESS || errno == EINTR) {  // after EINTR the connection is established asynchronously
      connecting = true;
      break;
    }
    // Refused, unreachable, out of ports: the link is broken; the protocol suspects the peer.
    close_fd(fd);
    mark_broken(to);
    return nullptr;
  }
  Connection& c = add_connection(fd, kConnEvents | (connecting ? std::uint32_t{EPOLLOUT} : 0U));
  c.outgoing = true;
  c.connecting = connecting;
  c.watching_out = connecting;
  c.peer = to;
  auto hello = encode_hello(id_);
  c.out.push_back(OutFrame{encode_length(static_cast<std::uint32_t>(hello.size())), std::move(hello), {}, nullptr});
  c.out_bytes = c.out.back().size();
  outgoing_[to] = c.key;
  return &c;
}

Endpoint::Flush Endpoint::flush(Connection& c) {
  while (!c.out.empty()) {
    std::array<iovec, kMaxIov> iov{};
    std::size_t n_iov = 0;
    std::size_t skip = c.out_offset;
    // Prefix, body and tail of each queued frame, the first one from where the last
    // write stopped (`skip` bytes into it).
    auto add = [&](const std::byte* data, std::size_t size) {
      if (skip >= size) {
        skip -= size;
        return;
      }
      iov[n_iov++] = iovec{const_cast<std::byte*>(data) + skip, size - skip};  // NOLINT: iovec is not const
      skip = 0;
    };
    for (auto& f : c.out) {
      if (n_iov + 3 > iov.size()) break;
      add(f.prefix.data(), kLengthPrefix);
      add(f.body.data(), f.body.size());
      add(f.tail.data(), f.tail.size());
    }
    msghdr msg{};
    msg.msg_iov = iov.data();
    msg.msg_iovlen = n_iov;
    const ssize_t n = ::sendmsg(c.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      const int e = errno;
      if (e == EINTR) continue;
      if (e == EAGAIN || e == EWOULDBLOCK) return Flush::pending;
      return Flush::failed;  // EPIPE, ECONNRESET, ETIMEDOUT, ...: the peer is lost
    }
    auto written = static_cast<std::size_t>(n);
    c.out_bytes -= written;
    while (written > 0) {
      const std::size_t rest = c.out.front().size() - c.out_offset;
      if (written < rest) {
        c.out_offset += written;
        break;
      }
      written -= rest;
      c.out.pop_front();
      c.out_offset = 0;
    }
  }
  return Flush::done;
}

void Endpoint::watch_output(Connection& c, bool on) {
  if (c.watching_out == on) return;
  epoll_event ev{};
  ev.events = kConnEvents | (on ? std::uint32_t{EPOLLOUT} : 0U);
  ev.data.u64 = c.key;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev) != 0)
    fail_sys(errno, "cannot change the events watched on a connection", "this is a kernel or sandbox restriction");
  c.watching_out = on;
}

void Endpoint::mark_broken(MemberId id) {
  auto p = peers_.find(id);
  if (p != peers_.end() && !p->second.broken) {
    p->second.broken = true;
    ++stats_.links_broken;
  }
  auto o = outgoing_.find(id);
  if (o != outgoing_.end()) drop(o->second, false);
}

void Endpoint::drop(std::uint64_t key, bool peer_lost) {
  auto it = conns_.find(key);
  if (it == conns_.end()) return;
  Connection c = std::move(it->second);
  conns_.erase(it);
  close_fd(c.fd);  // also leaves the epoll set
  if (!c.outgoing) --accepted_;
  if (c.outgoing && c.peer) {
    auto o = outgoing_.find(*c.peer);
    if (o != outgoing_.end() && o->second == key) outgoing_.erase(o);
  }
  // Only our own connection speaks for a peer's link: an accepted one carries a
  // claimed identity (its hello), and a stranger claiming to be a member must not
  // be able to break that member's link by misbehaving. A dead peer still shows,
  // on our connection to it and on its control connection to the manager.
  if (peer_lost && c.peer && c.outgoing) mark_broken(*c.peer);
}

std::optional<Inbound> Endpoint::wait(std::chrono::steady_clock::time_point deadline) {
  std::array<epoll_event, 64> events{};
  bool polled = false;
  for (;;) {
    {
      std::lock_guard lock(mu_);
      if (closed_) return std::nullopt;
      if (!inbox_.empty()) {
        Inbound in = std::move(inbox_.front());
        inbox_.pop_front();
        ++popped_;
        // woken_ stays: a wake() is never lost, the next wait() returns at once.
        pacer_.on_arrival(std::chrono::steady_clock::now());
        return in;
      }
      if (woken_.exchange(false)) return std::nullopt;
    }
    const auto now = std::chrono::steady_clock::now();
    // A look that cannot wait (the progress thread draining what came, its deadline
    // now) right after an epoll that found input. While such looks find nothing (one
    // message at a time, each waiting for its ACK), most are skipped: the system call
    // is a good part of what an all-acked message costs at two processes, and what the
    // kernel got meanwhile is read by the next wait, a round later. While they find
    // more (a stream), every one is made: they gather a burst under one ACK.
    const bool relook = !polled && now >= deadline && now - last_epoll_ < kRepollAfter;
    if (relook && !relook_found_ && relooks_skipped_ < kRelooksSkipped) {
      ++relooks_skipped_;
      return std::nullopt;
    }
    if (relook) relooks_skipped_ = 0;
    pacer_.on_empty(now);
    if (polled && now >= deadline) return std::nullopt;
    // Busy-polling right after traffic saves the wake-up of a sleeping thread (tens of
    // microseconds, more in a VM) on the next arrival; yielding between polls lets
    // other processes on the same cores run, as MPI does when oversubscribed.
    // Not where yielding costs a slice (cpu_share.hpp): asleep in the kernel, the
    // thread is woken at its event ahead of whoever holds the CPU. (A socket's poll
    // is a system call either way: sleeping here costs less than on shm, where a
    // thread that may keep its CPU spins on instead.) Watched in a process bound to
    // CPUs of its own.
    const bool spin = pacer_.spin(now) && !transport::cpu_contended();
    if (spin && polled) {
      const auto& share = transport::cpu_share();
      relax_(transport::may_keep_cpu(share, polling_threads_now(), 0), share.allowed < share.online);
    }
    // At most a day at a time, so no conversion below overflows.
    const std::chrono::nanoseconds left =
        deadline <= now || spin ? std::chrono::nanoseconds{0}
                                : std::min<std::chrono::nanoseconds>(deadline - now, std::chrono::hours{24});
    // About to block: say so first, then look at the flag once more, so a wake() that
    // came in between either is seen here or writes the eventfd.
    const bool blocks = left.count() > 0;
    if (blocks) {
      blocking_.store(true);
      if (woken_.load()) {
        blocking_.store(false);
        continue;
      }
    }
    int n = -1;
    bool done = false;
#if defined(__GLIBC_PREREQ)
#if __GLIBC_PREREQ(2, 35)
    if (pwait2_) {
      timespec ts{};
      ts.tv_sec = static_cast<time_t>(left.count() / 1'000'000'000);
      ts.tv_nsec = static_cast<long>(left.count() % 1'000'000'000);
      n = ::epoll_pwait2(epoll_fd_, events.data(), static_cast<int>(events.size()), &ts, nullptr);
      if (n >= 0 || (errno != ENOSYS && errno != EPERM)) done = true;
      else pwait2_ = false;  // older kernel, or a sandbox that does not know it: milliseconds then
    }
#endif
#endif
    if (!done) {
      const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
      n = ::epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), static_cast<int>(ms));
    }
    if (blocks) blocking_.store(false);
    polled = true;
    if (relook) relook_found_ = n > 0;
    if (n > 0) last_epoll_ = std::chrono::steady_clock::now();
    if (n < 0) {
      if (errno == EINTR) continue;
      fail_sys(errno, "cannot wait on the endpoint's epoll set", "the endpoint was destroyed while in use");
    }
    std::lock_guard lock(mu_);
    if (closed_) return std::nullopt;
    for (int i = 0; i < n; ++i) {
      const epoll_event& ev = events[static_cast<std::size_t>(i)];
      const std::uint64_t key = ev.data.u64;
      const std::uint32_t what = ev.events;
      if (key == kWakeKey) {
        std::uint64_t count = 0;
        if (::read(wake_fd_, &count, sizeof count) < 0 && errno != EAGAIN)
          fail_sys(errno, "cannot read the endpoint's eventfd", "the endpoint was destroyed while in use");
        woken_.store(true);
      } else if (key == kUdpKey) {
        read_datagrams(udp_fd_, false);
      } else if (key == kDirectKey) {
        read_datagrams(direct_fd_, true);
      } else if (key == kListenKey) {
        accept_connections();
      } else {
        on_connection_event(key, what);
      }
    }
  }
}

std::vector<std::byte> Endpoint::take_spare(std::size_t slot) {
  std::vector<std::byte> v;
  if (!spare_.empty()) {
    v = std::move(spare_.back());
    spare_.pop_back();
  }
  v.resize(slot);  // a spare has the capacity (recycle() checked): only its tail is zeroed
  return v;
}

void Endpoint::recycle(std::vector<std::byte>&& bytes) {
  // Only a slot's worth: a link's frame of megabytes would hold its memory here.
  const std::size_t slot = cfg_.mtu + 1;
  if (bytes.capacity() < slot || bytes.capacity() > 2 * slot) return;
  std::lock_guard lock(mu_);
  if (spare_.size() < kSpareSlots) spare_.push_back(std::move(bytes));
}

void Endpoint::drop_own_datagrams_in_kernel() {
  // Multicast loopback hands every datagram we send to our own socket too. A socket
  // filter drops those before they are queued: no wake-up, no read, and a sender
  // of a stream reads only what others send. A filter sees the UDP header first;
  // classic BPF loads words in network order, and the wire format is little-endian.
  constexpr std::uint32_t kUdpHeader = 8;
  constexpr std::uint32_t kSrcAt = kUdpHeader + 20;  // wire::peek_src's offset
  static_assert(wire::kHeaderSize >= 24);
  std::array<sock_filter, 8> code{{
      BPF_STMT(BPF_LD | BPF_W | BPF_LEN, 0),
      BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, kUdpHeader + wire::kHeaderSize, 0, 4),  // short: keep (user space counts it)
      BPF_STMT(BPF_LD | BPF_H | BPF_ABS, kUdpHeader),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __builtin_bswap16(wire::kMagic), 0, 2),  // not ours: keep
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, kSrcAt),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __builtin_bswap32(id_), 1, 0),  // from us: drop
      BPF_STMT(BPF_RET | BPF_K, 0xFFFFFFFFU),  // keep
      BPF_STMT(BPF_RET | BPF_K, 0),            // drop
  }};
  sock_fprog prog{static_cast<unsigned short>(code.size()), code.data()};
  // Without it (a kernel that refuses filters) read_datagrams() drops them instead.
  own_filtered_in_kernel_ = ::setsockopt(udp_fd_, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog) == 0;
}

void Endpoint::read_datagrams(int fd, bool direct) {
  const std::size_t slot = cfg_.mtu + 1;
  for (int taken = 0; taken < kDatagramsPerEvent;) {
    for (unsigned i = 0; i < kDatagramBatch; ++i) {
      HMCAST_ASSERT(datagram_slots_[i].size() == slot);
      datagram_iov_[i] = iovec{datagram_slots_[i].data(), slot};
      datagram_msgs_[i] = mmsghdr{};
      datagram_msgs_[i].msg_hdr.msg_iov = &datagram_iov_[i];
      datagram_msgs_[i].msg_hdr.msg_iovlen = 1;
    }
    const int got = ::recvmmsg(fd, datagram_msgs_.data(), kDatagramBatch, MSG_DONTWAIT, nullptr);
    if (got < 0) {
      const int e = errno;
      if (e == EAGAIN || e == EWOULDBLOCK) return;
      if (e == EINTR) continue;
      fail_sys(e, "cannot receive datagrams of " + cfg_.group_address + ":" + std::to_string(cfg_.group_port),
               "check that the interface " + cfg_.interface_address + " is up");
    }
    HMCAST_ASSERT(static_cast<unsigned>(got) <= kDatagramBatch);
    for (int i = 0; i < got; ++i) {
      const mmsghdr& m = datagram_msgs_[static_cast<std::size_t>(i)];
      const std::size_t len = m.msg_len;
      if (len > cfg_.mtu || (m.msg_hdr.msg_flags & MSG_TRUNC) != 0) {
        ++stats_.datagrams_oversized;
        continue;
      }
      std::vector<std::byte>& buf = datagram_slots_[static_cast<std::size_t>(i)];
      const std::span<const std::byte> bytes(buf.data(), len);
      MemberId from = 0;
      if (len >= wire::kHeaderSize) {
        from = wire::peek_src(bytes);
        if (from == id_) {
          ++stats_.datagrams_own;  // looped back to us: the engine would ignore it anyway
          continue;
        }
      }
      ++(direct ? stats_.direct_received : stats_.datagrams_received);
      // Past half a slot, the buffer itself goes and the slot takes a spare, of which
      // only the tail past its last datagram is zeroed (with no spare, a new slot is
      // zeroed: about what the copy moved); below, a copy of its size, so a small
      // datagram does not hold a whole slot.
      if (len > slot / 2) {
        buf.resize(len);
        inbox_.push_back(Inbound{true, from, std::move(buf), false, direct});
        buf = take_spare(slot);
      } else {
        inbox_.push_back(Inbound{true, from, std::vector<std::byte>(bytes.begin(), bytes.end()), false, direct});
      }
    }
    taken += got;
    if (static_cast<unsigned>(got) < kDatagramBatch) return;  // the socket is empty
  }
}

void Endpoint::accept_connections() {
  for (int i = 0; i < kAcceptsPerEvent; ++i) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      const int e = errno;
      if (e == EAGAIN || e == EWOULDBLOCK) return;
      // The connection died before we took it, or a signal: try the next one.
      if (e == EINTR || e == ECONNABORTED || e == EPROTO || e == ENETDOWN || e == ENOPROTOOPT || e == EHOSTDOWN ||
          e == ENONET || e == EHOSTUNREACH || e == EOPNOTSUPP || e == ENETUNREACH || e == EPERM)
        continue;
      fail_sys(e, "cannot accept a connection on port " + std::to_string(tcp_port_),
               "the process may be out of file descriptors or memory: raise ulimit -n, or lower "
               "SocketConfig::max_connections");
    }
    if (accepted_ >= cfg_.max_connections) {
      ++stats_.connections_over_limit;
      close_fd(fd);
      continue;
    }
    Connection& c = add_connection(fd, kConnEvents);
    c.reader.set_limit(kHelloSize);  // nothing but a hello until the peer named itself
    ++accepted_;
    ++stats_.connections_accepted;
  }
}

void Endpoint::on_connection_event(std::uint64_t key, std::uint32_t events) {
  auto it = conns_.find(key);
  if (it == conns_.end()) return;  // dropped earlier in this batch
  Connection& c = it->second;
  if (c.connecting) {
    if ((events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) == 0) return;
    int err = 0;
    socklen_t len = sizeof err;
    if (::getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err != 0) {
      drop(key, true);  // refused, unreachable, timed out
      return;
    }
    c.connecting = false;
    events |= EPOLLOUT;  // send what unicast() queued
  }
  if ((events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0 && !read_connection(c)) return;
  if ((events & EPOLLOUT) != 0) {
    switch (flush(c)) {
      case Flush::failed:
        drop(key, true);
        return;
      case Flush::pending:
        watch_output(c, true);
        return;
      case Flush::done:
        watch_output(c, false);
        return;
    }
  }
}

void Endpoint::set_block_placer(BlockPlacer placer, std::size_t min_payload) {
  std::lock_guard lock(mu_);
  placer_ = std::move(placer);
  min_placed_ = min_payload;
}

bool Endpoint::read_connection(Connection& c) {
  const std::uint64_t key = c.key;
  const auto start_placing = [&] {
    if (!c.peer || !placer_ || c.placing) return;
    // Offer each big enough Block frame's payload to the placer once its head is in.
    c.placing = true;
    const MemberId from = *c.peer;
    c.reader.set_placer(
        wire::kBlockHeadSize,
        [this, from](std::span<const std::byte> head, std::size_t size) {
          if (wire::peek_type(head) != wire::Type::block || size < wire::kBlockHeadSize + min_placed_)
            return std::optional<Placement>{};
          return placer_(from, head, size);
        },
        // A block declined while the frame read just before it on this link waits to
        // be handled (the announcement that makes its buffer) may find its place
        // once it is: read no further until then (FrameReader: Waiting). The reader
        // lives in `c`, which stays at its node of conns_ until dropped.
        [this, &c] { return c.last_handed > popped_; });
  };
  start_placing();
  // The frames read before the head we stopped at were handled since (wait() reads
  // connections only once its inbox is empty).
  c.reader.ask_again();
  const auto on_frame = [&](std::vector<std::byte>&& frame) {
    if (!c.peer) {
      c.peer = decode_hello(frame);
      if (!c.peer) return false;
      c.reader.set_limit(cfg_.max_frame);
      start_placing();  // a block read with the hello is placed too
      return true;
    }
    ++stats_.frames_received;
    const bool placed = c.reader.placed();
    if (placed) c.since_placed = 0;
    else if (c.since_placed != kNeverPlaced) ++c.since_placed;
    stats_.bytes_placed += c.reader.placed_bytes();
    stats_.bytes_placed_copied += c.reader.placed_copied();
    inbox_.push_back(Inbound{false, *c.peer, std::move(frame), placed});
    c.last_handed = popped_ + inbox_.size();
    return true;
  };
  for (int round = 0; round < kReadRounds; ++round) {
    if (c.reader.waiting()) return true;  // level-triggered: the connection reports again
    const auto direct = c.reader.direct();  // a placed payload still to come: read it in place
    // Into scratch_, while blocks come, only up to the next frame's head: a block's
    // payload read there would be copied again into its place (a segment is as large
    // as scratch_), and one more small recv() per segment costs less than that copy.
    std::size_t want = scratch_.size();
    if (direct.empty() && c.since_placed < kFramesExpectingBlocks) {
      const std::size_t head = c.reader.until_head();
      if (head != 0) want = std::min(want, head);
    }
    const ssize_t n = direct.empty() ? ::recv(c.fd, scratch_.data(), want, MSG_DONTWAIT)
                                     : ::recv(c.fd, direct.data(), direct.size(), MSG_DONTWAIT);
    if (n < 0) {
      const int e = errno;
      if (e == EINTR) continue;
      if (e == EAGAIN || e == EWOULDBLOCK) return true;
      drop(key, true);  // ECONNRESET, ETIMEDOUT, ...: the peer is lost
      return false;
    }
    if (n == 0) {
      drop(key, true);  // EOF: the peer closed the link (or its process ended)
      return false;
    }
    if (c.outgoing) {
      // Peers send on the connections they opened, never on ours: this is not an hmcast peer.
      ++stats_.connections_malformed;
      drop(key, true);
      return false;
    }
    const std::size_t asked = direct.empty() ? want : direct.size();
    const bool ok = !direct.empty()
                        ? c.reader.direct_filled(static_cast<std::size_t>(n), on_frame)
                        : c.reader.feed(std::span<const std::byte>(scratch_.data(), static_cast<std::size_t>(n)), on_frame);
    if (!ok) {
      // A length over the limit or a bad hello: the peer is not trusted any more.
      ++stats_.connections_malformed;
      drop(key, c.peer.has_value());
      return false;
    }
    // Less than asked: the socket held no more (level-triggered epoll reports what
    // comes next), so no call is spent on an EAGAIN.
    if (static_cast<std::size_t>(n) < asked) return true;
  }
  return true;
}

void Endpoint::close() {
  std::lock_guard lock(mu_);
  close_locked();
}

void Endpoint::close_locked() {
  if (closed_) return;
  closed_ = true;
  for (auto& [key, c] : conns_) {
    if (c.outgoing && !c.connecting) (void)flush(c);  // best effort: the kernel sends what it took after close
    close_fd(c.fd);
  }
  conns_.clear();
  outgoing_.clear();
  accepted_ = 0;
  close_fd(udp_fd_);
  close_fd(listen_fd_);
  close_fd(direct_fd_);
  popped_ += inbox_.size();
  inbox_.clear();
  const std::uint64_t one = 1;
  // Wakes a thread in wait(); EAGAIN means a wake is already pending. Nothing to do about other errors here.
  [[maybe_unused]] const ssize_t rc = ::write(wake_fd_, &one, sizeof one);
}

Stats Endpoint::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace hmcast::socket
