#include "large/host_schedule.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <tuple>
#include <vector>

using hmcast::LargeAlgorithm;
using hmcast::large::by_host;
using hmcast::large::Hop;
using hmcast::large::host_plan;
using hmcast::large::RankPlan;
using Hosts = std::vector<std::uint64_t>;

namespace {

std::vector<RankPlan> plans(LargeAlgorithm a, std::uint32_t root, std::uint32_t blocks, const Hosts& host_of) {
  std::vector<RankPlan> out;
  for (std::uint32_t r = 0; r < host_of.size(); ++r) out.push_back(host_plan(a, root, blocks, host_of, r));
  return out;
}

/// Runs the plans as the pipeline does (large/pipeline.cpp): each rank sends in its
/// order, a block only once it holds it and only on a credit; a receiver grants
/// credits in its receive order, `window` blocks ahead of what it holds. True when
/// every rank ends with every block, each received once.
bool runs_to_the_end(const std::vector<RankPlan>& p, std::uint32_t root, std::uint32_t blocks, std::uint32_t window) {
  const auto n = static_cast<std::uint32_t>(p.size());
  std::vector<std::vector<bool>> have(n, std::vector<bool>(blocks, false));
  std::vector<std::uint32_t> held(n, 0);
  have[root].assign(blocks, true);
  held[root] = blocks;
  std::vector<std::size_t> next(n, 0);
  std::map<std::pair<std::uint32_t, std::uint32_t>, std::uint32_t> sent;  // (from, to) -> blocks sent
  const auto credit = [&](std::uint32_t from, std::uint32_t to) {
    const auto& order = p[to].receives;
    const std::size_t granted = std::min<std::size_t>(order.size(), held[to] + window);
    return static_cast<std::uint32_t>(
        std::count_if(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(granted),
                      [&](const Hop& h) { return h.from == from; }));
  };
  for (bool moved = true; moved;) {
    moved = false;
    for (std::uint32_t r = 0; r < n; ++r) {
      while (next[r] < p[r].sends.size()) {
        const Hop& h = p[r].sends[next[r]];
        if (!have[r][h.block] || sent[{r, h.to}] >= credit(r, h.to)) break;
        if (have[h.to][h.block]) return false;  // a block received twice
        have[h.to][h.block] = true;
        ++held[h.to];
        ++sent[{r, h.to}];
        ++next[r];
        moved = true;
      }
    }
  }
  for (std::uint32_t r = 0; r < n; ++r)
    if (held[r] != blocks || next[r] != p[r].sends.size()) return false;
  return true;
}

void check(LargeAlgorithm a, std::uint32_t root, std::uint32_t blocks, const Hosts& host_of) {
  INFO("algorithm " << static_cast<int>(a) << ", root " << root << ", blocks " << blocks << ", ranks "
                    << host_of.size());
  const auto p = plans(a, root, blocks, host_of);
  const auto n = static_cast<std::uint32_t>(host_of.size());
  std::multiset<std::tuple<std::uint32_t, std::uint32_t, std::uint32_t>> sends, receives;
  std::uint64_t crossing = 0;
  for (std::uint32_t r = 0; r < n; ++r) {
    std::set<std::uint32_t> got;
    for (const Hop& h : p[r].receives) {
      REQUIRE(h.to == r);
      got.insert(h.block);
      receives.insert({h.from, h.to, h.block});
      if (host_of[h.from] != host_of[r]) ++crossing;
    }
    REQUIRE(p[r].receives.size() == (r == root ? 0U : blocks));  // each block once
    REQUIRE(got.size() == (r == root ? 0U : blocks));
    for (const Hop& h : p[r].sends) {
      REQUIRE(h.from == r);
      sends.insert({h.from, h.to, h.block});
    }
  }
  REQUIRE(sends == receives);  // both sides agree on every transfer
  // Each block enters each other host once.
  REQUIRE(crossing == std::uint64_t{blocks} * (std::set<std::uint64_t>(host_of.begin(), host_of.end()).size() - 1));
  REQUIRE(runs_to_the_end(p, root, blocks, 1));
}

}  // namespace

TEST_CASE("host schedule: which layouts take it", "[large][schedule]") {
  CHECK_FALSE(by_host(Hosts{}));
  CHECK_FALSE(by_host(Hosts{1, 1, 1}));     // one host
  CHECK_FALSE(by_host(Hosts{1, 2, 3}));     // a host each: the flat schedule is the same
  CHECK(by_host(Hosts{1, 2, 1}));
}

TEST_CASE("host schedule: two hosts of four, every algorithm, every root", "[large][schedule]") {
  const Hosts interleaved{1, 2, 1, 2, 1, 2, 1, 2};
  for (auto a : {LargeAlgorithm::binomial_pipeline, LargeAlgorithm::chain, LargeAlgorithm::sequential,
                 LargeAlgorithm::binomial_tree})
    for (std::uint32_t root = 0; root < 8; ++root)
      for (std::uint32_t blocks : {1U, 2U, 7U, 64U}) check(a, root, blocks, interleaved);
}

TEST_CASE("host schedule: random layouts", "[large][schedule]") {
  std::mt19937_64 rng(1818);
  for (int trial = 0; trial < 300; ++trial) {
    const auto n = static_cast<std::uint32_t>(2 + rng() % 20);
    const auto hosts = static_cast<std::uint32_t>(2 + rng() % 4);
    Hosts host_of(n);
    for (auto& h : host_of) h = rng() % hosts;
    if (!by_host(host_of)) continue;
    const auto a = std::vector<LargeAlgorithm>{LargeAlgorithm::binomial_pipeline, LargeAlgorithm::chain,
                                               LargeAlgorithm::sequential}[rng() % 3];
    check(a, static_cast<std::uint32_t>(rng() % n), static_cast<std::uint32_t>(1 + rng() % 40), host_of);
  }
}
