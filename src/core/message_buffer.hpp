// A complete message payload: its bytes and what keeps them alive.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "core/assert.hpp"

namespace hmcast {

/// Bytes shared by whoever holds them: a buffer the application filled, a large
/// message's final buffer, or a datagram as it arrived.
using SharedBytes = std::shared_ptr<const std::vector<std::byte>>;

/// A complete message payload. Immutable and shared: the same bytes are retained
/// for repairs, handed to delivery, and dropped when the last holder lets go. A
/// message may be a slice of a larger owner: a small message that arrived whole in
/// a datagram (alone or batched with others) stays in that datagram instead of
/// being copied out of it, so a batch of small messages costs one buffer, not one
/// per message. Reads like the pointer to the message it used to be (`*m`, `m->size()`).
class MessageBuffer {
 public:
  MessageBuffer() = default;
  // Implicit: a whole buffer is a message (the application's, a large message's).
  MessageBuffer(SharedBytes whole)  // NOLINT(google-explicit-constructor)
      : owner_(std::move(whole)), bytes_(owner_ ? std::span<const std::byte>(*owner_) : std::span<const std::byte>{}) {}
  MessageBuffer(std::shared_ptr<std::vector<std::byte>> whole)  // NOLINT(google-explicit-constructor)
      : MessageBuffer(SharedBytes(std::move(whole))) {}
  /// `bytes` lies within `*owner` (a message inside the datagram it arrived in).
  MessageBuffer(SharedBytes owner, std::span<const std::byte> bytes) : owner_(std::move(owner)), bytes_(bytes) {
    HMCAST_ASSERT(owner_ != nullptr);
    HMCAST_ASSERT(bytes_.empty() || (bytes_.data() >= owner_->data() &&
                                     bytes_.data() + bytes_.size() <= owner_->data() + owner_->size()));
  }

  /// Memory the sending application lent for its own message (Group::broadcast_from):
  /// `lender` is held, not owned bytes, so owner() shows an empty buffer and lent()
  /// says so; the bytes stay valid while any copy of this is held.
  static MessageBuffer lent(std::shared_ptr<const void> lender, std::span<const std::byte> bytes) {
    HMCAST_ASSERT(lender != nullptr);
    MessageBuffer m;
    m.owner_ = SharedBytes(std::move(lender), &lent_marker());
    m.bytes_ = bytes;
    return m;
  }
  [[nodiscard]] bool lent() const { return owner_.get() == &lent_marker(); }
  /// The same bytes in a buffer of their own (a delivery in lent memory that
  /// outlives the lending).
  [[nodiscard]] MessageBuffer copied() const {
    return MessageBuffer(std::make_shared<std::vector<std::byte>>(bytes_.begin(), bytes_.end()));
  }

  [[nodiscard]] explicit operator bool() const { return owner_ != nullptr; }
  [[nodiscard]] const std::span<const std::byte>& operator*() const { return bytes_; }
  [[nodiscard]] const std::span<const std::byte>* operator->() const { return &bytes_; }
  [[nodiscard]] std::span<const std::byte> bytes() const { return bytes_; }
  /// What keeps bytes() alive: the whole buffer, which may hold more than this message.
  [[nodiscard]] const SharedBytes& owner() const& { return owner_; }
  /// The owner, moved out: this buffer is empty after (a spent event's hold handed on).
  [[nodiscard]] SharedBytes take_owner() && {
    bytes_ = {};
    return std::move(owner_);
  }

 private:
  static const std::vector<std::byte>& lent_marker() {
    static const std::vector<std::byte> marker;
    return marker;
  }
  SharedBytes owner_;
  std::span<const std::byte> bytes_;
};

}  // namespace hmcast
