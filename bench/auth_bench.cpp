// What the group key's tags cost per frame (issue 21's budget: at most 10% on
// 2 KiB all-acked latency and on 64 MiB throughput): seal and open of one frame,
// by size. Bytes/s is the frame's bytes.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <vector>

#include "auth/frame_auth.hpp"
#include "auth/group_key.hpp"

namespace {

using namespace hmcast::auth;

void BM_SealFrame(benchmark::State& state) {
  const ViewKey key = derive_view_key(generate_key(), 1, 1);
  const auto n = static_cast<std::size_t>(state.range(0));
  std::vector<std::byte> frame(n + kTrailerBytes);
  std::uint64_t counter = 0;
  for (auto _ : state) {
    frame.resize(n);
    seal(key, 3, kMulticastChannel, ++counter, frame);
    benchmark::DoNotOptimize(frame.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_SealFrame)->Arg(64)->Arg(2048)->Arg(65536);

void BM_OpenFrame(benchmark::State& state) {
  const ViewKey key = derive_view_key(generate_key(), 1, 1);
  const auto n = static_cast<std::size_t>(state.range(0));
  std::vector<std::byte> frame(n);
  seal(key, 3, kMulticastChannel, 1, frame);
  ReplayWindow window;
  for (auto _ : state) {
    auto ok = open(key, 3, kMulticastChannel, frame);
    benchmark::DoNotOptimize(ok);
    benchmark::DoNotOptimize(window.accept(ok->counter));
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_OpenFrame)->Arg(64)->Arg(2048)->Arg(65536);

void BM_DeriveViewKey(benchmark::State& state) {
  const GroupKey g = generate_key();
  std::uint64_t view = 0;
  for (auto _ : state) benchmark::DoNotOptimize(derive_view_key(g, 1, ++view));
}
BENCHMARK(BM_DeriveViewKey);

}  // namespace
