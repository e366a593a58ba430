// The large path's first block (ProtocolConfig::large_unasked_first_block): a member
// sends it right behind the announcement, without waiting for the receiver's credit,
// only where that credit is certain to come on the announcement: the receiver's
// first receive is from this member, and the receiver showed by a frame that it runs
// this view. Otherwise, and with the option off, every block waits for its credit.
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include <catch2/catch.hpp>

#include "core/actions.hpp"
#include "core/wire.hpp"
#include "hmcast/types.hpp"
#include "large/pipeline.hpp"

using hmcast::LargeAlgorithm;
using hmcast::MemberId;
using hmcast::Outbox;
using hmcast::ProtocolConfig;
using hmcast::View;
using hmcast::large::Pipeline;
namespace action = hmcast::action;
namespace wire = hmcast::wire;

namespace {

constexpr hmcast::GroupId kGroup = 0xf1b;
constexpr MemberId kRoot = 20;
constexpr MemberId kPeer = 21;
constexpr MemberId kThird = 22;
constexpr std::uint64_t kBlock = 4000;
constexpr std::uint64_t kSize = 8000;  // two blocks

ProtocolConfig config(bool unasked, LargeAlgorithm algorithm = LargeAlgorithm::binomial_pipeline) {
  ProtocolConfig c;
  c.block_size = kBlock;
  c.segment_size = kBlock;
  c.large_algorithm = algorithm;
  c.large_receive_window = 1;
  c.large_unasked_first_block = unasked;
  return c;
}

struct Member {
  Member(MemberId self, const View& view, const ProtocolConfig& cfg)
      : emit(kGroup, self, view, cfg.mtu), p(self, view, cfg, emit) {}
  hmcast::Emitter emit;
  Pipeline p;
};

/// What `out` sends to `to`, in order: 'A' announcement, 'B' block, 'R' credit,
/// 'K' ACK, 'C' commit.
std::string sent_to(const Outbox& out, MemberId to) {
  std::string s;
  for (const auto& a : out) {
    if (const auto* b = std::get_if<action::SendBlock>(&a)) {
      if (b->to == to) s += 'B';
      continue;
    }
    const auto* p = std::get_if<action::SendP2P>(&a);
    if (p == nullptr || p->to != to) continue;
    const auto res = wire::decode(p->bytes);
    REQUIRE(res.ok());
    std::visit(
        [&](const auto& body) {
          using T = std::decay_t<decltype(body)>;
          if constexpr (std::is_same_v<T, wire::Announce>) s += 'A';
          else if constexpr (std::is_same_v<T, wire::Ready>) s += 'R';
          else if constexpr (std::is_same_v<T, wire::LargeAck>) s += 'K';
          else if constexpr (std::is_same_v<T, wire::LargeCommit>) s += 'C';
          else s += '?';
        },
        res.packet.body);
  }
  return s;
}

/// Hands every frame `out` sends to `to` over to `m`, as the link would, in order;
/// what `m` answers goes to `answers`. A block's payload is not modelled (the
/// pipeline sees its head only).
void deliver(const Outbox& out, MemberId from, MemberId to, Member& m, Outbox& answers) {
  for (const auto& a : out) {
    if (const auto* b = std::get_if<action::SendBlock>(&a)) {
      if (b->to != to) continue;
      const auto res = wire::decode(b->frame);
      REQUIRE(res.ok());
      m.p.on_block(from, std::get<wire::Block>(res.packet.body), answers);
      continue;
    }
    const auto* p = std::get_if<action::SendP2P>(&a);
    if (p == nullptr || p->to != to) continue;
    const auto res = wire::decode(p->bytes);
    REQUIRE(res.ok());
    Outbox before = std::move(answers);
    answers.clear();
    std::visit(
        [&](const auto& body) {
          using T = std::decay_t<decltype(body)>;
          if constexpr (std::is_same_v<T, wire::Announce>) m.p.on_announce(from, body, answers);
          else if constexpr (std::is_same_v<T, wire::Ready>) m.p.on_ready(from, body, answers);
          else if constexpr (std::is_same_v<T, wire::LargeAck>) m.p.on_ack(from, body, answers);
          else if constexpr (std::is_same_v<T, wire::LargeCommit>) m.p.on_commit(from, body, answers);
          else FAIL("a frame the large path does not send");
        },
        res.packet.body);
    // The runtime gives a buffer as soon as it is asked for one.
    for (const auto& n : Outbox(answers))
      if (const auto* nb = std::get_if<action::NeedBuffer>(&n)) m.p.buffer_ready(nb->sender, nb->seq, answers);
    for (auto& x : answers) before.push_back(std::move(x));
    answers = std::move(before);
  }
}

/// One message from the root to its one peer, to the end: returns what the root sent
/// first, in broadcast(), before any answer.
Outbox one_message(Member& root, Member& peer) {
  Outbox first;
  REQUIRE(root.p.broadcast(kSize, first).error == hmcast::large::LargeError::none);
  Outbox to_peer = first;
  for (int round = 0; round < 8 && !to_peer.empty(); ++round) {
    Outbox to_root;
    deliver(to_peer, kRoot, kPeer, peer, to_root);
    to_peer.clear();
    deliver(to_root, kPeer, kRoot, root, to_peer);
  }
  REQUIRE(root.p.active_transfers() == 0);
  REQUIRE(peer.p.active_transfers() == 0);
  return first;
}

}  // namespace

