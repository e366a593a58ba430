// Cuts a small message into datagrams that fit the transport's MTU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/assert.hpp"
#include "core/wire.hpp"
#include "hmcast/config.hpp"

namespace hmcast::small {

/// Payload bytes per fragment for a datagram MTU (header included in the MTU).
/// The MTU comes from a checked ProtocolConfig (policy::check).
inline std::uint32_t fragment_payload(std::uint32_t mtu) {
  HMCAST_ASSERT(mtu > wire::kDataOverhead + 16);
  return mtu - static_cast<std::uint32_t>(wire::kDataOverhead);
}

/// How a message is cut (datagram sizes, header included): one that fits a datagram
/// of `whole` bytes goes whole, a larger one in datagrams of at most `cut`
/// (ProtocolConfig::fragment_mtu). From one MTU: both the same.
struct Cut {
  Cut(std::uint32_t mtu) : whole(mtu), cut(mtu) {}  // NOLINT(google-explicit-constructor): an MTU is a Cut
  Cut(std::uint32_t whole_mtu, std::uint32_t cut_mtu) : whole(whole_mtu), cut(cut_mtu) {
    HMCAST_ASSERT(cut <= whole);
  }
  std::uint32_t whole;
  std::uint32_t cut;
};

/// The cut of `mtu` and a ProtocolConfig::fragment_mtu (0: none).
inline Cut cut_of(std::uint32_t mtu, std::uint32_t fragment_mtu) {
  return fragment_mtu == 0 || fragment_mtu >= mtu ? Cut(mtu) : Cut(mtu, fragment_mtu);
}
/// The cut of a checked ProtocolConfig.
inline Cut cut_of(const ProtocolConfig& c) { return cut_of(c.mtu, c.fragment_mtu); }

/// Payload bytes per fragment of a message of `msg_len` bytes.
inline std::uint32_t fragment_payload(std::size_t msg_len, Cut c) {
  const std::uint32_t whole = fragment_payload(c.whole);
  return msg_len <= whole ? whole : fragment_payload(c.cut);
}

/// Number of fragments for a message (a 0-byte message still takes one).
inline std::uint32_t fragment_count(std::size_t msg_len, Cut c) {
  const std::size_t per = fragment_payload(msg_len, c);
  return msg_len == 0 ? 1U : static_cast<std::uint32_t>((msg_len + per - 1) / per);
}

/// Fragment `index` of message (sender, seq) (its payload points into `message`).
wire::Data fragment_of(MemberId sender, Seq seq, Seq stable, std::span<const std::byte> message, Cut cut,
                       std::uint32_t index);
/// Encoded datagrams of message (sender, seq), each at most `cut.whole` bytes.
std::vector<std::vector<std::byte>> fragment(const wire::Header& header, MemberId sender, Seq seq, Seq stable,
                                             std::span<const std::byte> message, Cut cut);

}  // namespace hmcast::small
