// The two-level group's link (src/transport/host_link.hpp) with real endpoints:
// members 1 and 2 share a "host", member 3 is on another; what goes where, that a
// local datagram arrives once (the network's looped copy is dropped), and that a
// thread asleep in wait() wakes for either side.
#include "transport/host_link.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <set>
#include <thread>
#include <unistd.h>
#include <vector>

#include "core/wire.hpp"
#include "hmcast/config.hpp"
#include "transport/links.hpp"
#include "transport/sealed/sealed_link.hpp"

namespace w = hmcast::wire;
namespace tr = hmcast::transport;
using Bytes = std::vector<std::byte>;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

constexpr std::uint32_t kAddress = 0xEFFF4D4EU;  // 239.255.77.78
std::uint16_t test_port() { return static_cast<std::uint16_t>(21000 + ::getpid() % 1000); }

hmcast::GroupId test_group(std::uint64_t which) {
  return (static_cast<std::uint64_t>(::getpid()) << 24) ^ (which * 0x9e3779b97f4a7c15ULL);
}

Bytes datagram(hmcast::GroupId group, hmcast::MemberId src, hmcast::Seq seq) {
  return w::encode(w::Header{w::Type::stable, group, 1, src}, w::Stable{src, seq, seq});
}

/// The seq of a datagram of `group` (0 for anything else).
hmcast::Seq seq_of(const tr::Inbound& in, hmcast::GroupId group) {
  const auto res = w::decode(in.bytes);
  if (!res.ok() || res.packet.header.group != group) return 0;
  const auto* st = std::get_if<w::Stable>(&res.packet.body);
  return st != nullptr ? st->highest : 0;
}

const tr::HostLink& host_link(const tr::Link& l) { return dynamic_cast<const tr::HostLink&>(tr::bare_link(l)); }

/// Three members: 1 and 2 on one host, 3 on another.
struct Trio {
  explicit Trio(hmcast::GroupId group) {
    hmcast::SocketOptions socket;
    hmcast::ShmOptions shm;
    shm.multicast_bytes = shm.inbox_bytes = std::size_t{1} << 20;
    for (hmcast::MemberId m = 1; m <= 3; ++m)
      links.push_back(
          tr::make_host_link(m, group, kAddress, test_port(), socket, shm, hmcast::FaultConfig{}, nullptr, true));
    const std::vector<std::vector<hmcast::MemberId>> local = {{1, 2}, {1, 2}, {3}};
    for (std::size_t i = 0; i < 3; ++i) {
      links[i]->set_local_peers(local[i]);
      for (std::size_t j = 0; j < 3; ++j)
        if (i != j) links[i]->add_peer(static_cast<hmcast::MemberId>(j + 1), "127.0.0.1", tr::listening_port(*links[j]));
    }
  }
  std::vector<std::unique_ptr<tr::Link>> links;
};

/// What each link receives within `limit`, all driven from this thread as their
/// progress threads would (a socket's sender side moves only inside its wait()).
std::vector<std::vector<tr::Inbound>> drain(Trio& t, std::chrono::milliseconds limit) {
  std::vector<std::vector<tr::Inbound>> got(t.links.size());
  const auto end = Clock::now() + limit;
  while (Clock::now() < end)
    for (std::size_t i = 0; i < t.links.size(); ++i)
      while (auto in = t.links[i]->wait(Clock::now() + 200us)) got[i].push_back(std::move(*in));
  return got;
}

}  // namespace

TEST_CASE("host link: frames to the host's members go through shared memory, the rest over the socket",
          "[host_link]") {
  const auto group = test_group(1);
  Trio t(group);
  const auto& a = host_link(*t.links[0]);
  const Bytes to_local(3000, std::byte{0x5a});
  const Bytes to_remote(4000, std::byte{0xa5});
  REQUIRE(t.links[0]->unicast(2, to_local));
  const auto shm_bytes = a.local().link_bytes_sent();
  CHECK(shm_bytes >= to_local.size());
  REQUIRE(t.links[0]->unicast(3, to_remote));
  CHECK(a.local().link_bytes_sent() == shm_bytes);  // not through shared memory
  const auto got = drain(t, 300ms);
  const auto& at2 = got[1];
  const auto& at3 = got[2];
  REQUIRE(at2.size() == 1);
  CHECK((!at2[0].datagram && at2[0].from == 1 && at2[0].bytes == to_local));
  REQUIRE(at3.size() == 1);
  CHECK((!at3[0].datagram && at3[0].from == 1 && at3[0].bytes == to_remote));
}

TEST_CASE("host link: a datagram reaches every member once, the network's looped copy is dropped",
          "[host_link]") {
  const auto group = test_group(2);
  Trio t(group);
  constexpr hmcast::Seq kCount = 20;
  for (hmcast::Seq q = 1; q <= kCount; ++q) t.links[0]->multicast(datagram(group, 1, q));
  const auto got = drain(t, 500ms);
  for (std::size_t i : {1U, 2U}) {
    std::vector<hmcast::Seq> seqs;
    for (const auto& in : got[i])
      if (in.datagram && seq_of(in, group) != 0) seqs.push_back(seq_of(in, group));
    INFO("member " << i + 1);
    CHECK(seqs.size() == kCount);  // no copy twice (loopback UDP does not lose here)
    CHECK(std::set<hmcast::Seq>(seqs.begin(), seqs.end()).size() == kCount);
  }
  // Member 2 shares the host: its copies came through shared memory, and the socket's
  // looped ones were dropped. Member 3 has only the network.
  CHECK(host_link(*t.links[1]).looped_dropped() == kCount);
  CHECK(host_link(*t.links[2]).looped_dropped() == 0);
}

TEST_CASE("host link: a thread asleep in wait() wakes for either side, for wake() and for close()",
          "[host_link]") {
  const auto group = test_group(3);
  Trio t(group);
  for (std::size_t receiver : {1U, 2U}) {  // 2: shared memory, 3: the network
    INFO("member " << receiver + 1);
    // The connection to 3 is made now (the sender drives it from its wait()), and the
    // receiver then idles long enough to sleep rather than poll.
    REQUIRE(t.links[0]->unicast(static_cast<hmcast::MemberId>(receiver + 1), Bytes(10, std::byte{2})));
    const auto first = drain(t, 100ms);
    REQUIRE(first[receiver].size() == 1);
    auto got = std::async(std::launch::async, [&] {
      const auto start = Clock::now();
      auto in = t.links[receiver]->wait(start + 10s);
      return std::make_pair(std::move(in), Clock::now() - start);
    });
    std::this_thread::sleep_for(100ms);
    REQUIRE(t.links[0]->unicast(static_cast<hmcast::MemberId>(receiver + 1), Bytes(100, std::byte{1})));
    (void)t.links[0]->wait(Clock::now() + 1ms);  // the sender's side of the socket moves
    auto [in, took] = got.get();
    REQUIRE(in.has_value());
    CHECK(in->from == 1);
    CHECK(took < 5s);  // woken by the arrival, not by the deadline
  }
  auto woken = std::async(std::launch::async, [&] { return t.links[2]->wait(Clock::now() + 10s); });
  std::this_thread::sleep_for(100ms);
  t.links[2]->wake();
  REQUIRE(woken.wait_for(5s) == std::future_status::ready);
  CHECK_FALSE(woken.get().has_value());
  auto closing = std::async(std::launch::async, [&] { return t.links[1]->wait(Clock::now() + 10s); });
  std::this_thread::sleep_for(100ms);
  t.links[1]->close();
  REQUIRE(closing.wait_for(5s) == std::future_status::ready);
  CHECK_FALSE(closing.get().has_value());
}
