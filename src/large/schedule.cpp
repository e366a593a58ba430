// Schedule factory, names, and the three simple schedules (sequential, chain, binomial tree).
// The binomial pipeline lives in binomial_pipeline.cpp.

#include "large/schedule.hpp"

#include <limits>
#include <stdexcept>
#include <string>

#include "large/binomial_pipeline.hpp"

namespace hmcast::large {

std::optional<LargeAlgorithm> parse_algorithm(std::string_view name) noexcept {
  if (name == "sequential") return LargeAlgorithm::sequential;
  if (name == "chain") return LargeAlgorithm::chain;
  if (name == "tree" || name == "binomial_tree") return LargeAlgorithm::binomial_tree;
  if (name == "binomial_pipeline") return LargeAlgorithm::binomial_pipeline;
  return std::nullopt;
}

std::string_view to_string(LargeAlgorithm algorithm) noexcept {
  switch (algorithm) {
    case LargeAlgorithm::sequential: return "sequential";
    case LargeAlgorithm::chain: return "chain";
    case LargeAlgorithm::binomial_tree: return "binomial_tree";
    case LargeAlgorithm::binomial_pipeline: return "binomial_pipeline";
  }
  return "unknown";
}

std::uint32_t Schedule::relative(std::uint32_t rank) const {
  if (rank >= n_) {
    throw std::out_of_range("large::Schedule: rank " + std::to_string(rank) +
                            " out of range for " + std::to_string(n_) + " members");
  }
  return rank >= root_ ? rank - root_ : rank + (n_ - root_);
}

std::uint32_t Schedule::absolute(std::uint32_t rel) const noexcept {
  return rel < n_ - root_ ? rel + root_ : rel - (n_ - root_);
}

namespace {

// Root sends the whole message to relative rank 1, then to 2, ...: step s carries block s % B
// to relative rank s / B + 1.
class SequentialSchedule final : public Schedule {
 public:
  SequentialSchedule(std::uint32_t n, std::uint32_t root, std::uint32_t blocks, std::uint32_t steps)
      : Schedule(LargeAlgorithm::sequential, n, root, blocks), steps_(steps) {}
  [[nodiscard]] std::uint32_t steps() const noexcept override { return steps_; }

  [[nodiscard]] std::vector<Hop> sends(std::uint32_t rank, std::uint32_t step) const override {
    const std::uint32_t rel = relative(rank);
    if (step >= steps_ || rel != 0) return {};
    return {transfer(step)};
  }
  [[nodiscard]] std::vector<Hop> receives(std::uint32_t rank, std::uint32_t step) const override {
    const std::uint32_t rel = relative(rank);
    if (step >= steps_ || rel == 0 || step / blocks() + 1U != rel) return {};
    return {transfer(step)};
  }

 private:
  [[nodiscard]] Hop transfer(std::uint32_t step) const noexcept {
    return {root(), absolute(step / blocks() + 1U), step % blocks()};
  }
  std::uint32_t steps_;
};

// Relative rank i receives block b from i-1 in step b + i - 1.
class ChainSchedule final : public Schedule {
 public:
  ChainSchedule(std::uint32_t n, std::uint32_t root, std::uint32_t blocks, std::uint32_t steps)
      : Schedule(LargeAlgorithm::chain, n, root, blocks), steps_(steps) {}
  [[nodiscard]] std::uint32_t steps() const noexcept override { return steps_; }

  [[nodiscard]] std::vector<Hop> sends(std::uint32_t rank, std::uint32_t step) const override {
    const std::uint32_t rel = relative(rank);
    if (step >= steps_ || rel + 1U >= members() || step < rel || step - rel >= blocks()) return {};
    return {{rank, absolute(rel + 1U), step - rel}};
  }
  [[nodiscard]] std::vector<Hop> receives(std::uint32_t rank, std::uint32_t step) const override {
    const std::uint32_t rel = relative(rank);
    if (step >= steps_ || rel == 0 || step + 1U < rel || step + 1U - rel >= blocks()) return {};
    return {{absolute(rel - 1U), rank, step + 1U - rel}};
  }

