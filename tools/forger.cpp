#include "forger.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <stdexcept>
#include <thread>
#include <vector>

#include "auth/frame_auth.hpp"
#include "hmcast/error.hpp"
#include "transport/socket/framing.hpp"
#include "transport/socket/manager_client.hpp"
#include "transport/socket/net_util.hpp"
#include "core/rng.hpp"
#include "core/wire.hpp"
#include "workload.hpp"

namespace hmcast::tools {

namespace {

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  [[nodiscard]] int get() const { return fd_; }

 private:
  int fd_;
};

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error("forger: " + what + ": " + std::strerror(errno));
}

/// What the forger learnt from one captured datagram (sealed or not).
struct Heard {
  ViewId view = 0;
  std::map<MemberId, Seq> highest;  // per sender, the highest data seq in it
};

std::optional<Heard> learn(const std::vector<std::byte>& datagram, GroupId group) {
  auto r = wire::decode(datagram);
  // A sealed datagram is the plain one with a trailer: the header stays readable.
  if (!r.ok() && datagram.size() > auth::kTrailerBytes)
    r = wire::decode(std::span(datagram).first(datagram.size() - auth::kTrailerBytes));
  if (!r.ok() || r.packet.header.group != group) return std::nullopt;
  Heard h;
  h.view = r.packet.header.view;
  const auto note = [&](const wire::Packet& p) {
    const auto* d = std::get_if<wire::Data>(&p.body);
    // Our own forgeries come back to us too: they must not move what we forge next.
    if (d != nullptr && !is_forged(d->payload)) {
      auto& s = h.highest[d->sender];
      s = std::max(s, d->seq);
    }
  };
  note(r.packet);
  if (const auto* b = std::get_if<wire::Batch>(&r.packet.body))
    for (const auto& item : b->items) {
      const auto ir = wire::decode(item);
      if (ir.ok()) note(ir.packet);
    }
  return h;
}

void append_framed(std::vector<std::byte>& out, std::span<const std::byte> body) {
  for (auto b : socket::encode_length(static_cast<std::uint32_t>(body.size()))) out.push_back(b);
  out.insert(out.end(), body.begin(), body.end());
}

/// Opens a link to `to` with a hello naming `as` (another member) and sends `frames`
/// on it: how many were written.
std::uint64_t send_as(const membership::MemberAddress& to, MemberId as, const std::vector<std::vector<std::byte>>& frames) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  Fd guard(fd);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(to.port);
  if (::inet_pton(AF_INET, to.host.c_str(), &a.sin_addr) != 1 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
    return 0;
  // The hello built by hand, as tools/sprayer.cpp does (GCC 12's -Warray-bounds).
  std::vector<std::byte> bytes;
  for (auto b : socket::encode_length(static_cast<std::uint32_t>(socket::kHelloSize))) bytes.push_back(b);
  for (auto b : socket::kHelloMagic) bytes.push_back(b);
  for (auto b : socket::encode_length(as)) bytes.push_back(b);
  for (const auto& f : frames) append_framed(bytes, f);
  return ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size()) ? frames.size() : 0;
}

/// Asks the manager to let us join the group: whether it welcomed us (we leave at once).
bool try_join(const std::string& manager, const std::string& group, std::uint32_t group_size) {
  try {
    const auto [host, port] = socket::split_host_port(manager, "manager address");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    socket::ManagerClient client(host, port, deadline);
    (void)client.join(group, group_size, deadline);
    return true;
  } catch (const Error&) {
    return false;  // refused (the group key), or not in time
  }
}

}  // namespace

