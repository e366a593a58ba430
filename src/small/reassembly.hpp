// Reassembles one message from its datagram fragments, in any order, with duplicates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/wire.hpp"

namespace hmcast::small {

class Reassembly {
 public:
  enum class Result : std::uint8_t { added, duplicate, complete, mismatch };

  explicit Reassembly(const wire::Data& first)
      : msg_len_(first.msg_len), frag_count_(first.frag_count), have_(first.frag_count, false),
        buffer_(std::make_shared<std::vector<std::byte>>(first.msg_len)) {}

  /// Add a fragment. A fragment whose length or count disagrees with the first one is a
  /// `mismatch` (bad input): it is ignored and the partial message is kept.
  Result add(const wire::Data& frag) {
    if (frag.msg_len != msg_len_ || frag.frag_count != frag_count_) return Result::mismatch;
    // Every fragment implies the piece size; they must all agree, or the pieces would
    // overlap or leave gaps (the decoder checked each fragment on its own).
    const bool last = frag.frag_index + 1U == frag_count_;
    const std::uint64_t piece = last ? (frag_count_ > 1 ? frag.offset / (frag_count_ - 1U) : msg_len_)
                                     : frag.payload.size();
    if (piece_ == 0) piece_ = piece;
    if (piece != piece_) return Result::mismatch;
    if (have_[frag.frag_index]) return Result::duplicate;
    std::copy(frag.payload.begin(), frag.payload.end(), buffer_->begin() + frag.offset);
    have_[frag.frag_index] = true;
    ++received_;
    return received_ == frag_count_ ? Result::complete : Result::added;
  }
  /// The assembled message (valid once add() returned `complete`).
  [[nodiscard]] std::shared_ptr<std::vector<std::byte>> take() { return std::move(buffer_); }

 private:
  std::uint32_t msg_len_;
  std::uint16_t frag_count_;
  std::uint32_t received_ = 0;
  std::uint64_t piece_ = 0;  // bytes per non-final fragment, from the first fragment seen
  std::vector<bool> have_;
  std::shared_ptr<std::vector<std::byte>> buffer_;
};

}  // namespace hmcast::small
