// Binomial pipeline: B + ceil(log2 n) - 1 steps, one send and one receive per node per step.
//
// Why it works
// ------------
// Ranks are taken relative to the root (root = 0). Let l = floor(log2 n). The first 2^l relative
// ranks are the vertices of an l-dimensional hypercube (vertex 0 is the root); the remaining
// m = n - 2^l ranks are "twins" of vertices 1..m.
//
// 1. Hypercube, n = 2^l. In step t only links along dimension d = t mod l are used, so the links
//    of a step form a perfect matching v <-> v^(1<<d). Block k (c = k mod l):
//      * step k: the root sends k to vertex 1<<c;
//      * steps k+1 .. k+l-1: k spreads as a binomial tree over the half H_k = {v : bit c set},
//        adding dimensions c+1, c+2, ... (mod l): v in H_k gets k at step k + h, where h is the
//        highest set bit of v rotated right by c;
//      * step k+l (dimension c again): every v in H_k hands k to v^(1<<c), the other half.
//    Read backwards this is a closed form for what v != 0 receives at step t, d = t mod l:
//      bit d of v set:   block t - j, j = the largest i in [0,l) with bit (d-i) mod l of v set
//                        (the only k with v in H_k whose top bit, seen from c, is d);
//      bit d of v clear: block t - l (the hand-over into the other half).
//    That is exactly one block per step, every block exactly once (per residue class c one case
//    applies), and the sender v^(1<<d) got it earlier: in the first case it is v without its top
//    bit in the frame of k (smaller h), in the second it lies in H_k and had k by step k+l-1.
//    Receiver and sender evaluate the same formula, so they agree; each vertex is in one pair of
//    the matching, so it sends at most one block too. Blocks outside [0,B) are simply idle.
//    Tail: only the last block B-1 would be late (its hand-over is at step B-1+l). Instead, for
//    the half without bit c = (B-1) mod l, we let B-1 continue the root's binomial tree in steps
//    B .. B+l-2 (root -> 1<<(c+1), ... ; v gets it at step B-1+h). Those slots are idle in the
//    formula above (it would name a block >= B there), so nothing collides. Total B + l - 1.
//
// 2. Twins, 2^l < n < 2^(l+1), budget B + l steps (one more than the cube). A vertex x with a
//    twin is played by the pair {x, x'}: in each step one member, R, does the vertex's receive,
//    the other, S, does the vertex's send, and R passes one block to S (every port used once).
//    Which block does x send? Call t a "bit step" of x if bit (t mod l) of x is set. Between two
//    consecutive bit steps t_i < t_{i+1}, x sends only the block it received at t_i (to its
//    binomial children, and at t_{i+1} to the other half); at the other steps it receives
//    hand-over blocks that it never forwards. So: R is constant on each segment (t_i, t_{i+1}]
//    and alternates between segments (R = x iff the number of bit steps before t is even). The
//    member that received at t_i is S for the whole next segment and has exactly the block it
//    must send. Twin-to-twin forwarding: at each step R forwards the block it received in the
//    previous step, or, at the first step of its segment, the block it received at the end of
//    its previous segment (two segments back). Every block reaches the other member this way;
//    after the last cube step each member lacks at most one block held by its twin, and the extra
//    final step carries both in opposite directions. Total B + l = B + ceil(log2 n) - 1.
//
// Every query is O(l): a few bit scans and popcounts, no state beyond four integers.

#include "large/binomial_pipeline.hpp"

#include <bit>
#include <cstdint>

