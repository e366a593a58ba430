#include "ack_tree/tree.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <stdexcept>
#include <string>

namespace hmcast::ack_tree {

namespace {

// All intermediate arithmetic is 64-bit: with n up to 2^32-1, a power of the radix that is still
// below n, times the radix, or plus a rank, can exceed 32 bits but never 64.

std::uint32_t nonzero_digits(std::uint64_t x, std::uint32_t radix) noexcept {
  std::uint32_t count = 0;
  for (; x != 0; x /= radix) {
    if (x % radix != 0) ++count;
  }
  return count;
}

// The largest number of nonzero base-radix digits among 0..m. Either m itself, or: keep m's
// digits above some nonzero digit j, lower digit j by one and make every digit below j radix-1
// (nonzero, as radix >= 2). Those candidates cover every x <= m, so the maximum is among them.
std::uint32_t max_nonzero_digits_upto(std::uint64_t m, std::uint32_t radix) noexcept {
  const std::uint32_t total = nonzero_digits(m, radix);
  std::uint32_t best = total;
  std::uint32_t nonzero_so_far = 0;  // nonzero digits at positions <= j
  std::uint32_t j = 0;
  for (std::uint64_t x = m; x != 0; x /= radix, ++j) {
    const std::uint64_t d = x % radix;
    if (d == 0) continue;
    ++nonzero_so_far;
    const std::uint32_t candidate = (total - nonzero_so_far) + (d > 1 ? 1U : 0U) + j;
    best = std::max(best, candidate);
  }
  return best;
}

[[noreturn]] void throw_bad_rank(std::uint32_t rank, std::uint32_t n) {
  throw std::out_of_range("hmcast::ack_tree::Tree: rank " + std::to_string(rank) +
                          " is out of range for a tree of n=" + std::to_string(n) + " ranks");
}

}  // namespace

Tree::Tree(std::uint32_t n, std::uint32_t root, std::uint32_t radix)
    : n_(n), root_(root), radix_(radix), root_span_(1) {
  if (n == 0) throw std::invalid_argument("hmcast::ack_tree::Tree: n must be at least 1 (got 0)");
  if (root >= n) {
    throw std::invalid_argument("hmcast::ack_tree::Tree: root " + std::to_string(root) +
                                " must be less than n=" + std::to_string(n));
  }
  if (radix < 2) {
    throw std::invalid_argument("hmcast::ack_tree::Tree: radix must be at least 2 (got " +
                                std::to_string(radix) + ")");
  }
  while (root_span_ < n_) root_span_ *= radix_;
}

std::uint32_t Tree::rounds(std::uint32_t n, std::uint32_t radix) {
  if (radix < 2) {
    throw std::invalid_argument("hmcast::ack_tree::Tree::rounds: radix must be at least 2 (got " +
                                std::to_string(radix) + ")");
  }
  // Integer loop rather than log(): floating point is off by one near exact powers.
  std::uint32_t h = 0;
  for (std::uint64_t reach = 1; reach < n; reach *= radix) ++h;
  return h;
}

std::uint32_t Tree::rel(std::uint32_t rank) const {
  if (rank >= n_) throw_bad_rank(rank, n_);
  // Written to stay below n: rank - root + n could overflow 32 bits.
  return rank >= root_ ? rank - root_ : rank + (n_ - root_);
}

std::uint32_t Tree::abs(std::uint32_t r) const noexcept {
  return r < n_ - root_ ? r + root_ : r - (n_ - root_);
}

std::uint64_t Tree::span(std::uint32_t r) const noexcept {
  if (r == 0) return root_span_;
  std::uint64_t p = 1;
  for (std::uint32_t q = r; q % radix_ == 0; q /= radix_) p *= radix_;
  return p;
}

std::uint32_t Tree::subtree_size_rel(std::uint32_t r) const noexcept {
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(span(r), n_ - r));
}

std::optional<std::uint32_t> Tree::parent(std::uint32_t rank) const {
  const std::uint32_t r = rel(rank);
  if (r == 0) return std::nullopt;
  const std::uint64_t p = span(r);
  const std::uint64_t lowest_digit = (r / p) % radix_;
  return abs(static_cast<std::uint32_t>(r - lowest_digit * p));
}

std::vector<std::uint32_t> Tree::children(std::uint32_t rank) const {
  const std::uint32_t r = rel(rank);
  const std::uint64_t limit = span(r);

  // Child offsets are radix^i below r's lowest nonzero digit that still land inside the tree.
  // Each power is < n <= 2^32-1, so at most 32 of them.
  std::array<std::uint64_t, 32> powers{};
  std::size_t count = 0;
  for (std::uint64_t p = 1; p < limit && r + p < n_; p *= radix_) powers[count++] = p;

  std::vector<std::uint32_t> out;
  // Only the very last child (the largest rank) can have a subtree clipped by n; every other
  // child's subtree is a full radix^i block, and those come out of the loop below already in
  // decreasing size. So the clipped child is set aside and inserted where its size belongs.
  std::optional<std::uint32_t> clipped;
  std::uint64_t clipped_size = 0;
  std::size_t clipped_at = 0;
  while (count > 0) {
    const std::uint64_t p = powers[--count];
    std::uint64_t c = r + p;
    for (std::uint32_t d = 1; d < radix_ && c < n_; ++d, c += p) {
      const auto child = static_cast<std::uint32_t>(c);
      if (n_ - c < p) {
        clipped = child;
        clipped_size = n_ - c;
        clipped_at = out.size();
        continue;
      }
      if (clipped && p > clipped_size) ++clipped_at;
      out.push_back(abs(child));
    }
  }
  if (clipped) {
    out.insert(out.begin() + static_cast<std::ptrdiff_t>(clipped_at), abs(*clipped));
  }
  return out;
}

std::uint32_t Tree::depth(std::uint32_t rank) const { return nonzero_digits(rel(rank), radix_); }

std::uint32_t Tree::height() const { return max_nonzero_digits_upto(n_ - 1, radix_); }

std::uint32_t Tree::subtree_height(std::uint32_t rank) const {
  // Descendants are r + x for x in [0, size): x only uses digit positions where r has zeros,
  // so a descendant's depth below r is the number of nonzero digits of x.
  return max_nonzero_digits_upto(subtree_size_rel(rel(rank)) - 1U, radix_);
}

std::uint32_t Tree::subtree_size(std::uint32_t rank) const { return subtree_size_rel(rel(rank)); }

std::vector<std::uint32_t> Tree::subtree(std::uint32_t rank) const {
  const std::uint32_t r = rel(rank);
  const std::uint32_t size = subtree_size_rel(r);
  std::vector<std::uint32_t> out;
  out.reserve(size);
  for (std::uint32_t x = 0; x < size; ++x) out.push_back(abs(r + x));
  return out;
}

}  // namespace hmcast::ack_tree
