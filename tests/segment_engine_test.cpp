// The large-path engine (src/large/pipeline.*) driven directly, one member at a
// time, to watch what segments and just-in-time credits do to its actions: a relay
// forwards a segment before the whole block is here, a sender finishes one scheduled
// send before the next, credits go out while a block is still arriving, and
// duplicate or malformed segments are dropped and counted.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <variant>
#include <vector>

#include <catch2/catch.hpp>

#include "core/actions.hpp"
#include "core/wire.hpp"
#include "hmcast/types.hpp"
#include "large/pipeline.hpp"

using hmcast::MemberId;
using hmcast::Outbox;
using hmcast::View;
using hmcast::LargeAlgorithm;
using hmcast::large::Pipeline;
using hmcast::ProtocolConfig;
namespace action = hmcast::action;
namespace wire = hmcast::wire;

namespace {

constexpr hmcast::GroupId kGroup = 0x5e6;
// A chain 10 -> 11 -> 12: member 11 receives every block from 10 and forwards it to 12.
constexpr MemberId kRoot = 10;
constexpr MemberId kRelay = 11;
constexpr MemberId kLast = 12;
constexpr std::uint64_t kBlock = 4000;
constexpr std::uint64_t kSegment = 1000;
constexpr std::uint64_t kSize = 10'000;  // blocks of 4000, 4000 and 2000 bytes

const View kView{1, {kRoot, kRelay, kLast}};

ProtocolConfig config(std::uint64_t credit_lead) {
  ProtocolConfig c;
  c.block_size = kBlock;
  c.large_algorithm = LargeAlgorithm::chain;
  c.segment_size = kSegment;
  c.large_credit_lead_bytes = credit_lead;
  return c;
}

wire::Block segment(std::uint32_t index, std::uint64_t offset, std::uint32_t length) {
  return wire::Block{kRoot, 1, index, offset, length, {}};
}

std::vector<action::SendBlock> sends(const Outbox& out) {
  std::vector<action::SendBlock> v;
  for (const auto& a : out)
    if (const auto* s = std::get_if<action::SendBlock>(&a)) v.push_back(*s);
  return v;
}

/// The credit carried by a Ready frame to `to` in `out`, if there is one.
std::optional<std::uint32_t> credit_to(const Outbox& out, MemberId to) {
  std::optional<std::uint32_t> credit;
  for (const auto& a : out) {
    const auto* p = std::get_if<action::SendP2P>(&a);
    if (p == nullptr || p->to != to) continue;
    const auto res = wire::decode(p->bytes);
    REQUIRE(res.ok());
    if (const auto* r = std::get_if<wire::Ready>(&res.packet.body)) credit = r->credit;
  }
  return credit;
}

template <typename T>
bool has(const Outbox& out) {
  for (const auto& a : out)
    if (std::holds_alternative<T>(a)) return true;
  return false;
}

/// A pipeline with the emitter its frames go out through (as the group engine lends it).
struct Member {
  Member(MemberId self, const ProtocolConfig& cfg) : emit(kGroup, self, kView, cfg.mtu), p(self, kView, cfg, emit) {}
  hmcast::Emitter emit;
  Pipeline p;
};

/// Member 11, a relay with a buffer for message (10, 1) and member 12's credit for one block.
struct Relay : Member {
  explicit Relay(std::uint64_t credit_lead) : Member(kRelay, config(credit_lead)) { prime(p); }
  static void prime(Pipeline& p);
};

void Relay::prime(Pipeline& p) {
  Outbox out;
  p.on_announce(kRoot, wire::Announce{kRoot, 1, kSize, kBlock, static_cast<std::uint8_t>(LargeAlgorithm::chain)}, out);
  REQUIRE(has<action::NeedBuffer>(out));
  out.clear();
  p.buffer_ready(kRoot, 1, out);
  REQUIRE(credit_to(out, kRoot) == 1U);
  out.clear();
  p.on_ready(kLast, wire::Ready{kRoot, 1, 1}, out);
  REQUIRE(out.empty());  // a credit, but nothing held to send yet
}

}  // namespace

