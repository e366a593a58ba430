// Block-transfer schedules (src/large): simulate every schedule step by step.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <catch2/catch.hpp>

#include "large/schedule.hpp"

using hmcast::LargeAlgorithm;
using hmcast::large::ceil_log2;
using hmcast::large::make_schedule;
using hmcast::large::parse_algorithm;
using hmcast::large::to_string;
using hmcast::large::Hop;

namespace {

constexpr LargeAlgorithm kAlgorithms[] = {LargeAlgorithm::sequential, LargeAlgorithm::chain, LargeAlgorithm::binomial_tree,
                                     LargeAlgorithm::binomial_pipeline};

double test_scale() {
  const char* s = std::getenv("HMCAST_TEST_SCALE");
  if (s == nullptr || *s == '\0') return 1.0;
  const double v = std::strtod(s, nullptr);
  return v > 0.0 ? std::min(v, 1.0) : 1.0;
}

std::uint32_t scaled(std::uint32_t full, std::uint32_t floor_value) {
  const auto v = static_cast<std::uint32_t>(std::lround(static_cast<double>(full) * test_scale()));
  return std::max(std::min(v, full), floor_value);
}

std::uint64_t expected_steps(LargeAlgorithm a, std::uint64_t n, std::uint64_t b) {
  if (n == 1) return 0;
  const std::uint64_t log = ceil_log2(static_cast<std::uint32_t>(n));
  switch (a) {
    case LargeAlgorithm::sequential: return b * (n - 1);
    case LargeAlgorithm::chain: return b + n - 2;
    case LargeAlgorithm::binomial_tree: return b * log;
    case LargeAlgorithm::binomial_pipeline: return b + log - 1;
  }
  return 0;
}

bool transfer_less(const Hop& x, const Hop& y) {
  return std::tie(x.from, x.to, x.block) < std::tie(y.from, y.to, y.block);
}

std::string describe(const Hop& t) {
  std::ostringstream os;
  os << t.from << "->" << t.to << " block " << t.block;
  return os.str();
}

// Runs the schedule; returns an empty string if every property holds, else the first violation.
std::string simulate(LargeAlgorithm a, std::uint32_t n, std::uint32_t root, std::uint32_t b) {
  std::ostringstream err;
  const auto s = make_schedule(a, n, root, b);
  const std::uint32_t steps = s->steps();
  if (steps != expected_steps(a, n, b)) {
    err << "steps() = " << steps << ", expected " << expected_steps(a, n, b);
    return err.str();
  }
  // held[r * b + k]: rank r has block k at the start of the current step.
  std::vector<std::uint8_t> held(std::size_t{n} * b, 0);
  std::fill_n(held.begin() + static_cast<std::ptrdiff_t>(std::size_t{root} * b), b, std::uint8_t{1});
  std::vector<Hop> sent;
  std::vector<Hop> got;
  for (std::uint32_t step = 0; step < steps; ++step) {
    sent.clear();
    got.clear();
    for (std::uint32_t r = 0; r < n; ++r) {
      const auto out = s->sends(r, step);
      if (out.size() > 1) {
        err << "step " << step << ": rank " << r << " sends " << out.size() << " transfers";
        return err.str();
      }
      for (const Hop& t : out) {
        if (t.from != r || t.to >= n || t.to == r || t.block >= b) {
          err << "step " << step << ": rank " << r << " reports bad send " << describe(t);
          return err.str();
        }
        if (held[std::size_t{r} * b + t.block] == 0) {
          err << "step " << step << ": rank " << r << " sends block " << t.block << " it does not hold";
          return err.str();
        }
        sent.push_back(t);
      }
    }
    for (std::uint32_t r = 0; r < n; ++r) {
      const auto in = s->receives(r, step);
      if (in.size() > 1) {
        err << "step " << step << ": rank " << r << " receives " << in.size() << " transfers";
        return err.str();
      }
      for (const Hop& t : in) {
        if (t.to != r || t.from >= n || t.from == r || t.block >= b) {
          err << "step " << step << ": rank " << r << " reports bad receive " << describe(t);
          return err.str();
        }
        if (held[std::size_t{r} * b + t.block] != 0) {
          err << "step " << step << ": rank " << r << " receives block " << t.block
              << (r == root ? " (it is the root)" : " a second time");
          return err.str();
        }
        got.push_back(t);
      }
    }
    std::sort(sent.begin(), sent.end(), transfer_less);
    std::sort(got.begin(), got.end(), transfer_less);
    if (sent != got) {
      err << "step " << step << ": sends and receives disagree (" << sent.size() << " sends, " << got.size()
          << " receives)";
      for (const Hop& t : sent) {
        if (!std::binary_search(got.begin(), got.end(), t, transfer_less)) err << "; unmatched send " << describe(t);
      }
      for (const Hop& t : got) {
        if (!std::binary_search(sent.begin(), sent.end(), t, transfer_less)) {
          err << "; unmatched receive " << describe(t);
        }
      }
      return err.str();
    }
    // Blocks received in this step may be forwarded from the next step on.
    for (const Hop& t : got) held[std::size_t{t.to} * b + t.block] = 1;
  }
  for (std::uint32_t r = 0; r < n; ++r) {
    for (std::uint32_t k = 0; k < b; ++k) {
      if (held[std::size_t{r} * b + k] == 0) {
        err << "after " << steps << " steps rank " << r << " lacks block " << k;
        return err.str();
      }
    }
    if (!s->sends(r, steps).empty() || !s->receives(r, steps).empty()) {
      err << "rank " << r << " has transfers in step steps() = " << steps;
      return err.str();
    }
  }
  return {};
}

struct Case {
  LargeAlgorithm algorithm;
  std::uint32_t n;
  std::uint32_t root;
  std::uint32_t blocks;
};

// Simulates all cases (spread over a few threads: the checks are pure functions) and reports
// every failing one through Catch on the calling thread.
void check_cases(const std::vector<Case>& cases) {
  std::vector<std::string> problems(cases.size());
  std::atomic<std::size_t> next{0};
  auto worker = [&] {
    for (std::size_t i = next.fetch_add(1); i < cases.size(); i = next.fetch_add(1)) {
      const Case& c = cases[i];
      try {
        problems[i] = simulate(c.algorithm, c.n, c.root, c.blocks);
      } catch (const std::exception& e) {
        problems[i] = std::string("exception: ") + e.what();
      }
    }
  };
  const std::size_t threads = std::clamp<std::size_t>(std::thread::hardware_concurrency(), 1, 8);
  std::vector<std::thread> pool;
  for (std::size_t t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();

  std::size_t failures = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    if (problems[i].empty()) continue;
    const Case& c = cases[i];
    if (++failures <= 20) {
      FAIL_CHECK(to_string(c.algorithm) << " n=" << c.n << " root=" << c.root << " blocks=" << c.blocks
                                        << ": " << problems[i]);
    }
  }
  INFO(cases.size() << " schedules simulated");
  CHECK(failures == 0);
}

std::vector<std::uint32_t> roots_for(std::uint32_t n) {
  std::vector<std::uint32_t> roots{0, n - 1, n / 2};
  std::sort(roots.begin(), roots.end());
  roots.erase(std::unique(roots.begin(), roots.end()), roots.end());
  return roots;
}

void exhaustive(LargeAlgorithm a) {
  const std::uint32_t max_n = scaled(64, 9);
  const std::uint32_t max_b = scaled(64, 5);
  std::vector<Case> cases;
  for (std::uint32_t n = 1; n <= max_n; ++n) {
    for (std::uint32_t b = 1; b <= max_b; ++b) {
      for (std::uint32_t root : roots_for(n)) cases.push_back({a, n, root, b});
    }
  }
  check_cases(cases);
}

}  // namespace

