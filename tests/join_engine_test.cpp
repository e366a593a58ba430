// Joining a running group, at the engine level: after a flush (every message sent
// so far is all-acked), the view that takes the joiner in names where each sender's
// stream stands (set_stream_floors). The joiner delivers from there on, is never
// sent older messages, and its ACKs let the sender complete the new ones.
#include <algorithm>
#include <cstddef>
#include <map>
#include <memory>
#include <set>
#include <variant>
#include <vector>

#include <catch2/catch.hpp>

#include "core/actions.hpp"
#include "core/timer_queue.hpp"
#include "core/wire.hpp"
#include "hmcast/config.hpp"
#include "small/engine.hpp"

using hmcast::MemberId;
using hmcast::Outbox;
using hmcast::Seq;
using hmcast::View;
using hmcast::small::Engine;
namespace action = hmcast::action;
namespace wire = hmcast::wire;

namespace {

constexpr hmcast::GroupId kGroup = 0x101;

/// Engines wired to each other by hand: every datagram reaches every other engine,
/// every frame its addressee, in order, with time moving 1 ms per round.
struct Net {
  std::map<MemberId, std::unique_ptr<Engine>> engines;
  std::map<MemberId, std::vector<std::pair<MemberId, Seq>>> delivered;  // (sender, seq) per member
  std::map<MemberId, std::set<Seq>> completed;
  std::vector<std::pair<MemberId, Seq>> repairs_to;  // (to, seq) of every Repair frame
  std::set<MemberId> cut_off;  // members nothing reaches (datagrams and frames are lost)
  std::vector<std::pair<MemberId, Seq>> premature;  // own (sender, seq) completed before every live member delivered it
  hmcast::TimeNs now = 1'000'000;

  void add(MemberId id, const View& v, const std::map<MemberId, Seq>& floors) {
    hmcast::ProtocolConfig cfg;
    cfg.initial_hop_rtt_ns = 1'000'000;
    cfg.min_timeout_ns = 2'000'000;
    auto e = std::make_unique<Engine>(kGroup, id, v, cfg, now);
    e->use_external_membership();
    e->set_stream_floors(floors);
    engines[id] = std::move(e);
  }

  void run(MemberId from, Outbox& out) {
    std::vector<std::pair<MemberId, Outbox>> next;
    for (auto& a : out) {
      if (const auto* d = std::get_if<action::SendDatagram>(&a)) {
        for (auto& [id, e] : engines)
          if (id != from && cut_off.count(id) == 0) {
            Outbox o;
            e->on_datagram(d->bytes, now, o);
            next.emplace_back(id, std::move(o));
          }
      } else if (const auto* p = std::get_if<action::SendP2P>(&a)) {
        const auto res = wire::decode(p->bytes);
        if (res.ok())
          if (const auto* r = std::get_if<wire::Repair>(&res.packet.body)) repairs_to.emplace_back(p->to, r->seq);
        auto it = engines.find(p->to);
        if (it == engines.end() || cut_off.count(p->to) != 0) continue;
        Outbox o;
        it->second->on_p2p(from, p->bytes, now, o);
        next.emplace_back(p->to, std::move(o));
      } else if (const auto* dl = std::get_if<action::Deliver>(&a)) {
        delivered[from].emplace_back(dl->sender, dl->seq);
      } else if (const auto* c = std::get_if<action::Completed>(&a)) {
        completed[from].insert(c->seq);
        for (const auto& [id, e] : engines) {
          const auto& got = delivered[id];
          if (std::find(got.begin(), got.end(), std::make_pair(from, c->seq)) == got.end())
            premature.emplace_back(from, c->seq);
        }
      }
    }
    out.clear();
    for (auto& [id, o] : next) run(id, o);
  }

  void settle(int rounds = 200) {
    for (int i = 0; i < rounds; ++i) {
      now += 1'000'000;
      for (auto& [id, e] : engines) {
        Outbox o;
        e->on_timer(now, o);
        run(id, o);
      }
    }
  }

  void broadcast(MemberId from, std::size_t count) {
    for (std::size_t i = 0; i < count; ++i) {
      Outbox o;
      auto msg = std::make_shared<const std::vector<std::byte>>(100, std::byte{7});
      REQUIRE(engines.at(from)->broadcast(msg, now, o).error == hmcast::small::BroadcastError::none);
      run(from, o);
    }
  }

