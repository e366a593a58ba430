// Transport-level messages of the verbs transport's zero-copy path (no verbs calls:
// unit-tested and fuzzed on any host). They travel on reliable links as a frame of
// their own, marked by kControlChunk in the immediate value, so the protocol never
// sees them:
//
//   advertise (receiver -> a peer that will write): kind u8 = 1 | id u64 | addr u64 |
//             rkey u32 | length u64 | sender u32 | seq u64 | connection u32  (45 bytes)
//     "the final buffer of large message (sender, seq) is registered at addr/rkey,
//      length bytes; you may RDMA WRITE Block payloads into it, on your connection
//      `connection` (your key for it, from its connect request) and no other"
//   revoke   (receiver -> peer): kind u8 = 2 | id u64               (9 bytes)
//     "stop writing into region id"
//   revoked  (peer -> receiver): kind u8 = 3 | id u64               (9 bytes)
//     "I will never write into region id again"; it travels on the same RC queue
//     pair as the peer's WRITEs, so when it arrives every earlier WRITE has landed.
//
// And the head of a Block whose payload was written (kPlacedChunk) carries the id of
// the region written as an 8-byte trailer (encode_placed_trailer below).
//
// Integers are little-endian. Decoding checks the exact size and the kind; a region
// whose addr + length overflows is refused (the sender would compute wrapped addresses).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <variant>
#include <vector>

#include "core/wire.hpp"
#include "hmcast/types.hpp"

namespace hmcast::verbs {

struct RegionAdvertise {
  std::uint64_t id = 0;  // the receiver's name for this registration (never reused by it)
  std::uint64_t addr = 0;
  std::uint32_t rkey = 0;
  std::uint64_t length = 0;
  MemberId sender = 0;
  Seq seq = 0;
  std::uint32_t connection = 0;  // the writer's key of the only link it may write on
  friend bool operator==(const RegionAdvertise&, const RegionAdvertise&) = default;
};
struct RegionRevoke {
  std::uint64_t id = 0;
  friend bool operator==(const RegionRevoke&, const RegionRevoke&) = default;
};
struct RegionRevoked {
  std::uint64_t id = 0;
  friend bool operator==(const RegionRevoked&, const RegionRevoked&) = default;
};
using RegionMessage = std::variant<RegionAdvertise, RegionRevoke, RegionRevoked>;

inline constexpr std::size_t kRegionAdvertiseSize = 1 + 8 + 8 + 4 + 8 + 4 + 8 + 4;
inline constexpr std::size_t kRegionIdMessageSize = 1 + 8;

namespace region_detail {
inline void put(std::vector<std::byte>& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<std::byte>(v >> (8 * i)));
}
/// Reads the next `bytes` little-endian bytes at `pos` and moves past them.
inline std::uint64_t get(std::span<const std::byte> in, std::size_t& pos, int bytes) {
  const std::uint64_t v = wire::peek_le(in, pos, bytes);
  pos += static_cast<std::size_t>(bytes);
  return v;
}
}  // namespace region_detail

inline std::vector<std::byte> encode_region_message(const RegionMessage& m) {
  using region_detail::put;
  std::vector<std::byte> out;
  if (const auto* a = std::get_if<RegionAdvertise>(&m)) {
    out.reserve(kRegionAdvertiseSize);
    put(out, 1, 1);
    put(out, a->id, 8);
    put(out, a->addr, 8);
    put(out, a->rkey, 4);
    put(out, a->length, 8);
    put(out, a->sender, 4);
    put(out, a->seq, 8);
    put(out, a->connection, 4);
  } else if (const auto* r = std::get_if<RegionRevoke>(&m)) {
    put(out, 2, 1);
    put(out, r->id, 8);
  } else {
    put(out, 3, 1);
    put(out, std::get<RegionRevoked>(m).id, 8);
  }
  return out;
}

/// The message in `in`, or nothing if it is not exactly one well-formed message.
inline std::optional<RegionMessage> decode_region_message(std::span<const std::byte> in) {
  using region_detail::get;
  if (in.empty()) return std::nullopt;
  std::size_t pos = 1;
  switch (std::to_integer<std::uint8_t>(in[0])) {
    case 1: {
      if (in.size() != kRegionAdvertiseSize) return std::nullopt;
      RegionAdvertise a;
      a.id = get(in, pos, 8);
      a.addr = get(in, pos, 8);
      a.rkey = static_cast<std::uint32_t>(get(in, pos, 4));
      a.length = get(in, pos, 8);
      a.sender = static_cast<MemberId>(get(in, pos, 4));
      a.seq = get(in, pos, 8);
      a.connection = static_cast<std::uint32_t>(get(in, pos, 4));
      if (a.length == 0 || a.addr + a.length < a.addr) return std::nullopt;  // empty or wraps around
      return a;
    }
    case 2:
      if (in.size() != kRegionIdMessageSize) return std::nullopt;
      return RegionRevoke{get(in, pos, 8)};
    case 3:
      if (in.size() != kRegionIdMessageSize) return std::nullopt;
      return RegionRevoked{get(in, pos, 8)};
    default:
      return std::nullopt;
  }
}

/// A placed Block head (kPlacedChunk) is the Block frame's head followed by this
/// trailer: the id of the region the payload was written into (u64, little-endian).
inline constexpr std::size_t kPlacedTrailerSize = 8;
inline std::array<std::byte, kPlacedTrailerSize> encode_placed_trailer(std::uint64_t region) {
  std::array<std::byte, kPlacedTrailerSize> out{};
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<std::byte>(region >> (8 * i));
  return out;
}
/// `in` must hold exactly kPlacedTrailerSize bytes (the caller checked the size).
inline std::uint64_t decode_placed_trailer(std::span<const std::byte> in) {
  return wire::peek_le(in.first(kPlacedTrailerSize), 0, 8);
}

/// Whether [offset, offset + length) lies inside a region of `region_length` bytes
/// (no overflow for any input).
constexpr bool region_covers(std::uint64_t region_length, std::uint64_t offset, std::uint64_t length) {
  return offset <= region_length && length <= region_length - offset;
}

}  // namespace hmcast::verbs
