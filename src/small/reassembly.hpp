// Reassembles one message from its datagram fragments, in any order, with duplicates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/assert.hpp"
#include "core/wire.hpp"
#include "small/fragment_bits.hpp"

namespace hmcast::small {

class Reassembly {
 public:
  enum class Result : std::uint8_t { added, duplicate, complete, mismatch };

  /// Grows its own buffer as fragments come.
  explicit Reassembly(const wire::Data& first)
      : msg_len_(first.msg_len), frag_count_(first.frag_count), have_(first.frag_count, false),
        buffer_(std::make_shared<std::vector<std::byte>>()) {
    buffer_->reserve(msg_len_);
  }
  /// Into `buffer`, already of the message's size (its bytes are overwritten, never
  /// read before they are): a fragment may then be written into its place by whoever
  /// reads it off the wire (place(), add_placed()).
  Reassembly(const wire::Data& first, std::shared_ptr<std::vector<std::byte>> buffer)
      : msg_len_(first.msg_len), frag_count_(first.frag_count), have_(first.frag_count, false),
        buffer_(std::move(buffer)), sized_(true) {
    HMCAST_ASSERT(buffer_ != nullptr && buffer_->size() == msg_len_);
  }

  /// Add a fragment. A fragment whose length or count disagrees with the first one is a
  /// `mismatch` (bad input): it is ignored and the partial message is kept.
  Result add(const wire::Data& frag) {
    if (const Result r = admit(frag, frag.payload.size()); r != Result::added) return r;
    std::vector<std::byte>& b = *buffer_;
    if (sized_) {
      HMCAST_ASSERT(frag.offset + frag.payload.size() <= b.size());  // the decoder checked it against msg_len
      std::copy(frag.payload.begin(), frag.payload.end(), b.begin() + frag.offset);
    } else if (frag.offset >= b.size()) {
      // The buffer grows as fragments come in order (no zero fill of bytes about to be
      // overwritten); one past a hole zero-fills the hole, which its fragment fills later.
      b.resize(frag.offset);
      b.insert(b.end(), frag.payload.begin(), frag.payload.end());
    } else {
      HMCAST_ASSERT(frag.offset + frag.payload.size() <= b.size());  // fragments never overlap
      std::copy(frag.payload.begin(), frag.payload.end(), b.begin() + frag.offset);
    }
    return mark(frag);
  }
  /// Where the `size` payload bytes of fragment `head` (its payload not read yet) go,
  /// in a buffer of the message's size; nothing if this one is not, the fragment is
  /// had, or no fragment has come yet to fix the pieces' size: a fragment is written
  /// before it is checked against the others, so only where a fragment received
  /// already says the pieces lie, never overlapping another's bytes.
  [[nodiscard]] std::optional<std::span<std::byte>> place(const wire::Data& head, std::size_t size) const {
    if (!sized_ || piece_ == 0 || head.msg_len != msg_len_ || head.frag_count != frag_count_) return std::nullopt;
    if (piece_of(head, size) != piece_ || have_[head.frag_index]) return std::nullopt;
    return std::span<std::byte>(*buffer_).subspan(head.offset, size);
  }
  /// Fragment `head`, whose `size` payload bytes were written where place() said.
  Result add_placed(const wire::Data& head, std::size_t size) {
    HMCAST_ASSERT(sized_);
    if (const Result r = admit(head, size); r != Result::added) return r;
    return mark(head);
  }
  /// Whether `at` is where fragment `head`'s payload goes in this message's buffer
  /// (whoever placed one says where it wrote it).
  [[nodiscard]] bool slot_at(const wire::Data& head, const std::byte* at) const {
    return sized_ && at != nullptr && at == buffer_->data() + head.offset;
  }
  [[nodiscard]] const std::shared_ptr<std::vector<std::byte>>& buffer() const { return buffer_; }
  [[nodiscard]] std::uint16_t frag_count() const { return frag_count_; }
  [[nodiscard]] bool has(std::uint32_t index) const { return index < frag_count_ && have_[index]; }
  /// The highest fragment index received so far.
  [[nodiscard]] std::uint32_t highest() const { return highest_; }
  /// Bytes of fragment `index` (which has() must hold): repairers serve fragments
  /// from a message they are still assembling.
  [[nodiscard]] std::span<const std::byte> fragment(std::uint32_t index) const {
    HMCAST_ASSERT(has(index) && piece_ != 0);
    const std::uint64_t start = std::uint64_t{index} * piece_;
    const std::uint64_t end = index + 1U == frag_count_ ? msg_len_ : start + piece_;
    return std::span<const std::byte>(*buffer_).subspan(start, end - start);
  }
  [[nodiscard]] std::uint32_t received() const { return received_; }
  /// A Nack bitmap of the fragments below `limit` not yet received.
  [[nodiscard]] std::vector<std::uint8_t> missing(std::uint32_t limit) const {
    std::vector<std::uint8_t> bits(bitmap_bytes(frag_count_), 0);
    for (std::uint32_t i = 0; i < std::min<std::uint32_t>(limit, frag_count_); ++i)
      if (!have_[i]) set_bit(bits, i);
    return bits;
  }
  /// Fragment `index` as the sender made it (has() must hold).
  [[nodiscard]] wire::Data fragment_data(std::uint32_t index, MemberId sender, Seq seq, Seq stable) const {
    wire::Data d;
    d.sender = sender;
    d.seq = seq;
    d.stable = stable;
    d.msg_len = msg_len_;
    d.offset = static_cast<std::uint32_t>(std::uint64_t{index} * piece_);
    d.frag_index = static_cast<std::uint16_t>(index);
    d.frag_count = frag_count_;
    d.payload = fragment(index);
    return d;
  }
  /// The assembled message (valid once add() returned `complete`).
  [[nodiscard]] std::shared_ptr<std::vector<std::byte>> take() {
    HMCAST_ASSERT(received_ == frag_count_ && buffer_->size() == msg_len_);
    return std::move(buffer_);
  }

