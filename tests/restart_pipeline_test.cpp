// A view change in the middle of a large message: the sender starts it again over the
// new view and it completes against the survivors, with no failure at the sender and no
// second delivery at members that had it. Pipelines (src/large/pipeline.*) are
// driven directly through a small in-memory router, so the crash lands exactly where
// the test wants it: after some members delivered, before the sender completed.
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <variant>
#include <vector>

#include <catch2/catch.hpp>

#include "core/actions.hpp"
#include "core/wire.hpp"
#include "hmcast/types.hpp"
#include "large/pipeline.hpp"

using hmcast::MemberId;
using hmcast::Outbox;
using hmcast::Seq;
using hmcast::View;
using hmcast::LargeAlgorithm;
using hmcast::large::Pipeline;
using hmcast::ProtocolConfig;
namespace action = hmcast::action;
namespace wire = hmcast::wire;

namespace {

constexpr hmcast::GroupId kGroup = 0x7e57;

struct Member {
  std::unique_ptr<Pipeline> pipeline;
  std::vector<std::pair<MemberId, Seq>> delivered;
  std::vector<Seq> completed;
  std::vector<Seq> failed;
  std::set<std::pair<MemberId, Seq>> buffers;  // what the application holds for the pipeline
};

/// Routes frames between pipelines; frames to a member in `dead` vanish (it crashed).
/// Like the engine, a member drops frames of any view but its current one.
class Router {
 public:
  /// Members 1 -> 2 -> 3 -> 4 in view 1, a chain of 1000-byte blocks, each a single segment.
  Router() {
    ProtocolConfig cfg;
    cfg.block_size = 1000;
    cfg.segment_size = 1000;
    cfg.large_algorithm = LargeAlgorithm::chain;
    const View v1{1, {1, 2, 3, 4}};
    for (MemberId m : v1.members) {
      members_[m].pipeline = std::make_unique<Pipeline>(kGroup, m, v1, cfg);
      views_[m] = v1.id;
    }
  }
  Member& at(MemberId m) { return members_.at(m); }
  std::set<MemberId> dead;

  /// `from` broadcasts `size` bytes (its application's buffer in place, as
  /// Group::broadcast_large does) and every frame that can move, moves.
  Seq broadcast(MemberId from, std::uint64_t size) {
    Outbox out;
    const auto r = at(from).pipeline->broadcast(size, out);
    REQUIRE(r.error == hmcast::large::LargeError::none);
    at(from).buffers.insert({from, r.seq});
    run(from, out);
    return r.seq;
  }

  void run(MemberId from, Outbox& out) {
    queue_.emplace_back(from, std::move(out));
    out.clear();
    while (!queue_.empty()) {
      auto [src, batch] = std::move(queue_.front());
      queue_.pop_front();
      for (auto& a : batch) act(src, a);
    }
  }

  /// Every survivor installs `view` before any frame of it moves: the engine holds
  /// frames of a view it has not installed yet, which comes to the same.
  void install(const View& view) {
    std::vector<std::pair<MemberId, Outbox>> outs;
    for (MemberId m : view.members) {
      views_[m] = view.id;
      Outbox out;
      at(m).pipeline->on_view(view, out);
      outs.emplace_back(m, std::move(out));
    }
    for (auto& [m, out] : outs) run(m, out);
  }

 private:
  void act(MemberId self, hmcast::Action& a) {
    Member& me = at(self);
    if (auto* p = std::get_if<action::SendP2P>(&a)) {
      frame(self, p->to, p->bytes);
    } else if (auto* b = std::get_if<action::SendBlock>(&a)) {
      REQUIRE(me.buffers.count({b->sender, b->seq}) == 1);  // a block is only sent from a held buffer
      frame(self, b->to, b->frame);
    } else if (auto* nb = std::get_if<action::NeedBuffer>(&a)) {
      me.buffers.insert({nb->sender, nb->seq});
      Outbox out;
      me.pipeline->buffer_ready(nb->sender, nb->seq, out);
      queue_.emplace_back(self, std::move(out));
    } else if (auto* d = std::get_if<action::DeliverLarge>(&a)) {
      me.delivered.emplace_back(d->sender, d->seq);
    } else if (auto* c = std::get_if<action::CompletedLarge>(&a)) {
      me.completed.push_back(c->seq);
    } else if (auto* f = std::get_if<action::FailedLarge>(&a)) {
      me.failed.push_back(f->seq);
    } else if (auto* r = std::get_if<action::ReleaseLarge>(&a)) {
      me.buffers.erase({r->sender, r->seq});
    } else if (auto* x = std::get_if<action::DiscardLarge>(&a)) {
      me.buffers.erase({x->sender, x->seq});
    }
  }

