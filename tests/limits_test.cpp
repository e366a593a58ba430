// Limits in the core: every count and size a peer sends is checked against this
// member's own limits before anything is allocated or iterated for it. Bad input is
// counted and dropped, never an exception or an assertion.
#include <cstdint>
#include <memory>
#include <vector>

#include <catch2/catch.hpp>

#include "alloc_counter.hpp"
#include "core/wire.hpp"
#include "group/group_engine.hpp"
#include "hmcast/config.hpp"

using namespace hmcast;
using group::GroupEngine;

namespace {

constexpr GroupId kGroup = 0x11317;

group::ViewChange first(View v) {
  group::ViewChange c;
  c.view = std::move(v);
  return c;
}

std::vector<std::byte> announce(MemberId from, std::uint64_t size, std::uint64_t block, LargeAlgorithm algorithm) {
  return wire::encode(wire::Header{wire::Type::announce, kGroup, 1, from},
                      wire::Announce{from, 1, size, block, static_cast<std::uint8_t>(algorithm)});
}

}  // namespace

TEST_CASE("limits: an Announce naming 2^32-1 blocks is counted and dropped without allocating", "[limits][large]") {
  View view{1, {}};
  for (MemberId m = 1; m <= 40; ++m) view.members.push_back(m);
  GroupEngine e(kGroup, 1, first(view), ProtocolConfig{}, 0);
  struct Case {
    const char* name;
    std::uint64_t size;
    std::uint64_t block;
    LargeAlgorithm algorithm;
  };
  const Case cases[] = {
      // Within max_large_message (16 GiB), but 2^32-1 blocks of one byte.
      {"2^32-1 one-byte blocks", 0xffffffffULL, 1, LargeAlgorithm::binomial_pipeline},
      // 2^32-1 blocks of 4 KiB: 16 TiB, over max_large_message.
      {"2^32-1 blocks of 4 KiB", 0xffffffffULL * 4096, 4096, LargeAlgorithm::binomial_pipeline},
      // Few enough blocks, but sequential to 40 members walks blocks x 39 steps.
      {"kMaxBlocks blocks, sequential", wire::kMaxBlocks * 16, 16, LargeAlgorithm::sequential},
      {"one block over kMaxBlocks", (wire::kMaxBlocks + 1) * 4096, 4096, LargeAlgorithm::chain},
  };
  std::uint64_t dropped = 0;
  for (const auto& c : cases) {
    INFO(c.name);
    const auto frame = announce(2, c.size, c.block, c.algorithm);
    REQUIRE(wire::decode(frame).ok());  // a well-formed frame: only our limits refuse it
    Outbox out;
    out.reserve(16);
    std::size_t allocated = 0;
    {
      hmcast::testing::CountAllocations count;
      e.on_frame(2, frame, 10, out);
      allocated = count.bytes();
    }
    CHECK(out.empty());  // no NeedBuffer, no forwarded announcement
    CHECK(e.large_path().stats().over_limit_dropped == ++dropped);
    CHECK(e.large_path().active_transfers() == 0);
    // Decoding and dispatch only: nothing per block, no schedule (a bitmap of 2^32-1
    // blocks alone would be 512 MiB).
    CHECK(allocated < 1024);
  }
  // A message within the limits is taken: the counter did not swallow everything.
  Outbox out;
  e.on_frame(2, announce(2, 1 << 20, 64 << 10, LargeAlgorithm::binomial_pipeline), 20, out);
  CHECK(e.large_path().active_transfers() == 1);
  CHECK(e.large_path().stats().over_limit_dropped == dropped);
}

TEST_CASE("limits: one sender's announcements cannot pile up transfers", "[limits][large]") {
  GroupEngine e(kGroup, 1, first(View{1, {1, 2, 3}}), ProtocolConfig{}, 0);
  Outbox out;
  for (hmcast::Seq seq = 1; seq <= 100; ++seq)
    e.on_frame(2, wire::encode(wire::Header{wire::Type::announce, kGroup, 1, 2},
                               wire::Announce{2, seq, 1 << 20, 64 << 10, 3}), 10, out);
  CHECK(e.large_path().active_transfers() == hmcast::large::kMaxTransfersPerSender);
  CHECK(e.large_path().stats().over_limit_dropped == 100 - hmcast::large::kMaxTransfersPerSender);
}

TEST_CASE("limits: an own message receivers would refuse is refused at the sender", "[limits][large]") {
  ProtocolConfig cfg;
  cfg.block_size = 16;  // absurdly small blocks: a 32 MiB message needs 2M of them
  GroupEngine e(kGroup, 1, first(View{1, {1, 2}}), cfg, 0);
  Outbox out;
  const auto r = e.broadcast_large(32ULL << 20, 16, 0, out);
  CHECK(r.error == hmcast::large::LargeError::over_limit);
  CHECK(out.empty());
  CHECK(e.broadcast_large(1 << 20, 16, 0, out).error == hmcast::large::LargeError::none);
}
