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

GroupKey key_under(Cipher c) {
  GroupKey k = generate_key();
  k.cipher = c;
  return k;
}

/// range(0): frame bytes; range(1): the cipher (KeyCipher's value).
void BM_SealFrame(benchmark::State& state) {
  const auto cipher = static_cast<Cipher>(state.range(1));
  if (!cipher_available(cipher)) {
    state.SkipWithError("this CPU cannot run the cipher");
    return;
  }
  const ChannelKey key(key_under(cipher), 1, 1, kMulticastChannel);
  const auto n = static_cast<std::size_t>(state.range(0));
  std::vector<std::byte> frame(n + kTrailerBytes);
  std::uint64_t counter = 0;
  for (auto _ : state) {
    frame.resize(n);
    seal(key, 3, ++counter, frame);
    benchmark::DoNotOptimize(frame.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_SealFrame)->ArgsProduct({{64, 2048, 65536}, {1, 2}});

void BM_OpenFrame(benchmark::State& state) {
  const auto cipher = static_cast<Cipher>(state.range(1));
  if (!cipher_available(cipher)) {
    state.SkipWithError("this CPU cannot run the cipher");
    return;
  }
  const ChannelKey key(key_under(cipher), 1, 1, kMulticastChannel);
  const auto n = static_cast<std::size_t>(state.range(0));
  std::vector<std::byte> frame(n);
  seal(key, 3, 1, frame);
  ReplayWindow window;
  for (auto _ : state) {
    auto ok = open(key, 3, frame);
    benchmark::DoNotOptimize(ok);
    benchmark::DoNotOptimize(window.accept(ok->counter));
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_OpenFrame)->ArgsProduct({{64, 2048, 65536}, {1, 2}});

void BM_DeriveChannelKey(benchmark::State& state) {
  const GroupKey g = generate_key();
  std::uint64_t view = 0;
  for (auto _ : state) benchmark::DoNotOptimize(ChannelKey(g, 1, ++view, kMulticastChannel));
}
BENCHMARK(BM_DeriveChannelKey);

}  // namespace
