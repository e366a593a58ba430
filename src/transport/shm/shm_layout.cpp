#include "transport/shm/shm_layout.hpp"

#include "core/assert.hpp"

namespace hmcast::shm {

namespace {
constexpr std::uint64_t kPage = 4096;
constexpr std::uint64_t page_up(std::uint64_t n) { return (n + kPage - 1) / kPage * kPage; }
}  // namespace

Offsets offsets_for(std::uint64_t multicast_capacity, std::uint64_t inbox_capacity) {
  Offsets o;
  o.multicast = page_up(sizeof(Header));
  o.inbox = o.multicast + page_up(multicast_capacity);
  o.file_size = o.inbox + page_up(inbox_capacity);
  return o;
}

std::uint64_t Ring::span_at(std::uint64_t tail, std::uint64_t length) const {
  const std::uint64_t need = align_up(kRecordHeader + length);
  const std::uint64_t to_end = capacity - tail % capacity;
  return need <= to_end ? need : to_end + need;
}

std::uint64_t Ring::pad_to_end(std::uint64_t tail) const {
  const std::uint64_t at = tail % capacity;
  HMCAST_ASSERT(at != 0 && at % kAlign == 0);
  RecordHeader pad;
  pad.flags = kPadding;
  pad.length = static_cast<std::uint32_t>(capacity - at - kRecordHeader);
  std::memcpy(data + at, &pad, sizeof pad);
  return tail + (capacity - at);
}

std::uint64_t Ring::write(std::uint64_t tail, RecordHeader header, std::span<const std::byte> payload,
                          std::span<const std::byte> more) const {
  HMCAST_ASSERT(header.length == payload.size() + more.size());
  const std::uint64_t need = align_up(kRecordHeader + header.length);
  HMCAST_ASSERT(need <= capacity);
  std::uint64_t at = tail % capacity;
  if (capacity - at < need) {  // pad to the end; the record starts at 0
    tail = pad_to_end(tail);
    at = 0;
  }
  std::memcpy(data + at, &header, sizeof header);
  if (!payload.empty()) std::memcpy(data + at + kRecordHeader, payload.data(), payload.size());
  if (!more.empty()) std::memcpy(data + at + kRecordHeader + payload.size(), more.data(), more.size());
  return tail + need;
}

bool Ring::read(std::uint64_t pos, std::uint64_t tail, Read& out) const {
  for (int hop = 0; hop < 2; ++hop) {
    if (pos >= tail || pos % kAlign != 0) return false;
    const std::uint64_t at = pos % capacity;
    std::memcpy(&out.header, data + at, sizeof out.header);
    const std::uint64_t need = align_up(kRecordHeader + std::uint64_t{out.header.length});
    if (need > capacity - at || pos + need > tail) return false;
    if (out.header.flags & kPadding) {
      if (at + need != capacity) return false;  // padding only ever runs to the end
      pos += need;
      continue;
    }
    out.payload = data + at + kRecordHeader;
    out.next = pos + need;
    return true;
  }
  return false;
}

}  // namespace hmcast::shm