TEST_CASE("first block: it goes behind the announcement once the receiver showed it runs the view",
          "[pipeline][first_block]") {
  const View view{1, {kRoot, kPeer}};
  Member root(kRoot, view, config(true));
  Member peer(kPeer, view, config(true));
  // Nothing heard from the peer in this view yet: the block waits for its credit.
  CHECK(sent_to(one_message(root, peer), kPeer) == "A");
  // The peer credited and ACKed the first message: the next one's first block goes
  // at once, after its announcement on the same link; the second waits for credit.
  CHECK(sent_to(one_message(root, peer), kPeer) == "AB");
  CHECK(sent_to(one_message(root, peer), kPeer) == "AB");
  CHECK(peer.p.stats().invalid_dropped == 0);
  CHECK(peer.p.stats().blocks_received == 6);
  CHECK(root.p.stats().blocks_sent == 6);

  // A new view: whether the peer installed it shows only by its frames.
  const View next{2, {kRoot, kPeer}};
  Outbox out;
  root.p.on_view(next, out);
  peer.p.on_view(next, out);
  CHECK(sent_to(one_message(root, peer), kPeer) == "A");
  CHECK(sent_to(one_message(root, peer), kPeer) == "AB");
}

TEST_CASE("first block: with the option off every block waits for its credit", "[pipeline][first_block]") {
  const View view{1, {kRoot, kPeer}};
  Member root(kRoot, view, config(false));
  Member peer(kPeer, view, config(false));
  for (int i = 0; i < 3; ++i) CHECK(sent_to(one_message(root, peer), kPeer) == "A");
  CHECK(peer.p.stats().blocks_received == 6);
}

TEST_CASE("first block: never to a member whose first block comes from another", "[pipeline][first_block]") {
  // A chain 20 -> 21 -> 22: the root sends nothing to 22, and 21 is 22's only source.
  const View view{1, {kRoot, kPeer, kThird}};
  Member root(kRoot, view, config(true, LargeAlgorithm::chain));
  Outbox out;
  // Frames from both others in this view.
  root.p.on_ready(kPeer, wire::Ready{kThird, 7, 1}, out);
  root.p.on_ready(kThird, wire::Ready{kThird, 7, 1}, out);
  out.clear();
  REQUIRE(root.p.broadcast(kSize, out).error == hmcast::large::LargeError::none);
  CHECK(sent_to(out, kPeer) == "AB");
  CHECK(sent_to(out, kThird).empty());

  // The relay: the root's block comes to it, and it forwards each to 22, whose only
  // source it is; having heard from 22, it may send 22's first block uncredited
  // once it holds it.
  Member relay(kPeer, view, config(true, LargeAlgorithm::chain));
  Outbox r;
  relay.p.on_ready(kThird, wire::Ready{kThird, 7, 1}, r);
  r.clear();
  relay.p.on_announce(kRoot, wire::Announce{kRoot, 1, kSize, kBlock, static_cast<std::uint8_t>(LargeAlgorithm::chain)},
                      r);
  relay.p.buffer_ready(kRoot, 1, r);
  CHECK(sent_to(r, kThird) == "A");
  r.clear();
  relay.p.on_block(kRoot, wire::Block{kRoot, 1, 0, 0, static_cast<std::uint32_t>(kBlock), {}}, r);
  CHECK(sent_to(r, kThird) == "B");
}
