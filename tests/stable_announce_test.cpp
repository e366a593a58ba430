// Stability announcements (Stable datagrams) let receivers drop messages every member
// holds. While a sender keeps sending, each Data already carries its stable prefix, so
// an announcement would only cost every member one more datagram: the sender waits
// for a pause, then announces once, and the receivers' holdings drain.
#include <memory>
#include <vector>

#include <catch2/catch.hpp>

#include "core/wire.hpp"
#include "hmcast/config.hpp"
#include "mem_net.hpp"

using hmcast::TimeNs;
using hmcast::View;
using hmcast::testing::MemNet;
namespace wire = hmcast::wire;

namespace {

constexpr TimeNs kAnnounce = 1'000'000;

/// Three members, every datagram and frame delivered at once.
struct Trio {
  MemNet net{[] {
    MemNet::Options o;
    o.protocol.stable_announce_ns = kAnnounce;
    return o;
  }()};
  Trio() {
    const View v{1, {1, 2, 3}};
    for (hmcast::MemberId id : v.members) net.add(id, v);
  }
  [[nodiscard]] std::size_t stable_sent() const { return net.of_type(wire::Type::stable, 1).size(); }
  [[nodiscard]] std::size_t completed() { return net.completed[1].size(); }
  [[nodiscard]] std::size_t held(hmcast::MemberId m) { return net.engine(m).small_path().held_messages(); }
  void send_one() {
    REQUIRE(net.broadcast(1, std::make_shared<const std::vector<std::byte>>(64, std::byte{7})).error ==
            hmcast::small::BroadcastError::none);
  }
};

}  // namespace

TEST_CASE("a sender announces stability once it pauses, not while each Data carries it", "[engine][stable]") {
  Trio t;
  // 40 messages, one every 100 us: 4 ms of sending, four announcement intervals.
  for (int i = 0; i < 40; ++i) {
    t.send_one();
    t.net.advance(100'000);
  }
  CHECK(t.completed() == 40);
  CHECK(t.stable_sent() == 0);
  // Receivers still hold the last message: the last Data carried the prefix before it.
  CHECK(t.held(2) >= 1);

  // A pause: one announcement, and every receiver drops what every member holds.
  for (int i = 0; i < 30; ++i) t.net.advance(100'000);
  CHECK(t.stable_sent() == 1);
  CHECK(t.held(2) == 0);
  CHECK(t.held(3) == 0);

  // Nothing new is stable: no more announcements.
  for (int i = 0; i < 30; ++i) t.net.advance(100'000);
  CHECK(t.stable_sent() == 1);
}
