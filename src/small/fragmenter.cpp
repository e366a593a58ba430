#include "small/fragmenter.hpp"

namespace hmcast::small {

wire::Data fragment_of(MemberId sender, Seq seq, Seq stable, std::span<const std::byte> message, Cut cut,
                       std::uint32_t index) {
  const std::uint32_t per = fragment_payload(message.size(), cut);
  const std::uint32_t count = fragment_count(message.size(), cut);
  HMCAST_ASSERT(count <= 0xffffU && index < count);  // policy::check bounds max_small_message by the MTU
  const std::size_t offset = std::size_t{index} * per;
  wire::Data d;
  d.sender = sender;
  d.seq = seq;
  d.stable = stable;
  d.msg_len = static_cast<std::uint32_t>(message.size());
  d.offset = static_cast<std::uint32_t>(offset);
  d.frag_index = static_cast<std::uint16_t>(index);
  d.frag_count = static_cast<std::uint16_t>(count);
  d.payload = message.subspan(offset, std::min<std::size_t>(per, message.size() - offset));
  return d;
}

std::vector<std::vector<std::byte>> fragment(const wire::Header& header, MemberId sender, Seq seq, Seq stable,
                                             std::span<const std::byte> message, Cut cut) {
  const std::uint32_t count = fragment_count(message.size(), cut);
  std::vector<std::vector<std::byte>> out;
  out.reserve(count);
  for (std::uint32_t i = 0; i < count; ++i) out.push_back(wire::encode(header, fragment_of(sender, seq, stable, message, cut, i)));
  return out;
}

}  // namespace hmcast::small
