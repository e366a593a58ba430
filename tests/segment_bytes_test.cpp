// Several large-path engines (src/large/pipeline.*) joined by a small runtime
// that really moves bytes, the way src/api/node.cpp does: a SendBlock reads the
// segment from the sender's buffer, a BlockAccepted writes it at its final offset.
// Links are FIFO per channel (control, bulk) and the runtime picks which link moves
// next at random, so segments, credits and ACKs of different links interleave in
// many orders. It checks that every member ends with exactly the sender's bytes,
// that nobody forwards a byte it does not hold, that each byte is written once, and
// that a receiver never has more than window + 1 blocks arriving at once.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include <catch2/catch.hpp>

#include "core/actions.hpp"
#include "core/wire.hpp"
#include "hmcast/types.hpp"
#include "large/pipeline.hpp"
#include "core/rng.hpp"

using hmcast::MemberId;
using hmcast::Outbox;
using hmcast::Seq;
using hmcast::View;
using hmcast::LargeAlgorithm;
using hmcast::large::Pipeline;
using hmcast::ProtocolConfig;
namespace action = hmcast::action;
namespace wire = hmcast::wire;
using Bytes = std::vector<std::byte>;

namespace {

constexpr hmcast::GroupId kGroup = 0xb17e5;

std::byte expected(MemberId sender, Seq seq, std::uint64_t i) {
  // Differs between neighbouring offsets, blocks and messages: a misplaced segment shows.
  const std::uint64_t x = (i * 0x9e3779b97f4a7c15ULL) ^ (std::uint64_t{sender} << 40) ^ (seq << 32);
  return static_cast<std::byte>((x >> 29) ^ (x >> 7));
}

struct Buffer {
  Bytes bytes;
  std::vector<std::uint8_t> writes;  // per byte: how often it was written here
  std::vector<bool> held;
  std::map<std::uint32_t, std::uint64_t> arriving;  // block -> bytes held, while partial
  bool released = false;
};

class Group {
 public:
  Group(std::uint32_t n, const ProtocolConfig& cfg, std::uint64_t seed) : cfg_(cfg), rng_(seed) {
    View v{1, {}};
    for (std::uint32_t i = 0; i < n; ++i) v.members.push_back(100 + 3 * i);
    view_ = v;
    for (MemberId m : v.members) {
      nodes_[m] = std::make_unique<Pipeline>(kGroup, m, v, cfg);
      buffers_[m];
    }
  }

  void broadcast(MemberId sender, std::uint64_t size) {
    const Seq seq = nodes_[sender]->next_seq();
    Buffer& b = buffers_[sender][{sender, seq}];
    b.bytes.resize(size);
    for (std::uint64_t i = 0; i < size; ++i) b.bytes[i] = expected(sender, seq, i);
    b.held.assign(size, true);
    b.writes.assign(size, 1);
    sizes_[{sender, seq}] = size;
    Outbox out;
    REQUIRE(nodes_[sender]->broadcast(size, out).error == hmcast::large::LargeError::none);
    execute(sender, out);
  }

  /// Move frames until none is left; returns how many moved.
  std::uint64_t run() {
    std::uint64_t moved = 0;
    while (!links_.empty()) {
      auto it = links_.begin();
      std::advance(it, static_cast<std::ptrdiff_t>(rng_.below(links_.size())));
      const auto [from, to, bulk] = it->first;
      Frame f = std::move(it->second.front());
      it->second.pop_front();
      if (it->second.empty()) links_.erase(it);
      deliver(from, to, f);
      ++moved;
    }
    return moved;
  }

  void check_all_delivered() {
    for (const auto& [key, size] : sizes_) {
      CHECK(completed_.count(key) == 1);
      for (MemberId m : view_.members) {
        INFO("member " << m << " message (" << key.first << ", " << key.second << ") of " << size << " bytes");
        CHECK(delivered_[m].count(key) == 1);
        const auto& b = buffers_[m][key];
        REQUIRE(b.bytes.size() == size);
        std::uint64_t wrong = 0;
        for (std::uint64_t i = 0; i < size; ++i)
          if (b.bytes[i] != expected(key.first, key.second, i)) ++wrong;
        CHECK(wrong == 0);
        for (std::uint64_t i = 0; i < size; ++i)
          if (b.writes[i] != 1) FAIL("byte " << i << " written " << int{b.writes[i]} << " times");
      }
    }
    for (const auto& [m, node] : nodes_) {
      CHECK(node->stats().invalid_dropped == 0);
      CHECK(node->stats().duplicate_segments == 0);
    }
  }

  std::uint64_t cut_through_sends = 0;  // segments forwarded while their block was still arriving
  std::uint64_t most_arriving = 0;      // most blocks of one message arriving at one member at once

 private:
  struct Frame {
    Bytes bytes;
    Bytes payload;  // a segment's bytes, carried beside its description (like a transport placing data)
  };

