// Cuts a small message into datagrams that fit the transport's MTU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <vector>

#include "core/wire.hpp"

namespace hmcast::small {

/// Payload bytes per fragment for a datagram MTU (header included in the MTU).
inline std::uint32_t fragment_payload(std::uint32_t mtu) {
  if (mtu <= wire::kDataOverhead + 16)
    throw std::invalid_argument("datagram MTU too small for hmcast headers: use an MTU of at least 256 bytes");
  return mtu - static_cast<std::uint32_t>(wire::kDataOverhead);
}

/// Number of fragments for a message (a 0-byte message still takes one).
inline std::uint32_t fragment_count(std::size_t msg_len, std::uint32_t mtu) {
  const std::size_t per = fragment_payload(mtu);
  return msg_len == 0 ? 1U : static_cast<std::uint32_t>((msg_len + per - 1) / per);
}

/// Encoded datagrams of message (sender, seq), each at most `mtu` bytes.
std::vector<std::vector<std::byte>> fragment(const wire::Header& header, MemberId sender, Seq seq, Seq stable,
                                             std::span<const std::byte> message, std::uint32_t mtu);

}  // namespace hmcast::small
