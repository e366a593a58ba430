// A view change in the middle of a large message: the sender starts it again over the
// new view and it completes against the survivors, with no failure at the sender and no
// second delivery at members that had it. Pipelines (src/large/pipeline.*) are
// driven directly through a small in-memory router, so the crash lands exactly where
// the test wants it: after some members delivered, before the sender completed.
#include <cstdint>
#include <memory>
#include <vector>

#include <catch2/catch.hpp>

#include "hmcast/config.hpp"
#include "hmcast/types.hpp"
#include "mem_net.hpp"

using hmcast::LargeAlgorithm;
using hmcast::MemberId;
using hmcast::Seq;
using hmcast::View;
using hmcast::testing::MemNet;

namespace {

/// Members 1 -> 2 -> 3 -> 4 in view 1, a chain of 1000-byte blocks, each a single
/// segment; `dead` crash before anything moves (frames to them are lost, and links
/// to them break).
struct Router {
  MemNet net{[] {
    MemNet::Options o;
    o.protocol.block_size = 1000;
    o.protocol.segment_size = 1000;
    o.protocol.large_algorithm = LargeAlgorithm::chain;
    return o;
  }()};
  explicit Router(MemberId dead) {
    const View v1{1, {1, 2, 3, 4}};
    for (MemberId m : v1.members) net.add(m, v1);
    net.crash(dead);
  }
  Seq broadcast(MemberId from, std::size_t size) {
    const auto r = net.broadcast_large(from, std::make_shared<std::vector<std::byte>>(size, std::byte{3}));
    REQUIRE(r.error == hmcast::large::LargeError::none);
    return r.seq;
  }
  std::vector<std::pair<MemberId, Seq>> delivered(MemberId m) {
    std::vector<std::pair<MemberId, Seq>> v;
    for (const auto& d : net.delivered[m])
      if (d.large) v.emplace_back(d.sender, d.seq);
    return v;
  }
  const hmcast::large::PipelineStats& stats(MemberId m) { return net.engine(m).large_path().stats(); }
};

}  // namespace

TEST_CASE("pipeline restart: a message cut by a view change completes against the survivors, delivered once",
          "[pipeline][membership]") {
  // A chain 1 -> 2 -> 3 -> 4 with two blocks: 2 and 3 deliver, then 4 dies before it
  // has anything, so the sender's ACK can never come back in view 1.
  Router net(4);

  const Seq seq = net.broadcast(1, 2000);
  CHECK(net.delivered(2).size() == 1);
  CHECK(net.delivered(3).size() == 1);
  CHECK(net.net.completed_large[1].empty());  // 4 never ACKs in view 1

  // View 2 without 4: the sender starts the message again over the survivors.
  const View v2{2, {1, 2, 3}};
  net.net.install(v2);

  for (MemberId m : {MemberId{1}, MemberId{2}, MemberId{3}}) {
    INFO("member " << m);
    REQUIRE(net.delivered(m).size() == 1);  // once, whatever the restart
    CHECK(net.delivered(m)[0] == std::make_pair(MemberId{1}, seq));
    CHECK(net.net.failed_large[m].empty());
    CHECK(net.net.at(m).large_buffers() == 0);  // every buffer released once the message is over
  }
  REQUIRE(net.net.completed_large[1] == std::vector<Seq>{seq});
  CHECK(net.stats(1).restarted == 1);
  CHECK(net.stats(1).failed == 0);
  // 2 and 3 took part again (3 needs its blocks from 2) without delivering twice.
  CHECK(net.stats(2).redeliveries_suppressed == 1);
  CHECK(net.stats(3).redeliveries_suppressed == 1);

  // The next message goes as usual, delivered by everyone once.
  net.broadcast(1, 1500);
  for (MemberId m : {MemberId{2}, MemberId{3}}) CHECK(net.delivered(m).size() == 2);
  CHECK(net.net.completed_large[1].size() == 2);
}

TEST_CASE("pipeline restart: a member that first hears of a message in the new view delivers it",
          "[pipeline][membership]") {
  // 3 dies: 2 gets the message, 4 never hears of it in view 1. After the view change 4
  // gets it through 2, every survivor has delivered exactly once, the sender completes.
  Router net(3);  // the chain breaks at 3: 2 gets blocks, 3 and 4 nothing

  const Seq seq = net.broadcast(1, 3000);
  CHECK(net.delivered(2).size() == 1);  // 2 holds it all: the sender sends regardless of 3
  CHECK(net.delivered(4).empty());

  const View v2{2, {1, 2, 4}};
  net.net.install(v2);
  CHECK(net.delivered(2).size() == 1);
  REQUIRE(net.delivered(4).size() == 1);
  CHECK(net.delivered(1).size() == 1);
  CHECK(net.net.completed_large[1] == std::vector<Seq>{seq});
  CHECK(net.stats(4).redeliveries_suppressed == 0);
}