 private:
  std::uint32_t steps_;
};

// Round r (steps r*B .. r*B+B-1): relative ranks below 2^r send block (step % B) to rank + 2^r.
class BinomialTreeSchedule final : public Schedule {
 public:
  BinomialTreeSchedule(std::uint32_t n, std::uint32_t root, std::uint32_t blocks, std::uint32_t steps)
      : Schedule(LargeAlgorithm::binomial_tree, n, root, blocks), steps_(steps) {}
  [[nodiscard]] std::uint32_t steps() const noexcept override { return steps_; }

  [[nodiscard]] std::vector<Hop> sends(std::uint32_t rank, std::uint32_t step) const override {
    const std::uint32_t rel = relative(rank);
    if (step >= steps_) return {};
    const std::uint32_t round = step / blocks();
    const std::uint64_t span = std::uint64_t{1} << round;
    if (rel >= span || rel + span >= members()) return {};
    return {{rank, absolute(rel + static_cast<std::uint32_t>(span)), step % blocks()}};
  }
  [[nodiscard]] std::vector<Hop> receives(std::uint32_t rank, std::uint32_t step) const override {
    const std::uint32_t rel = relative(rank);
    if (step >= steps_) return {};
    const std::uint32_t round = step / blocks();
    const std::uint64_t span = std::uint64_t{1} << round;
    if (rel < span || rel >= 2U * span) return {};
    return {{absolute(rel - static_cast<std::uint32_t>(span)), rank, step % blocks()}};
  }

 private:
  std::uint32_t steps_;
};

[[noreturn]] void bad(const std::string& what) {
  throw std::invalid_argument("large::make_schedule: " + what);
}

}  // namespace

std::optional<std::uint64_t> schedule_steps(LargeAlgorithm algorithm, std::uint32_t n, std::uint32_t blocks) noexcept {
  if (n == 0 || blocks == 0) return std::nullopt;
  const std::uint64_t b = blocks;
  const std::uint64_t others = n - 1U;
  const std::uint64_t log = ceil_log2(n);
  if (n == 1) return 0;
  switch (algorithm) {
    case LargeAlgorithm::sequential: return b * others;
    case LargeAlgorithm::chain: return b + others - 1U;
    case LargeAlgorithm::binomial_tree: return b * log;
    case LargeAlgorithm::binomial_pipeline: return b + log - 1U;
  }
  return std::nullopt;
}

std::unique_ptr<Schedule> make_schedule(LargeAlgorithm algorithm, std::uint32_t n, std::uint32_t root,
                                        std::uint32_t blocks) {
  if (n == 0) bad("a group needs at least one member (n == 0)");
  if (root >= n) bad("root " + std::to_string(root) + " is not a rank of a " + std::to_string(n) + "-member group");
  if (blocks == 0) bad("a message has at least one block (blocks == 0)");
  const auto counted = schedule_steps(algorithm, n, blocks);
  if (!counted) bad("unknown algorithm " + std::to_string(static_cast<int>(algorithm)));
  const std::uint64_t steps = *counted;
  if (steps > std::numeric_limits<std::uint32_t>::max()) {
    bad(std::string(to_string(algorithm)) + " with " + std::to_string(n) + " members and " +
        std::to_string(blocks) + " blocks needs " + std::to_string(steps) +
        " steps, more than a 32-bit step counter holds");
  }
  const auto s = static_cast<std::uint32_t>(steps);
  switch (algorithm) {
    case LargeAlgorithm::sequential: return std::make_unique<SequentialSchedule>(n, root, blocks, s);
    case LargeAlgorithm::chain: return std::make_unique<ChainSchedule>(n, root, blocks, s);
    case LargeAlgorithm::binomial_tree: return std::make_unique<BinomialTreeSchedule>(n, root, blocks, s);
    case LargeAlgorithm::binomial_pipeline: return std::make_unique<BinomialPipelineSchedule>(n, root, blocks);
  }
  bad("unknown algorithm " + std::to_string(static_cast<int>(algorithm)));
}

}  // namespace hmcast::large
