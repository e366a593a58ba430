#include "sprayer.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <thread>

#include "core/wire.hpp"
#include "core/rng.hpp"
#include "transport/socket/framing.hpp"

namespace hmcast::tools {

namespace {

sockaddr_in addr_of(std::uint32_t host_order, std::uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(host_order);
  a.sin_port = htons(port);
  return a;
}

std::vector<std::byte> random_bytes(Rng& rng, std::size_t n) {
  std::vector<std::byte> b(n);
  for (auto& x : b) x = static_cast<std::byte>(rng.next() & 0xffU);
  return b;
}

/// Connects to a member's link port, sends `bytes`, and reports whether the member
/// then closed the connection (as it must for bad input) within a moment.
/// Sends `bytes` on a new connection to member `m` and counts whether it hangs up
/// within 2 s; a connection it refuses (it no longer listens) is counted apart.
void send_and_judge(const membership::MemberAddress& m, const std::vector<std::byte>& bytes, SprayStats& st) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(m.port);
  if (fd < 0 || ::inet_pton(AF_INET, m.host.c_str(), &a.sin_addr) != 1) {
    ++st.tcp_attempts;  // nothing sent, nothing hung up: judged as kept
    if (fd >= 0) ::close(fd);
    return;
  }
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    const int e = errno;
    ::close(fd);
    if (e == ECONNREFUSED) ++st.tcp_unreachable;
    else ++st.tcp_attempts;  // a timeout or another failure: judged as kept
    return;
  }
  ++st.tcp_attempts;
  (void)::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 2000) > 0) {
    std::byte sink[256];
    if (::recv(fd, sink, sizeof sink, 0) <= 0) ++st.tcp_disconnected;
  }
  ::close(fd);
}

}  // namespace

std::vector<std::byte> bad_datagram(const membership::IssuedView& target, Rng& rng, std::uint64_t round,
                                    std::size_t oversize) {
  const MemberId member = target.view.members.empty() ? 1 : target.view.members.front();
  const std::vector<std::byte> body(100, std::byte{0x5a});
  // One well-formed data packet with the given header fields.
  const auto packet = [&](GroupId gid, ViewId view, MemberId src) {
    wire::Data d;
    d.sender = src;
    d.seq = 1 + rng.below(1000);
    d.msg_len = static_cast<std::uint32_t>(body.size());
    d.payload = body;
    return wire::encode(wire::Header{wire::Type::data, gid, view, src}, d);
  };
  std::vector<std::byte> d;
  switch (round % 8) {
    case 0: d = random_bytes(rng, 1 + rng.below(1400)); break;
    case 1: {
      d = packet(target.group_id, target.view.id, member);
      d.resize(1 + rng.below(d.size() - 1));  // truncated
      break;
    }
    case 2: {
      d = packet(target.group_id, target.view.id, member);
      d[rng.below(wire::kHeaderSize)] ^= std::byte{0x41};  // corrupted header
      break;
    }
    case 3: d = random_bytes(rng, oversize); break;  // over the MTU (or as long as the fabric carries)
    case 4: d = packet(target.group_id, target.view.id == 0 ? 0 : target.view.id - 1, member); break;  // stale
    case 5: d = packet(target.group_id, target.view.id + 1000, member); break;  // far future view
    case 6: d = packet(target.group_id ^ 0x1234, target.view.id, member); break;  // another group
    default: d = packet(target.group_id, target.view.id, 900000 + static_cast<MemberId>(rng.below(100))); break;
  }
  return d;
}

SprayStats spray(const membership::IssuedView& target, const std::string& interface_address, std::uint64_t seed,
                 const std::atomic<bool>& stop, std::uint32_t pause_us) {
  SprayStats st;
  Rng rng(seed);
  const int udp = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (udp < 0) return st;
  in_addr ifaddr{};
  if (::inet_pton(AF_INET, interface_address.c_str(), &ifaddr) == 1)
    (void)::setsockopt(udp, IPPROTO_IP, IP_MULTICAST_IF, &ifaddr, sizeof ifaddr);
  const unsigned char loop = 1;
  (void)::setsockopt(udp, IPPROTO_IP, IP_MULTICAST_LOOP, &loop, sizeof loop);
  auto group = addr_of(target.multicast_address, target.multicast_port);
  const MemberId member = target.view.members.empty() ? 1 : target.view.members.front();
  // TCP first, once per member: the members must hang up on both.
  for (const auto& m : target.push.members) {
    send_and_judge(m, random_bytes(rng, 64), st);  // no valid hello
    // A valid hello (built by hand: socket::encode_hello inlined here trips GCC 12's -Warray-bounds).
    std::vector<std::byte> evil;
    for (auto b : socket::encode_length(static_cast<std::uint32_t>(socket::kHelloSize))) evil.push_back(b);
    for (auto b : socket::kHelloMagic) evil.push_back(b);
    for (auto b : socket::encode_length(member)) evil.push_back(b);
    for (auto b : socket::encode_length(0xfffffff0U)) evil.push_back(b);  // a length over any limit
    send_and_judge(m, evil, st);
  }

  for (std::uint64_t round = 0; !stop.load(); ++round) {
    const auto d = bad_datagram(target, rng, round, 9000 + rng.below(50000));  // over the MTU: over 8192
    if (::sendto(udp, d.data(), d.size(), 0, reinterpret_cast<sockaddr*>(&group), sizeof group) >= 0) ++st.datagrams;
    std::this_thread::sleep_for(std::chrono::microseconds(pause_us));
  }
  ::close(udp);
  return st;
}

}  // namespace hmcast::tools
