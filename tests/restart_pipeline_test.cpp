// A view change in the middle of a large message: the sender starts it again over the
// new view and it completes against the survivors, with no failure at the sender and one
// delivery at each survivor (members deliver on the sender's commit, which exists only
// once every member holds the message: those that held it whole when the view changed
// take part in the restart with the others). Pipelines (src/large/pipeline.*) are
// driven directly through a small in-memory router, so the crash lands exactly where
// the test wants it: after some members delivered, before the sender completed.
#include <cstdint>
#include <memory>
#include <set>
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
/// A chain of 1000-byte blocks, each a single segment.
MemNet::Options chain_options() {
  MemNet::Options o;
  o.protocol.block_size = 1000;
  o.protocol.segment_size = 1000;
  o.protocol.large_algorithm = LargeAlgorithm::chain;
  return o;
}

struct Router {
  MemNet net{chain_options()};
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
  // A chain 1 -> 2 -> 3 -> 4 with two blocks: 2 and 3 hold it whole, then 4 dies before
  // it has anything, so the sender's ACK (and so its commit) can never come in view 1.
  Router net(4);

  const Seq seq = net.broadcast(1, 2000);
  CHECK(net.delivered(2).empty());  // held whole, awaiting the commit
  CHECK(net.delivered(3).empty());
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
  // 2 and 3 dropped their uncommitted copies and took part again (3 needs its blocks
  // from 2): nothing had been delivered, so nothing was suppressed.
  CHECK(net.stats(2).redeliveries_suppressed == 0);
  CHECK(net.stats(3).redeliveries_suppressed == 0);
  CHECK(net.stats(2).uncommitted_discarded == 0);

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
  CHECK(net.delivered(2).empty());  // 2 holds it all (the sender sends regardless of 3), uncommitted
  CHECK(net.delivered(4).empty());

  const View v2{2, {1, 2, 4}};
  net.net.install(v2);
  CHECK(net.delivered(2).size() == 1);
  REQUIRE(net.delivered(4).size() == 1);
  CHECK(net.delivered(1).size() == 1);
  CHECK(net.net.completed_large[1] == std::vector<Seq>{seq});
  CHECK(net.stats(4).redeliveries_suppressed == 0);
}

namespace {

/// Members 1..4 in view 1 (sender 1), a chain of 1000-byte blocks; commits from the
/// sender to the members in `commit_lost` are lost.
struct CommitNet {
  MemNet net{chain_options()};
  explicit CommitNet(std::set<MemberId> commit_lost) {
    const View v1{1, {1, 2, 3, 4}};
    for (MemberId m : v1.members) net.add(m, v1);
    net.drop = [lost = std::move(commit_lost)](const MemNet::Frame& f) {
      return f.from == 1 && lost.count(f.to) != 0 && hmcast::wire::peek_type(f.bytes) == hmcast::wire::Type::large_commit;
    };
  }
  std::size_t large_deliveries(MemberId m) {
    std::size_t n = 0;
    for (const auto& d : net.delivered[m]) n += d.large ? 1 : 0;
    return n;
  }
  const hmcast::large::PipelineStats& stats(MemberId m) { return net.engine(m).large_path().stats(); }
};

}  // namespace

TEST_CASE("pipeline commit: a sender that dies after committing to one member: every survivor delivers",
          "[pipeline][membership]") {
  CommitNet c({3, 4});  // only 2 hears the commit
  const auto r = c.net.broadcast_large(1, std::make_shared<std::vector<std::byte>>(2500, std::byte{5}));
  REQUIRE(r.error == hmcast::large::LargeError::none);
  REQUIRE(c.net.completed_large[1].size() == 1);  // every member held it: the sender completed
  CHECK(c.large_deliveries(2) == 1);
  CHECK(c.large_deliveries(3) == 0);  // held whole, its commit lost
  CHECK(c.large_deliveries(4) == 0);
  c.net.crash(1);
  c.net.install(View{2, {2, 3, 4}});
  c.net.settle(20);
  for (MemberId m : {MemberId{2}, MemberId{3}, MemberId{4}}) {
    INFO("member " << m);
    CHECK(c.large_deliveries(m) == 1);  // 2's relay of the commit reached 3 and 4
    CHECK(c.net.at(m).large_buffers() == 0);
    CHECK(c.net.engine(m).large_path().awaiting_commit() == 0);
  }
  CHECK(c.stats(2).commits_relayed == 1);
  CHECK(c.stats(3).delivered_on_relay == 1);
  CHECK(c.stats(4).delivered_on_relay == 1);
}

TEST_CASE("pipeline commit: a sender that dies before any member has its commit: no survivor delivers",
          "[pipeline][membership]") {
  CommitNet c({2, 3, 4});
  const auto r = c.net.broadcast_large(1, std::make_shared<std::vector<std::byte>>(2500, std::byte{5}));
  REQUIRE(r.error == hmcast::large::LargeError::none);
  c.net.crash(1);
  c.net.install(View{2, {2, 3, 4}});
  c.net.settle(20);
  for (MemberId m : {MemberId{2}, MemberId{3}, MemberId{4}}) {
    INFO("member " << m);
    CHECK(c.large_deliveries(m) == 0);
    CHECK(c.net.engine(m).large_path().awaiting_commit() == 1);  // kept one view change for a relay
  }
  // Bounded: two view changes later (relays of the first may still be on their way at
  // the next), a message nobody committed is let go.
  c.net.install(View{3, {2, 3, 4}});
  c.net.settle(20);
  CHECK(c.net.engine(2).large_path().awaiting_commit() == 1);
  c.net.crash(4);
  c.net.install(View{4, {2, 3}});
  c.net.settle(20);
  for (MemberId m : {MemberId{2}, MemberId{3}}) {
    INFO("member " << m);
    CHECK(c.large_deliveries(m) == 0);
    CHECK(c.net.engine(m).large_path().awaiting_commit() == 0);
    CHECK(c.net.at(m).large_buffers() == 0);
    CHECK(c.stats(m).uncommitted_discarded == 1);
  }
}
