// The socket transport (src/transport/socket): UDP multicast datagrams on loopback
// and TCP links, three endpoints in one process. The group port depends on the
// process id (17000 + pid % 1000) and each test case uses a group id of its own,
// so concurrent test processes do not see each other's datagrams as theirs.
// Every wait is bounded; the whole file runs in a few seconds.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "transport/faulty/faulty_link.hpp"
#include "transport/links.hpp"
#include "core/wire.hpp"
#include "hmcast/error.hpp"
#include "transport/socket/framing.hpp"
#include "transport/socket/socket_transport.hpp"

namespace sk = hmcast::socket;
namespace w = hmcast::wire;
using Bytes = std::vector<std::byte>;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

std::uint16_t test_port() { return static_cast<std::uint16_t>(17000 + ::getpid() % 1000); }

hmcast::GroupId test_group(std::uint64_t which) {
  return (static_cast<std::uint64_t>(::getpid()) << 16) ^ (which * 0x9e3779b97f4a7c15ULL);
}

sk::SocketConfig config() {
  sk::SocketConfig c;
  c.group_port = test_port();
  return c;
}

Bytes pattern(std::size_t n, std::uint32_t salt) {
  Bytes b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::byte>((i * 131U + salt * 7U + (i >> 9U)) & 0xffU);
  return b;
}

/// A real hmcast datagram: a `stable` packet of `group` from `src`, numbered by `seq`.
Bytes datagram(hmcast::GroupId group, hmcast::MemberId src, hmcast::Seq seq) {
  return w::encode(w::Header{w::Type::stable, group, 1, src}, w::Stable{src, seq, seq});
}

/// The seq of a datagram of ours (`group`), or 0 for anything else.
hmcast::Seq seq_of(const sk::Inbound& in, hmcast::GroupId group) {
  auto r = w::decode(in.bytes);
  if (!r.ok() || r.packet.header.group != group) return 0;
  const auto* s = std::get_if<w::Stable>(&r.packet.body);
  return s == nullptr ? 0 : s->highest;
}

/// Drives endpoints from this thread (as their progress threads would) until
/// `done()` holds or `timeout` passes; what each receives goes to `got[i]`.
bool pump(const std::vector<sk::Endpoint*>& eps, std::vector<std::vector<sk::Inbound>>& got,
          const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  got.resize(eps.size());
  const auto end = Clock::now() + timeout;
  for (;;) {
    if (done()) return true;
    if (Clock::now() >= end) return false;
    for (std::size_t i = 0; i < eps.size(); ++i)
      while (auto in = eps[i]->wait(Clock::now() + 200us)) got[i].push_back(std::move(*in));
  }
}

std::vector<hmcast::Seq> seqs(const std::vector<sk::Inbound>& got, hmcast::GroupId group) {
  std::vector<hmcast::Seq> s;
  for (const auto& in : got)
    if (in.datagram && seq_of(in, group) != 0) s.push_back(seq_of(in, group));
  return s;
}

std::vector<const sk::Inbound*> frames_from(const std::vector<sk::Inbound>& got, hmcast::MemberId from) {
  std::vector<const sk::Inbound*> f;
  for (const auto& in : got)
    if (!in.datagram && in.from == from) f.push_back(&in);
  return f;
}

void connect_all(const std::vector<sk::Endpoint*>& eps) {
  for (auto* a : eps)
    for (auto* b : eps)
      if (a != b) a->add_peer(b->id(), "127.0.0.1", b->tcp_port());
}

/// A plain TCP client to 127.0.0.1:port (blocking, with a 50 ms receive timeout).
int raw_client(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  timeval tv{0, 50'000};
  REQUIRE(::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  REQUIRE(::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr) == 1);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  return fd;
}

void send_all(int fd, const Bytes& b) {
  std::size_t off = 0;
  while (off < b.size()) {
    const ssize_t n = ::send(fd, b.data() + off, b.size() - off, MSG_NOSIGNAL);
    REQUIRE(n > 0);
    off += static_cast<std::size_t>(n);
  }
}

/// Pumps `ep` until the raw client's connection is closed by it (EOF or reset).
bool dropped_by(sk::Endpoint& ep, int fd, std::chrono::milliseconds timeout) {
  const auto end = Clock::now() + timeout;
  while (Clock::now() < end) {
    while (ep.wait(Clock::now() + 1ms)) {
    }
    std::byte b{};
    const ssize_t n = ::recv(fd, &b, 1, 0);  // 50 ms timeout
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
  }
  return false;
}

/// Equal bytes (compared without Catch printing megabytes of them on failure).
bool same(const Bytes& got, const Bytes& want) {
  if (got == want) return true;
  std::size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  UNSCOPED_INFO("sizes " << got.size() << " and " << want.size() << ", first difference at byte " << i);
  return false;
}

Bytes frame(const Bytes& body) {
  Bytes b;
  const auto p = sk::encode_length(static_cast<std::uint32_t>(body.size()));
  b.insert(b.end(), p.begin(), p.end());
  b.insert(b.end(), body.begin(), body.end());
  return b;
}

/// Frames of these sizes back to back, frame i's body pattern(sizes[i], i).
Bytes frames(const std::vector<std::size_t>& sizes) {
  Bytes stream;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const auto f = frame(pattern(sizes[i], static_cast<std::uint32_t>(i)));
    stream.insert(stream.end(), f.begin(), f.end());
  }
  return stream;
}

}  // namespace

