#include "ack_tree/host_tree.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <stdexcept>
#include <vector>

using hmcast::ack_tree::HostTree;
using hmcast::ack_tree::Tree;
using U32s = std::vector<std::uint32_t>;
using Hosts = std::vector<std::uint64_t>;

namespace {

/// What every ACK tree owes: one root, each other rank's parent lists it as a child
/// exactly once, depths, sizes and heights agree with the parent links.
void check_consistent(const HostTree& t, std::uint32_t root) {
  const std::uint32_t n = t.n();
  REQUIRE_FALSE(t.parent(root).has_value());
  REQUIRE(t.subtree_size(root) == n);
  std::uint32_t max_depth = 0;
  for (std::uint32_t r = 0; r < n; ++r) {
    std::uint32_t size = 1;
    std::uint32_t height = 0;
    for (auto c : t.children(r)) {
      REQUIRE(t.parent(c) == r);
      REQUIRE(t.depth(c) == t.depth(r) + 1);
      size += t.subtree_size(c);
      height = std::max(height, t.subtree_height(c) + 1);
    }
    REQUIRE(t.subtree_size(r) == size);
    REQUIRE(t.subtree_height(r) == height);
    const auto sub = t.subtree(r);
    REQUIRE(sub.size() == size);
    REQUIRE(sub.front() == r);
    REQUIRE(std::set<std::uint32_t>(sub.begin(), sub.end()).size() == size);
    if (r != root) REQUIRE(t.parent(r).has_value());
    max_depth = std::max(max_depth, t.depth(r));
  }
  REQUIRE(t.subtree_height(root) == max_depth);
}

/// The two-level promise: a host other than the root's is entered by exactly one
/// edge, into its leader (smallest rank), whose subtree is exactly that host.
void check_by_host(const HostTree& t, std::uint32_t root, const Hosts& host_of) {
  const std::uint32_t n = t.n();
  std::uint32_t crossing = 0;
  for (std::uint32_t r = 0; r < n; ++r) {
    const auto p = t.parent(r);
    if (!p || host_of[*p] == host_of[r]) continue;
    ++crossing;
    REQUIRE(host_of[r] != host_of[root]);
    const auto first = static_cast<std::uint32_t>(std::find(host_of.begin(), host_of.end(), host_of[r]) -
                                                  host_of.begin());
    REQUIRE(r == first);  // the leader
    std::uint32_t on_host = 0;
    for (auto s : t.subtree(r))
      if (host_of[s] == host_of[r]) ++on_host;
    REQUIRE(on_host == static_cast<std::uint32_t>(std::count(host_of.begin(), host_of.end(), host_of[r])));
  }
  REQUIRE(crossing == std::set<std::uint64_t>(host_of.begin(), host_of.end()).size() - 1);
}

}  // namespace

TEST_CASE("host_tree: one host, or a host per member, is the flat tree", "[ack_tree]") {
  for (std::uint32_t n = 1; n <= 20; ++n)
    for (std::uint32_t radix = 2; radix <= 4; ++radix)
      for (std::uint32_t root = 0; root < n; ++root) {
        const Tree flat(n, root, radix);
        Hosts one(n, 7);
        Hosts each(n);
        for (std::uint32_t r = 0; r < n; ++r) each[r] = 100 + r;
        for (const Hosts& hosts : {Hosts{}, one, each}) {
          const HostTree t(n, root, radix, hosts);
          REQUIRE_FALSE(t.by_host());
          for (std::uint32_t r = 0; r < n; ++r) {
            REQUIRE(t.parent(r) == flat.parent(r));
            REQUIRE(t.children(r) == flat.children(r));
            REQUIRE(t.subtree(r) == flat.subtree(r));
          }
        }
      }
}

TEST_CASE("host_tree: two hosts of four, rooted on either", "[ack_tree]") {
  // Ranks 0..7, interleaved across hosts A and B as ids from two namespaces may be.
  const Hosts hosts{1, 2, 1, 2, 1, 2, 1, 2};
  const HostTree t(8, 2, 2, hosts);
  REQUIRE(t.by_host());
  check_consistent(t, 2);
  check_by_host(t, 2, hosts);
  // The root's host: a binomial tree over ranks {0, 2, 4, 6} rooted at 2; host B
  // hangs under the root through its leader, rank 1.
  REQUIRE(t.parent(1) == 2U);
  REQUIRE(t.subtree(1).size() == 4);
  REQUIRE(t.children(2).front() == 1U);  // the largest subtree (the remote host) first
  for (std::uint32_t r : {3U, 5U, 7U}) {
    REQUIRE(t.parent(r).has_value());
    REQUIRE(hosts[*t.parent(r)] == 2);
  }
}

TEST_CASE("host_tree: properties hold for random layouts", "[ack_tree]") {
  std::mt19937_64 rng(18);
  for (int trial = 0; trial < 2000; ++trial) {
    const auto n = static_cast<std::uint32_t>(2 + rng() % 40);
    const auto hosts = static_cast<std::uint32_t>(1 + rng() % n);
    const auto radix = static_cast<std::uint32_t>(2 + rng() % 3);
    const auto root = static_cast<std::uint32_t>(rng() % n);
    Hosts host_of(n);
    for (auto& h : host_of) h = rng() % hosts;
    const HostTree t(n, root, radix, host_of);
    check_consistent(t, root);
    if (t.by_host()) check_by_host(t, root, host_of);
  }
}

TEST_CASE("host_tree: bad arguments throw", "[ack_tree]") {
  REQUIRE_THROWS_AS(HostTree(4, 0, 2, Hosts{1, 2}), std::invalid_argument);
  REQUIRE_THROWS_AS(HostTree(4, 4, 2, Hosts{}), std::invalid_argument);
  const HostTree t(4, 0, 2, Hosts{1, 1, 2, 2});
  REQUIRE_THROWS_AS(t.parent(4), std::out_of_range);
  REQUIRE_THROWS_AS(t.subtree(9), std::out_of_range);
}
