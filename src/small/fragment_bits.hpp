// Bitmaps of fragments as Nack carries them: bit i (byte i/8, bit i%8) names fragment i.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace hmcast::small {

/// Whether fragment `i` is named (a bitmap shorter than that names nothing past its end).
inline bool has_bit(std::span<const std::uint8_t> bits, std::uint32_t i) {
  return i / 8 < bits.size() && ((static_cast<unsigned>(bits[i / 8]) >> (i % 8)) & 1U) != 0;
}
inline void set_bit(std::vector<std::uint8_t>& bits, std::uint32_t i) {
  bits[i / 8] |= static_cast<std::uint8_t>(1U << (i % 8));
}
inline void clear_bit(std::vector<std::uint8_t>& bits, std::uint32_t i) {
  bits[i / 8] &= static_cast<std::uint8_t>(~(1U << (i % 8)));
}
inline bool any_bit(std::span<const std::uint8_t> bits) {
  return std::any_of(bits.begin(), bits.end(), [](std::uint8_t b) { return b != 0; });
}
/// dst |= src, byte by byte (both sized for the same message).
inline void merge_bits(std::vector<std::uint8_t>& dst, std::span<const std::uint8_t> src) {
  for (std::size_t i = 0; i < std::min(dst.size(), src.size()); ++i) dst[i] |= src[i];
}
/// dst &= ~src, byte by byte: what dst names and src does not.
inline void drop_bits(std::vector<std::uint8_t>& dst, std::span<const std::uint8_t> src) {
  for (std::size_t i = 0; i < std::min(dst.size(), src.size()); ++i) dst[i] &= static_cast<std::uint8_t>(~src[i]);
}
/// Bytes a bitmap of `count` fragments takes.
inline std::size_t bitmap_bytes(std::uint32_t count) { return (std::size_t{count} + 7) / 8; }

}  // namespace hmcast::small
