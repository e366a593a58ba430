#include "core/emitter.hpp"

#include <cstring>
#include <utility>

namespace hmcast {

namespace {
/// Spare capacity kept at most: a 4 MiB message's datagrams (the largest small-path
/// message of any built-in profile), so a message's next one allocates none.
constexpr std::size_t kMaxSpareBytes = 4U << 20;
}  // namespace

std::vector<std::byte> Emitter::take_buffer() {
  std::vector<std::byte> bytes;
  if (!spare_.empty()) {
    bytes = std::move(spare_.back());
    spare_.pop_back();
    spare_bytes_ -= bytes.capacity();
    bytes.clear();
  }
  return bytes;
}

std::vector<std::byte> Emitter::encode(const wire::Body& body) {
  std::vector<std::byte> bytes = take_buffer();
  wire::encode_into(header(), body, bytes);
  return bytes;
}

void Emitter::recycle(std::vector<std::byte>&& bytes) {
  const std::size_t capacity = bytes.capacity();
  // Only buffers that hold a long message's fragment (with the seal's room), so that
  // encode() takes the last one kept and does not grow it: a message's full
  // datagrams, and batches (built in an MTU's room). Its shorter last one, and
  // datagrams of short messages sent alone, are left to malloc, which reuses them at
  // once (they come and go one at a time).
  if (capacity < std::size_t{keep_bytes_} + wire::kTailRoom || capacity > 2 * (std::size_t{mtu_} + wire::kTailRoom))
    return;
  if (spare_bytes_ + capacity > kMaxSpareBytes) return;
  spare_bytes_ += capacity;
  spare_.push_back(std::move(bytes));
}

void Emitter::datagram(const wire::Body& body, Outbox& out, bool may_hold) {
  // Sized here only when it may wait: encode() sizes what goes at once itself.
  if (may_hold) {
    const std::size_t size = wire::encoded_size(header(), body);
    if (holdable(size, wire::type_of(body))) {
      wire::encode_to(header(), body, hold(size, out));
      return;
    }
  }
  flush_batch(out);
  send(encode(body), out);
}

void Emitter::fragment(const wire::Data& d, const MessageBuffer& message, Outbox& out, bool may_hold) {
  if (gather_from_ == 0 || emulated_ || d.payload.size() < gather_from_) {
    datagram(d, out, may_hold);
    return;
  }
  HMCAST_ASSERT(d.payload.data() >= message->data() &&
                d.payload.data() + d.payload.size() <= message->data() + message->size());
  flush_batch(out);
  // The payload is the encoding's last field, unframed: the encoding without it is
  // the datagram's head.
  wire::Data head = d;
  head.payload = {};
  ++stats_.datagrams_sent;
  out.emplace_back(action::SendDatagram{wire::encode(header(), head), d.payload, message});
}

void Emitter::datagram_bytes(std::vector<std::byte> bytes, Outbox& out, bool may_hold) {
  if (!may_hold || bytes.size() < wire::kHeaderSize || !holdable(bytes.size(), wire::peek_type(bytes))) {
    flush_batch(out);
    send(std::move(bytes), out);
    return;
  }
  const auto at = hold(bytes.size(), out);
  std::memcpy(at.data(), bytes.data(), bytes.size());
  recycle(std::move(bytes));
}

std::span<std::byte> Emitter::hold(std::size_t size, Outbox& out) {
  const std::size_t item = wire::kBatchItemOverhead + size;
  HMCAST_ASSERT(size >= wire::kHeaderSize && size <= 0xffff && wire::kBatchOverhead + item <= mtu_);
  if (held_ != 0 && (batch_.size() + item > mtu_ || held_ == max_items_)) flush_batch(out);
  if (held_ == 0) {
    if (batch_.capacity() == 0) batch_ = take_buffer();
    batch_.clear();
    // The whole batch's room at once (and the seal's): no growth while it fills.
    batch_.reserve(std::size_t{mtu_} + wire::kTailRoom);
    batch_.resize(wire::kBatchOverhead);
  }
  const std::size_t at = batch_.size();
  batch_.resize(at + item);
  wire::store_le(batch_.data() + at, static_cast<std::uint16_t>(size));
  ++held_;
  return std::span(batch_).subspan(at + wire::kBatchItemOverhead, size);
}

void Emitter::flush_batch(Outbox& out) {
  if (held_ == 0) return;
  HMCAST_ASSERT(batch_.size() <= mtu_);
  if (held_ == 1) {
    // Alone: sent as it was offered, in a buffer of its own size (a transport may
    // queue it), and the batch's buffer stays for the next batch.
    const auto item = std::span(batch_).subspan(wire::kBatchOverhead + wire::kBatchItemOverhead);
    std::vector<std::byte> one;
    one.reserve(item.size() + wire::kTailRoom);
    one.assign(item.begin(), item.end());
    batch_.clear();
    held_ = 0;
    send(std::move(one), out);
    return;
  }
  wire::encode_batch_head(header(), held_, std::span(batch_).first(wire::kBatchOverhead));
  ++stats_.batches_sent;
  stats_.datagrams_batched += held_;
  held_ = 0;
  send(std::exchange(batch_, {}), out);
}

void Emitter::send(std::vector<std::byte> bytes, Outbox& out) {
  ++stats_.datagrams_sent;
  if (!emulated_) {
    out.emplace_back(action::SendDatagram{std::move(bytes), {}, {}});
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
