// The sealing layer (transport/sealed) and a Node with a group key: members holding
// the key hear each other; a stranger on the same fabric who hears everything can
// neither forge nor replay.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include "auth/frame_auth.hpp"
#include "api/node_state.hpp"
#include "auth/group_key.hpp"
#include "core/wire.hpp"
#include "hmcast/hmcast.hpp"
#include "transport/links.hpp"
#include "transport/sealed/sealed_link.hpp"

using namespace hmcast;
using transport::Inbound;
using transport::Link;

namespace {

constexpr GroupId kGroupId = 77;

std::vector<std::byte> frame(ViewId view, MemberId src, std::uint64_t nonce) {
  return wire::encode(wire::Header{wire::Type::mcast_probe, kGroupId, view, src}, wire::McastProbe{nonce});
}

std::optional<Inbound> next(Link& l, int ms = 300) {
  return l.wait(std::chrono::steady_clock::now() + std::chrono::milliseconds(ms));
}

struct Fabric {
  auth::GroupKey key = auth::generate_key();
  std::unique_ptr<Link> a, b, stranger;
  explicit Fabric(const std::string& name) {
    a = transport::make_inproc_link(name, kGroupId, 1, 0, {}, &key);
    b = transport::make_inproc_link(name, kGroupId, 2, 0, {}, &key);
    stranger = transport::make_inproc_link(name, kGroupId, 9, 0, {}, nullptr);  // no key, hears all datagrams
  }
};

}  // namespace

TEST_CASE("sealed link: members with the key hear each other as sent", "[auth]") {
  Fabric f("sealed-pass");
  const auto sent = frame(5, 1, 42);
  f.a->multicast(sent);
  auto got = next(*f.b);
  REQUIRE(got);
  CHECK(got->datagram);
  CHECK(got->bytes == sent);
  auto heard = next(*f.stranger);
  REQUIRE(heard);
  CHECK(heard->bytes.size() == sent.size() + auth::kTrailerBytes);  // what travels carries a tag

  REQUIRE(f.a->unicast(2, frame(5, 1, 43)));
  got = next(*f.b);
  REQUIRE(got);
  CHECK_FALSE(got->datagram);
  CHECK(got->from == 1);
  CHECK(got->bytes == frame(5, 1, 43));

  // A block's head and payload travel as one sealed frame.
  std::vector<std::byte> payload(1000, std::byte{7});
  const auto head = frame(5, 1, 44);
  REQUIRE(f.a->send_block(2, head, payload, payload.size(), nullptr));
  got = next(*f.b);
  REQUIRE(got);
  CHECK_FALSE(got->placed);
  REQUIRE(got->bytes.size() == head.size() + payload.size());
  CHECK(std::equal(head.begin(), head.end(), got->bytes.begin()));

  const auto s = transport::seal_stats(*f.b);
  CHECK(s.opened == 3);
  CHECK(s.auth_failures == 0);
  CHECK(s.replays_refused == 0);
  CHECK(transport::seal_stats(*f.a).sealed == 3);
}

TEST_CASE("sealed link: forgeries and replays from a stranger who heard the traffic are dropped", "[auth]") {
  Fabric f("sealed-forge");
  f.a->multicast(frame(5, 1, 1));
  REQUIRE(next(*f.b));
  auto captured = next(*f.stranger);
  REQUIRE(captured);

  SECTION("a replayed datagram") {
    f.stranger->multicast(captured->bytes);
    CHECK_FALSE(next(*f.b, 100));
    CHECK(transport::seal_stats(*f.b).replays_refused == 1);
    CHECK(transport::seal_stats(*f.b).auth_failures == 0);
  }
  SECTION("a captured datagram altered (its nonce changed, tag kept)") {
    auto forged = captured->bytes;
    forged[wire::kHeaderSize] ^= std::byte{1};
    f.stranger->multicast(forged);
    CHECK_FALSE(next(*f.b, 100));
    CHECK(transport::seal_stats(*f.b).auth_failures == 1);
  }
  SECTION("its counter moved on (a replay dressed as new)") {
    auto forged = captured->bytes;
    forged[forged.size() - auth::kTrailerBytes] = std::byte{2};
    f.stranger->multicast(forged);
    CHECK_FALSE(next(*f.b, 100));
    CHECK(transport::seal_stats(*f.b).auth_failures == 1);
  }
  SECTION("a frame with no tag, one too short for a tag, one sealed under another key") {
    f.stranger->multicast(frame(5, 1, 2));
    f.stranger->multicast(std::vector<std::byte>(10, std::byte{1}));
    auto other = frame(5, 1, 3);
    auth::seal(auth::ChannelKey(auth::generate_key(), kGroupId, 5, auth::kMulticastChannel), 1, 1, other);
    f.stranger->multicast(other);
    CHECK_FALSE(next(*f.b, 100));
    CHECK(transport::seal_stats(*f.b).auth_failures == 3);
  }
  SECTION("a captured datagram sent over a link, naming its real sender") {
    REQUIRE(f.stranger->unicast(2, captured->bytes));
    CHECK_FALSE(next(*f.b, 100));
    CHECK(transport::seal_stats(*f.b).auth_failures == 1);  // the link's peer is 9, not 1
  }
  SECTION("a captured datagram of a view too old to judge") {
    for (ViewId v = 6; v <= 8; ++v) {
      f.a->multicast(frame(v, 1, v));
      REQUIRE(next(*f.b));
    }
    f.stranger->multicast(captured->bytes);  // view 5: the newest is 8
    CHECK_FALSE(next(*f.b, 100));
    CHECK(transport::seal_stats(*f.b).replays_refused == 1);
  }
  // Whatever the stranger did, the members still hear each other.
  f.a->multicast(frame(9, 1, 99));
  auto got = next(*f.b);
  REQUIRE(got);
  CHECK(got->bytes == frame(9, 1, 99));
}

