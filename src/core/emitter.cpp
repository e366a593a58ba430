#include "core/emitter.hpp"

namespace hmcast {

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