TEST_CASE("algorithm names round-trip", "[schedule]") {
  for (LargeAlgorithm a : kAlgorithms) CHECK(parse_algorithm(to_string(a)) == a);
  CHECK(parse_algorithm("tree") == LargeAlgorithm::binomial_tree);
  CHECK(parse_algorithm("binomial_tree") == LargeAlgorithm::binomial_tree);
  CHECK(parse_algorithm("sequential") == LargeAlgorithm::sequential);
  CHECK(parse_algorithm("chain") == LargeAlgorithm::chain);
  CHECK(parse_algorithm("binomial_pipeline") == LargeAlgorithm::binomial_pipeline);
  CHECK_FALSE(parse_algorithm("").has_value());
  CHECK_FALSE(parse_algorithm("Chain").has_value());
  CHECK_FALSE(parse_algorithm("pipeline").has_value());
}

TEST_CASE("make_schedule rejects bad arguments", "[schedule]") {
  for (LargeAlgorithm a : kAlgorithms) {
    CHECK_THROWS_AS(make_schedule(a, 0, 0, 1), std::invalid_argument);
    CHECK_THROWS_AS(make_schedule(a, 4, 4, 1), std::invalid_argument);
    CHECK_THROWS_AS(make_schedule(a, 4, 0, 0), std::invalid_argument);
    const auto s = make_schedule(a, 5, 2, 3);
    CHECK(s->algorithm() == a);
    CHECK(s->members() == 5);
    CHECK(s->root() == 2);
    CHECK(s->blocks() == 3);
    CHECK_THROWS_AS(s->sends(5, 0), std::out_of_range);
    CHECK_THROWS_AS(s->receives(7, 0), std::out_of_range);
  }
  // Step counts that do not fit a 32-bit counter.
  CHECK_THROWS_AS(make_schedule(LargeAlgorithm::sequential, 70000, 0, 70000), std::invalid_argument);
  CHECK_THROWS_AS(make_schedule(LargeAlgorithm::binomial_tree, 1U << 20, 0, 1U << 31), std::invalid_argument);
  CHECK_NOTHROW(make_schedule(LargeAlgorithm::binomial_pipeline, 1U << 20, 0, 1U << 31));
  try {
    (void)make_schedule(LargeAlgorithm::chain, 3, 9, 1);
    FAIL("no exception");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("root 9") != std::string::npos);
  }
}