 private:
  /// The size of every fragment but the last that fragment `frag` implies.
  [[nodiscard]] std::uint64_t piece_of(const wire::Data& frag, std::size_t size) const {
    const bool last = frag.frag_index + 1U == frag_count_;
    return last ? (frag_count_ > 1 ? frag.offset / (frag_count_ - 1U) : msg_len_) : size;
  }
  /// `added` if a fragment with `size` payload bytes fits what came before and is
  /// new; otherwise why not. Every fragment implies the piece size; they must all
  /// agree, or the pieces would overlap or leave gaps (the decoder checked each
  /// fragment on its own).
  Result admit(const wire::Data& frag, std::size_t size) {
    if (frag.msg_len != msg_len_ || frag.frag_count != frag_count_) return Result::mismatch;
    const std::uint64_t piece = piece_of(frag, size);
    if (piece_ == 0) piece_ = piece;
    if (piece != piece_) return Result::mismatch;
    if (have_[frag.frag_index]) return Result::duplicate;
    return Result::added;
  }
  Result mark(const wire::Data& frag) {
    have_[frag.frag_index] = true;
    highest_ = std::max<std::uint32_t>(highest_, frag.frag_index);
    ++received_;
    return received_ == frag_count_ ? Result::complete : Result::added;
  }

  std::uint32_t msg_len_;
  std::uint16_t frag_count_;
  std::uint32_t received_ = 0;
  std::uint32_t highest_ = 0;
  std::uint64_t piece_ = 0;  // bytes per non-final fragment, from the first fragment seen
  std::vector<bool> have_;
  std::shared_ptr<std::vector<std::byte>> buffer_;
  bool sized_ = false;  // buffer_ has the message's size from the start
};

}  // namespace hmcast::small
