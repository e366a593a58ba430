// Micro-benchmarks of the protocol's hot paths beyond the wire format:
//   - ACK aggregation: GroupEngine::on_frame with cumulative ACKs from tree children (64 members),
//     at the root (ACKs complete messages) and at an interior node (ACKs go up the tree);
//   - fragmenting and reassembling a 64 KiB message at MTU 4096;
//   - RC pipeline schedule queries (binomial pipeline, n = 512, B = 256);
//   - ACK-tree children() for n = 1024;
//   - a progress loop: one broadcast through 4 runtimes on the in-memory network until the
//     sender sees Completed (per-message cost of the whole protocol, no I/O);
//   - a stream's receiver: batches of 64-byte messages into one engine, with the
//     drain after each batch (the engine's cost per message delivered in a stream);
//   - a stream's sender: 64-byte messages broadcast back to back, batched (the
//     engine's cost per message sent in a stream).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <variant>
#include <vector>

#include "ack_tree/tree.hpp"
#include "core/actions.hpp"
#include "core/timer_queue.hpp"
#include "core/wire.hpp"
#include "hmcast/config.hpp"
#include "hmcast/types.hpp"
#include "large/schedule.hpp"
#include "group/group_engine.hpp"
#include "mem_net.hpp"
#include "policy/defaults.hpp"
#include "small/fragmenter.hpp"
#include "small/reassembly.hpp"