TEST_CASE("sealed link: datagrams a little out of order pass, each once", "[auth]") {
  Fabric f("sealed-order");
  std::vector<std::vector<std::byte>> heard;
  for (std::uint64_t i = 1; i <= 5; ++i) {
    f.a->multicast(frame(5, 1, i));
    REQUIRE(next(*f.b));
    auto h = next(*f.stranger);
    REQUIRE(h);
    heard.push_back(h->bytes);
  }
  // b missed nothing, so every one of these is a replay, in any order.
  for (auto it = heard.rbegin(); it != heard.rend(); ++it) f.stranger->multicast(*it);
  CHECK_FALSE(next(*f.b, 100));
  CHECK(transport::seal_stats(*f.b).replays_refused == 5);
}

TEST_CASE("sealed link: a frame of a view whose counters are forgotten is not sent", "[auth]") {
  Fabric f("sealed-stale");
  for (ViewId v = 5; v <= 8; ++v) f.a->multicast(frame(v, 1, v));  // keeps 6, 7, 8
  f.a->multicast(frame(5, 1, 100));
  CHECK(transport::seal_stats(*f.a).stale_unsent == 1);
  CHECK(transport::seal_stats(*f.a).sealed == 4);
}

namespace {

/// Message i of `sender`, which names i in its first byte (small and large
/// messages are numbered apart, so a delivery's seq does not tell i).
std::vector<std::byte> message(MemberId sender, std::uint32_t i, std::size_t size) {
  std::vector<std::byte> b(size);
  for (std::size_t k = 0; k < size; ++k) b[k] = static_cast<std::byte>((sender * 131 + i * 7 + k * 3) & 0xffU);
  b[0] = static_cast<std::byte>(i);
  return b;
}

}  // namespace

