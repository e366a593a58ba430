// The large path (src/large/pipeline.*) in whole runtimes that really move bytes
// (src/runtime: a SendBlock reads the segment from the sender's buffer, a
// BlockAccepted writes it at its final offset), on the shared in-memory network.
// Links are FIFO and the network picks which link moves next at random, so
// segments, credits and ACKs of different links interleave in many orders. It
// checks that every member ends with exactly the sender's bytes, that nobody
// forwards a byte it does not hold, that no segment is accepted twice, that every
// buffer is released, and that a receiver never has more than window + 1 blocks
// arriving at once.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <tuple>
#include <vector>

#include <catch2/catch.hpp>

#include "core/wire.hpp"
#include "hmcast/config.hpp"
#include "hmcast/types.hpp"
#include "mem_net.hpp"

using hmcast::LargeAlgorithm;
using hmcast::MemberId;
using hmcast::ProtocolConfig;
using hmcast::Seq;
using hmcast::View;
using hmcast::testing::MemNet;
namespace wire = hmcast::wire;
using Bytes = std::vector<std::byte>;

namespace {

std::byte expected(MemberId sender, Seq seq, std::uint64_t i) {
  // Differs between neighbouring offsets, blocks and messages: a misplaced segment shows.
  const std::uint64_t x = (i * 0x9e3779b97f4a7c15ULL) ^ (std::uint64_t{sender} << 40) ^ (seq << 32);
  return static_cast<std::byte>((x >> 29) ^ (x >> 7));
}

/// n members (ids 100, 103, ...) on the shared in-memory network, whose runtimes move
/// the real bytes; links move in an order drawn from the seed. Every Block frame
/// is watched as it is sent and as it arrives.
class Group {
 public:
  Group(std::uint32_t n, const ProtocolConfig& cfg, std::uint64_t seed)
      : cfg_(cfg), net_(MemNet::Options{cfg, seed, 1'000'000}) {
    for (std::uint32_t i = 0; i < n; ++i) view_.members.push_back(100 + 3 * i);
    view_.id = 1;
    for (MemberId m : view_.members) net_.add(m, view_);
    net_.observe = [this](const MemNet::Frame& f, bool moved) { watch(f, moved); };
  }

  void broadcast(MemberId sender, std::uint64_t size) {
    const Seq seq = net_.engine(sender).large_path().next_seq();
    auto bytes = std::make_shared<Bytes>(size);
    for (std::uint64_t i = 0; i < size; ++i) (*bytes)[i] = expected(sender, seq, i);
    sizes_[{sender, seq}] = size;
    REQUIRE(net_.broadcast_large(sender, std::move(bytes), false).error == hmcast::large::LargeError::none);
  }

  void check_all_delivered() {
    net_.deliver_all();
    for (const auto& [key, size] : sizes_) {
      const auto& done = net_.completed_large[key.first];
      CHECK(std::count(done.begin(), done.end(), key.second) == 1);
      for (MemberId m : view_.members) {
        INFO("member " << m << " message (" << key.first << ", " << key.second << ") of " << size << " bytes");
        std::uint64_t copies = 0;
        for (const auto& d : net_.delivered[m]) {
          if (!d.large || d.sender != key.first || d.seq != key.second) continue;
          ++copies;
          REQUIRE(d.message->size() == size);
          std::uint64_t wrong = 0;
          for (std::uint64_t i = 0; i < size; ++i)
            if ((*d.message)[i] != expected(key.first, key.second, i)) ++wrong;
          CHECK(wrong == 0);
        }
        CHECK(copies == 1);
      }
    }
    for (MemberId m : view_.members) {
      const auto& st = net_.engine(m).large_path().stats();
      CHECK(st.invalid_dropped == 0);
      CHECK(st.duplicate_segments == 0);  // each accepted segment lands where the held bytes end: once
      CHECK(net_.at(m).large_buffers() == 0);  // every buffer released once its message is over
    }
    CHECK(forwarded_wrong == 0);
  }

  std::uint64_t cut_through_sends = 0;  // segments forwarded while their block was still arriving
  std::uint64_t most_arriving = 0;      // most blocks of one message arriving at one member at once
  std::uint64_t forwarded_wrong = 0;    // segment bytes sent that are not the message's (not held yet)

