#include "ack_tree/tree.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

using hmcast::ack_tree::Tree;
using U32s = std::vector<std::uint32_t>;

namespace {

constexpr std::uint32_t kMaxN = 1024;
constexpr std::uint32_t kRadices[] = {2, 3, 4, 8};
// Checking every rank of every root is O(n^2) calls per n (~360M per radix up to 1024), far
// over the time budget. The tree for root q is the root-0 tree relabelled by (rank - q) mod n,
// so: every rank of every root up to this n, and above it every rank for a few roots plus a
// sampled comparison against the root-0 tree for every root.
constexpr std::uint32_t kEveryRankEveryRootUpTo = 64;

double test_scale() {
  const char* env = std::getenv("HMCAST_TEST_SCALE");
  if (env == nullptr || *env == '\0') return 1.0;
  char* end = nullptr;
  const double v = std::strtod(env, &end);
  if (end == env || !(v > 0.0)) return 1.0;
  return std::min(v, 4.0);  // > 1 widens the sweep for soak runs; time grows ~scale^2
}

// Collects failures so a sweep over thousands of trees costs one assertion per (n, radix), while
// the first failure's message still says exactly which n/root/radix/rank broke.
struct Failures {
  std::size_t count = 0;
  std::string first;

  template <typename... Parts>
  void add(const Tree& t, const Parts&... parts) {
    if (count++ != 0) return;
    std::ostringstream os;
    os << "n=" << t.n() << " root=" << t.root() << " radix=" << t.radix() << ": ";
    (os << ... << parts);
    first = os.str();
  }
};

// Independent restatement of the spec: clear the least-significant nonzero base-radix digit
// of the relative rank, by explicit digit vectors rather than the library's power arithmetic.
std::optional<std::uint32_t> oracle_parent(std::uint32_t n, std::uint32_t root,
                                           std::uint32_t radix, std::uint32_t rank) {
  const std::uint64_t r = (std::uint64_t{rank} + n - root) % n;
  if (r == 0) return std::nullopt;
  std::vector<std::uint64_t> digits;
  for (std::uint64_t x = r; x != 0; x /= radix) digits.push_back(x % radix);
  for (auto& d : digits) {
    if (d != 0) {
      d = 0;
      break;
    }
  }
  std::uint64_t p = 0;
  for (auto it = digits.rbegin(); it != digits.rend(); ++it) p = p * radix + *it;
  return static_cast<std::uint32_t>((p + root) % n);
}

std::uint32_t rotate(std::uint32_t rank, std::uint32_t from_root, std::uint32_t to_root,
                     std::uint32_t n) {
  return static_cast<std::uint32_t>((std::uint64_t{rank} + n - from_root + to_root) % n);
}

// Every property, checked on every rank of one tree. O(n log n) calls.
void check_every_rank(const Tree& t, Failures& f) {
  const std::uint32_t n = t.n();
  const std::uint32_t root = t.root();
  constexpr auto kNone = std::numeric_limits<std::uint32_t>::max();

  // Exactly one parent for non-roots, none for the root, and it is the k-nomial parent.
  U32s parent(n, kNone);
  for (std::uint32_t rank = 0; rank < n; ++rank) {
    const auto p = t.parent(rank);
    if (p != oracle_parent(n, root, t.radix(), rank)) f.add(t, "parent(", rank, ") != spec");
    if (rank == root) {
      if (p) f.add(t, "root has parent ", *p);
    } else if (!p || *p >= n || *p == rank) {
      f.add(t, "rank ", rank, " has no valid parent");
    } else {
      parent[rank] = *p;
    }
  }
  if (f.count != 0) return;  // the walks below assume a sane parent array

  // Spanning: walking parents reaches the root, in exactly depth() steps.
  U32s depth(n, 0);
  std::uint32_t max_depth = 0;
  for (std::uint32_t rank = 0; rank < n; ++rank) {
    std::uint32_t steps = 0;
    std::uint32_t x = rank;
    while (x != root && steps <= n) {
      x = parent[x];
      ++steps;
    }
    if (x != root) {
      f.add(t, "parents of ", rank, " never reach the root");
      return;
    }
    depth[rank] = steps;
    max_depth = std::max(max_depth, steps);
    if (t.depth(rank) != steps) f.add(t, "depth(", rank, ")=", t.depth(rank), " but walk=", steps);
  }
  if (t.height() != max_depth) f.add(t, "height()=", t.height(), " but max depth=", max_depth);
  if (t.height() > Tree::rounds(n, t.radix())) f.add(t, "height() > rounds()");

  // Subtree size and height from first principles: every rank counts toward each ancestor.
  U32s size(n, 0);
  U32s height(n, 0);
  for (std::uint32_t rank = 0; rank < n; ++rank) {
    for (std::uint32_t x = rank;; x = parent[x]) {
      ++size[x];
      height[x] = std::max(height[x], depth[rank] - depth[x]);
      if (x == root) break;
    }
  }

  // Children: consistent with parent (c in children(p) iff parent(c) == p), each non-root
  // listed once, ordered by non-increasing subtree size and height; sizes and heights add up;
  // children's subtree() lists are disjoint and with the node make up its subtree().
  U32s listed(n, 0);
  U32s mark(n, 0);
  U32s seen(n, 0);
  std::uint32_t stamp = 0;
  std::size_t total_children = 0;
  for (std::uint32_t p = 0; p < n; ++p) {
    if (t.subtree_size(p) != size[p]) f.add(t, "subtree_size(", p, ") != ", size[p]);
    if (t.subtree_height(p) != height[p]) f.add(t, "subtree_height(", p, ") != ", height[p]);

    const U32s kids = t.children(p);
    total_children += kids.size();
    std::uint64_t sum = 1;
    std::uint32_t kid_height = 0;
    ++stamp;
    std::size_t marked = 0;
    for (std::size_t i = 0; i < kids.size(); ++i) {
      const std::uint32_t c = kids[i];
      if (c >= n || c == root || parent[c] != p) {
        f.add(t, "children(", p, ") lists ", c, " whose parent is not ", p);
        return;
      }
      if (listed[c]++ != 0) f.add(t, "rank ", c, " listed as a child twice");
      if (i > 0 && (size[kids[i - 1]] < size[c] || height[kids[i - 1]] < height[c])) {
        f.add(t, "children(", p, ") not largest-subtree-first at index ", i);
      }
      sum += size[c];
      kid_height = std::max(kid_height, height[c] + 1);
      for (const std::uint32_t x : t.subtree(c)) {
        if (x >= n || mark[x] == stamp) {
          f.add(t, "subtrees of children of ", p, " overlap at ", x);
          return;
        }
        mark[x] = stamp;
        ++marked;
      }
    }
    if (sum != t.subtree_size(p)) f.add(t, "subtree sizes under ", p, " do not add up");
    if (kid_height != t.subtree_height(p)) f.add(t, "subtree_height(", p, ") != 1 + max child");

    const U32s sub = t.subtree(p);
    if (sub.size() != size[p] || sub.size() != marked + 1 || sub.empty() || sub[0] != p) {
      f.add(t, "subtree(", p, ") is not {", p, "} + children's subtrees");
      continue;
    }
    for (const std::uint32_t x : sub) {
      if (x >= n || seen[x] == stamp || (x != p && mark[x] != stamp)) {
        f.add(t, "subtree(", p, ") contains ", x, " twice or outside the children's subtrees");
        break;
      }
      seen[x] = stamp;
    }
  }
  if (total_children != n - 1) f.add(t, total_children, " children listed, expected ", n - 1);
}

// Compares a few ranks of `t` with the root-0 tree `t0` under relabelling, and walks one path
// to the root. O(log n) calls, cheap enough for every root of every n.
void check_rotated(const Tree& t, const Tree& t0, Failures& f) {
  const std::uint32_t n = t.n();
  const std::uint32_t root = t.root();
  if (t.height() != t0.height()) f.add(t, "height differs from root 0");
  if (t.parent(root)) f.add(t, "root has a parent");
  if (t.depth(root) != 0 || t.subtree_size(root) != n) f.add(t, "root is not depth 0 / size n");

  const std::uint32_t hashed = static_cast<std::uint32_t>((std::uint64_t{root} * 2654435761U) % n);
  const std::uint32_t samples[] = {root, rotate(n - 1, 0, root, n), hashed};
  for (const std::uint32_t rank : samples) {
    const std::uint32_t r = rotate(rank, root, 0, n);
    const auto p = t.parent(rank);
    const auto p0 = t0.parent(r);
    if (p.has_value() != p0.has_value() || (p && *p != rotate(*p0, 0, root, n))) {
      f.add(t, "parent(", rank, ") is not the rotated root-0 parent");
    }
    if (t.depth(rank) != t0.depth(r) || t.subtree_size(rank) != t0.subtree_size(r) ||
        t.subtree_height(rank) != t0.subtree_height(r)) {
      f.add(t, "depth/subtree_size/subtree_height(", rank, ") differ from root 0");
    }
    U32s kids0 = t0.children(r);
    for (auto& c : kids0) c = rotate(c, 0, root, n);
    if (t.children(rank) != kids0) f.add(t, "children(", rank, ") not the rotated root-0 ones");

    std::uint32_t steps = 0;
    for (std::uint32_t x = rank; x != root; ++steps) {
      const auto up = t.parent(x);
      if (!up || t.depth(*up) + 1 != t.depth(x) || steps > n) {
        f.add(t, "walk up from ", rank, " breaks at ", x);
        return;
      }
      x = *up;
    }
    if (steps != t.depth(rank)) f.add(t, "walk from ", rank, " took ", steps, " != depth");
  }
}

bool is_power_of(std::uint32_t n, std::uint32_t radix) {
  std::uint64_t p = 1;
  while (p < n) p *= radix;
  return p == n;
}

void check_n(std::uint32_t n, std::uint32_t radix, const U32s& every_rank_roots, bool all_roots) {
  Failures f;
  const Tree t0(n, 0, radix);
  const std::uint32_t rounds = Tree::rounds(n, radix);
  if (t0.height() > rounds) f.add(t0, "height ", t0.height(), " > rounds ", rounds);
  if (is_power_of(n, radix) && t0.height() != rounds) {
    f.add(t0, "n is a power of the radix but height ", t0.height(), " != rounds ", rounds);
  }
  for (const std::uint32_t root : every_rank_roots) check_every_rank(Tree(n, root, radix), f);
  if (all_roots) {
    for (std::uint32_t root = 0; root < n; ++root) check_rotated(Tree(n, root, radix), t0, f);
  } else {
    for (const std::uint32_t root : every_rank_roots) check_rotated(Tree(n, root, radix), t0, f);
  }
  INFO("n=" << n << " radix=" << radix << ": " << f.count << " failure(s), first: " << f.first);
  REQUIRE(f.count == 0);
}

U32s all_ranks(std::uint32_t n) {
  U32s v(n);
  for (std::uint32_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

U32s a_few_roots(std::uint32_t n) {
  U32s v = {0, n - 1, n / 2, static_cast<std::uint32_t>((std::uint64_t{n} * 7919U + 13U) % n)};
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

}  // namespace

TEST_CASE("ack_tree: hand-checked small trees", "[ack_tree]") {
  SECTION("binomial, n=8, root 0") {
    const Tree t(8, 0, 2);
    REQUIRE(t.n() == 8);
    REQUIRE(t.root() == 0);
    REQUIRE(t.radix() == 2);
    REQUIRE(t.children(0) == U32s{4, 2, 1});
    REQUIRE(t.children(4) == U32s{6, 5});
    REQUIRE(t.children(6) == U32s{7});
    REQUIRE(t.children(7).empty());
    REQUIRE_FALSE(t.parent(0).has_value());
    REQUIRE(t.parent(7) == 6U);
    REQUIRE(t.parent(6) == 4U);
    REQUIRE(t.parent(5) == 4U);
    REQUIRE(t.parent(3) == 2U);
    REQUIRE(t.depth(7) == 3);
    REQUIRE(t.depth(4) == 1);
    REQUIRE(t.height() == 3);
    REQUIRE(t.subtree(4) == U32s{4, 5, 6, 7});
    REQUIRE(t.subtree_size(2) == 2);
    REQUIRE(t.subtree_height(4) == 2);
    REQUIRE(t.subtree_height(0) == 3);
    REQUIRE(t.subtree_height(1) == 0);
  }
  SECTION("binomial, n=8, root 3 is the root-0 tree shifted by 3") {
    const Tree t(8, 3, 2);
    REQUIRE_FALSE(t.parent(3).has_value());
    REQUIRE(t.children(3) == U32s{7, 5, 4});
    REQUIRE(t.children(7) == U32s{1, 0});  // relative 4 -> {6, 5}
    REQUIRE(t.parent(2) == 1U);            // relative 7 -> 6
    REQUIRE(t.parent(0) == 7U);            // relative 5 -> 4
    REQUIRE(t.depth(2) == 3);
    REQUIRE(t.subtree(7) == U32s{7, 0, 1, 2});  // wraps past n-1
  }
  SECTION("trinomial, n=9, root 0") {
    const Tree t(9, 0, 3);
    REQUIRE(t.children(0) == U32s{3, 6, 1, 2});
    REQUIRE(t.children(3) == U32s{4, 5});
    REQUIRE(t.parent(8) == 6U);
    REQUIRE(t.parent(5) == 3U);
    REQUIRE(t.depth(8) == 2);
    REQUIRE(t.height() == 2);
  }
  SECTION("a subtree clipped by n moves behind larger full ones") {
    // n=5: 4's block {4,5,6,7} is clipped to {4}, so 2 (size 2) is served first.
    REQUIRE(Tree(5, 0, 2).children(0) == U32s{2, 4, 1});
    // n=6: 4's block is {4,5}, same size as 2's; ties keep the higher digit first.
    REQUIRE(Tree(6, 0, 2).children(0) == U32s{4, 2, 1});
  }
  SECTION("single member") {
    const Tree t(1, 0, 2);
    REQUIRE_FALSE(t.parent(0).has_value());
    REQUIRE(t.children(0).empty());
    REQUIRE(t.height() == 0);
    REQUIRE(t.subtree(0) == U32s{0});
  }
  SECTION("radix larger than n is a star") {
    const Tree t(5, 2, 1000);
    REQUIRE(t.children(2) == U32s{3, 4, 0, 1});
    REQUIRE(t.parent(1) == 2U);
    REQUIRE(t.height() == 1);
  }
}

TEST_CASE("ack_tree: invalid arguments throw", "[ack_tree]") {
  using Catch::Matchers::Contains;
  REQUIRE_THROWS_AS(Tree(0, 0, 2), std::invalid_argument);
  REQUIRE_THROWS_WITH(Tree(0, 0, 2), Contains("n must be"));
  REQUIRE_THROWS_AS(Tree(4, 4, 2), std::invalid_argument);
  REQUIRE_THROWS_WITH(Tree(4, 4, 2), Contains("root 4") && Contains("n=4"));
  REQUIRE_THROWS_AS(Tree(4, 9, 2), std::invalid_argument);
  REQUIRE_THROWS_AS(Tree(4, 0, 1), std::invalid_argument);
  REQUIRE_THROWS_WITH(Tree(4, 0, 1), Contains("radix"));
  REQUIRE_THROWS_AS(Tree(4, 0, 0), std::invalid_argument);
  REQUIRE_THROWS_AS(Tree::rounds(4, 1), std::invalid_argument);
  REQUIRE_NOTHROW(Tree(4, 3, 2));

  const Tree t(4, 1, 2);
  REQUIRE_THROWS_AS(t.parent(4), std::out_of_range);
  REQUIRE_THROWS_AS(t.children(4), std::out_of_range);
  REQUIRE_THROWS_AS(t.depth(100), std::out_of_range);
  REQUIRE_THROWS_AS(t.subtree_size(4), std::out_of_range);
  REQUIRE_THROWS_AS(t.subtree_height(4), std::out_of_range);
  REQUIRE_THROWS_AS(t.subtree(4), std::out_of_range);
}

TEST_CASE("ack_tree: rounds is the smallest h with radix^h >= n", "[ack_tree]") {
  REQUIRE(Tree::rounds(0, 2) == 0);
  REQUIRE(Tree::rounds(1, 2) == 0);
  REQUIRE(Tree::rounds(2, 2) == 1);
  REQUIRE(Tree::rounds(1024, 2) == 10);
  REQUIRE(Tree::rounds(1025, 2) == 11);
  REQUIRE(Tree::rounds(729, 3) == 6);
  REQUIRE(Tree::rounds(730, 3) == 7);
  std::size_t failures = 0;
  std::string first;
  for (const std::uint32_t radix : {2U, 3U, 4U, 5U, 8U, 10U, 1000U}) {
    for (std::uint32_t n = 1; n <= 4 * kMaxN; ++n) {
      std::uint32_t h = 0;
      std::uint64_t p = 1;
      while (p < n) {
        p *= radix;
        ++h;
      }
      // Smallest such h: radix^h >= n, and radix^(h-1) < n unless h == 0.
      if (Tree::rounds(n, radix) != h && failures++ == 0) {
        first = "n=" + std::to_string(n) + " radix=" + std::to_string(radix);
      }
    }
  }
  INFO("first failure: " << first);
  REQUIRE(failures == 0);
}

TEST_CASE("ack_tree: properties hold for every n, root and radix", "[ack_tree]") {
  const double scale = test_scale();
  const auto n_max = std::max<std::uint32_t>(
      1, static_cast<std::uint32_t>(static_cast<double>(kMaxN) * scale));
  INFO("HMCAST_TEST_SCALE=" << scale << ", every n up to " << n_max);
  for (const std::uint32_t radix : kRadices) {
    for (std::uint32_t n = 1; n <= n_max; ++n) {
      if (n <= kEveryRankEveryRootUpTo) {
        check_n(n, radix, all_ranks(n), true);
      } else {
        check_n(n, radix, a_few_roots(n), true);
      }
    }
    // Reduced runs still see the sizes a real deployment hits: the largest power of the radix
    // up to kMaxN (height == rounds) and the awkward sizes around kMaxN.
    std::uint32_t power = 1;
    while (power * radix <= kMaxN) power *= radix;
    for (const std::uint32_t n : {power, 1000U, kMaxN - 1, kMaxN}) {
      if (n > n_max) check_n(n, radix, a_few_roots(n), false);
    }
  }
}

TEST_CASE("ack_tree: no overflow near 2^32", "[ack_tree]") {
  constexpr std::uint32_t kBig = std::numeric_limits<std::uint32_t>::max();  // 2^32-1 ranks

  SECTION("rounds") {
    REQUIRE(Tree::rounds(kBig, 2) == 32);
    REQUIRE(Tree::rounds(kBig, 3) == 21);  // 3^20 < 2^32-1 < 3^21
    REQUIRE(Tree::rounds(kBig, 65536) == 2);
    REQUIRE(Tree::rounds(kBig, kBig) == 1);
    REQUIRE(Tree::rounds(kBig, 1U << 31) == 2);
  }
  SECTION("binomial over 2^32-1 ranks") {
    const Tree t(kBig, 0, 2);
    // rounds is 32, but the deepest relative rank has only 31 one-bits (2^32-1 is not a rank).
    REQUIRE(t.height() == 31);
    REQUIRE(t.subtree_size(0) == kBig);
    REQUIRE(t.depth(kBig - 1) == 31);
    REQUIRE(t.parent(kBig - 1) == kBig - 3);  // clears bit 1 of 0xFFFFFFFE
    const U32s kids = t.children(0);
    REQUIRE(kids.size() == 32);
    REQUIRE(kids.front() == 1U << 31);
    REQUIRE(kids.back() == 1);
    REQUIRE(t.subtree_size(1U << 31) == (1U << 31) - 1);  // clipped by n
    REQUIRE(t.subtree_height(1U << 31) == 30);
  }
  SECTION("root near the top: relabelling must not wrap 32 bits") {
    const Tree t(kBig, kBig - 1, 2);
    REQUIRE_FALSE(t.parent(kBig - 1).has_value());
    REQUIRE(t.parent(0) == kBig - 1);  // relative 1
    REQUIRE(t.parent(kBig - 2) == kBig - 4);  // relative 2^32-2 -> 2^32-4
    REQUIRE(t.subtree(kBig - 2).size() == 1);
    REQUIRE(t.children(0).empty());
    const U32s kids = t.children(kBig - 1);
    REQUIRE(kids.size() == 32);
    REQUIRE(kids.front() == (1U << 31) - 1);  // relative 2^31
  }
  SECTION("huge radix") {
    const Tree t(kBig, 7, 65536);
    REQUIRE(t.height() == 2);
    const U32s kids = t.children(7);
    REQUIRE(kids.size() == 2 * 65535);
    // 65535 * 65536 is clipped to 65535 ranks: after every full 65536-block, before the leaves.
    const std::uint32_t clipped = rotate(65535U * 65536U, 0, 7, kBig);
    REQUIRE(kids[65533] == rotate(65534U * 65536U, 0, 7, kBig));
    REQUIRE(kids[65534] == clipped);
    REQUIRE(kids[65535] == rotate(1, 0, 7, kBig));
    REQUIRE(t.subtree_size(clipped) == 65535);
    REQUIRE(t.subtree_height(clipped) == 1);

    const Tree star(kBig, kBig - 1, kBig);
    REQUIRE(star.height() == 1);
    REQUIRE(star.parent(12345) == kBig - 1);
    REQUIRE(star.children(12345).empty());
    REQUIRE(star.subtree_size(kBig - 1) == kBig);
  }
}