namespace hmcast::large {

BinomialPipelineSchedule::BinomialPipelineSchedule(std::uint32_t n, std::uint32_t root,
                                                   std::uint32_t blocks) noexcept
    : Schedule(LargeAlgorithm::binomial_pipeline, n, root, blocks) {
  if (n <= 1) return;  // nothing to send
  dim_ = static_cast<std::uint32_t>(std::bit_width(n)) - 1U;
  cube_ = 1U << dim_;
  twins_ = n - cube_;
  cube_steps_ = blocks + dim_ - 1U;
  steps_ = cube_steps_ + (twins_ > 0 ? 1U : 0U);
}

BinomialPipelineSchedule::Role BinomialPipelineSchedule::role_of(std::uint32_t rel) const noexcept {
  if (rel < cube_) return {rel, rel};
  return {rel - cube_ + 1U, rel};
}

bool BinomialPipelineSchedule::bit_step(std::uint32_t v, std::uint32_t t) const noexcept {
  return ((v >> (t % dim_)) & 1U) != 0;
}

std::optional<std::uint32_t> BinomialPipelineSchedule::prev_bit_step(std::uint32_t v,
                                                                     std::uint32_t t) const noexcept {
  // v != 0 has a set bit among any l consecutive steps.
  for (std::uint32_t i = 1; i <= dim_ && i <= t; ++i) {
    if (bit_step(v, t - i)) return t - i;
  }
  return std::nullopt;
}

// The block hypercube vertex v (!= 0) receives in cube step t < cube_steps_, from v ^ (1 << d).
std::optional<std::uint32_t> BinomialPipelineSchedule::cube_block(std::uint32_t v,
                                                                  std::uint32_t t) const noexcept {
  const std::uint32_t l = dim_;
  const std::uint32_t d = t % l;
  const std::int64_t nblocks = blocks();
  std::int64_t k = 0;
  if (((v >> d) & 1U) != 0) {
    std::uint32_t j = l - 1U;
    while (((v >> ((d + l - j) % l)) & 1U) == 0) --j;  // terminates at j == 0 (bit d is set)
    k = std::int64_t{t} - std::int64_t{j};
  } else {
    k = std::int64_t{t} - std::int64_t{l};
  }
  if (k >= 0 && k < nblocks) return static_cast<std::uint32_t>(k);
  // Tail: block B-1 continues the root's binomial tree into the half without bit c.
  const std::uint32_t last = blocks() - 1U;
  if (t > last) {
    const std::uint32_t c = last % l;
    if (((v >> c) & 1U) == 0) {
      const std::uint32_t mask = cube_ - 1U;
      const std::uint32_t rotated = c == 0 ? v : (((v >> c) | (v << (l - c))) & mask);
      const auto h = static_cast<std::uint32_t>(std::bit_width(rotated)) - 1U;
      if (t - last == h) return last;
    }
  }
  return std::nullopt;
}

// Member (relative rank) of vertex v that does the vertex's receive in step t.
std::uint32_t BinomialPipelineSchedule::cube_receiver(std::uint32_t v, std::uint32_t t) const noexcept {
  if (!is_pair(v)) return v;
  const std::uint32_t l = dim_;
  const std::uint32_t below = v & ((1U << (t % l)) - 1U);
  const std::uint64_t bit_steps_before =
      std::uint64_t{t / l} * static_cast<std::uint64_t>(std::popcount(v)) +
      static_cast<std::uint64_t>(std::popcount(below));
  return (bit_steps_before % 2U == 0) ? v : twin_of(v);
}

// Member of vertex v that does the vertex's send in step t.
std::uint32_t BinomialPipelineSchedule::cube_sender(std::uint32_t v, std::uint32_t t) const noexcept {
  if (!is_pair(v)) return v;
  return cube_receiver(v, t) == v ? twin_of(v) : v;
}

// Block the receiving member R of pair v passes to its twin in step t (1 <= t <= cube_steps_).
std::optional<std::uint32_t> BinomialPipelineSchedule::forward_block(std::uint32_t v,
                                                                     std::uint32_t t) const noexcept {
  if (t == 0) return std::nullopt;
  if (!bit_step(v, t - 1)) return cube_block(v, t - 1);  // same segment: last step's block
  // First step of R's segment: the block R got at the end of its previous segment.
  const auto s = prev_bit_step(v, t - 1);
  if (!s) return std::nullopt;
  return cube_block(v, *s);
}

// In the final (twin-only) step, S passes back the block it got at the last bit step.
std::optional<std::uint32_t> BinomialPipelineSchedule::last_bit_step_block(std::uint32_t v) const noexcept {
  const std::uint32_t f = cube_steps_;
  if (bit_step(v, f - 1)) return cube_block(v, f - 1);
  const auto s = prev_bit_step(v, f - 1);
  if (!s) return std::nullopt;
  return cube_block(v, *s);
}

std::vector<Hop> BinomialPipelineSchedule::receives(std::uint32_t rank, std::uint32_t step) const {
  const std::uint32_t rel = relative(rank);
  std::vector<Hop> out;
  if (step >= steps_) return out;
  const Role me = role_of(rel);
  const std::uint32_t v = me.vertex;
  if (step < cube_steps_) {
    if (v != 0 && cube_receiver(v, step) == me.member) {
      if (const auto b = cube_block(v, step)) {
        const std::uint32_t p = v ^ (1U << (step % dim_));
        out.push_back({absolute(cube_sender(p, step)), rank, *b});
      }
    }
    if (is_pair(v) && cube_sender(v, step) == me.member) {
      if (const auto b = forward_block(v, step)) {
        out.push_back({absolute(cube_receiver(v, step)), rank, *b});
      }
    }
  } else if (is_pair(v)) {  // final step: the twins swap what each still lacks
    const std::uint32_t x = cube_receiver(v, step);
    const std::uint32_t y = x == v ? twin_of(v) : v;
    const auto b = me.member == x ? last_bit_step_block(v) : forward_block(v, step);
    if (b) out.push_back({absolute(me.member == x ? y : x), rank, *b});
  }
  return out;
}

std::vector<Hop> BinomialPipelineSchedule::sends(std::uint32_t rank, std::uint32_t step) const {
  const std::uint32_t rel = relative(rank);
  std::vector<Hop> out;
  if (step >= steps_) return out;
  const Role me = role_of(rel);
  const std::uint32_t v = me.vertex;
  if (step < cube_steps_) {
    const std::uint32_t p = v ^ (1U << (step % dim_));
    if (p != 0 && cube_sender(v, step) == me.member) {
      if (const auto b = cube_block(p, step)) {
        out.push_back({rank, absolute(cube_receiver(p, step)), *b});
      }
    }
    if (is_pair(v) && cube_receiver(v, step) == me.member) {
      if (const auto b = forward_block(v, step)) {
        out.push_back({rank, absolute(cube_sender(v, step)), *b});
      }
    }
  } else if (is_pair(v)) {
    const std::uint32_t x = cube_receiver(v, step);
    const std::uint32_t y = x == v ? twin_of(v) : v;
    const auto b = me.member == x ? forward_block(v, step) : last_bit_step_block(v);
    if (b) out.push_back({rank, absolute(me.member == x ? y : x), *b});
  }
  return out;
}

}  // namespace hmcast::large