 private:
  using Key = std::tuple<MemberId, MemberId, Seq>;  // (member, sender, seq)

  void watch(const MemNet::Frame& f, bool moved) {
    if (f.bytes.size() < wire::kHeaderSize || wire::peek_type(f.bytes) != wire::Type::block) return;
    const auto res = wire::decode(f.bytes);
    REQUIRE(res.ok());
    const auto& b = std::get<wire::Block>(res.packet.body);
    const auto block_start = std::uint64_t{b.index} * cfg_.block_size;
    const std::uint64_t length = std::min<std::uint64_t>(cfg_.block_size, sizes_.at({b.sender, b.seq}) - block_start);
    if (!moved) {
      // A member forwards only bytes it holds: a segment with other bytes was not held.
      for (std::uint64_t i = 0; i < b.payload.size(); ++i)
        if (b.payload[i] != expected(b.sender, b.seq, b.offset + i)) ++forwarded_wrong;
      if (f.from != b.sender && arriving_[{f.from, b.sender, b.seq}].count(b.index) != 0) ++cut_through_sends;
      return;
    }
    auto& arriving = arriving_[{f.to, b.sender, b.seq}];
    if ((arriving[b.index] += b.length) == length) arriving.erase(b.index);
    most_arriving = std::max<std::uint64_t>(most_arriving, arriving.size());
  }

  ProtocolConfig cfg_;
  MemNet net_;
  View view_;
  std::map<std::pair<MemberId, Seq>, std::uint64_t> sizes_;
  std::map<Key, std::map<std::uint32_t, std::uint64_t>> arriving_;  // block -> bytes arrived, while partial
};

}  // namespace

TEST_CASE("segments: every member ends with the sender's exact bytes, for odd sizes and segment sizes",
          "[pipeline][segment]") {
  constexpr std::uint64_t kBlock = 1000;
  std::uint64_t runs = 0;
  std::uint64_t cut_through = 0;
  for (auto algo : {LargeAlgorithm::binomial_pipeline, LargeAlgorithm::chain, LargeAlgorithm::sequential, LargeAlgorithm::binomial_tree}) {
    for (std::uint32_t n : {1U, 2U, 3U, 6U, 9U}) {
      // Segments of 1 byte, a few bytes, not dividing the block, the whole block, past it.
      for (std::uint64_t seg : {std::uint64_t{1}, std::uint64_t{7}, std::uint64_t{256}, kBlock, 5 * kBlock}) {
        // Empty, one byte, around a segment and a block, and a multi-block non-multiple.
        for (std::uint64_t size : {std::uint64_t{0}, std::uint64_t{1}, seg + 1, kBlock - 1, kBlock, kBlock + 1,
                                   3 * kBlock + 256 + 7}) {
          if (seg == 1 && size > kBlock + 1) continue;  // a byte per frame: enough at the smaller sizes
          ProtocolConfig cfg;
          cfg.block_size = kBlock;
          cfg.large_algorithm = algo;
          cfg.segment_size = seg;
          cfg.large_credit_lead_bytes = std::uint64_t{300} * (runs % 3);  // 0, 300, 600: none, some, most of a block
          Group g(n, cfg, 7 + runs);
          INFO(hmcast::large::to_string(algo) << " n " << n << " segment " << seg << " size " << size
                                                     << " credit lead " << cfg.large_credit_lead_bytes);
          g.broadcast(100, size);
          if (n > 1) g.broadcast(100 + 3 * (n - 1), size / 2 + 1);  // a second sender at once
          g.check_all_delivered();
          CHECK(g.most_arriving <= cfg.large_receive_window + 1);
          cut_through += g.cut_through_sends;
          ++runs;
        }
      }
    }
  }
  INFO(runs << " runs");
  CHECK(cut_through > 0);  // relays did forward segments of blocks still arriving
}

TEST_CASE("segments: a chain relay forwards while its block arrives", "[pipeline][segment]") {
  ProtocolConfig cfg;
  cfg.block_size = 4096;
  cfg.large_algorithm = LargeAlgorithm::chain;
  cfg.segment_size = 512;
  Group g(4, cfg, 3);
  g.broadcast(100, 5 * 4096 + 100);
  g.check_all_delivered();
  // Without cut-through every forwarded segment would belong to a block already complete.
  CHECK(g.cut_through_sends > 0);
}