TEST_CASE("segments: a relay forwards a segment before the whole block arrived", "[pipeline][segment]") {
  Relay m(kSegment);
  Pipeline& p = m.p;
  Outbox out;
  p.on_block(kRoot, segment(0, 0, kSegment), out);
  // Its bytes are placed, then forwarded at once: a quarter of block 0, not the block.
  REQUIRE(out.size() >= 2);
  const auto* accepted = std::get_if<action::BlockAccepted>(&out[0]);
  REQUIRE(accepted != nullptr);
  CHECK(accepted->offset == 0);
  CHECK(accepted->length == kSegment);
  auto s = sends(out);
  REQUIRE(s.size() == 1);
  CHECK(s[0].to == kLast);
  CHECK(s[0].offset == 0);
  CHECK(s[0].length == kSegment);
  CHECK_FALSE(has<action::DeliverLarge>(out));
  const auto frame = wire::decode(s[0].frame);
  REQUIRE(frame.ok());
  const auto& b = std::get<wire::Block>(frame.packet.body);
  CHECK(b.index == 0);
  CHECK(b.offset == 0);
  CHECK(b.length == kSegment);
  CHECK(p.stats().segments_sent == 1);
  CHECK(p.stats().blocks_sent == 0);  // the block is not all sent yet
  CHECK(p.stats().blocks_received == 0);

  // The next segment follows it; the block's last one completes block 0 both ways.
  out.clear();
  p.on_block(kRoot, segment(0, kSegment, kSegment), out);
  s = sends(out);
  REQUIRE(s.size() == 1);
  CHECK(s[0].offset == kSegment);
  p.on_block(kRoot, segment(0, 2 * kSegment, kSegment), out);
  p.on_block(kRoot, segment(0, 3 * kSegment, kSegment), out);
  CHECK(p.stats().blocks_received == 1);
  CHECK(p.stats().blocks_sent == 1);
  CHECK(p.stats().segments_sent == 4);
}

TEST_CASE("segments: block 1 is not forwarded without its own credit", "[pipeline][segment]") {
  Relay m(0);
  Pipeline& p = m.p;
  Outbox out;
  for (std::uint64_t k = 0; k < 4; ++k) p.on_block(kRoot, segment(0, k * kSegment, kSegment), out);
  CHECK(sends(out).size() == 4);
  REQUIRE(credit_to(out, kRoot) == 2U);  // the credit for block 1
  out.clear();
  p.on_block(kRoot, segment(1, kBlock, kSegment), out);
  CHECK(sends(out).empty());  // held, but member 12 gave credit for one block only
  out.clear();
  p.on_ready(kLast, wire::Ready{kRoot, 1, 2}, out);
  const auto s = sends(out);
  REQUIRE(s.size() == 1);  // what is held goes at once
  CHECK(s[0].offset == kBlock);
  CHECK(s[0].length == kSegment);
}

TEST_CASE("segments: a sender posts every segment of one scheduled send before the next", "[pipeline][segment]") {
  Member m(kRoot, config(kSegment));
  Pipeline& p = m.p;
  Outbox out;
  REQUIRE(p.broadcast(kSize, out).error == hmcast::large::LargeError::none);
  CHECK(sends(out).empty());  // no credit yet
  out.clear();
  p.on_ready(kRelay, wire::Ready{kRoot, 1, 3}, out);
  const auto s = sends(out);
  // 4 + 4 + 2 segments, contiguous and in order: block 0 whole, then block 1, then block 2.
  REQUIRE(s.size() == 10);
  std::uint64_t next = 0;
  for (const auto& seg : s) {
    CHECK(seg.to == kRelay);
    CHECK(seg.offset == next);
    CHECK(seg.length == kSegment);
    const auto frame = wire::decode(seg.frame);
    REQUIRE(frame.ok());
    CHECK(std::get<wire::Block>(frame.packet.body).index == seg.offset / kBlock);
    next += seg.length;
  }
  CHECK(next == kSize);
  CHECK(p.stats().blocks_sent == 3);
  CHECK(p.stats().bytes_sent == kSize);
}

TEST_CASE("segments: the next credit goes out while the current block is still arriving", "[pipeline][segment]") {
  SECTION("lead of one segment: at the third of four segments") {
    Relay m(kSegment);
    Pipeline& p = m.p;
    Outbox out;
    p.on_block(kRoot, segment(0, 0, kSegment), out);
    p.on_block(kRoot, segment(0, kSegment, kSegment), out);
    CHECK_FALSE(credit_to(out, kRoot).has_value());  // 2000 bytes still to come: too early
    out.clear();
    p.on_block(kRoot, segment(0, 2 * kSegment, kSegment), out);
    CHECK(credit_to(out, kRoot) == 2U);  // 1000 to come: just in time for block 1
    out.clear();
    p.on_block(kRoot, segment(0, 3 * kSegment, kSegment), out);
    CHECK_FALSE(credit_to(out, kRoot).has_value());  // never more than one block ahead of the window
    // Block 1 arriving in its turn earns the credit for block 2 the same way.
    out.clear();
    for (std::uint64_t k = 0; k < 3; ++k) p.on_block(kRoot, segment(1, kBlock + k * kSegment, kSegment), out);
    CHECK(credit_to(out, kRoot) == 3U);
  }
  SECTION("lead of 0: only once the block is complete (store-and-forward credits)") {
    Relay m(0);
    Pipeline& p = m.p;
    Outbox out;
    for (std::uint64_t k = 0; k < 3; ++k) p.on_block(kRoot, segment(0, k * kSegment, kSegment), out);
    CHECK_FALSE(credit_to(out, kRoot).has_value());
    p.on_block(kRoot, segment(0, 3 * kSegment, kSegment), out);
    CHECK(credit_to(out, kRoot) == 2U);
  }
}

