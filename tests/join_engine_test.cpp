// Joining a running group, at the engine level: after a flush (every message sent
// so far is all-acked), the view that takes the joiner in names where each sender's
// stream stands (the floors). The joiner delivers from there on, is never sent
// older messages, and its ACKs let the sender complete the new ones.
#include <map>
#include <memory>
#include <vector>

#include <catch2/catch.hpp>

#include "core/wire.hpp"
#include "hmcast/config.hpp"
#include "mem_net.hpp"

using hmcast::MemberId;
using hmcast::Seq;
using hmcast::View;
using hmcast::testing::MemNet;
namespace wire = hmcast::wire;

namespace {

/// Timers start cautious (1 ms hops), and time moves 1 ms per round.
MemNet net() {
  MemNet::Options o;
  o.protocol.initial_hop_rtt_ns = 1'000'000;
  o.protocol.min_timeout_ns = 2'000'000;
  return MemNet(o);
}

void broadcast(MemNet& n, MemberId from, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i)
    REQUIRE(n.broadcast(from, std::make_shared<const std::vector<std::byte>>(100, std::byte{7})).error ==
            hmcast::small::BroadcastError::none);
}

/// (to, seq) of every Repair frame sent.
std::vector<std::pair<MemberId, Seq>> repairs_to(const MemNet& n) {
  std::vector<std::pair<MemberId, Seq>> v;
  for (const auto* f : n.of_type(wire::Type::repair)) {
    const auto res = wire::decode(f->bytes);
    REQUIRE(res.ok());
    v.emplace_back(f->to, std::get<wire::Repair>(res.packet.body).seq);
  }
  return v;
}

}  // namespace

TEST_CASE("join: the joiner delivers from the flush on and the sender completes against it", "[engine][join]") {
  MemNet n = net();
  const View v1{1, {1, 2, 3}};
  for (MemberId m : v1.members) n.add(m, v1, {});
  broadcast(n, 1, 5);
  n.settle();
  REQUIRE(n.completed[1].size() == 5);  // flushed: member 1's messages are all-acked
  REQUIRE(n.engine(1).small_path().in_flight() == 0);
  REQUIRE(n.engine(1).small_path().next_seq() == 6);

  // The view that ends the flush: member 4 joins; member 1's stream stands at 5.
  const View v2{2, {1, 2, 3, 4}};
  const std::map<MemberId, Seq> floors{{1, 5}, {2, 0}, {3, 0}};
  n.add(4, v2, floors);
  n.install(v2, floors);
  broadcast(n, 1, 5);
  broadcast(n, 4, 2);  // the joiner sends too
  n.settle();

  CHECK(n.seqs(4, 1) == std::vector<Seq>{6, 7, 8, 9, 10});
  CHECK(n.seqs(4, 4) == std::vector<Seq>{1, 2});
  for (MemberId m : {1U, 2U, 3U}) {
    CHECK(n.seqs(m, 1) == std::vector<Seq>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
    CHECK(n.seqs(m, 4) == std::vector<Seq>{1, 2});
  }
  CHECK(n.completed[1].size() == 10);
  CHECK(n.completed[4].size() == 2);
  for (const auto& [to, seq] : repairs_to(n)) CHECK_FALSE((to == 4 && seq <= 5));
  CHECK(n.engine(4).sent().suspicions == 0);
}

TEST_CASE("join: without the floors the joiner holds up the sender's new messages", "[engine][join]") {
  // The same run with the floors left out: the joiner's cumulative ACK can never
  // pass 5, so nothing sent after the join completes. This is what the floors fix.
  MemNet n = net();
  const View v1{1, {1, 2, 3}};
  for (MemberId m : v1.members) n.add(m, v1, {});
  broadcast(n, 1, 5);
  n.settle();
  REQUIRE(n.completed[1].size() == 5);
  const View v2{2, {1, 2, 3, 4}};
  n.add(4, v2, {});
  n.install(v2, {});
  broadcast(n, 1, 5);
  n.settle(50);
  CHECK(n.completed[1].size() < 10);
  CHECK(n.seqs(4, 1).empty());
}

TEST_CASE("view change: a child's old ACK does not speak for a new subtree of the same size",
          "[engine][view][regression]") {
  // Seen in a soak: with 6 members and sender 3, member 5's subtree is {5, 6}; once 6
  // is gone it is {5, 1}, of the same size. Carrying 5's old "my subtree holds up to
  // s" into the new view let the sender complete messages member 1 did not have yet.
  MemNet n = net();
  const View v1{1, {1, 2, 3, 4, 5, 6}};
  for (MemberId m : v1.members) n.add(m, v1, {});
  n.cut_off.insert(1);
  broadcast(n, 3, 6);
  n.settle(5);  // everyone but member 1 has them and has said so
  REQUIRE(n.completed[3].empty());
  // Member 6 dies; member 1 is reachable again.
  n.crash(6);
  n.cut_off.clear();
  n.install(View{2, {1, 2, 3, 4, 5}}, {});
  n.settle();
  CHECK(n.premature.empty());
  CHECK(n.completed[3].size() == 6);
  CHECK(n.seqs(1, 3) == std::vector<Seq>{1, 2, 3, 4, 5, 6});
}
