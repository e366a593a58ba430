// The ACK tree: which member forwards to / collects acknowledgements from which.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace hmcast::ack_tree {

/// A k-nomial spanning tree (binomial for radix 2) over the ranks 0..n-1 of one view, rooted at
/// `root` (typically the sender). Every member computes the same tree from (n, root, radix) alone,
/// so nobody has to agree on or ship a topology; a member only needs its own rank.
///
/// Shape, on the relative rank r = (rank - root) mod n written in base `radix`: the parent of r
/// clears r's least-significant nonzero digit, so depth = number of nonzero digits. A k-nomial
/// tree is what an optimal "each informed node tells radix-1 more per round" schedule produces,
/// so its height never exceeds rounds(n, radix) and the tree adds no latency over the lower bound.
///
/// Because the subtree of relative rank r is the contiguous relative range [r, r + radix^t) with
/// t = r's number of trailing zero digits (clipped at n), every query is arithmetic: O(log n)
/// time, plus the size of the answer for children() and subtree(). Nothing is stored per rank,
/// so a Tree is three integers and may be built for any n up to 2^32-1 and copied freely.
///
/// Ranks passed to the queries must be < n(); otherwise std::out_of_range is thrown (cheap to
/// check, and a bad rank here would otherwise silently produce a wrong but plausible tree).
class Tree {
 public:
  /// Throws std::invalid_argument if n == 0 (no tree over nobody), root >= n, or radix < 2
  /// (radix 1 would be a chain the digit arithmetic cannot describe).
  Tree(std::uint32_t n, std::uint32_t root, std::uint32_t radix);

  [[nodiscard]] std::uint32_t n() const noexcept { return n_; }
  [[nodiscard]] std::uint32_t root() const noexcept { return root_; }
  [[nodiscard]] std::uint32_t radix() const noexcept { return radix_; }

  /// The rank `rank` reports to; nullopt exactly for the root. O(log n).
  [[nodiscard]] std::optional<std::uint32_t> parent(std::uint32_t rank) const;

  /// The ranks whose parent is `rank`, each exactly once. Ordered by decreasing subtree size
  /// (ties: higher digit position first, then increasing rank offset), which also makes subtree
  /// heights non-increasing: sending to the children in this order starts the deepest subtrees
  /// first. At most (radix-1) * rounds(n, radix) entries. O(log n + answer).
  [[nodiscard]] std::vector<std::uint32_t> children(std::uint32_t rank) const;

  /// Number of edges from `rank` up to the root (root = 0). O(log n).
  [[nodiscard]] std::uint32_t depth(std::uint32_t rank) const;

  /// The largest depth() over all ranks; 0 for n == 1. Always <= rounds(n, radix), and equal
  /// to it when n is a power of radix. O(log n).
  [[nodiscard]] std::uint32_t height() const;

  /// Height of the subtree rooted at `rank`, i.e. the longest path down from it (a leaf = 0).
  /// Equals max(depth(x)) - depth(rank) over x in subtree(rank). O(log n).
  [[nodiscard]] std::uint32_t subtree_height(std::uint32_t rank) const;

  /// Number of ranks in the subtree rooted at `rank`, including `rank`; n for the root. O(log n).
  [[nodiscard]] std::uint32_t subtree_size(std::uint32_t rank) const;

  /// All ranks in the subtree rooted at `rank`, `rank` first, then in increasing relative rank
  /// (which is a pre-order walk). Its size is subtree_size(rank). O(answer).
  [[nodiscard]] std::vector<std::uint32_t> subtree(std::uint32_t rank) const;

  /// ceil(log_radix(n)): the smallest h with radix^h >= n, so 0 for n <= 1. This is the lower
  /// bound on rounds for any dissemination in which each informed node informs at most radix-1
  /// new nodes per round (the informed set grows at most radix-fold per round). Exact for all
  /// n up to 2^32-1 (no floating point). Throws std::invalid_argument if radix < 2.
  [[nodiscard]] static std::uint32_t rounds(std::uint32_t n, std::uint32_t radix);

 private:
  std::uint32_t rel(std::uint32_t rank) const;  // checks rank < n
  std::uint32_t abs(std::uint32_t r) const noexcept;
  /// radix^t for r's t trailing zero digits; for r == 0 the first power >= n. Relative rank r's
  /// subtree is [r, min(r + span, n)).
  std::uint64_t span(std::uint32_t r) const noexcept;
  std::uint32_t subtree_size_rel(std::uint32_t r) const noexcept;

  std::uint32_t n_;
  std::uint32_t root_;
  std::uint32_t radix_;
  std::uint64_t root_span_;  // radix^rounds(n, radix) <= (n-1)*radix < 2^64: cached for r == 0
};

}  // namespace hmcast::ack_tree