TEST_CASE("socket: frame reader cuts any byte stream into the frames written, and refuses long lengths",
          "[socket]") {
  const std::vector<std::size_t> sizes{0, 1, 0, 300, 70'000, 5, 0};
  const Bytes stream = frames(sizes);
  for (const std::size_t chunk : {std::size_t{1}, std::size_t{3}, std::size_t{4}, std::size_t{4096}, stream.size()}) {
    INFO("chunk " << chunk);
    sk::FrameReader r(100'000);
    std::vector<Bytes> out;
    bool ok = true;
    for (std::size_t off = 0; off < stream.size(); off += chunk) {
      const auto piece = std::span<const std::byte>(stream).subspan(off, std::min(chunk, stream.size() - off));
      ok = r.feed(piece, [&](Bytes&& b) {
        out.push_back(std::move(b));
        return true;
      }) && ok;
    }
    REQUIRE(ok);
    REQUIRE(out.size() == sizes.size());
    for (std::size_t i = 0; i < sizes.size(); ++i) CHECK(same(out[i], pattern(sizes[i], static_cast<std::uint32_t>(i))));
    CHECK(r.partial() == 0);
  }
  sk::FrameReader r(100);
  const Bytes bad{std::byte{0xff}, std::byte{0xff}, std::byte{0xff}, std::byte{0xff}};
  CHECK_FALSE(r.feed(bad, [](Bytes&&) { return true; }));
  CHECK_FALSE(r.feed(frame({}), [](Bytes&&) { return true; }));  // stays refused
  const auto hello = sk::encode_hello(0xdeadbeef);
  CHECK(sk::decode_hello(hello) == 0xdeadbeefU);
  auto wrong = hello;
  wrong[3] = std::byte{2};
  CHECK_FALSE(sk::decode_hello(wrong).has_value());
}

TEST_CASE("socket: frame reader places the tail of a long frame where the placer says", "[socket][placement]") {
  // Frames of 10 (under the head), 5000 (placed), 5000 (the placer declines) and 12 bytes.
  constexpr std::size_t kHead = 16;
  const std::vector<std::size_t> sizes{10, 5000, 5000, 12};
  const Bytes stream = frames(sizes);
  for (const std::size_t chunk : {std::size_t{1}, std::size_t{7}, std::size_t{16}, std::size_t{4096}, stream.size()}) {
    for (const bool direct : {false, true}) {
      INFO("chunk " << chunk << " direct " << direct);
      sk::FrameReader r(100'000);
      auto dest = std::make_shared<Bytes>(6000, std::byte{0});
      int asked = 0;
      r.set_placer(kHead, [&](std::span<const std::byte> head, std::size_t body) -> std::optional<sk::Placement> {
        CHECK(head.size() == kHead);
        ++asked;
        if (asked != 1) return std::nullopt;  // only the first long frame is placed
        return sk::Placement{std::span(*dest).subspan(100, body - kHead), dest};
      });
      std::vector<std::pair<Bytes, bool>> out;
      const auto on_frame = [&](Bytes&& b) {
        out.emplace_back(std::move(b), r.placed());
        return true;
      };
      bool ok = true;
      for (std::size_t off = 0; off < stream.size();) {
        auto piece = std::span<const std::byte>(stream).subspan(off, std::min(chunk, stream.size() - off));
        if (direct && !r.direct().empty()) {
          // What the socket does: read straight into the destination.
          const auto into = r.direct();
          const std::size_t n = std::min(into.size(), piece.size());
          std::copy_n(piece.begin(), n, into.begin());
          ok = r.direct_filled(n, on_frame) && ok;
          off += n;
          continue;
        }
        ok = r.feed(piece, on_frame) && ok;
        off += piece.size();
      }
      REQUIRE(ok);
      REQUIRE(out.size() == 4);
      CHECK(asked == 2);
      const auto big = pattern(5000, 1);
      CHECK(same(out[0].first, pattern(10, 0)));
      CHECK_FALSE(out[0].second);
      CHECK(out[1].second);  // handed on as the head alone...
      CHECK(same(out[1].first, Bytes(big.begin(), big.begin() + kHead)));
      CHECK(std::equal(big.begin() + kHead, big.end(), dest->begin() + 100));  // ...the tail in place
      CHECK((*dest)[99] == std::byte{0});
      CHECK((*dest)[100 + 5000 - kHead] == std::byte{0});
      CHECK_FALSE(out[2].second);
      CHECK(same(out[2].first, pattern(5000, 2)));
      CHECK(same(out[3].first, pattern(12, 3)));
      CHECK(r.partial() == 0);
    }
  }
}

TEST_CASE("socket: a reader fed no more than until_head() gets every placed tail straight into its place",
          "[socket][placement]") {
  // What Endpoint::read_connection does while blocks come: frames of 5000 (placed),
  // 30 (a credit between blocks, under the head), 5000 (placed) and 5000 (declined).
  constexpr std::size_t kHead = 16;
  const std::vector<std::size_t> sizes{5000, 30, 5000, 5000};
  const Bytes stream = frames(sizes);
  sk::FrameReader r(100'000);
  CHECK(r.until_head() == 0);  // no placer: a caller reads as much as it likes
  auto dest = std::make_shared<Bytes>(10'000, std::byte{0});
  int asked = 0;
  r.set_placer(kHead, [&](std::span<const std::byte>, std::size_t body) -> std::optional<sk::Placement> {
    if (body < 1000) return std::nullopt;  // not a block (Endpoint's placer looks at the type)
    ++asked;
    if (asked == 3) return std::nullopt;
    return sk::Placement{std::span(*dest).subspan(asked == 1 ? 0 : 5000, body - kHead), dest};
  });
  std::vector<std::pair<Bytes, bool>> out;
  std::size_t copied = 0;
  const auto on_frame = [&](Bytes&& b) {
    out.emplace_back(std::move(b), r.placed());
    copied += r.placed_copied();
    return true;
  };
  std::size_t fed = 0;  // bytes that went through feed(), i.e. through the caller's own buffer
  for (std::size_t off = 0; off < stream.size();) {
    const auto rest = std::span<const std::byte>(stream).subspan(off);
    if (!r.direct().empty()) {
      const auto into = r.direct();
      const std::size_t n = std::min(into.size(), rest.size());
      std::copy_n(rest.begin(), n, into.begin());
      REQUIRE(r.direct_filled(n, on_frame));
      off += n;
      continue;
    }
    const std::size_t limit = r.until_head();
    REQUIRE(limit > 0);  // a placer is set and no tail is being placed
    const std::size_t n = std::min(limit, rest.size());
    REQUIRE(r.feed(rest.first(n), on_frame));
    fed += n;
    off += n;
  }
  REQUIRE(out.size() == 4);
  CHECK(asked == 3);
  CHECK(out[0].second);
  CHECK_FALSE(out[1].second);
  CHECK(out[2].second);
  CHECK_FALSE(out[3].second);
  CHECK(same(out[1].first, pattern(30, 1)));
  CHECK(same(out[3].first, pattern(5000, 3)));
  const auto a = pattern(5000, 0), b = pattern(5000, 2);
  CHECK(std::equal(a.begin() + kHead, a.end(), dest->begin()));
  CHECK(std::equal(b.begin() + kHead, b.end(), dest->begin() + 5000));
  // Only prefixes and heads went through feed() for the placed frames; the credit and
  // the declined frame went whole.
  CHECK(fed == stream.size() - 2 * (5000 - kHead));
  CHECK(copied == 0);
  CHECK(r.partial() == 0);
}

TEST_CASE("socket: a reader waits at a head its placer declines for now, and places it when asked again",
          "[socket][placement]") {
  // An announcement (30 bytes) and a block (5000) right behind it: the block's place
  // exists only once the announcement is handled, which happens after the reader
  // handed it on. Fed no more than until_head(), the reader stops at the block's head
  // while the announcement waits, and the tail then lands in place, not in a copy.
  constexpr std::size_t kHead = 16;
  const std::vector<std::size_t> sizes{30, 5000, 5000};
  const Bytes stream = frames(sizes);
  sk::FrameReader r(100'000);
  auto dest = std::make_shared<Bytes>(5000, std::byte{0});
  std::vector<Bytes> unhandled;  // handed on, not yet handled (the endpoint's inbox)
  bool announced = false;        // the announcement was handled: the block has a place
  int asked = 0;
  bool may_wait = true;
  r.set_placer(
      kHead,
      [&](std::span<const std::byte>, std::size_t body) -> std::optional<sk::Placement> {
        if (body < 1000) return std::nullopt;
        ++asked;
        if (!announced) return std::nullopt;
        return sk::Placement{std::span(*dest).first(body - kHead), dest};
      },
      [&] { return may_wait && !unhandled.empty(); });
  std::vector<std::pair<Bytes, bool>> out;
  const auto on_frame = [&](Bytes&& b) {
    out.emplace_back(b, r.placed());
    unhandled.push_back(std::move(b));
    return true;
  };
  std::size_t off = 0;
  const auto read_some = [&] {
    while (off < stream.size() && !r.waiting()) {
      const auto rest = std::span<const std::byte>(stream).subspan(off);
      if (!r.direct().empty()) {
        const std::size_t n = std::min(r.direct().size(), rest.size());
        std::copy_n(rest.begin(), n, r.direct().begin());
        REQUIRE(r.direct_filled(n, on_frame));
        off += n;
        continue;
      }
      const std::size_t n = std::min(r.until_head(), rest.size());
      REQUIRE(r.feed(rest.first(n), on_frame));
      off += n;
    }
  };
  read_some();
  REQUIRE(r.waiting());
  CHECK(asked == 1);
  REQUIRE(out.size() == 1);  // the announcement, handed on
  CHECK(off == 4 + 30 + 4 + kHead);  // and nothing of the block past its head
  // The announcement is handled; asked again, the placer names the place.
  unhandled.clear();
  announced = true;
  r.ask_again();
  CHECK_FALSE(r.waiting());
  CHECK(asked == 2);
  // The third frame: declined for good once nothing waits to be handled (no waiting).
  announced = false;
  unhandled.clear();
  may_wait = false;
  read_some();
  REQUIRE(out.size() == 3);
  CHECK(out[1].second);
  const auto block = pattern(5000, 1);
  CHECK(std::equal(block.begin() + kHead, block.end(), dest->begin()));
  CHECK_FALSE(out[2].second);
  CHECK(same(out[2].first, pattern(5000, 2)));
  CHECK(asked == 3);
  CHECK(r.partial() == 0);
}

TEST_CASE("socket: block payloads on a link land in their place with no copy through the link's buffer",
          "[socket][placement]") {
  // Block frames back to back on a new link (the first read with its hello), a small
  // frame between two of them (a credit): every block is placed, and only the first
  // one's payload, read before the link knew blocks were coming, is copied.
  sk::Endpoint a(1, config()), b(2, config());
  connect_all({&a, &b});
  const hmcast::GroupId group = test_group(41);
  constexpr std::size_t kLen = 256 * 1024, kBlocks = 8;
  auto src = std::make_shared<Bytes>(pattern(kLen * kBlocks, 5));
  auto dest = std::make_shared<Bytes>(kLen * kBlocks, std::byte{0});
  std::size_t asked = 0;  // one link: blocks come in the order sent
  b.set_block_placer([&](hmcast::MemberId from, std::span<const std::byte> head, std::size_t size)
                         -> std::optional<hmcast::transport::Placement> {
    CHECK(from == 1U);
    CHECK(head.size() == w::kBlockHeadSize);
    CHECK(size == w::kBlockHeadSize + kLen);
    return hmcast::transport::Placement{std::span(*dest).subspan(kLen * asked++, kLen), dest};
  });
  for (std::size_t i = 0; i < kBlocks; ++i) {
    const w::Header h{w::Type::block, group, 1, 1};
    const Bytes head = w::encode(h, w::Block{1, 1, static_cast<std::uint32_t>(i), i * kLen, kLen, {}});
    REQUIRE(head.size() == w::kBlockHeadSize);
    REQUIRE(a.unicast(2, head, std::span<const std::byte>(*src).subspan(i * kLen, kLen), src));
    if (i == 3) REQUIRE(a.unicast(2, pattern(40, 3)));
  }
  std::vector<std::vector<sk::Inbound>> got;
  REQUIRE(pump({&a, &b}, got, [&] { return frames_from(got[1], 1).size() >= kBlocks + 1; }, 4000ms));
  CHECK(asked == kBlocks);
  for (std::size_t i = 0; i < kBlocks; ++i) {
    INFO("block " << i);
    CHECK(std::equal(src->begin() + static_cast<std::ptrdiff_t>(i * kLen),
                     src->begin() + static_cast<std::ptrdiff_t>((i + 1) * kLen), dest->begin() + static_cast<std::ptrdiff_t>(i * kLen)));
  }
  const auto st = b.stats();
  CHECK(st.bytes_placed == kLen * kBlocks);
  CHECK(st.bytes_placed_copied <= kLen);
}

TEST_CASE("socket: a datagram reaches every other endpoint on the host, and not its sender", "[socket]") {
  const auto group = test_group(1);
  sk::Endpoint a(1, config()), b(2, config()), c(3, config());
  std::vector<std::vector<sk::Inbound>> got;
  constexpr hmcast::Seq kCount = 20;
  for (hmcast::Seq s = 1; s <= kCount; ++s) a.multicast(datagram(group, 1, s));
  const bool arrived = pump({&a, &b, &c}, got, [&] {
    return seqs(got[1], group).size() >= kCount && seqs(got[2], group).size() >= kCount;
  }, 2000ms);
  pump({&a, &b, &c}, got, [] { return false; }, 100ms);  // time for a stray copy to show up
  INFO("if nothing arrives, check `ip route` (multicast on lo may need: ip route add 224.0.0.0/4 dev lo)");
  REQUIRE(arrived);
  std::vector<hmcast::Seq> want(kCount);
  for (hmcast::Seq s = 1; s <= kCount; ++s) want[s - 1] = s;
  CHECK(seqs(got[0], group).empty());  // not its own
  // The kernel drops them (a socket filter on the sender's own id); failing that, reading does.
  if (a.drops_own_in_kernel()) CHECK(a.stats().datagrams_own == 0);
  else CHECK(a.stats().datagrams_own >= kCount);
  CHECK(a.drops_own_in_kernel());  // Linux has had socket filters since 2.2
  for (std::size_t i : {std::size_t{1}, std::size_t{2}}) {
    auto s = seqs(got[i], group);
    std::sort(s.begin(), s.end());
    CHECK(s == want);  // each exactly once
    for (const auto& in : got[i])
      if (seq_of(in, group) != 0) CHECK(in.from == 1U);
  }
  CHECK(a.stats().datagrams_sent == kCount);

  // Over the MTU: refused at the sender, with the fix in the message.
  Bytes big(a.mtu() + 1);
  CHECK_THROWS_AS(a.multicast(big), hmcast::Error);
  CHECK_THROWS_WITH(a.multicast(big), Catch::Contains("ProtocolConfig::mtu"));
}

TEST_CASE("socket: a datagram given in two parts arrives as one; in two parts over the MTU it is refused",
          "[socket]") {
  const auto group = test_group(31);
  sk::Endpoint a(1, config()), b(2, config());
  constexpr hmcast::Seq kCount = 6;
  std::vector<Bytes> sent;
  for (hmcast::Seq s = 1; s <= kCount; ++s) {
    sent.push_back(datagram(group, 1, s));
    sent.back().resize(sent.back().size() + 1000 * s, std::byte{static_cast<unsigned char>(s)});
    const std::size_t cut = s == 1 ? 0 : s == kCount ? sent.back().size() : 30 + s;  // a part may be empty
    a.multicast(std::span(sent.back()).first(cut), std::span(sent.back()).subspan(cut));
  }
  // Each arrives whole, or not at all: compared byte for byte with what was sent.
  auto ours = [&](const std::vector<sk::Inbound>& ins) {
    std::vector<Bytes> found;
    for (const auto& in : ins)
      if (std::find(sent.begin(), sent.end(), in.bytes) != sent.end()) found.push_back(in.bytes);
    std::sort(found.begin(), found.end());
    return found;
  };
  std::vector<std::vector<sk::Inbound>> got;
  INFO("if nothing arrives, check `ip route` (multicast on lo may need: ip route add 224.0.0.0/4 dev lo)");
  REQUIRE(pump({&a, &b}, got, [&] { return ours(got[1]).size() >= kCount; }, 2000ms));
  const std::vector<Bytes> arrived = ours(got[1]);
  std::sort(sent.begin(), sent.end());
  CHECK(arrived == sent);
  Bytes half(a.mtu() / 2 + 1);
  CHECK_THROWS_WITH(a.multicast(half, half), Catch::Contains("ProtocolConfig::mtu"));
}

TEST_CASE("socket: a tail lent for the call only (no keeper) is copied when it must wait, and arrives as it was",
          "[socket][lent]") {
  // 8 MB cannot all go into the kernel at once, and b reads nothing until the
  // sender's buffer has been overwritten: what reaches b is the bytes as lent.
  sk::Endpoint a(1, config()), b(2, config());
  connect_all({&a, &b});
  const std::vector<std::size_t> sizes{8U << 20, 1000};
  std::vector<Bytes> want;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    Bytes lent = pattern(sizes[i], static_cast<std::uint32_t>(20 + i));
    want.push_back(lent);
    REQUIRE(a.unicast(2, Bytes{std::byte{7}}, lent, nullptr));
    std::fill(lent.begin(), lent.end(), std::byte{0xEE});  // the lender reuses its buffer at once
  }
  CHECK(a.stats().lent_tails_copied == 2);  // the 8 MB frame waited for b, the small one behind it
  std::vector<std::vector<sk::Inbound>> got;
  REQUIRE(pump({&a, &b}, got, [&] { return frames_from(got[1], 1).size() >= sizes.size(); }, 4000ms));
  const auto frames = frames_from(got[1], 1);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    INFO("frame " << i);
    REQUIRE(frames[i]->bytes.size() == 1 + sizes[i]);
    CHECK(frames[i]->bytes[0] == std::byte{7});
    CHECK(std::equal(want[i].begin(), want[i].end(), frames[i]->bytes.begin() + 1));
  }
}

TEST_CASE("socket: unicast frames of 0 B, 1 B, 100 KB and 5 MB arrive intact and in order", "[socket]") {
  sk::Endpoint a(1, config()), b(2, config()), c(3, config());
  connect_all({&a, &b, &c});
  const std::vector<std::size_t> sizes{0, 1, 100 * 1024, 5 * 1024 * 1024, 1, 0, 100 * 1024, 7};
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    REQUIRE(a.unicast(2, pattern(sizes[i], static_cast<std::uint32_t>(i))));
    REQUIRE(c.unicast(2, pattern(sizes[i], static_cast<std::uint32_t>(100 + i))));  // a second stream, interleaved
  }
  REQUIRE(b.unicast(1, pattern(10, 7)));
  std::vector<std::vector<sk::Inbound>> got;
  const bool arrived = pump({&a, &b, &c}, got, [&] {
    return frames_from(got[1], 1).size() >= sizes.size() && frames_from(got[1], 3).size() >= sizes.size() &&
           !frames_from(got[0], 2).empty();
  }, 4000ms);
  REQUIRE(arrived);
  const auto from_a = frames_from(got[1], 1);
  const auto from_c = frames_from(got[1], 3);
  REQUIRE(from_a.size() == sizes.size());
  REQUIRE(from_c.size() == sizes.size());
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    INFO("frame " << i << " of " << sizes[i] << " bytes");
    CHECK(same(from_a[i]->bytes, pattern(sizes[i], static_cast<std::uint32_t>(i))));
    CHECK(same(from_c[i]->bytes, pattern(sizes[i], static_cast<std::uint32_t>(100 + i))));
  }
  CHECK(same(frames_from(got[0], 2).front()->bytes, pattern(10, 7)));
  CHECK(got[2].empty());
  CHECK(b.stats().frames_received == 2 * sizes.size());
  CHECK(a.stats().frames_sent == sizes.size());
}

TEST_CASE("socket: a link to a closed or absent peer breaks, and unicast to it returns false", "[socket]") {
  sk::Endpoint a(1, config());
  auto c = std::make_unique<sk::Endpoint>(3, config());
  a.add_peer(3, "127.0.0.1", c->tcp_port());
  std::vector<std::vector<sk::Inbound>> got;

  SECTION("unknown member") { CHECK_FALSE(a.unicast(42, pattern(1, 1))); }

  SECTION("peer closed after the link was up") {
    REQUIRE(a.unicast(3, pattern(1, 1)));
    REQUIRE(pump({&a, c.get()}, got, [&] { return !frames_from(got[1], 1).empty(); }, 2000ms));
    c->close();
    bool broken = false;
    const auto end = Clock::now() + 2000ms;
    while (!broken && Clock::now() < end) {
      broken = !a.unicast(3, pattern(100, 2));
      (void)a.wait(Clock::now() + 1ms);  // notices the EOF
    }
    CHECK(broken);
    CHECK_FALSE(a.unicast(3, pattern(1, 3)));  // stays broken
    CHECK(a.stats().links_broken == 1);
    CHECK_FALSE(c->unicast(1, pattern(1, 4)));  // closed endpoints send nothing
  }

  SECTION("peer gone before the first unicast (connection refused)") {
    c.reset();  // its port now refuses connections
    bool broken = false;
    const auto end = Clock::now() + 2000ms;
    while (!broken && Clock::now() < end) {
      broken = !a.unicast(3, pattern(10, 5));
      (void)a.wait(Clock::now() + 1ms);
    }
    CHECK(broken);
  }

  SECTION("naming the peer again gives the link another chance") {
    c.reset();
    const auto end = Clock::now() + 2000ms;
    while (a.unicast(3, pattern(10, 5)) && Clock::now() < end) (void)a.wait(Clock::now() + 1ms);
    REQUIRE_FALSE(a.unicast(3, pattern(10, 5)));
    sk::Endpoint c2(3, config());
    a.add_peer(3, "127.0.0.1", c2.tcp_port());
    REQUIRE(a.unicast(3, pattern(10, 6)));
    REQUIRE(pump({&a, &c2}, got, [&] { return !frames_from(got[1], 1).empty(); }, 2000ms));
    CHECK(same(frames_from(got[1], 1).front()->bytes, pattern(10, 6)));
  }
}

TEST_CASE("socket: a connection that breaks the framing is dropped and the endpoint keeps working", "[socket]") {
  sk::Endpoint a(1, config()), b(2, config());
  connect_all({&a, &b});
  std::vector<std::vector<sk::Inbound>> got;
  const int fd = raw_client(b.tcp_port());

  SECTION("length prefix 0xFFFFFFFF in place of a hello") {
    send_all(fd, Bytes(4, std::byte{0xff}));
  }
  SECTION("a hello of another version") {
    auto hello = sk::encode_hello(9);
    hello[3] = std::byte{7};
    send_all(fd, frame(hello));
  }
  SECTION("a valid hello, then a length over the limit") {
    send_all(fd, frame(sk::encode_hello(9)));
    const auto len = sk::encode_length(static_cast<std::uint32_t>(sk::kDefaultMaxFrame + 1));
    send_all(fd, Bytes(len.begin(), len.end()));
  }
  CHECK(dropped_by(b, fd, 2000ms));
  ::close(fd);
  CHECK(b.stats().connections_malformed == 1);

  // Still serving its real peers, in both directions.
  REQUIRE(a.unicast(2, pattern(1000, 1)));
  REQUIRE(b.unicast(1, pattern(1000, 2)));
  REQUIRE(pump({&a, &b}, got, [&] { return !frames_from(got[1], 1).empty() && !frames_from(got[0], 2).empty(); },
               2000ms));
  CHECK(same(frames_from(got[1], 1).front()->bytes, pattern(1000, 1)));
  CHECK(same(frames_from(got[0], 2).front()->bytes, pattern(1000, 2)));
}

TEST_CASE("socket: output queued for a peer that stops reading is bounded: the link breaks", "[socket]") {
  auto cfg = config();
  cfg.max_output_bytes = 1U << 20;
  sk::Endpoint a(1, cfg), b(2, config());  // b is never driven: it reads nothing
  a.add_peer(2, "127.0.0.1", b.tcp_port());
  bool refused = false;
  for (int i = 0; i < 200 && !refused; ++i) {
    refused = !a.unicast(2, pattern(256 * 1024, 1));
    (void)a.wait(Clock::now());  // completes the connection and sends what the kernel takes
  }
  CHECK(refused);
  CHECK_FALSE(a.unicast(2, pattern(1, 1)));
  CHECK(a.stats().links_broken == 1);
}

TEST_CASE("socket: a socket link carries the fault layer: it drops or duplicates received datagrams", "[socket]") {
  // The endpoint itself adds no faults; make_socket_link puts the layer on top.
  const auto group = test_group(2);
  hmcast::FaultConfig lossy;
  lossy.datagram_loss = 1.0;
  hmcast::FaultConfig dupy;
  dupy.datagram_duplicate = 1.0;
  hmcast::SocketOptions options;
  const std::uint32_t address = 0xEFFF4D4DU;  // 239.255.77.77, config()'s group
  sk::Endpoint s(1, config());
  auto l = hmcast::transport::make_socket_link(2, address, test_port(), options, lossy);
  auto d = hmcast::transport::make_socket_link(3, address, test_port(), options, dupy);
  constexpr hmcast::Seq kCount = 20;
  for (hmcast::Seq q = 1; q <= kCount; ++q) s.multicast(datagram(group, 1, q));
  std::vector<sk::Inbound> got_l, got_d;
  const auto end = Clock::now() + 2000ms;
  while (Clock::now() < end && seqs(got_d, group).size() < 2 * kCount) {
    while (auto in = l->wait(Clock::now() + 200us)) got_l.push_back(std::move(*in));
    while (auto in = d->wait(Clock::now() + 200us)) got_d.push_back(std::move(*in));
  }
  const auto settle = Clock::now() + 100ms;
  while (Clock::now() < settle)
    while (auto in = l->wait(Clock::now() + 1ms)) got_l.push_back(std::move(*in));
  CHECK(seqs(got_l, group).empty());
  CHECK(hmcast::transport::fault_stats(*l).dropped >= kCount);
  CHECK(hmcast::transport::fault_stats(*d).duplicated >= kCount);
  CHECK(hmcast::transport::listening_port(*l) != 0);  // still reachable through the layer
  auto dup = seqs(got_d, group);
  CHECK(dup.size() == 2 * kCount);
  std::sort(dup.begin(), dup.end());
  for (hmcast::Seq q = 1; q <= kCount; ++q) {
    CHECK(dup[2 * (q - 1)] == q);
    CHECK(dup[2 * (q - 1) + 1] == q);
  }
}

TEST_CASE("socket: progress threads drain while other threads send (as a Node uses it)", "[socket]") {
  const auto group = test_group(3);
  sk::Endpoint a(1, config()), b(2, config()), c(3, config());
  connect_all({&a, &b, &c});
  std::vector<sk::Endpoint*> eps{&a, &b, &c};
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::vector<std::vector<sk::Inbound>> got(3);
  std::vector<std::thread> progress;
  for (std::size_t i = 0; i < 3; ++i) {
    progress.emplace_back([&, i] {
      while (!stop.load()) {
        auto in = eps[i]->wait(Clock::now() + 50ms);
        if (in) {
          std::lock_guard lock(mu);
          got[i].push_back(std::move(*in));
        }
      }
    });
  }
  constexpr std::uint32_t kFrames = 100;
  constexpr hmcast::Seq kDatagrams = 30;
  auto size_of = [](std::uint32_t k) { return static_cast<std::size_t>((k * 7919U) % 40'000U); };
  std::thread other([&] {
    for (std::uint32_t k = 0; k < kFrames; ++k) (void)c.unicast(2, pattern(size_of(k), 1000 + k));
  });
  bool all_sent = true;
  for (std::uint32_t k = 0; k < kFrames; ++k) all_sent = a.unicast(2, pattern(size_of(k), k)) && all_sent;
  for (hmcast::Seq q = 1; q <= kDatagrams; ++q) a.multicast(datagram(group, 1, q));
  other.join();
  const auto end = Clock::now() + 4000ms;
  bool arrived = false;
  while (!arrived && Clock::now() < end) {
    {
      std::lock_guard lock(mu);
      arrived = frames_from(got[1], 1).size() >= kFrames && frames_from(got[1], 3).size() >= kFrames &&
                seqs(got[1], group).size() >= kDatagrams && seqs(got[2], group).size() >= kDatagrams;
    }
    if (!arrived) std::this_thread::sleep_for(5ms);
  }
  stop = true;
  for (auto* ep : eps) ep->wake();
  for (auto& t : progress) t.join();
  CHECK(all_sent);
  REQUIRE(arrived);
  const auto from_a = frames_from(got[1], 1);
  const auto from_c = frames_from(got[1], 3);
  REQUIRE(from_a.size() == kFrames);
  REQUIRE(from_c.size() == kFrames);
  std::size_t bad = 0;
  for (std::uint32_t k = 0; k < kFrames; ++k) {
    bad += from_a[k]->bytes == pattern(size_of(k), k) ? 0U : 1U;
    bad += from_c[k]->bytes == pattern(size_of(k), 1000 + k) ? 0U : 1U;
  }
  CHECK(bad == 0);
  CHECK(seqs(got[0], group).empty());
}

TEST_CASE("socket: a bad configuration or a refused system call is an exception that says what to do",
          "[socket]") {
  auto cfg = config();
  cfg.group_address = "10.1.2.3";
  CHECK_THROWS_WITH(sk::Endpoint(1, cfg), Catch::Contains("not an IPv4 multicast address"));
  cfg = config();
  cfg.mtu = 70'000;
  CHECK_THROWS_AS(sk::Endpoint(1, cfg), hmcast::Error);
  cfg = config();
  cfg.interface_address = "203.0.113.77";  // TEST-NET-3: no interface of this host has it
  try {
    sk::Endpoint e(1, cfg);
    FAIL("joined a group on an interface that does not exist");
  } catch (const sk::TransportError& e) {
    INFO(e.what());
    CHECK_THAT(e.what(), Catch::Contains("cannot join multicast group") && Catch::Contains("interface_address"));
    CHECK(e.error() != 0);
  }
  sk::Endpoint a(1, config());
  CHECK_THROWS_AS(a.add_peer(2, "127.0.0.1", 0), hmcast::Error);
  CHECK_THROWS_WITH(a.unicast(2, Bytes(sk::kDefaultMaxFrame + 1)), Catch::Contains("max_frame"));
  a.close();
  CHECK_FALSE(a.wait(Clock::now() + 1h).has_value());  // closed: returns at once
  a.multicast(datagram(1, 1, 1));                      // closed: nothing sent, no error
  CHECK(a.stats().datagrams_sent == 0);
}

TEST_CASE("socket: a datagram over the receiver's MTU is counted and dropped, the ones after it arrive", "[socket]") {
  const auto group = test_group(7);
  sk::SocketConfig small = config();
  small.mtu = 200;
  sk::Endpoint a(1, config()), b(2, small);
  // One over b's MTU between two that fit, all in one burst (one recvmmsg() call takes them).
  a.multicast(datagram(group, 1, 1));
  Bytes big = datagram(group, 1, 2);
  big.resize(small.mtu + 100);  // a real header, then bytes past b's limit
  a.multicast(big);
  a.multicast(datagram(group, 1, 3));
  std::vector<std::vector<sk::Inbound>> got;
  const bool arrived =
      pump({&a, &b}, got, [&] { return seqs(got[1], group).size() >= 2 && b.stats().datagrams_oversized >= 1; }, 2000ms);
  REQUIRE(arrived);
  CHECK(seqs(got[1], group) == std::vector<hmcast::Seq>{1, 3});
  CHECK(b.stats().datagrams_oversized == 1);
  for (const auto& in : got[1]) CHECK(in.bytes.size() <= small.mtu);
}

TEST_CASE("socket: wake() ends a wait that sleeps, and one that has not begun, once each", "[socket]") {
  sk::SocketConfig cfg = config();
  cfg.completion = hmcast::CompletionMode::interrupt;  // wait() sleeps in epoll at once
  sk::Endpoint a(1, cfg);
  // Before wait(): the flag alone (no eventfd write) ends the next wait at once...
  a.wake();
  auto t0 = Clock::now();
  CHECK_FALSE(a.wait(Clock::now() + 5s).has_value());
  CHECK(Clock::now() - t0 < 1s);
  // ...and only that one: the next runs to its deadline.
  t0 = Clock::now();
  CHECK_FALSE(a.wait(Clock::now() + 150ms).has_value());
  CHECK(Clock::now() - t0 >= 150ms);
  // During a wait asleep in epoll: the eventfd is written and the wait ends.
  std::atomic<bool> returned{false};
  std::thread waiter([&] {
    (void)a.wait(Clock::now() + 10s);
    returned = true;
  });
  std::this_thread::sleep_for(100ms);
  CHECK_FALSE(returned.load());
  t0 = Clock::now();
  a.wake();
  waiter.join();
  CHECK(returned.load());
  CHECK(Clock::now() - t0 < 2s);
}

TEST_CASE("socket: large datagrams leave in buffers of their own, and recycled buffers never alias one in use",
          "[socket]") {
  // Datagrams past half a slot are handed over without a copy and their slot refilled
  // from recycle()d buffers: each must arrive whole and unchanged, including after
  // its buffer's earlier holders were recycled, and a buffer far larger than a slot
  // (a link's frame) is not kept.
  auto cfg = config();
  cfg.mtu = 16384;
  sk::Endpoint a(1, cfg), b(2, cfg);
  const auto group = test_group(9);
  constexpr std::uint32_t kRounds = 6;
  constexpr std::uint32_t kPerRound = 20;  // more than the 8 slots of one recvmmsg()
  // Some are held across a round (as an engine still holding them would) with what
  // they must still say after the next round's datagrams arrived.
  std::vector<std::pair<sk::Inbound, Bytes>> kept;
  for (std::uint32_t round = 0; round < kRounds; ++round) {
    std::vector<Bytes> sent;
    for (std::uint32_t i = 0; i < kPerRound; ++i) {
      // Sizes on both sides of half a slot, a header in front (the kernel's filter reads it).
      const std::size_t size = (i % 3 == 0) ? 3000 : cfg.mtu - (i % 5) * 700;
      Bytes d = pattern(size, round * 100 + i);
      const Bytes head = datagram(group, 1, round * 100 + i + 1);
      std::copy(head.begin(), head.end(), d.begin());
      sent.push_back(d);
      a.multicast(d);
    }
    std::vector<std::vector<sk::Inbound>> got;
    const bool arrived = pump({&b}, got, [&] { return got.size() == 1 && got[0].size() >= kPerRound; }, 3000ms);
    REQUIRE(arrived);
    REQUIRE(got[0].size() == kPerRound);
    for (std::uint32_t i = 0; i < kPerRound; ++i) {
      CHECK(got[0][i].bytes == sent[i]);  // loopback keeps the order of one sender
      CHECK(got[0][i].from == 1U);
    }
    for (const auto& [in, want] : kept) CHECK(in.bytes == want);  // no later datagram landed in them
    // Half goes back to the endpoint now, half a round later.
    for (auto& [in, want] : kept) b.recycle(std::move(in.bytes));
    kept.clear();
    for (std::uint32_t i = 0; i < kPerRound; ++i) {
      if (i % 2 == 0) b.recycle(std::move(got[0][i].bytes));
      else kept.emplace_back(std::move(got[0][i]), sent[i]);
    }
  }
  std::vector<std::byte> huge(cfg.mtu * 8);
  b.recycle(std::move(huge));  // not kept (and nothing to see but that it is harmless)
  a.multicast(datagram(group, 1, 999));
  std::vector<std::vector<sk::Inbound>> got;
  CHECK(pump({&b}, got, [&] { return got.size() == 1 && !got[0].empty(); }, 2000ms));
}

TEST_CASE("socket: a direct datagram reaches its one peer as a datagram; over the MTU or switched off, the link",
          "[socket]") {
  const hmcast::GroupId g = test_group(40);
  sk::SocketConfig off = config();
  off.direct_datagrams = false;
  sk::Endpoint a(1, config()), b(2, config()), c(3, off);
  connect_all({&a, &b, &c});
  CHECK(a.direct_datagram_limit() == config().mtu);
  CHECK(c.direct_datagram_limit() == 0);
  CHECK(a.unicast_datagram(2, datagram(g, 1, 5)));
  CHECK(a.unicast_datagram(2, datagram(g, 1, 6)));
  Bytes big = pattern(config().mtu + 1, 3);
  CHECK(a.unicast_datagram(2, big));                 // over the MTU: the link carries it
  CHECK(c.unicast_datagram(2, datagram(g, 3, 9)));   // direct datagrams off: the link too
  CHECK(a.unicast_datagram(77, datagram(g, 1, 7)));  // nobody we know: dropped, counted
  std::vector<std::vector<sk::Inbound>> got;
  const bool arrived = pump({&a, &b, &c}, got, [&] { return got[1].size() >= 4; }, 4000ms);
  REQUIRE(arrived);
  std::vector<hmcast::Seq> direct;
  int frames = 0;
  for (const auto& in : got[1]) {
    if (in.datagram) {
      CHECK(in.direct);
      CHECK(in.from == 1);
      direct.push_back(seq_of(in, g));
    } else {
      CHECK_FALSE(in.direct);
      ++frames;
      if (in.from == 1) CHECK(same(in.bytes, big));
      else CHECK(in.from == 3);
    }
  }
  std::sort(direct.begin(), direct.end());
  CHECK(direct == std::vector<hmcast::Seq>{5, 6});
  CHECK(frames == 2);
  CHECK(got[0].empty());  // a direct datagram is not multicast: nobody else hears it
  CHECK(got[2].empty());
  CHECK(a.stats().direct_sent == 2);
  CHECK(a.stats().direct_send_dropped == 1);
  CHECK(b.stats().direct_received == 2);
  CHECK(b.stats().datagrams_received == 0);
  CHECK(c.stats().direct_sent == 0);
}

TEST_CASE("socket: the direct socket and the listener share one port number, also a configured one", "[socket]") {
  sk::Endpoint a(1, config());
  // The UDP port is taken: binding it again fails.
  const int probe = ::socket(AF_INET, SOCK_DGRAM, 0);
  REQUIRE(probe >= 0);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_port = htons(a.tcp_port());
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  CHECK(::bind(probe, reinterpret_cast<sockaddr*>(&at), sizeof at) != 0);
  CHECK(errno == EADDRINUSE);
  ::close(probe);
  // A configured port whose UDP number another socket holds is refused, saying what to do.
  const int holder = ::socket(AF_INET, SOCK_DGRAM, 0);
  REQUIRE(holder >= 0);
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(holder, reinterpret_cast<sockaddr*>(&any), sizeof any) == 0);
  socklen_t len = sizeof any;
  REQUIRE(::getsockname(holder, reinterpret_cast<sockaddr*>(&any), &len) == 0);
  sk::SocketConfig fixed = config();
  fixed.listen_port = ntohs(any.sin_port);
  try {
    sk::Endpoint clash(2, fixed);
    FAIL("an endpoint opened on a UDP port another socket holds");
  } catch (const std::exception& e) {
    CHECK(std::string(e.what()).find("listen_port") != std::string::npos);
  }
  ::close(holder);
}

TEST_CASE("socket: a waiter that polls alone counts one polling thread, then the configured ones again",
          "[socket]") {
  // Between polls a thread keeps its CPU only where the member's polling threads fit
  // the CPUs it may use (cpu_share.hpp): a borrower polls while the progress thread
  // is parked (Link::set_sole_poller), and counts itself alone meanwhile.
  sk::SocketConfig cfg = config();
  cfg.polling_threads = 2;
  sk::Endpoint e(1, cfg);
  CHECK(e.polling_threads_now() == 2U);
  e.set_sole_poller(true);
  CHECK(e.polling_threads_now() == 1U);
  e.set_sole_poller(false);
  CHECK(e.polling_threads_now() == 2U);
  e.close();
}
