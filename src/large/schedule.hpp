// Block-transfer schedules for the large-message (RC pipeline) path.
//
// A message of `blocks` blocks sits at `root`; it must reach all `members` ranks (0..n-1) over
// point-to-point links in synchronous steps. A schedule answers, for any rank and step, what that
// rank sends and what it receives, computed locally (no global simulation per query), so that
// sender and receiver sides agree without talking. All schedules here are one-ported: in every
// step a rank sends at most one block and receives at most one block.
//
// Algorithms (see the RDMC paper, Behrens et al.):
//   sequential         root sends every block to every other rank in turn: B*(n-1) steps.
//   chain              relay along ranks root, root+1, ... (mod n): B + n - 2 steps.
//   binomial_tree      store-and-forward binomial tree, whole message per hop: B*ceil(log2 n).
//   binomial_pipeline  hypercube pipeline (with twins for non-powers of two):
//                      B + ceil(log2 n) - 1 steps, optimal. See binomial_pipeline.cpp.
// For n == 1 every schedule has 0 steps.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "hmcast/config.hpp"

namespace hmcast::large {

/// Accepts "sequential", "chain", "tree" / "binomial_tree", "binomial_pipeline".
[[nodiscard]] std::optional<LargeAlgorithm> parse_algorithm(std::string_view name) noexcept;
/// Canonical name ("sequential", "chain", "binomial_tree", "binomial_pipeline").
[[nodiscard]] std::string_view to_string(LargeAlgorithm algorithm) noexcept;

/// One block moving over one link in one step. Ranks are absolute (0..n-1).
struct Hop {
  std::uint32_t from = 0;
  std::uint32_t to = 0;
  std::uint32_t block = 0;
  friend bool operator==(const Hop&, const Hop&) = default;
};

class Schedule {
 public:
  virtual ~Schedule() = default;
  Schedule(const Schedule&) = delete;
  Schedule& operator=(const Schedule&) = delete;
  Schedule(Schedule&&) = delete;
  Schedule& operator=(Schedule&&) = delete;

  [[nodiscard]] LargeAlgorithm algorithm() const noexcept { return algorithm_; }
  [[nodiscard]] std::uint32_t members() const noexcept { return n_; }
  [[nodiscard]] std::uint32_t root() const noexcept { return root_; }
  [[nodiscard]] std::uint32_t blocks() const noexcept { return blocks_; }

  /// Number of steps; steps are numbered 0..steps()-1.
  [[nodiscard]] virtual std::uint32_t steps() const noexcept = 0;
  /// What `rank` sends in `step` (at most one transfer; empty for step >= steps()).
  /// Throws std::out_of_range if rank >= members().
  [[nodiscard]] virtual std::vector<Hop> sends(std::uint32_t rank, std::uint32_t step) const = 0;
  /// What `rank` receives in `step` (at most one transfer; empty for step >= steps()).
  /// Throws std::out_of_range if rank >= members().
  [[nodiscard]] virtual std::vector<Hop> receives(std::uint32_t rank, std::uint32_t step) const = 0;

 protected:
  Schedule(LargeAlgorithm algorithm, std::uint32_t n, std::uint32_t root, std::uint32_t blocks) noexcept
      : algorithm_(algorithm), n_(n), root_(root), blocks_(blocks) {}

  /// Rank relative to the root (the root is 0). Throws std::out_of_range for rank >= n.
  [[nodiscard]] std::uint32_t relative(std::uint32_t rank) const;
  /// Inverse of relative().
  [[nodiscard]] std::uint32_t absolute(std::uint32_t rel) const noexcept;

 private:
  LargeAlgorithm algorithm_;
  std::uint32_t n_;
  std::uint32_t root_;
  std::uint32_t blocks_;
};

/// Steps the schedule of `algorithm` takes for `n` ranks and `blocks` blocks, or
/// nothing if there is no such schedule (n or blocks 0, an unknown algorithm).
/// Never throws: a receiver checks a peer's announcement with it before building.
[[nodiscard]] std::optional<std::uint64_t> schedule_steps(LargeAlgorithm algorithm, std::uint32_t n,
                                                          std::uint32_t blocks) noexcept;

/// Builds a schedule for `n` ranks (n >= 1), rooted at `root` (< n), for `blocks` (>= 1) blocks.
/// Throws std::invalid_argument on bad arguments, including a step count that does not fit in
/// 32 bits.
[[nodiscard]] std::unique_ptr<Schedule> make_schedule(LargeAlgorithm algorithm, std::uint32_t n,
                                                      std::uint32_t root, std::uint32_t blocks);

/// ceil(log2 n) for n >= 1 (0 for n == 1).
[[nodiscard]] constexpr std::uint32_t ceil_log2(std::uint32_t n) noexcept {
  std::uint32_t l = 0;
  while (l < 32 && (std::uint64_t{1} << l) < n) ++l;
  return l;
}

}  // namespace hmcast::large
