// Binomial pipeline schedule (hypercube + twins). Use make_schedule(); this header exists so the
// implementation can be reached from schedule.cpp and inspected by tests.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "large/schedule.hpp"

namespace hmcast::large {

class BinomialPipelineSchedule final : public Schedule {
 public:
  /// Preconditions (checked by make_schedule): n >= 1, root < n, blocks >= 1.
  BinomialPipelineSchedule(std::uint32_t n, std::uint32_t root, std::uint32_t blocks) noexcept;

  [[nodiscard]] std::uint32_t steps() const noexcept override { return steps_; }
  [[nodiscard]] std::vector<Hop> sends(std::uint32_t rank, std::uint32_t step) const override;
  [[nodiscard]] std::vector<Hop> receives(std::uint32_t rank, std::uint32_t step) const override;

  /// Hypercube dimension l = floor(log2 n).
  [[nodiscard]] std::uint32_t dimension() const noexcept { return dim_; }
  /// Number of twin ranks, n - 2^l.
  [[nodiscard]] std::uint32_t twins() const noexcept { return twins_; }

 private:
  struct Role {
    std::uint32_t vertex;  // hypercube vertex (0 = root)
    std::uint32_t member;  // relative rank of this node
  };

  [[nodiscard]] Role role_of(std::uint32_t rel) const noexcept;
  [[nodiscard]] bool is_pair(std::uint32_t v) const noexcept { return v >= 1 && v <= twins_; }
  [[nodiscard]] std::uint32_t twin_of(std::uint32_t v) const noexcept { return cube_ + v - 1; }
  [[nodiscard]] bool bit_step(std::uint32_t v, std::uint32_t t) const noexcept;
  [[nodiscard]] std::optional<std::uint32_t> prev_bit_step(std::uint32_t v, std::uint32_t t) const noexcept;
  [[nodiscard]] std::optional<std::uint32_t> cube_block(std::uint32_t v, std::uint32_t t) const noexcept;
  [[nodiscard]] std::uint32_t cube_receiver(std::uint32_t v, std::uint32_t t) const noexcept;
  [[nodiscard]] std::uint32_t cube_sender(std::uint32_t v, std::uint32_t t) const noexcept;
  [[nodiscard]] std::optional<std::uint32_t> forward_block(std::uint32_t v, std::uint32_t t) const noexcept;
  [[nodiscard]] std::optional<std::uint32_t> last_bit_step_block(std::uint32_t v) const noexcept;

  std::uint32_t dim_ = 0;         // l
  std::uint32_t cube_ = 1;        // 2^l
  std::uint32_t twins_ = 0;       // n - 2^l
  std::uint32_t cube_steps_ = 0;  // B + l - 1 (0 for n == 1)
  std::uint32_t steps_ = 0;       // cube_steps_ (+1 if there are twins)
};

}  // namespace hmcast::large
