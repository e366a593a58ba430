#include "core/emitter.hpp"

namespace hmcast {

namespace {
/// Spare capacity kept at most: a 4 MiB message's datagrams (the largest small-path
/// message of any built-in profile), so a message's next one allocates none.
constexpr std::size_t kMaxSpareBytes = 4U << 20;
}  // namespace

std::vector<std::byte> Emitter::encode(const wire::Body& body) {
  std::vector<std::byte> bytes;
  if (!spare_.empty()) {
    bytes = std::move(spare_.back());
    spare_.pop_back();
    spare_bytes_ -= bytes.capacity();
  }
  wire::encode_into(header(), body, bytes);
  return bytes;
}

void Emitter::recycle(std::vector<std::byte>&& bytes) {
  const std::size_t capacity = bytes.capacity();
  // Only buffers that hold a long message's fragment (with the seal's room), so that
  // encode() takes the last one kept and does not grow it: a message's full
  // datagrams. Its shorter last one, and datagrams of short messages, are left to
  // malloc, which reuses them at once (they come and go one at a time).
  if (capacity < std::size_t{keep_bytes_} + wire::kTailRoom || capacity > 2 * (std::size_t{mtu_} + wire::kTailRoom))
    return;
  if (spare_bytes_ + capacity > kMaxSpareBytes) return;
  spare_bytes_ += capacity;
  spare_.push_back(std::move(bytes));
}

void Emitter::datagram_bytes(std::vector<std::byte> bytes, Outbox& out, bool may_hold) {
  const std::size_t item = wire::kBatchItemOverhead + bytes.size();
  // Only what two of could share one datagram is worth holding.
  may_hold = may_hold && wire::kBatchOverhead + 2 * item <= mtu_ && wire::is_batchable_type(wire::peek_type(bytes));
  if (!may_hold) {
    flush_batch(out);
    send(std::move(bytes), out);
    return;
  }
  if (!held_.empty() && (held_size_ + item > mtu_ || held_.size() == max_items_)) flush_batch(out);
  if (held_.empty()) held_size_ = wire::kBatchOverhead;
  held_size_ += item;
  held_.push_back(std::move(bytes));
}

void Emitter::flush_batch(Outbox& out) {
  if (held_.empty()) return;
  if (held_.size() == 1) {
    send(std::move(held_.front()), out);  // alone: as it was
  } else {
    wire::Batch b;
    b.items.reserve(held_.size());
    for (const auto& d : held_) b.items.emplace_back(d);
    auto bytes = wire::encode(header(), b);
    HMCAST_ASSERT(bytes.size() == held_size_ && bytes.size() <= mtu_);
    ++stats_.batches_sent;
    stats_.datagrams_batched += held_.size();
    send(std::move(bytes), out);
  }
  held_.clear();
  held_size_ = 0;
}

void Emitter::send(std::vector<std::byte> bytes, Outbox& out) {
  ++stats_.datagrams_sent;
  if (!emulated_) {
    out.emplace_back(action::SendDatagram{std::move(bytes)});
    return;
  }
  // The receiver accepts a datagram-typed frame only from the member it names as
  // source (GroupEngine::on_frame): the link vouches for the sender.
  for (MemberId m : view_.members) {
    if (m == self_) continue;
    ++stats_.emulated_datagrams;
    ++stats_.frames_sent;
    out.emplace_back(action::SendP2P{m, bytes});
  }
}

}  // namespace hmcast