ForgeStats spray_forged(const membership::IssuedView& target, const std::string& interface_address,
                        const std::string& manager, std::uint32_t group_size, std::uint64_t seed,
                        const std::atomic<bool>& stop, std::uint32_t pause_us) {
  ForgeStats st;
  Rng rng(seed ^ 0xf0f0f0f0ULL);
  sockaddr_in group{};
  group.sin_family = AF_INET;
  group.sin_addr.s_addr = htonl(target.multicast_address);
  group.sin_port = htons(target.multicast_port);
  in_addr ifaddr{};
  if (::inet_pton(AF_INET, interface_address.c_str(), &ifaddr) != 1)
    throw std::runtime_error("forger: bad interface address " + interface_address);

  // Listen as the members do (they share the port with SO_REUSEPORT).
  Fd rx(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (rx.get() < 0) fail("socket");
  const int one = 1;
  (void)::setsockopt(rx.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  (void)::setsockopt(rx.get(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  if (::bind(rx.get(), reinterpret_cast<sockaddr*>(&group), sizeof group) != 0) fail("bind to the group's port");
  ip_mreq mreq{};
  mreq.imr_multiaddr = group.sin_addr;
  mreq.imr_interface = ifaddr;
  if (::setsockopt(rx.get(), IPPROTO_IP, IP_ADD_MEMBERSHIP, &mreq, sizeof mreq) != 0) fail("join the group");

  Fd tx(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (tx.get() < 0) fail("socket");
  (void)::setsockopt(tx.get(), IPPROTO_IP, IP_MULTICAST_IF, &ifaddr, sizeof ifaddr);
  const unsigned char loop = 1;
  (void)::setsockopt(tx.get(), IPPROTO_IP, IP_MULTICAST_LOOP, &loop, sizeof loop);
  const auto send = [&](const std::vector<std::byte>& d) {
    return ::sendto(tx.get(), d.data(), d.size(), 0, reinterpret_cast<sockaddr*>(&group), sizeof group) >= 0;
  };

  constexpr std::size_t kKept = 256;  // captured datagrams kept for replay
  std::vector<std::vector<std::byte>> captured;
  std::size_t next_slot = 0;
  ViewId view = target.view.id;
  std::map<MemberId, Seq> highest;  // per real sender, the highest seq heard
  std::vector<std::byte> buf(65536);
  std::vector<std::byte> body(64, std::byte{0x66});
  std::copy(kForgedMarker.begin(), kForgedMarker.end(), reinterpret_cast<char*>(body.data()));

  for (std::uint64_t round = 0; !stop.load(); ++round) {
    for (int n = 0; n < 64; ++n) {
      const auto got = ::recv(rx.get(), buf.data(), buf.size(), 0);
      if (got <= 0) break;
      std::vector<std::byte> d(buf.begin(), buf.begin() + got);
      const auto h = learn(d, target.group_id);
      if (!h) continue;  // not the group's
      ++st.captured;
      view = std::max(view, h->view);
      for (const auto& [s, seq] : h->highest) highest[s] = std::max(highest[s], seq);
      if (captured.size() < kKept) captured.push_back(std::move(d));
      else captured[next_slot++ % kKept] = std::move(d);
    }
    if (!captured.empty() && send(captured[rng.below(captured.size())])) ++st.replayed;
    if (!highest.empty()) {
      auto it = highest.begin();
      std::advance(it, static_cast<std::ptrdiff_t>(rng.below(highest.size())));
      const MemberId victim = it->first;
      wire::Data d;
      d.sender = victim;
      d.seq = it->second + 1 + rng.below(3);  // what the members expect next from it
      d.msg_len = static_cast<std::uint32_t>(body.size());
      d.payload = body;
      if (send(wire::encode(wire::Header{wire::Type::data, target.group_id, view, victim}, d))) ++st.forged_data;
      if (round % 8 == 0) {
        wire::Stable s;
        s.sender = victim;
        s.stable = it->second + 1000;
        s.highest = it->second + 1000;
        if (send(wire::encode(wire::Header{wire::Type::stable, target.group_id, view, victim}, s))) ++st.forged_stable;
      }
    }
    if (round % 500 == 250 && !highest.empty() && target.push.members.size() >= 2) {
      // On a link: an ACK saying a member holds everything, and a repair of a forged
      // message, from a member the link's hello names but that never opened it.
      const auto& to = target.push.members[rng.below(target.push.members.size())];
      MemberId as = to.id;
      while (as == to.id) as = target.push.members[rng.below(target.push.members.size())].id;
      const auto [victim, seq] = *highest.begin();
      wire::Ack ack;
      ack.entries.push_back(wire::AckEntry{victim, seq + 1000, seq + 1000, 0});
      wire::Repair repair;
      repair.sender = as;
      repair.seq = highest.count(as) != 0 ? highest[as] + 1 : 1;
      repair.payload = body;
      st.link_frames += send_as(to, as, {wire::encode(wire::Header{wire::Type::ack, target.group_id, view, as}, ack),
                                         wire::encode(wire::Header{wire::Type::repair, target.group_id, view, as}, repair)});
    }
    if (round % 2000 == 1000 && !manager.empty()) {
      ++st.joins_tried;
      if (try_join(manager, target.group, group_size)) ++st.joins_admitted;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(pause_us));
  }
  return st;
}

}  // namespace hmcast::tools