TEST_CASE("single member: nothing to do", "[schedule]") {
  for (LargeAlgorithm a : kAlgorithms) {
    const auto s = make_schedule(a, 1, 0, 17);
    CHECK(s->steps() == 0);
    CHECK(s->sends(0, 0).empty());
    CHECK(s->receives(0, 0).empty());
  }
}

TEST_CASE("small schedules look as documented", "[schedule]") {
  using V = std::vector<Hop>;
  // Chain 0 -> 1 -> 2 rooted at 1: relative order 1, 2, 0.
  const auto chain = make_schedule(LargeAlgorithm::chain, 3, 1, 2);
  CHECK(chain->steps() == 3);
  CHECK(chain->sends(1, 0) == V{{1, 2, 0}});
  CHECK(chain->receives(0, 1) == V{{2, 0, 0}});
  CHECK(chain->receives(0, 2) == V{{2, 0, 1}});
  // Hypercube of 4 at root 0: step 0 root -> 1 (block 0), step 1 root -> 2 (block 1), 1 -> 3.
  const auto pipe = make_schedule(LargeAlgorithm::binomial_pipeline, 4, 0, 3);
  CHECK(pipe->steps() == 4);
  CHECK(pipe->sends(0, 0) == V{{0, 1, 0}});
  CHECK(pipe->sends(0, 1) == V{{0, 2, 1}});
  CHECK(pipe->sends(1, 1) == V{{1, 3, 0}});
  // Sequential: whole message to relative rank 1 first.
  const auto seq = make_schedule(LargeAlgorithm::sequential, 3, 2, 2);
  CHECK(seq->receives(0, 0) == V{{2, 0, 0}});
  CHECK(seq->receives(0, 1) == V{{2, 0, 1}});
  CHECK(seq->receives(1, 2) == V{{2, 1, 0}});
}

