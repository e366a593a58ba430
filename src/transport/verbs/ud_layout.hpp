// Arithmetic of UD receive buffers and path MTUs, kept apart from the verbs calls so
// it is tested on hosts without an RDMA device.
//
// Every UD receive starts with a 40-byte area for the Global Routing Header (on
// RoCE it holds the IP header, IPv4 in its last 20 bytes), whether or not the packet
// carried one; the payload follows. So a receive buffer for datagrams of `mtu`
// bytes is mtu + 40 bytes, and a completion's byte_len counts those 40 too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace hmcast::verbs {

inline constexpr std::size_t kGrhBytes = 40;

/// Bytes a UD receive buffer needs for datagrams of up to `mtu` payload bytes.
constexpr std::size_t ud_receive_bytes(std::size_t mtu) { return mtu + kGrhBytes; }

/// The payload length of a UD receive completion of `byte_len` bytes into a buffer
/// for `mtu`-byte datagrams; nothing if byte_len cannot come from a valid datagram.
constexpr std::optional<std::size_t> ud_payload_bytes(std::size_t byte_len, std::size_t mtu) {
  if (byte_len < kGrhBytes || byte_len - kGrhBytes > mtu) return std::nullopt;
  return byte_len - kGrhBytes;
}

/// Bytes of an ibv_mtu enum value (IBV_MTU_256 = 1 ... IBV_MTU_4096 = 5); 0 if unknown.
constexpr std::uint32_t mtu_enum_bytes(int mtu_enum) {
  return mtu_enum >= 1 && mtu_enum <= 5 ? 128U << mtu_enum : 0U;
}

/// The RoCE path MTU a netdev MTU allows: the largest of 256..4096 that fits with the
/// RoCEv2 headers (IP + UDP + BTH + ICRC, at most 70 bytes with IPv6). 1500 -> 1024,
/// 9000 -> 4096.
constexpr std::uint32_t roce_path_mtu(std::uint32_t netdev_mtu) {
  std::uint32_t best = 0;
  for (std::uint32_t m = 256; m <= 4096; m *= 2)
    if (m + 70 <= netdev_mtu) best = m;
  return best;
}

/// Reliable-link message immediates: the top bit marks a frame's last chunk.
inline constexpr std::uint32_t kLastChunk = 0x8000'0000U;
/// With kLastChunk: the frame is a transport control message (region_wire.hpp), not
/// one for the protocol.
inline constexpr std::uint32_t kControlChunk = 0x4000'0000U;
/// With kLastChunk: the frame is the head of a Block frame whose payload the sender
/// RDMA WROTE into a region we advertised, ahead of this SEND on the same queue pair;
/// the head is followed by that region's id (region_wire.hpp, kPlacedTrailerSize).
inline constexpr std::uint32_t kPlacedChunk = 0x2000'0000U;

/// A frame of `frame_bytes` moves in this many link messages of up to `chunk` bytes
/// (an empty frame still takes one).
constexpr std::size_t chunks_for(std::size_t frame_bytes, std::size_t chunk) {
  return frame_bytes == 0 ? 1 : (frame_bytes + chunk - 1) / chunk;
}

}  // namespace hmcast::verbs