  void install(const View& v, const std::map<MemberId, Seq>& floors) {
    for (auto& [id, e] : engines) {
      if (!v.contains(id) || e->view().id >= v.id) continue;
      e->set_stream_floors(floors);
      Outbox o;
      e->apply_view(v, now, o);
      run(id, o);
    }
  }
};

std::vector<Seq> seqs_from(const std::vector<std::pair<MemberId, Seq>>& d, MemberId sender) {
  std::vector<Seq> v;
  for (const auto& [s, q] : d)
    if (s == sender) v.push_back(q);
  return v;
}

}  // namespace

TEST_CASE("join: the joiner delivers from the flush on and the sender completes against it", "[engine][join]") {
  Net net;
  const View v1{1, {1, 2, 3}};
  for (MemberId m : v1.members) net.add(m, v1, {});
  net.broadcast(1, 5);
  net.settle();
  REQUIRE(net.completed[1].size() == 5);  // flushed: member 1's messages are all-acked
  REQUIRE(net.engines.at(1)->in_flight() == 0);
  REQUIRE(net.engines.at(1)->next_seq() == 6);

  // The view that ends the flush: member 4 joins; member 1's stream stands at 5.
  const View v2{2, {1, 2, 3, 4}};
  const std::map<MemberId, Seq> floors{{1, 5}, {2, 0}, {3, 0}};
  net.add(4, v2, floors);
  net.install(v2, floors);
  net.broadcast(1, 5);
  net.broadcast(4, 2);  // the joiner sends too
  net.settle();

  CHECK(seqs_from(net.delivered[4], 1) == std::vector<Seq>{6, 7, 8, 9, 10});
  CHECK(seqs_from(net.delivered[4], 4) == std::vector<Seq>{1, 2});
  for (MemberId m : {1U, 2U, 3U}) {
    CHECK(seqs_from(net.delivered[m], 1) == std::vector<Seq>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
    CHECK(seqs_from(net.delivered[m], 4) == std::vector<Seq>{1, 2});
  }
  CHECK(net.completed[1].size() == 10);
  CHECK(net.completed[4].size() == 2);
  for (const auto& [to, seq] : net.repairs_to) CHECK_FALSE((to == 4 && seq <= 5));
  CHECK(net.engines.at(4)->stats().suspicions == 0);
}

TEST_CASE("join: without the floors the joiner holds up the sender's new messages", "[engine][join]") {
  // The same run with the floors left out: the joiner's cumulative ACK can never
  // pass 5, so nothing sent after the join completes. This is what the floors fix.
  Net net;
  const View v1{1, {1, 2, 3}};
  for (MemberId m : v1.members) net.add(m, v1, {});
  net.broadcast(1, 5);
  net.settle();
  REQUIRE(net.completed[1].size() == 5);
  const View v2{2, {1, 2, 3, 4}};
  net.add(4, v2, {});
  net.install(v2, {});
  net.broadcast(1, 5);
  net.settle(50);
  CHECK(net.completed[1].size() < 10);
  CHECK(seqs_from(net.delivered[4], 1).empty());
}

TEST_CASE("view change: a child's old ACK does not speak for a new subtree of the same size",
          "[engine][view][regression]") {
  // Seen in a soak: with 6 members and sender 3, member 5's subtree is {5, 6}; once 6
  // is gone it is {5, 1}, of the same size. Carrying 5's old "my subtree holds up to
  // s" into the new view let the sender complete messages member 1 did not have yet.
  Net net;
  const View v1{1, {1, 2, 3, 4, 5, 6}};
  for (MemberId m : v1.members) net.add(m, v1, {});
  net.cut_off.insert(1);
  net.broadcast(3, 6);
  net.settle(5);  // everyone but member 1 has them and has said so
  REQUIRE(net.completed[3].empty());
  // Member 6 dies; member 1 is reachable again.
  net.engines.erase(6);
  net.delivered.erase(6);
  net.cut_off.clear();
  net.install(View{2, {1, 2, 3, 4, 5}}, {});
  net.settle();
  CHECK(net.premature.empty());
  CHECK(net.completed[3].size() == 6);
  CHECK(seqs_from(net.delivered[1], 3) == std::vector<Seq>{1, 2, 3, 4, 5, 6});
}