TEST_CASE("segments: a duplicate segment is counted and dropped", "[pipeline][segment]") {
  Relay m(kSegment);
  Pipeline& p = m.p;
  Outbox out;
  p.on_block(kRoot, segment(0, 0, kSegment), out);
  p.on_block(kRoot, segment(0, kSegment, kSegment), out);
  out.clear();
  p.on_block(kRoot, segment(0, 0, kSegment), out);  // held already, block not complete
  p.on_block(kRoot, segment(0, kSegment, kSegment), out);
  CHECK(out.empty());
  CHECK(p.stats().duplicate_segments == 2);
  p.on_block(kRoot, segment(0, 2 * kSegment, kSegment), out);
  p.on_block(kRoot, segment(0, 3 * kSegment, kSegment), out);
  out.clear();
  p.on_block(kRoot, segment(0, kSegment, kSegment), out);  // and once the block is complete
  CHECK(out.empty());
  CHECK(p.stats().duplicate_segments == 3);
  CHECK(p.stats().segments_received == 4);
  CHECK(p.stats().invalid_dropped == 0);
}

TEST_CASE("segments: a segment outside its block, the message or the order is refused", "[pipeline][segment]") {
  Relay m(kSegment);
  Pipeline& p = m.p;
  Outbox out;
  p.on_block(kRoot, segment(0, 0, kSegment), out);
  out.clear();
  const auto refused = [&](const wire::Block& b, MemberId from = kRoot) {
    const auto before = p.stats().invalid_dropped;
    p.on_block(from, b, out);
    return out.empty() && p.stats().invalid_dropped == before + 1;
  };
  CHECK(refused(segment(0, kBlock - 500, kSegment)));       // runs past the end of block 0
  CHECK(refused(segment(1, kBlock - 500, kSegment)));       // starts before block 1
  CHECK(refused(segment(1, 2 * kBlock, kSegment)));         // starts past block 1 (inside block 2)
  CHECK(refused(segment(2, kSize - 500, kSegment)));        // past the end of the message (short last block)
  CHECK(refused(segment(3, 3 * kBlock, kSegment)));         // a block the message does not have
  CHECK(refused(segment(0, kSegment, 0)));                  // empty, in a block that is not
  CHECK(refused(segment(0, 2 * kSegment, kSegment)));       // a gap: [1000, 2000) has not come
  CHECK(refused(segment(0, kSegment / 2, kSegment)));       // overlaps what is held
  CHECK(refused(segment(0, kSegment, kSegment), kLast));    // not from this block's scheduled source
  CHECK(p.stats().duplicate_segments == 0);
  // None of it disturbed the transfer: the segment that is due is taken.
  p.on_block(kRoot, segment(0, kSegment, kSegment), out);
  CHECK(has<action::BlockAccepted>(out));
  CHECK(p.stats().segments_received == 2);
}

TEST_CASE("segments: an empty message moves as one empty segment", "[pipeline][segment]") {
  Member m(kRelay, config(kSegment));
  Pipeline& p = m.p;
  Outbox out;
  p.on_announce(kRoot, wire::Announce{kRoot, 1, 0, kBlock, static_cast<std::uint8_t>(LargeAlgorithm::chain)}, out);
  p.buffer_ready(kRoot, 1, out);
  p.on_ready(kLast, wire::Ready{kRoot, 1, 1}, out);
  out.clear();
  p.on_block(kRoot, segment(0, 0, 0), out);
  CHECK(!has<action::DeliverLarge>(out));  // held whole: delivered on the sender's commit
  const auto s = sends(out);
  REQUIRE(s.size() == 1);
  CHECK(s[0].length == 0);
  out.clear();
  p.on_block(kRoot, segment(0, 0, 0), out);
  CHECK(out.empty());
  // Counted as a duplicate, or (if member 11 has already ACKed and sent everything, so
  // the transfer is over) as a frame of no transfer, as for any late block.
  CHECK(p.stats().duplicate_segments + p.stats().invalid_dropped == 1);
  p.on_commit(kRoot, wire::LargeCommit{kRoot, 1}, out);
  CHECK(has<action::DeliverLarge>(out));
}

TEST_CASE("segments: with one receiver a block goes in one transfer", "[pipeline][segment]") {
  // Nobody forwards what the only receiver gets, so segments would only add transfers.
  const View two{1, {kRoot, kRelay}};
  ProtocolConfig cfg = config(kSegment);
  hmcast::Emitter emit(kGroup, kRoot, two, cfg.mtu);
  Pipeline p(kRoot, two, cfg, emit);
  Outbox out;
  REQUIRE(p.broadcast(kSize, out, kBlock).error == hmcast::large::LargeError::none);
  out.clear();
  p.on_ready(kRelay, wire::Ready{kRoot, 1, 3}, out);  // credit for all three blocks
  const auto s = sends(out);
  REQUIRE(s.size() == 3);
  CHECK(s[0].length == kBlock);
  CHECK(s[1].offset == kBlock);
  CHECK(s[1].length == kBlock);
  CHECK(s[2].length == kSize - 2 * kBlock);
  CHECK(p.stats().segments_sent == 3);
  CHECK(p.stats().blocks_sent == 3);
}