namespace {

using hmcast::GroupId;
using hmcast::MemberId;
using hmcast::MessageBuffer;
using hmcast::Outbox;
using hmcast::ProtocolConfig;
using hmcast::Seq;
using hmcast::TimeNs;
using hmcast::View;
using hmcast::group::GroupEngine;
namespace action = hmcast::action;
namespace wire = hmcast::wire;
using Bytes = std::vector<std::byte>;

constexpr GroupId kGroup = 0xbe7cULL;

View numbered_view(std::uint32_t n) {
  View v{1, {}};
  for (MemberId m = 1; m <= n; ++m) v.members.push_back(m);
  return v;
}

MessageBuffer filled(std::size_t n) {
  auto m = std::make_shared<std::vector<std::byte>>(n);
  for (std::size_t i = 0; i < n; ++i) (*m)[i] = static_cast<std::byte>(i & 0xffU);
  return m;
}

// ---------------------------------------------------------------------------
// ACK aggregation

// Arg 0: this engine is the sender, the root of the tree (member 1 of 64; 6 children).
// Arg 1: this engine is member 33, an interior node of sender 1's tree (5 children).
// Each batch: the engine holds K messages of sender 1; every child ACKs 1, 2, ..., K in
// turn (cumulative: stable = have = k). Time is per ACK frame handled.
void BM_AckAggregation(benchmark::State& state) {
  constexpr std::uint32_t kN = 64;
  constexpr std::uint32_t kK = 256;
  const bool at_root = state.range(0) == 0;
  ProtocolConfig cfg;
  cfg.window_messages = kK;
  cfg.initial_window_messages = kK;
  const View view = numbered_view(kN);
  const MemberId sender = 1;
  const MemberId self = at_root ? 1 : 33;

  const hmcast::ack_tree::Tree tree(kN, *view.rank_of(sender), cfg.radix);
  std::vector<MemberId> children;
  for (auto r : tree.children(*view.rank_of(self))) children.push_back(view.members[r]);

  // The ACK frames, in the order they are fed, built once.
  std::vector<std::pair<MemberId, Bytes>> acks;
  for (Seq k = 1; k <= kK; ++k)
    for (MemberId c : children)
      acks.emplace_back(c, wire::encode(wire::Header{wire::Type::ack, kGroup, view.id, c},
                                        wire::Ack{{wire::AckEntry{sender, k, k, 0}}}));
  // The sender's datagrams, for the interior node to hold the messages first.
  const auto msg = filled(64);
  std::vector<Bytes> datagrams;
  for (Seq k = 1; k <= kK; ++k) {
    wire::Data d;
    d.sender = sender;
    d.seq = k;
    d.msg_len = static_cast<std::uint32_t>(msg->size());
    d.payload = *msg;
    datagrams.push_back(wire::encode(wire::Header{wire::Type::data, kGroup, view.id, sender}, d));
  }

  std::optional<GroupEngine> e;
  Outbox out;
  auto setup = [&] {
    hmcast::group::ViewChange first;
    first.view = view;
    e.emplace(kGroup, self, first, cfg, 0);
    out.clear();
    for (Seq k = 1; k <= kK; ++k) {
      if (at_root) (void)e->broadcast(msg, 0, out);
      else e->on_datagram(datagrams[k - 1], 0, out);
      out.clear();
    }
  };

  setup();
  std::uint64_t frames = 0;
  for (auto _ : state) {
    state.PauseTiming();
    setup();
    state.ResumeTiming();
    TimeNs now = 1'000;
    for (const auto& [from, bytes] : acks) {
      now += 50;
      e->on_frame(from, bytes, now, out);
      out.clear();
    }
    frames += acks.size();
  }
  // Sanity: the ACKs did what they should (complete everything / travel up).
  if (at_root ? e->small_path().stats().completed != kK : e->small_path().stats().acks_sent == 0)
    state.SkipWithError("ACKs had no effect: the benchmark is not measuring aggregation");
  state.SetItemsProcessed(static_cast<std::int64_t>(frames));
  state.counters["children"] = static_cast<double>(children.size());
}
BENCHMARK(BM_AckAggregation)->ArgName("interior")->Arg(0)->Arg(1);

// ---------------------------------------------------------------------------
// A stream's receiver

// One receiver of sender 1's stream in a view of 8, with shm's protocol defaults:
// batches of kItems 64-byte messages as the sender's emitter makes them (each item a
// whole Data datagram; stable trailing one batch behind), each fed as one datagram and
// followed by the drain's on_drained(), as the runtime's round does. Arg: the
// receiver (2: an interior node of sender 1's tree, 8: a leaf). Time is per message.
/// A new engine for member `self` of `view`, at time 0, in its first view.
void fresh_engine(std::optional<GroupEngine>& e, MemberId self, const View& view, const ProtocolConfig& cfg) {
  hmcast::group::ViewChange first;
  first.view = view;
  e.emplace(kGroup, self, first, cfg, 0);
}

void BM_StreamReceive(benchmark::State& state) {
  constexpr std::uint32_t kN = 8;
  constexpr std::uint32_t kItems = 256;
  constexpr std::uint32_t kBatches = 64;
  const auto self = static_cast<MemberId>(state.range(0));
  const ProtocolConfig cfg = hmcast::policy::transport_defaults("shm", 67'584);
  const View view = numbered_view(kN);
  const MemberId sender = 1;
  const auto msg = filled(64);

  std::vector<std::shared_ptr<const Bytes>> batches;
  for (std::uint32_t b = 0; b < kBatches; ++b) {
    std::vector<Bytes> items;
    for (std::uint32_t i = 0; i < kItems; ++i) {
      wire::Data d;
      d.sender = sender;
      d.seq = Seq{b} * kItems + i + 1;
      d.stable = b == 0 ? 0 : Seq{b - 1} * kItems;
      d.msg_len = static_cast<std::uint32_t>(msg->size());
      d.payload = *msg;
      items.push_back(wire::encode(wire::Header{wire::Type::data, kGroup, view.id, sender}, d));
    }
    wire::Batch batch;
    for (const auto& it : items) batch.items.emplace_back(it);
    batches.push_back(
        std::make_shared<const Bytes>(wire::encode(wire::Header{wire::Type::batch, kGroup, view.id, sender}, batch)));
  }

  std::optional<GroupEngine> e;
  Outbox out;
  std::uint64_t delivered = 0;
  std::uint64_t messages = 0;
  for (auto _ : state) {
    state.PauseTiming();
    fresh_engine(e, self, view, cfg);
    out.clear();
    state.ResumeTiming();
    TimeNs now = 1'000;
    for (const auto& b : batches) {
      now += 1'000;
      e->on_datagram(*b, now, out, b);
      e->on_drained(now, out);
      for (const auto& a : out) delivered += std::holds_alternative<action::Deliver>(a) ? 1 : 0;
      out.clear();
    }
    messages += Seq{kBatches} * kItems;
  }
  if (delivered != messages) state.SkipWithError("not every message was delivered: not measuring a stream");
  state.SetItemsProcessed(static_cast<std::int64_t>(messages));
  state.counters["acks/msg"] = static_cast<double>(e->small_path().stats().acks_sent) / (kBatches * kItems);
}
BENCHMARK(BM_StreamReceive)->ArgName("member")->Arg(2)->Arg(8);

// A stream's sender: 64-byte messages broadcast back to back into one engine (of 8
// members), batched, each batch's buffer handed back after it is sent as the runtime
// does (Runtime::execute). The engine's cost per message sent in a stream.
void BM_StreamSend(benchmark::State& state) {
  constexpr std::uint32_t kN = 8;
  constexpr std::uint32_t kMessages = 2048;
  const ProtocolConfig cfg = hmcast::policy::transport_defaults("shm", 67'584);
  const View view = numbered_view(kN);
  std::optional<GroupEngine> e;
  Outbox out;
  std::uint64_t sent = 0;
  std::uint64_t messages = 0;
  std::uint64_t datagrams = 0;
  for (auto _ : state) {
    state.PauseTiming();
    fresh_engine(e, 1, view, cfg);
    out.clear();
    std::vector<MessageBuffer> msgs;
    for (std::uint32_t i = 0; i < kMessages; ++i) msgs.push_back(filled(64));
    state.ResumeTiming();
    TimeNs now = 1'000;
    for (auto& m : msgs) {
      now += 100;
      sent += e->broadcast(std::move(m), now, out).error == hmcast::small::BroadcastError::none ? 1 : 0;
      for (auto& a : out)
        if (auto* d = std::get_if<action::SendDatagram>(&a)) {
          ++datagrams;
          e->recycle_datagram(std::move(d->bytes));
        }
      out.clear();
    }
    messages += kMessages;
  }
  if (sent != messages) state.SkipWithError("a broadcast was refused: not measuring a stream");
  state.SetItemsProcessed(static_cast<std::int64_t>(messages));
  state.counters["datagrams/msg"] = static_cast<double>(datagrams) / static_cast<double>(messages);
}
BENCHMARK(BM_StreamSend);

// ---------------------------------------------------------------------------
// Fragmentation and reassembly of a 64 KiB message at MTU 4096

constexpr std::size_t k64K = 64 * 1024;
constexpr std::uint32_t kMtu4K = 4096;

void BM_Fragment64K(benchmark::State& state) {
  const auto msg = filled(k64K);
  const wire::Header h{wire::Type::data, kGroup, 1, 2};
  for (auto _ : state) benchmark::DoNotOptimize(hmcast::small::fragment(h, 2, 7, 6, *msg, kMtu4K));
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(k64K));
}
BENCHMARK(BM_Fragment64K);

// Decode every fragment and reassemble (reverse order, as after a reordering network).
void BM_Reassemble64K(benchmark::State& state) {
  const auto msg = filled(k64K);
  const wire::Header h{wire::Type::data, kGroup, 1, 2};
  auto frags = hmcast::small::fragment(h, 2, 7, 6, *msg, kMtu4K);
  std::reverse(frags.begin(), frags.end());
  std::size_t bad = 0;
  for (auto _ : state) {
    std::optional<hmcast::small::Reassembly> r;
    MessageBuffer done;
    for (const auto& f : frags) {
      const auto res = wire::decode(f);
      const auto& d = std::get<wire::Data>(res.packet.body);
      if (!r) r.emplace(d);
      if (r->add(d) == hmcast::small::Reassembly::Result::complete) done = r->take();
    }
    if (!done || done->size() != k64K) ++bad;
    benchmark::DoNotOptimize(done);
  }
  if (bad != 0) state.SkipWithError("reassembly did not complete");
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(k64K));
  state.counters["fragments"] = static_cast<double>(frags.size());
}
BENCHMARK(BM_Reassemble64K);

void BM_FragmentReassemble64K(benchmark::State& state) {
  const auto msg = filled(k64K);
  const wire::Header h{wire::Type::data, kGroup, 1, 2};
  for (auto _ : state) {
    const auto frags = hmcast::small::fragment(h, 2, 7, 6, *msg, kMtu4K);
    std::optional<hmcast::small::Reassembly> r;
    MessageBuffer done;
    for (const auto& f : frags) {
      const auto res = wire::decode(f);
      const auto& d = std::get<wire::Data>(res.packet.body);
      if (!r) r.emplace(d);
      if (r->add(d) == hmcast::small::Reassembly::Result::complete) done = r->take();
    }
    benchmark::DoNotOptimize(done);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(k64K));
}
BENCHMARK(BM_FragmentReassemble64K);

// ---------------------------------------------------------------------------
// Schedule step queries: binomial pipeline, n = 512, B = 256

// (rank, step) pairs in a scrambled order, so the queries are not a predictable sweep.
std::vector<std::pair<std::uint32_t, std::uint32_t>> query_points(std::uint32_t n, std::uint32_t steps) {
  std::vector<std::pair<std::uint32_t, std::uint32_t>> pts;
  std::uint64_t x = 0x9e3779b97f4a7c15ULL;
  for (int i = 0; i < 4096; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    pts.emplace_back(static_cast<std::uint32_t>((x >> 33) % n), static_cast<std::uint32_t>((x >> 17) % steps));
  }
  return pts;
}

template <bool kSends>
void BM_BinomialPipelineQuery(benchmark::State& state) {
  const auto s = hmcast::large::make_schedule(hmcast::LargeAlgorithm::binomial_pipeline, 512, 0, 256);
  const auto pts = query_points(s->members(), s->steps());
  std::size_t i = 0;
  for (auto _ : state) {
    const auto& [rank, step] = pts[i++ & 4095U];
    if constexpr (kSends) benchmark::DoNotOptimize(s->sends(rank, step));
    else benchmark::DoNotOptimize(s->receives(rank, step));
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_BinomialPipelineQuery<true>)->Name("BM_BinomialPipelineSends/n:512/B:256");
BENCHMARK(BM_BinomialPipelineQuery<false>)->Name("BM_BinomialPipelineReceives/n:512/B:256");

// ---------------------------------------------------------------------------
// ACK tree: children() for n = 1024

void BM_TreeChildren(benchmark::State& state) {
  const auto radix = static_cast<std::uint32_t>(state.range(0));
  const hmcast::ack_tree::Tree tree(1024, 0, radix);
  std::uint32_t rank = 0;
  std::size_t total = 0;
  for (auto _ : state) {
    const auto c = tree.children(rank);
    total += c.size();
    benchmark::DoNotOptimize(c);
    rank = (rank + 389) & 1023U;  // 389 is odd: visits every rank
  }
  benchmark::DoNotOptimize(total);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_TreeChildren)->ArgName("radix")->Arg(2)->Arg(4);

// ---------------------------------------------------------------------------
// Progress loop: 4 engines in one process, one broadcast at a time

/// Member 1 broadcasts on the shared in-memory network (whole runtimes), then time
/// moves until member 1 sees the message completed. False if that never happens.
bool one_message(hmcast::testing::MemNet& net, const MessageBuffer& msg, std::uint64_t& packets,
                 std::uint64_t& deliveries) {
  const auto r = net.broadcast(1, msg);
  if (r.error != hmcast::small::BroadcastError::none) return false;
  for (int rounds = 0; net.completed[1].empty() || net.completed[1].back() != r.seq; ++rounds) {
    if (rounds > 100'000) return false;
    net.advance(200);
  }
  packets += net.sent.size();
  for (auto& [m, d] : net.delivered) deliveries += d.size();
  net.sent.clear();  // the logs would grow with every iteration
  net.delivered.clear();
  return true;
}

void BM_ProgressLoop(benchmark::State& state) {
  constexpr std::uint32_t kN = 4;
  const auto msg = filled(static_cast<std::size_t>(state.range(0)));
  hmcast::testing::MemNet net(hmcast::testing::MemNet::Options{});
  const View view = numbered_view(kN);
  for (MemberId m : view.members) net.add(m, view);
  std::uint64_t packets = 0;
  std::uint64_t deliveries = 0;
  for (auto _ : state) {
    if (!one_message(net, msg, packets, deliveries)) {
      state.SkipWithError("a broadcast did not complete");
      break;
    }
  }
  const auto n = static_cast<double>(state.iterations());
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
  state.counters["pkts/msg"] = static_cast<double>(packets) / n;
  state.counters["deliv/msg"] = static_cast<double>(deliveries) / n;
}
BENCHMARK(BM_ProgressLoop)->ArgName("bytes")->Arg(64)->Arg(1024)->Arg(8192);

}  // namespace