  void frame(MemberId from, MemberId to, const std::vector<std::byte>& bytes) {
    if (dead.count(to) != 0) return;
    const auto res = wire::decode(bytes);
    REQUIRE(res.ok());
    Member& dst = at(to);
    Outbox out;
    Pipeline& p = *dst.pipeline;
    if (res.packet.header.view != view_of(to)) return;  // stale: the engine drops these
    if (const auto* an = std::get_if<wire::Announce>(&res.packet.body)) p.on_announce(from, *an, out);
    else if (const auto* rd = std::get_if<wire::Ready>(&res.packet.body)) p.on_ready(from, *rd, out);
    else if (const auto* bl = std::get_if<wire::Block>(&res.packet.body)) p.on_block(from, *bl, out);
    else if (const auto* ack = std::get_if<wire::LargeAck>(&res.packet.body)) p.on_ack(from, *ack, out);
    queue_.emplace_back(to, std::move(out));
  }

  hmcast::ViewId view_of(MemberId m) { return views_[m]; }

  std::map<MemberId, hmcast::ViewId> views_;
  std::map<MemberId, Member> members_;
  std::deque<std::pair<MemberId, Outbox>> queue_;
};

}  // namespace

TEST_CASE("pipeline restart: a message cut by a view change completes against the survivors, delivered once",
          "[pipeline][membership]") {
  // A chain 1 -> 2 -> 3 -> 4 with two blocks: 2 and 3 deliver, then 4 dies before it
  // has anything, so the sender's ACK can never come back in view 1.
  Router net;
  net.dead.insert(4);

  const Seq seq = net.broadcast(1, 2000);
  CHECK(net.at(2).delivered.size() == 1);
  CHECK(net.at(3).delivered.size() == 1);
  CHECK(net.at(1).completed.empty());  // 4 never ACKs in view 1

  // View 2 without 4: the sender starts the message again over the survivors.
  const View v2{2, {1, 2, 3}};
  net.install(v2);

  for (MemberId m : {MemberId{1}, MemberId{2}, MemberId{3}}) {
    INFO("member " << m);
    REQUIRE(net.at(m).delivered.size() == 1);  // once, whatever the restart
    CHECK(net.at(m).delivered[0] == std::make_pair(MemberId{1}, seq));
    CHECK(net.at(m).failed.empty());
    CHECK(net.at(m).buffers.empty());  // every buffer released once the message is over
  }
  REQUIRE(net.at(1).completed == std::vector<Seq>{seq});
  CHECK(net.at(1).pipeline->stats().restarted == 1);
  CHECK(net.at(1).pipeline->stats().failed == 0);
  // 2 and 3 took part again (3 needs its blocks from 2) without delivering twice.
  CHECK(net.at(2).pipeline->stats().redeliveries_suppressed == 1);
  CHECK(net.at(3).pipeline->stats().redeliveries_suppressed == 1);

  // The next message goes as usual, delivered by everyone once.
  net.broadcast(1, 1500);
  for (MemberId m : {MemberId{2}, MemberId{3}}) CHECK(net.at(m).delivered.size() == 2);
  CHECK(net.at(1).completed.size() == 2);
}

TEST_CASE("pipeline restart: a member that first hears of a message in the new view delivers it",
          "[pipeline][membership]") {
  // 3 dies: 2 gets the message, 4 never hears of it in view 1. After the view change 4
  // gets it through 2, every survivor has delivered exactly once, the sender completes.
  Router net;
  net.dead.insert(3);  // the chain breaks at 3: 2 gets blocks, 3 and 4 nothing

  const Seq seq = net.broadcast(1, 3000);
  CHECK(net.at(2).delivered.size() == 1);  // 2 holds it all: the sender sends regardless of 3
  CHECK(net.at(4).delivered.empty());

  const View v2{2, {1, 2, 4}};
  net.install(v2);
  CHECK(net.at(2).delivered.size() == 1);
  REQUIRE(net.at(4).delivered.size() == 1);
  CHECK(net.at(1).delivered.size() == 1);
  CHECK(net.at(1).completed == std::vector<Seq>{seq});
  CHECK(net.at(4).pipeline->stats().redeliveries_suppressed == 0);
}