  void execute(MemberId self, Outbox& out) {
    Outbox batch;
    batch.swap(out);
    for (auto& a : batch) {
      if (auto* p = std::get_if<action::SendP2P>(&a)) {
        links_[{self, p->to, false}].push_back(Frame{std::move(p->bytes), {}});
      } else if (auto* s = std::get_if<action::SendBlock>(&a)) {
        send_segment(self, *s);
      } else if (auto* nb = std::get_if<action::NeedBuffer>(&a)) {
        Buffer& b = buffers_[self][{nb->sender, nb->seq}];
        b.bytes.assign(nb->size, std::byte{0});
        b.writes.assign(nb->size, 0);
        b.held.assign(nb->size, false);
        Outbox more;
        nodes_[self]->buffer_ready(nb->sender, nb->seq, more);
        execute(self, more);
      } else if (auto* acc = std::get_if<action::BlockAccepted>(&a)) {
        place(self, *acc);
      } else if (auto* d = std::get_if<action::DeliverLarge>(&a)) {
        CHECK(delivered_[self].insert({d->sender, d->seq}).second);
      } else if (auto* c = std::get_if<action::CompletedLarge>(&a)) {
        completed_.insert({self, c->seq});
      } else if (auto* r = std::get_if<action::ReleaseLarge>(&a)) {
        buffers_[self][{r->sender, r->seq}].released = true;
      } else if (std::holds_alternative<action::FailedLarge>(a) || std::holds_alternative<action::DiscardLarge>(a)) {
        FAIL("no view changes here, yet a transfer was abandoned");
      }
    }
  }

  void send_segment(MemberId self, const action::SendBlock& s) {
    const Buffer& b = buffers_[self][{s.sender, s.seq}];
    REQUIRE_FALSE(b.released);
    REQUIRE(s.offset + s.length <= b.bytes.size());
    for (std::uint64_t i = s.offset; i < s.offset + s.length; ++i)
      if (!b.held[i]) FAIL("member " << self << " forwards byte " << i << " it does not hold");
    if (s.sender != self) {
      if (b.arriving.count(static_cast<std::uint32_t>(s.offset / cfg_.block_size)) != 0) ++cut_through_sends;
    }
    const auto first = b.bytes.begin() + static_cast<std::ptrdiff_t>(s.offset);
    links_[{self, s.to, true}].push_back(Frame{s.frame, Bytes(first, first + static_cast<std::ptrdiff_t>(s.length))});
  }

  void place(MemberId self, const action::BlockAccepted& acc) {
    Buffer& b = buffers_[self][{acc.sender, acc.seq}];
    REQUIRE(inbound_ != nullptr);
    REQUIRE(inbound_->size() == acc.length);
    REQUIRE(acc.offset + acc.length <= b.bytes.size());
    for (std::uint64_t i = 0; i < acc.length; ++i) {
      b.bytes[acc.offset + i] = (*inbound_)[i];
      ++b.writes[acc.offset + i];
      b.held[acc.offset + i] = true;
    }
    const auto block = static_cast<std::uint32_t>(acc.offset / cfg_.block_size);
    const std::uint64_t length = std::min<std::uint64_t>(cfg_.block_size, b.bytes.size() - std::uint64_t{block} * cfg_.block_size);
    const std::uint64_t now = (b.arriving[block] += acc.length);
    if (now == length) b.arriving.erase(block);
    most_arriving = std::max<std::uint64_t>(most_arriving, b.arriving.size());
  }

  void deliver(MemberId from, MemberId to, const Frame& f) {
    const auto res = wire::decode(f.bytes);
    REQUIRE(res.ok());
    REQUIRE(res.packet.header.src == from);
    Outbox out;
    Pipeline& p = *nodes_[to];
    std::visit(
        [&](const auto& body) {
          using T = std::decay_t<decltype(body)>;
          if constexpr (std::is_same_v<T, wire::Announce>) p.on_announce(from, body, out);
          else if constexpr (std::is_same_v<T, wire::Ready>) p.on_ready(from, body, out);
          else if constexpr (std::is_same_v<T, wire::LargeAck>) p.on_ack(from, body, out);
          else if constexpr (std::is_same_v<T, wire::Block>) {
            inbound_ = &f.payload;
            p.on_block(from, body, out);
          } else FAIL("unexpected frame type");
        },
        res.packet.body);
    execute(to, out);  // BlockAccepted comes before anything else: the bytes land first
    inbound_ = nullptr;
  }

  ProtocolConfig cfg_;
  hmcast::Rng rng_;
  View view_;
  std::map<MemberId, std::unique_ptr<Pipeline>> nodes_;
  std::map<MemberId, std::map<std::pair<MemberId, Seq>, Buffer>> buffers_;
  std::map<std::pair<MemberId, Seq>, std::uint64_t> sizes_;
  std::map<MemberId, std::set<std::pair<MemberId, Seq>>> delivered_;
  std::set<std::pair<MemberId, Seq>> completed_;
  std::map<std::tuple<MemberId, MemberId, bool>, std::deque<Frame>> links_;
  const Bytes* inbound_ = nullptr;
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
          g.run();
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
  g.run();
  g.check_all_delivered();
  // Without cut-through every forwarded segment would belong to a block already complete.
  CHECK(g.cut_through_sends > 0);
}
