// Micro-benchmarks of the per-message decisions beyond the protocol engines:
//   - the policy's choice (path, radix, block size) for one message;
//   - one whole schedule step: every rank's sends() and receives() for one step, for
//     each large-path algorithm at n = 8 and n = 64 (what a group of that size asks
//     its schedules per step, all members together).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>

#include "policy/policy.hpp"
#include "policy/profile.hpp"
#include "large/schedule.hpp"

namespace {

void BM_PolicyChoose(benchmark::State& state) {
  const auto profile = hmcast::policy::builtin_profile("socket");
  std::uint64_t size = 1;
  for (auto _ : state) {
    size = size * 3 % (256ULL << 20) + 1;  // sizes from bytes to 256 MiB, both paths
    benchmark::DoNotOptimize(hmcast::policy::choose(profile, size, 8, 8192));
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_PolicyChoose);

void BM_ScheduleStep(benchmark::State& state) {
  using hmcast::LargeAlgorithm;
  const auto algorithm = static_cast<LargeAlgorithm>(state.range(0));
  const auto n = static_cast<std::uint32_t>(state.range(1));
  const auto s = hmcast::large::make_schedule(algorithm, n, 0, 64);
  std::uint32_t step = 0;
  for (auto _ : state) {
    for (std::uint32_t r = 0; r < n; ++r) {
      benchmark::DoNotOptimize(s->sends(r, step));
      benchmark::DoNotOptimize(s->receives(r, step));
    }
    step = (step + 1) % s->steps();
  }
  state.SetLabel(std::string(hmcast::large::to_string(algorithm)));
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * n);
}
BENCHMARK(BM_ScheduleStep)
    ->ArgNames({"algo", "n"})
    ->ArgsProduct({{static_cast<int>(hmcast::LargeAlgorithm::sequential),
                    static_cast<int>(hmcast::LargeAlgorithm::chain),
                    static_cast<int>(hmcast::LargeAlgorithm::binomial_tree),
                    static_cast<int>(hmcast::LargeAlgorithm::binomial_pipeline)},
                   {8, 64}});

}  // namespace
