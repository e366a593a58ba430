// Cuts a small message into datagrams that fit the transport's MTU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/assert.hpp"
#include "core/wire.hpp"

namespace hmcast::small {

/// Payload bytes per fragment for a datagram MTU (header included in the MTU).
/// The MTU comes from a checked ProtocolConfig (policy::check).
inline std::uint32_t fragment_payload(std::uint32_t mtu) {
  HMCAST_ASSERT(mtu > wire::kDataOverhead + 16);
  return mtu - static_cast<std::uint32_t>(wire::kDataOverhead);
}

/// Number of fragments for a message (a 0-byte message still takes one).
inline std::uint32_t fragment_count(std::size_t msg_len, std::uint32_t mtu) {
  const std::size_t per = fragment_payload(mtu);
  return msg_len == 0 ? 1U : static_cast<std::uint32_t>((msg_len + per - 1) / per);
}

/// Fragment `index` of message (sender, seq) (its payload points into `message`).
wire::Data fragment_of(MemberId sender, Seq seq, Seq stable, std::span<const std::byte> message, std::uint32_t mtu,
                       std::uint32_t index);
/// Calls `emit(datagram, count)` with each encoded datagram of message (sender, seq),
/// in order, each at most `mtu` bytes (`count` of them): fragment() without a vector
/// to hold them, for the send path.
template <class Emit>
void for_each_fragment(const wire::Header& header, MemberId sender, Seq seq, Seq stable,
                       std::span<const std::byte> message, std::uint32_t mtu, Emit&& emit) {
  const std::uint32_t count = fragment_count(message.size(), mtu);
  for (std::uint32_t i = 0; i < count; ++i) emit(wire::encode(header, fragment_of(sender, seq, stable, message, mtu, i)), count);
}
/// Encoded datagrams of message (sender, seq), each at most `mtu` bytes.
std::vector<std::vector<std::byte>> fragment(const wire::Header& header, MemberId sender, Seq seq, Seq stable,
                                             std::span<const std::byte> message, std::uint32_t mtu);

}  // namespace hmcast::small
