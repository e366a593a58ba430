// Micro-benchmarks of the hot paths: encode/decode of the wire format.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/wire.hpp"

namespace {

void BM_EncodeData(benchmark::State& state) {
  std::vector<std::byte> payload(static_cast<std::size_t>(state.range(0)));
  hmcast::wire::Header h{hmcast::wire::Type::data, 1, 1, 3};
  hmcast::wire::Data d;
  d.sender = 3;
  d.seq = 42;
  d.msg_len = static_cast<std::uint32_t>(payload.size());
  d.payload = payload;
  for (auto _ : state) benchmark::DoNotOptimize(hmcast::wire::encode(h, d));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_EncodeData)->Arg(64)->Arg(1500)->Arg(4000);

void BM_DecodeData(benchmark::State& state) {
  std::vector<std::byte> payload(static_cast<std::size_t>(state.range(0)));
  hmcast::wire::Header h{hmcast::wire::Type::data, 1, 1, 3};
  hmcast::wire::Data d;
  d.sender = 3;
  d.seq = 42;
  d.msg_len = static_cast<std::uint32_t>(payload.size());
  d.payload = payload;
  const auto bytes = hmcast::wire::encode(h, d);
  for (auto _ : state) benchmark::DoNotOptimize(hmcast::wire::decode(bytes));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_DecodeData)->Arg(64)->Arg(1500)->Arg(4000);

// ACKs with `range(0)` entries (one per stream the child reports on).
hmcast::wire::Ack make_ack(std::int64_t entries) {
  hmcast::wire::Ack a;
  for (std::int64_t i = 0; i < entries; ++i) {
    const auto u = static_cast<std::uint64_t>(i);
    a.entries.push_back(hmcast::wire::AckEntry{static_cast<std::uint32_t>(i + 1), 100 + u, 120 + u, 0b1010});
  }
  return a;
}

void BM_EncodeAck(benchmark::State& state) {
  const hmcast::wire::Header h{hmcast::wire::Type::ack, 1, 1, 3};
  const hmcast::wire::Body body = make_ack(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(hmcast::wire::encode(h, body));
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_EncodeAck)->ArgName("entries")->Arg(1)->Arg(16)->Arg(64);

void BM_DecodeAck(benchmark::State& state) {
  const hmcast::wire::Header h{hmcast::wire::Type::ack, 1, 1, 3};
  const auto bytes = hmcast::wire::encode(h, make_ack(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(hmcast::wire::decode(bytes));
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_DecodeAck)->ArgName("entries")->Arg(1)->Arg(16)->Arg(64)->Arg(1024);

// Refusing bad input must be cheap: a Data packet cut inside its fixed fields, and one
// whose ACK count claims far more entries than the packet holds.
void BM_DecodeRejectTruncated(benchmark::State& state) {
  std::vector<std::byte> payload(64);
  hmcast::wire::Data d;
  d.seq = 1;
  d.msg_len = 64;
  d.payload = payload;
  auto bytes = hmcast::wire::encode(hmcast::wire::Header{hmcast::wire::Type::data, 1, 1, 3}, d);
  bytes.resize(hmcast::wire::kHeaderSize + 10);
  for (auto _ : state) benchmark::DoNotOptimize(hmcast::wire::decode(bytes));
}
BENCHMARK(BM_DecodeRejectTruncated);

void BM_DecodeRejectAckCount(benchmark::State& state) {
  auto bytes = hmcast::wire::encode(hmcast::wire::Header{hmcast::wire::Type::ack, 1, 1, 3}, make_ack(2));
  bytes[hmcast::wire::kHeaderSize + 2] = std::byte{0x0f};  // count ~1M
  for (auto _ : state) benchmark::DoNotOptimize(hmcast::wire::decode(bytes));
}
BENCHMARK(BM_DecodeRejectAckCount);

}  // namespace