TEST_CASE("sequential: exhaustive small groups", "[schedule]") { exhaustive(LargeAlgorithm::sequential); }
TEST_CASE("chain: exhaustive small groups", "[schedule]") { exhaustive(LargeAlgorithm::chain); }
TEST_CASE("binomial tree: exhaustive small groups", "[schedule]") { exhaustive(LargeAlgorithm::binomial_tree); }
TEST_CASE("binomial pipeline: exhaustive small groups", "[schedule]") {
  exhaustive(LargeAlgorithm::binomial_pipeline);
}

TEST_CASE("schedules: spot checks up to 1024 members", "[schedule]") {
  const double scale = test_scale();
  const std::uint32_t sizes[] = {100, 127, 128, 129, 255, 256, 500, 512, 1000, 1023, 1024};
  const std::uint32_t block_counts[] = {1, 7, 256};
  std::vector<Case> cases;
  for (LargeAlgorithm a : kAlgorithms) {
    for (std::uint32_t n : sizes) {
      if (scale < 1.0 && n > std::max(130.0, 1024.0 * scale)) continue;  // keep 100, 127..129
      for (std::uint32_t b : block_counts) {
        // Sequential is O(B*n) steps of O(n) queries each: keep its 256-block runs to n <= 129.
        if (b == 256 && a == LargeAlgorithm::sequential && n > 129) continue;
        if (scale < 1.0 && b == 256 && a != LargeAlgorithm::binomial_pipeline) continue;
        for (std::uint32_t root : {0U, n - 1, n / 3}) cases.push_back({a, n, root, b});
      }
    }
  }
  // Many blocks: one block per step per link far beyond the warm-up.
  cases.push_back({LargeAlgorithm::binomial_pipeline, 1023, 5, scaled(4096, 300)});
  cases.push_back({LargeAlgorithm::binomial_pipeline, 768, 700, scaled(4096, 300)});
  cases.push_back({LargeAlgorithm::chain, 100, 5, scaled(4096, 300)});
  check_cases(cases);
}

TEST_CASE("schedules: randomized", "[schedule]") {
  std::mt19937_64 rng(0x5eed'4d43'6173'7421ULL);
  const std::uint32_t draws = scaled(200, 20);
  std::vector<Case> cases;
  for (std::uint32_t i = 0; i < draws; ++i) {
    const LargeAlgorithm a = kAlgorithms[std::uniform_int_distribution<std::size_t>(0, 3)(rng)];
    const auto n = std::uniform_int_distribution<std::uint32_t>(1, 300)(rng);
    const auto root = std::uniform_int_distribution<std::uint32_t>(0, n - 1)(rng);
    const auto b = std::uniform_int_distribution<std::uint32_t>(1, 300)(rng);
    cases.push_back({a, n, root, b});
  }
  check_cases(cases);
}

TEST_CASE("binomial pipeline: per-node work is one send and one receive in steady state", "[schedule]") {
  // After the warm-up of ceil(log2 n) steps and before the last block leaves the root, every
  // non-root rank receives a block in every step.
  for (std::uint32_t n : {5U, 6U, 7U, 8U, 12U, 33U, 100U}) {
    const std::uint32_t b = 40;
    const auto s = make_schedule(LargeAlgorithm::binomial_pipeline, n, 0, b);
    const std::uint32_t log = ceil_log2(n);
    for (std::uint32_t step = log; step + log < b; ++step) {
      for (std::uint32_t r = 1; r < n; ++r) {
        INFO("n=" << n << " rank=" << r << " step=" << step);
        CHECK(s->receives(r, step).size() == 1);
      }
    }
  }
}