TEST_CASE("sealed link: a group with a key delivers small and large messages, under loss", "[auth]") {
  constexpr std::uint32_t kNodes = 3;
  constexpr std::uint32_t kMessages = 40;
  const auto cipher = GENERATE(KeyCipher::aes256gcm, KeyCipher::chacha20poly1305);
  if (!auth::cipher_available(cipher)) {
    WARN("this CPU has no AES-NI: the group under AES-256-GCM is not run here");
    return;
  }
  CAPTURE(auth::cipher_name(cipher));
  const auto key = auth::generate_key();
  Config cfg;
  cfg.fabric = "sealed-api-" + auth::cipher_name(cipher);
  cfg.group_size = kNodes;
  cfg.key = key.bytes;
  cfg.key_cipher = cipher;
  cfg.faults.datagram_loss = 0.05;
  cfg.faults.datagram_duplicate = 0.02;
  auto protocol = default_protocol(cfg);
  CHECK(protocol.mtu == ProtocolConfig{}.mtu - kKeyTrailerBytes);  // room for the tags
  protocol.initial_hop_rtt_ns = 200'000;
  protocol.min_timeout_ns = 2'000'000;
  cfg.protocol = protocol;
  std::vector<std::unique_ptr<Node>> nodes;
  for (std::uint32_t i = 0; i < kNodes; ++i) {
    cfg.faults.seed = 300 + i;
    nodes.push_back(std::make_unique<Node>(cfg));
  }
  std::vector<Group> groups(kNodes);
  std::vector<std::thread> joiners;
  for (std::uint32_t i = 0; i < kNodes; ++i) joiners.emplace_back([&, i] { groups[i] = nodes[i]->join("sealed"); });
  for (auto& t : joiners) t.join();

  const std::size_t large = protocol.max_small_message * 3 + 17;
  auto size_of = [&](std::uint32_t m) { return m % 10 == 3 ? large : 1 + (m * 97) % 3000; };
  std::mutex mu;
  std::map<MemberId, std::uint32_t> bad, total;
  for (std::uint32_t i = 0; i < kNodes; ++i) {
    groups[i].on_deliver([&, i](const Delivery& d) {
      const auto n = std::to_integer<std::uint32_t>(d.bytes[0]);
      const auto want = message(d.sender, n, size_of(n));
      std::lock_guard lock(mu);
      if (!std::equal(d.bytes.begin(), d.bytes.end(), want.begin(), want.end())) ++bad[i];
      ++total[i];
    });
  }
  std::vector<std::thread> senders;
  for (std::uint32_t i = 0; i < kNodes; ++i) {
    senders.emplace_back([&, i] {
      for (std::uint32_t m = 0; m < kMessages; ++m) groups[i].broadcast(message(groups[i].self(), m, size_of(m))).get();
    });
  }
  for (auto& t : senders) t.join();
  for (int wait = 0; wait < 500; ++wait) {
    std::uint64_t all = 0;
    {
      std::lock_guard lock(mu);
      for (auto& [m, n] : total) all += n;
    }
    if (all == std::uint64_t{kNodes} * kNodes * kMessages) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (std::uint32_t i = 0; i < kNodes; ++i) {
    INFO("member " << i);
    std::lock_guard lock(mu);
    CHECK(bad[i] == 0);
    CHECK(total[i] == kNodes * kMessages);
    const auto st = groups[i].stats();
    CHECK(st.auth_failures == 0);
    CHECK(st.large_delivered > 0);
    CHECK(st.faults.dropped > 0);  // the loss was there, and was repaired through sealed frames
  }
}

TEST_CASE("sealed link: where the Node finds its key, and what it refuses", "[auth]") {
  const std::string path = "/tmp/hmcast-sealed-test-" + std::to_string(::getpid()) + ".key";
  std::remove(path.c_str());
  const auto key = auth::generate_key();
  auth::write_key_file(path, key);
  Config cfg;
  cfg.fabric = "sealed-config";

  cfg.key_file = path;
  CHECK(detail::group_key_of(cfg) == key);
  CHECK(default_protocol(cfg).mtu == ProtocolConfig{}.mtu - kKeyTrailerBytes);  // tags have room
  cfg.key = key.bytes;
  CHECK_THROWS_WITH(Node(cfg), Catch::Contains("both set"));
  cfg.key.reset();

  cfg.key_file.clear();
  ::setenv("HMCAST_KEY_FILE", path.c_str(), 1);
  CHECK(detail::group_key_of(cfg) == key);
  CHECK(default_protocol(cfg).mtu == ProtocolConfig{}.mtu - kKeyTrailerBytes);
  ::chmod(path.c_str(), 0644);
  CHECK_THROWS_WITH(Node(cfg), Catch::Contains("chmod 600"));
  ::unsetenv("HMCAST_KEY_FILE");
  CHECK_FALSE(detail::group_key_of(cfg));
  CHECK(default_protocol(cfg).mtu == ProtocolConfig{}.mtu);
  std::remove(path.c_str());
}

namespace {

/// The transport under a SealedLink: keeps what it is given to multicast, and
/// where its bytes lay.
class RecordingLink final : public Link {
 public:
  [[nodiscard]] MemberId id() const override { return 1; }
  void multicast(std::span<const std::byte> bytes) override { frames.emplace_back(bytes.begin(), bytes.end()); }
  void multicast_owned(std::vector<std::byte>&& frame) override {
    owned_data.push_back(frame.data());
    frames.push_back(std::move(frame));
  }
  bool unicast(MemberId /*to*/, std::vector<std::byte> frame) override {
    frames.push_back(std::move(frame));
    return true;
  }
  void add_peer(MemberId /*id*/, const std::string& /*host*/, std::uint16_t /*port*/) override {}
  std::optional<Inbound> wait(std::chrono::steady_clock::time_point /*deadline*/) override { return std::nullopt; }
  void wake() override {}
  void close() override {}
  void set_sole_poller(bool sole) override { sole_calls.push_back(sole); }

  std::vector<std::vector<std::byte>> frames;
  std::vector<bool> sole_calls;
  std::vector<const std::byte*> owned_data;
};

}  // namespace

TEST_CASE("sealed link: a frame wire::encode() made is sealed where it lies", "[auth]") {
  const auto key = auth::generate_key();
  auto inner = std::make_unique<RecordingLink>();
  auto* rec = inner.get();
  transport::SealedLink sealed(std::move(inner), key, kGroupId);

  auto made = frame(5, 1, 42);
  REQUIRE(made.capacity() >= made.size() + wire::kTailRoom);  // encode() leaves the trailer's room
  const auto plain = made;
  const std::byte* where = made.data();
  sealed.multicast_owned(std::move(made));
  REQUIRE(rec->owned_data.size() == 1);
  CHECK(rec->owned_data[0] == where);  // no copy into a larger buffer
  REQUIRE(rec->frames.size() == 1);
  REQUIRE(rec->frames[0].size() == plain.size() + auth::kTrailerBytes);
  CHECK(std::equal(plain.begin(), plain.end(), rec->frames[0].begin()));

  // A frame given as a span (the caller keeps it) is copied, then sealed the same way.
  sealed.multicast(plain);
  REQUIRE(rec->frames.size() == 2);
  CHECK(rec->frames[1].size() == plain.size() + auth::kTrailerBytes);
  // Both are genuine, with counters 1 and 2 on the multicast channel of view 5.
  const auth::ChannelKey ck(key, kGroupId, 5, auth::kMulticastChannel);
  const auto first = auth::open(ck, 1, rec->frames[0]);
  const auto second = auth::open(ck, 1, rec->frames[1]);
  REQUIRE(first);
  REQUIRE(second);
  CHECK(first->counter == 1);
  CHECK(second->counter == 2);
  CHECK(first->frame_size == plain.size());

  // Unicast frames from encode() are sealed in place too.
  auto uni = frame(5, 1, 43);
  const std::byte* uni_at = uni.data();
  REQUIRE(sealed.unicast(2, std::move(uni)));
  REQUIRE(rec->frames.size() == 3);
  CHECK(rec->frames[2].data() == uni_at);
}

TEST_CASE("sealed link: each view and channel keeps its own counter, however frames alternate", "[auth]") {
  const auto key = auth::generate_key();
  auto inner = std::make_unique<RecordingLink>();
  auto* rec = inner.get();
  transport::SealedLink sealed(std::move(inner), key, kGroupId);
  // Channels 2 and 10 share a slot of the link's lookup hints (kHints is 8), and views
  // 7 and 8 alternate: every frame must still take its own channel's next counter.
  struct Sent {
    ViewId view;
    std::uint32_t channel;
    std::uint64_t counter;
  };
  const std::vector<Sent> plan = {{7, 0, 1}, {7, 2, 1}, {7, 10, 1}, {8, 2, 1}, {7, 2, 2}, {8, 10, 1},
                                  {7, 10, 2}, {8, 0, 1}, {7, 0, 2}, {8, 2, 2}, {7, 2, 3}, {8, 10, 2}};
  for (const auto& s : plan) {
    auto f = frame(s.view, 1, s.counter);
    if (s.channel == auth::kMulticastChannel)
      sealed.multicast_owned(std::move(f));
    else
      REQUIRE(sealed.unicast(s.channel, std::move(f)));
  }
  REQUIRE(rec->frames.size() == plan.size());
  for (std::size_t i = 0; i < plan.size(); ++i) {
    const auth::ChannelKey ck(key, kGroupId, plan[i].view, plan[i].channel);
    const auto opened = auth::open(ck, 1, rec->frames[i]);
    REQUIRE(opened);
    CHECK(opened->counter == plan[i].counter);
  }
}

TEST_CASE("sealed link: a receiver judges frames of the views it keeps apart, as they alternate", "[auth]") {
  Fabric f("sealed-views");
  // a multicasts in views 5 to 8 and, while they are kept, in older ones again; the
  // stranger hears each and replays them all afterwards.
  std::vector<std::vector<std::byte>> heard;
  const std::vector<ViewId> views = {5, 6, 5, 7, 6, 7, 8, 6, 7, 8};
  for (std::size_t i = 0; i < views.size(); ++i) {
    f.a->multicast(frame(views[i], 1, 100 + i));
    auto got = next(*f.b);
    REQUIRE(got);
    CHECK(got->bytes == frame(views[i], 1, 100 + i));
    auto h = next(*f.stranger);
    REQUIRE(h);
    heard.push_back(h->bytes);
  }
  CHECK(transport::seal_stats(*f.b).opened == views.size());
  for (const auto& h : heard) f.stranger->multicast(h);
  CHECK_FALSE(next(*f.b, 100));
  // Views 6, 7 and 8 are kept (replays refused by their windows), view 5 is too old:
  // refused either way, and nothing passes.
  CHECK(transport::seal_stats(*f.b).replays_refused == views.size());
  CHECK(transport::seal_stats(*f.b).auth_failures == 0);
}

TEST_CASE("sealed link: direct datagrams are sealed on a channel of their own, and go by link where there are none",
          "[auth]") {
  const auth::GroupKey key = auth::generate_key();
  // Keys of a member's direct channel are not those of its link (a datagram may overtake
  // the link's frames by more than a replay window), nor of any member's link.
  CHECK(auth::ChannelKey(key, kGroupId, 5, auth::kDirectChannel + 2).raw() !=
        auth::ChannelKey(key, kGroupId, 5, 2).raw());
  CHECK(auth::ChannelKey(key, kGroupId, 5, auth::kDirectChannel + 2).raw() !=
        auth::ChannelKey(key, kGroupId, 5, auth::kDirectChannel + 3).raw());

  SECTION("in process: no datagrams to one member, so a sealed link frame") {
    Fabric f("sealed-direct");
    CHECK(f.a->direct_datagram_limit(2) == 0);
    f.a->unicast_datagram(2, frame(5, 1, 60));
    auto got = next(*f.b);
    REQUIRE(got);
    CHECK_FALSE(got->datagram);
    CHECK(got->bytes == frame(5, 1, 60));
    CHECK(transport::seal_stats(*f.b).auth_failures == 0);
  }
  SECTION("on sockets: datagrams to one member, interleaved with link frames, each once") {
    SocketOptions options;
    const std::uint16_t port = static_cast<std::uint16_t>(18000 + ::getpid() % 1000);
    constexpr std::uint32_t kAddress = 0xEFFF4D4FU;  // 239.255.77.79
    auto a = transport::make_socket_link(1, kAddress, port, options, {}, &key, kGroupId);
    auto b = transport::make_socket_link(2, kAddress, port, options, {}, &key, kGroupId);
    a->add_peer(2, "127.0.0.1", transport::listening_port(*b));
    b->add_peer(1, "127.0.0.1", transport::listening_port(*a));
    CHECK(a->direct_datagram_limit(2) == options.datagram_size() - auth::kTrailerBytes);
    constexpr std::uint64_t kEach = 40;
    for (std::uint64_t i = 1; i <= kEach; ++i) {
      a->unicast_datagram(2, frame(5, 1, i));
      REQUIRE(a->unicast(2, frame(5, 1, 1000 + i)));
    }
    std::set<std::uint64_t> direct, linked;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while ((direct.size() < kEach || linked.size() < kEach) && std::chrono::steady_clock::now() < until) {
      auto got = next(*b, 50);
      (void)next(*a, 0);  // a's links make progress too
      if (!got) continue;
      const auto p = wire::decode(got->bytes);
      REQUIRE(p.ok());
      const std::uint64_t nonce = std::get<wire::McastProbe>(p.packet.body).nonce;
      CHECK(got->from == 1);
      if (got->direct) {
        CHECK(got->datagram);
        direct.insert(nonce);
      } else {
        CHECK_FALSE(got->datagram);
        linked.insert(nonce);
      }
    }
    CHECK(direct.size() == kEach);  // loopback with room to spare loses none
    CHECK(linked.size() == kEach);
    CHECK(*direct.rbegin() == kEach);
    CHECK(*linked.begin() == 1001);
    const auto s = transport::seal_stats(*b);
    CHECK(s.auth_failures == 0);
    CHECK(s.replays_refused == 0);
    CHECK(s.opened == 2 * kEach);
  }
}

TEST_CASE("sealed link: whether its waiter polls alone reaches the transport under it", "[auth]") {
  // A borrower that polls alone may keep its CPU (Link::set_sole_poller); a layer in
  // between must not swallow that.
  auto inner = std::make_unique<RecordingLink>();
  auto* rec = inner.get();
  transport::SealedLink sealed(std::move(inner), auth::generate_key(), kGroupId);
  sealed.set_sole_poller(true);
  sealed.set_sole_poller(false);
  CHECK(rec->sole_calls == std::vector<bool>{true, false});
}
